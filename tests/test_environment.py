"""Every result says where it ran (issue 33): the environment record inside the training and
evaluation details (a function of machine kind, packages, params and data, so dvc.lock repeats),
the provenance record outside DVC (the git commit), and precision as a setting."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tokenizers
import torch
import transformers
import yaml
from torch import nn

from pipeline.execution import environment
from pipeline.params_file import parse_params
from pipeline.execution.environment import Compute, environment_record, provenance_record, training_compute
from pipeline.errors import PipelineError
from pipeline.execution.runtime import RunContext, run_context, with_precision
from pipeline.training.loop import training_step

from conftest import MIRROR, REPO_ROOT, tiny_preset
from tiny_models import save_tiny_bert

RECORD_KEYS = {"device", "gpu", "cpu", "versions", "threads", "precision", "compile", "world_size", "per_device_batch",
               "activation_checkpointing", "data_sha256", "sick_splits"}
VERSION_KEYS = {"python", "torch", "transformers", "tokenizers", "dvc", "cuda", "cudnn"}
CPU = torch.device("cpu")


@pytest.fixture
def data_files(tmp_path) -> list[Path]:
    corpus, trips = tmp_path / "corpus.txt", tmp_path / "I.txt"
    corpus.write_text("a sentence\nanother one\n")
    trips.write_text("a phrase\nanother one\n")
    return [corpus, trips]


def test_the_record_holds_every_field_from_the_runtime(tiny_params_dict, data_files, tmp_path):
    params = parse_params(tiny_params_dict)
    record = environment_record(CPU, params, [*data_files, tmp_path / "absent.txt"], Compute("fp32", "off", 1, 16))
    assert set(record) == RECORD_KEYS and set(record["versions"]) == VERSION_KEYS
    versions = record["versions"]
    assert versions["torch"] == torch.__version__
    assert record["threads"] == torch.get_num_threads()
    assert versions["transformers"] == transformers.__version__
    assert versions["tokenizers"] == tokenizers.__version__
    assert versions["python"] == platform.python_version()
    assert versions["dvc"] == importlib.metadata.version("dvc")
    assert versions["cuda"] == torch.version.cuda
    assert (record["device"], record["gpu"]) == ("cpu", None)
    assert (record["precision"], record["compile"], record["world_size"], record["per_device_batch"]) == ("fp32", "off", 1, 16)
    assert record["activation_checkpointing"] == "off"
    assert record["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability() and record["cpu"]["model"]
    hashes = record["data_sha256"]
    for path in data_files:
        assert hashes[path.as_posix()] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert hashes[(tmp_path / "absent.txt").as_posix()] is None
    assert record["sick_splits"] == ["train", "trial"]
    tiny_params_dict["data"]["add_sick"] = False
    assert environment_record(CPU, parse_params(tiny_params_dict), data_files, Compute("fp32", "off", 1, 16))["sick_splits"] == []


def test_two_calls_in_the_same_environment_give_the_same_record(tiny_params_dict, data_files):
    """What goes into DVC outputs repeats: same bytes, so dvc.lock repeats."""
    params = parse_params(tiny_params_dict)
    context = run_context("cpu")
    first = environment_record(context.device, params, data_files, training_compute(params.pretrain, context, "off"))
    second = environment_record(context.device, params, data_files, training_compute(params.pretrain, context, "off"))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_the_training_compute_is_the_resolved_precision_and_the_per_device_batch(tiny_params_dict):
    params = parse_params(tiny_params_dict)
    compute = training_compute(params.pretrain, RunContext(CPU, None, rank=0, world_size=2), "module")
    assert compute == Compute("fp32", "module", 2, params.pretrain.batch_size // 2)
    assert training_compute(params.pretrain, RunContext(CPU, torch.bfloat16), "off").precision == "bf16"


def git(root: Path, *arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def init_repository(root: Path) -> str:
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    return git(root, "rev-parse", "HEAD")


def test_provenance_holds_the_git_commit_and_whether_code_differed(tmp_path):
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "metrics.json").write_text("{}\n")
    commit = init_repository(tmp_path)
    record = provenance_record("joint", tmp_path)
    assert (record["stage"], record["git_commit"], record["git_dirty"]) == ("joint", commit, False)
    (tmp_path / "reports" / "metrics.json").write_text('{"a": 1}\n')  # what the run itself writes
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    assert provenance_record("joint", tmp_path)["git_dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance_record("joint", tmp_path)["git_dirty"] is True
    outside = tmp_path.parent / f"{tmp_path.name}-no-git"
    outside.mkdir()
    assert (provenance_record("joint", outside)["git_commit"], provenance_record("joint", outside)["git_dirty"]) == (None, None)


# ----------------------------------------------------------------------------- precision in the loop


def test_a_cpu_context_computes_in_fp32_and_refuses_half_precision_in_one_line():
    context = run_context("cpu")
    assert (context.autocast_dtype, context.precision) == (None, "fp32")
    assert with_precision(context, "fp32", "train.precision").precision == "fp32"
    with pytest.raises(PipelineError) as error:
        with_precision(context, "fp16", "train.precision")
    assert str(error.value) == "train.precision=fp16 needs a CUDA GPU but the device is cpu; on CPU set train.precision: fp32"


def squares(model: nn.Module, batch: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
    return {"loss": model(batch).float().pow(2).mean()}


def test_bf16_autocast_runs_the_step_in_bf16_internally():
    """The loop's autocast path, exercised on a CPU (bf16 autocast exists there; the setting stays fp32-only on CPU)."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    before = model.weight.detach().clone()
    seen = []
    model.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    terms = training_step(squares, model, optimizer, [torch.randn(6, 8)], RunContext(CPU, torch.bfloat16), 0)
    assert seen == [torch.bfloat16] and model.weight.dtype == torch.float32
    assert torch.isfinite(terms["loss"][0]) and not torch.equal(model.weight, before)


def test_fp16_scales_the_loss_and_skips_a_step_whose_gradient_overflowed():
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    context = RunContext(CPU, torch.float16)
    scaler = context.grad_scaler()
    assert scaler.is_enabled() and not RunContext(CPU, torch.bfloat16).grad_scaler().is_enabled()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before, scale = model.weight.detach().clone(), scaler.get_scale()
    training_step(squares, model, optimizer, [torch.randn(6, 8)], context, 0, scaler=scaler,
                  loss_hook=lambda loss, step: loss * float("inf"))
    assert torch.equal(model.weight, before) and scaler.get_scale() == scale / 2  # skipped, scale backed off
    training_step(squares, model, optimizer, [torch.randn(6, 8)], context, 1, scaler=scaler, max_grad_norm=1.0)
    assert torch.isfinite(model.weight).all() and not torch.equal(model.weight, before)


# ----------------------------------------------------------------------------- the stages write them


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A git checkout of a small project after `pretrain --tower I` and `evaluate --name backbone`."""
    root = tmp_path_factory.mktemp("project")
    save_tiny_bert(root / "data" / "backbone", seed=5)
    shutil.copytree(MIRROR / "senteval", root / "data" / "raw" / "senteval")
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:64]
    (root / "data" / "raw" / "corpus.txt").write_text("\n".join(lines) + "\n")
    (root / "data" / "rtt").mkdir(parents=True)
    (root / "data" / "rtt" / "I.txt").write_text("\n".join(lines) + "\n")
    raw = tiny_preset()
    raw["device"] = "cpu"
    raw["pretrain"].update(max_steps=2, eval_every=2, save_every=100)
    raw["eval"].update(max_pairs=100, batch_size=64, max_length=32)
    raw["eval"]["mteb"]["enabled"] = False
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    (root / ".gitignore").write_text("/data/\n")
    commit = init_repository(root)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    for stage in (["pretrain", "--tower", "I"], ["evaluate", "--name", "backbone"]):
        done = subprocess.run([sys.executable, "-m", "stages", *stage], cwd=root, capture_output=True, text=True,
                              timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
    (root / "commit").write_text(commit)
    return root


def test_the_training_details_hold_the_environment_of_the_run(project):
    details = json.loads((project / "reports" / "training" / "details" / "pretrain-I.json").read_text())
    record = details["environment"]
    assert set(record) == RECORD_KEYS and record["versions"]["torch"] == torch.__version__
    assert (record["device"], record["precision"], record["compile"], record["world_size"]) == ("cpu", "fp32", "off", 1)
    assert record["per_device_batch"] == 16
    corpus, trips = project / "data" / "raw" / "corpus.txt", project / "data" / "rtt" / "I.txt"
    assert record["data_sha256"] == {"data/raw/corpus.txt": hashlib.sha256(corpus.read_bytes()).hexdigest(),
                                     "data/rtt/I.txt": hashlib.sha256(trips.read_bytes()).hexdigest()}
    assert record["sick_splits"] == ["train", "trial"]
    assert "git_commit" not in json.dumps(details)  # the commit stays out of DVC outputs


def test_the_evaluation_details_hold_the_environment(project):
    details = json.loads((project / "reports" / "metrics" / "details" / "backbone.json").read_text())
    record = details["environment"]
    assert set(record) == RECORD_KEYS and (record["precision"], record["compile"]) == ("fp32", "off")
    assert set(record["data_sha256"]) == {"data/raw/corpus.txt", "data/rtt/I.txt", "data/rtt/II.txt"}
    assert record["data_sha256"]["data/rtt/II.txt"] is None  # not made in this project


def test_the_provenance_files_hold_the_git_commit(project):
    commit = (project / "commit").read_text()
    for stage in ("pretrain-I", "evaluate-backbone"):
        record = json.loads((project / "reports" / "provenance" / f"{stage}.json").read_text())
        assert (record["stage"], record["git_commit"], record["git_dirty"]) == (stage, commit, False)


def test_provenance_is_no_dvc_output_or_dependency():
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    declared = json.dumps(stages)
    assert environment.paths.PROVENANCE.as_posix() not in declared
    folders = [entry for stage in stages.values() for entry in (stage.get("do", stage).get("deps") or [])]
    assert not [folder for folder in folders if environment.paths.PROVENANCE.is_relative_to(folder)]


def test_the_cpu_record_names_the_microarchitecture_and_the_kernel_features():
    """Two machines that print the same model name ("Intel(R) Xeon(R) Processor") may differ in these, and so
    in the last bits they train: the reproduction check treats them as machine facts."""
    from pipeline.execution.environment import cpu_record

    record = cpu_record()
    first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}
    assert record["microarchitecture"] == "/".join(fields[key] for key in ("vendor_id", "cpu family", "model", "stepping"))
    assert set(record["features"]) <= set(fields["flags"].split()) and record["features"] == sorted(record["features"])
    assert ("avx2" in record["features"]) == ("avx2" in fields["flags"].split())
    assert all(not flag.startswith(("avx", "fma", "amx")) or flag in record["features"] for flag in fields["flags"].split())


def test_the_cpu_record_names_the_caches_blas_kernels_are_sized_by(tmp_path):
    """A virtual machine may report its host's model and features on a host with other caches: MKL and
    oneDNN size their blocks by them, so they are machine facts too (read from the kernel's sysfs)."""
    from pipeline.execution.environment import cpu_caches, cpu_record

    for index, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"),
                                                 ("3", "Unified", "307200K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(value + "\n")
    (tmp_path / "index9").mkdir()  # an entry the kernel left without its files is skipped
    assert cpu_caches(tmp_path) == {"L1d": "48K", "L1i": "32K", "L2": "2048K", "L3": "307200K"}
    record = cpu_record()
    assert record["caches"] == cpu_caches() and record["logical_cpus"] == os.cpu_count()


def test_aten_cpu_capability_shows_in_the_record():
    """`ATEN_CPU_CAPABILITY=avx2` runs other kernels, so other last bits: the record must show it (CI runs the
    tiny pipeline so, and the reproduction check calls it equivalent, not identical)."""
    import subprocess
    import sys

    code = "from pipeline.execution.environment import cpu_record; print(cpu_record()['capability'])"
    lowered = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                             capture_output=True, text=True, check=True).stdout.strip()
    assert lowered == "DEFAULT"
