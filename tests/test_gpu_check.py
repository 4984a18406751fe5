"""The GPU check's CPU mode (tools/gpu_check/, issue 41): every code path of the device run except
what needs CUDA, on tiny shapes. The checks that need CUDA say so and never pass; the others pass; the
JSON has the throughput, targets and cost of every item; and the run imports nothing the offline GPU
machine lacks (../shared/gpu/prepare.sh's bundle: no dvc, Hydra, mteb or datasets there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from conftest import REPO_ROOT

COMMAND = [sys.executable, "-m", "tools.gpu_check"]  # run from the project root
NOT_ON_THE_GPU_MACHINE = ("dvc", "hydra", "omegaconf", "mteb", "datasets")
# Runs the check with those packages unimportable (the launched rank runs in processes of its own).
BLOCKED_RUN = f"""
import runpy, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_ON_THE_GPU_MACHINE!r}:
            raise ImportError(f"{{name}} is not on the GPU machine")
sys.meta_path.insert(0, Blocked())
sys.argv = ["tools.gpu_check", *sys.argv[1:]]
runpy.run_module("tools.gpu_check", run_name="__main__", alter_sys=True)
"""
CUDA_CHECKS = {"cuda_fp32_follows_cpu", "bf16_close_to_fp32", "fp16_close_to_fp32", "compiled_matches_eager", "cuda_graphs_match_eager",
               "lease_pins_device"}
CPU_CHECKS = {"activation_checkpointing_same_loss", "launcher_one_rank"}


def environment() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture(scope="module")
def report(tmp_path_factory, mirror) -> dict:  # the check reads the data mirror
    output = tmp_path_factory.mktemp("gpu-check") / "bench-gpu.json"
    done = subprocess.run([sys.executable, "-c", BLOCKED_RUN, "--device", "cpu", "--output", str(output)],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=environment(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("gpu check (CPU mode")
    return json.loads(output.read_text())


def test_the_checks_that_need_cuda_are_skipped_never_passed(report):
    checks = {check["name"]: check for check in report["checks"]}
    assert set(checks) == CUDA_CHECKS | CPU_CHECKS
    for name in CUDA_CHECKS:
        assert checks[name]["passed"] is None and checks[name]["skipped"].startswith("skipped: no CUDA")
        assert checks[name]["tolerance"]


def test_the_checks_a_cpu_runs_pass_with_their_numbers(report):
    checks = {check["name"]: check for check in report["checks"]}
    recomputed = checks["activation_checkpointing_same_loss"]
    assert recomputed["passed"] is True and recomputed["numbers"]["max_relative_difference"] <= 1e-5
    assert len(recomputed["numbers"]["reference_losses"]) == len(recomputed["numbers"]["checkpointed_losses"]) == 8
    launcher = checks["launcher_one_rank"]
    assert launcher["passed"] is True
    assert launcher["numbers"]["backend"] == "gloo" and launcher["numbers"]["world_size"] == 1
    assert launcher["numbers"]["ddp_loss"] == pytest.approx(launcher["numbers"]["plain_loss"], rel=1e-6)


def test_every_throughput_item_is_measured_with_flops_and_memory(report):
    throughput = report["throughput"]
    assert not [name for name, record in throughput.items() if "error" in record or "skipped" in record]
    training = [name for name in throughput if name != "evaluator_bert_seven_benchmarks"]
    assert len(training) == 6 and {throughput[name]["stage"] for name in training} == {"pretrain", "tncse", "jtcse-6", "distill"}
    assert {throughput[name]["activation_checkpointing"] for name in training if "roberta" in name} == {True, False}
    for name in training:
        record = throughput[name]
        assert record["steps_per_s"] > 0 and record["flops_per_call"] > 0 and record["peak_memory_mb"] > 0
        assert record["fraction_of_bf16_peak"] is None  # no GPU, no peak
    evaluator = throughput["evaluator_bert_seven_benchmarks"]
    assert len(evaluator["tasks"]) == 7 and evaluator["sentences_per_s"] > 0 and evaluator["flops_per_call"] > 0
    # the target items carry a profile summary; on a CPU there are no kernel launches and no GPU to be busy
    for name in report["targets"]:
        profile = throughput[name]["profile"]
        assert profile["kernel_launches_per_call"] == 0 and profile["gpu_busy_fraction"] is None


def test_targets_are_not_judged_without_cuda(report):
    assert set(report["targets"]) == {"pretrain_bert_64x32", "tncse_bert_64x64", "evaluator_bert_seven_benchmarks"}
    assert all(target["met"] is None and target["measured"] > 0 for target in report["targets"].values())


def test_the_cost_covers_every_table_from_the_measured_items(report):
    cost = report["cost"]
    tables = yaml.safe_load((REPO_ROOT / "tables.yaml").read_text())["tables"]
    assert set(cost["tables"]) == set(tables)
    assert set(cost["basis"]) == {"pretrain", "tncse", "jtcse-6", "distill", "tncse@roberta"}
    assert cost["gpu_hours_total"] > 0 and "not the papers' cost" in cost["note"]


def test_the_machine_is_recorded(report):
    machine = report["machine"]
    assert machine["device"] == "cpu" and machine["gpu"] is None and machine["bf16_peak_tflops"] is None
    assert machine["versions"]["torch"] and machine["cpu"]["capability"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the device run would start")
def test_asking_for_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_check.sh"), "--output", str(tmp_path / "x.json")],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=environment(), timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: device=cuda but no CUDA GPU is visible to torch; set device: auto or device: cpu"]
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(("name", "peak"), [("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0),
                                            ("NVIDIA H200", 989.4), ("NVIDIA A100-SXM4-80GB", None)])
def test_the_bf16_peak_by_device_name(name, peak):
    from tools.gpu_check.modes import bf16_peak

    found, note = bf16_peak(name)
    assert found == peak and note


def test_the_cost_table_for_docs_lists_every_table(report, tmp_path):
    (tmp_path / "report.json").write_text(json.dumps(report))
    done = subprocess.run([*COMMAND, "--cost-table", str(tmp_path / "report.json")], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=environment(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(report["cost"]["tables"])
    assert "not the papers' cost" in done.stdout.splitlines()[0]


def test_a_second_run_reuses_what_the_first_measured_and_measures_the_rest(report, tmp_path):
    """`--reuse`: a run cut short by its budget is completed by a second one that spends its minutes on the
    checks and the missing items only; the cost then covers every table."""
    earlier = {**report, "throughput": {**report["throughput"], "distill_bert_64x32": {"skipped": "time budget"}}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    done = subprocess.run([*COMMAND, "--device", "cpu", "--output", str(tmp_path / "second.json"),
                           "--reuse", str(tmp_path / "earlier.json")],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=environment(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads((tmp_path / "second.json").read_text())
    throughput = second["throughput"]
    assert "reused_from" not in throughput["distill_bert_64x32"] and throughput["distill_bert_64x32"]["steps_per_s"] > 0
    assert {name for name, record in throughput.items() if "reused_from" in record} == set(report["throughput"]) - {"distill_bert_64x32"}
    assert second["reused"]["created"] == report["created"] and second["cost"]["basis"]["distill"] == "distill_bert_64x32"
    assert [check["name"] for check in second["checks"]] == [check["name"] for check in report["checks"]]  # checks rerun


def test_reusing_another_gpu_models_report_is_one_line_and_exit_2(report, tmp_path):
    (tmp_path / "h200.json").write_text(json.dumps({**report, "machine": {**report["machine"], "gpu": {"model": "NVIDIA H200"}}}))
    done = subprocess.run([*COMMAND, "--device", "cpu", "--output", str(tmp_path / "x.json"),
                           "--reuse", str(tmp_path / "h200.json")],
                          cwd=REPO_ROOT, capture_output=True, text=True, env=environment(), timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: --reuse") and "NVIDIA H200" in done.stderr
    assert not (tmp_path / "x.json").exists()
