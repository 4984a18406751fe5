"""CI's reproduction check: it passes on the committed results and fails on a moved metric, on any
output whose hash differs (naming the first) and says which params differ."""

import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_reproduction.py"
METRICS = {"STS12": {"all": 51.88, "subsets": {"MSRpar": 51.88}}, "avg": 65.92, "model": "backbone", "max_pairs": 300}
LOCK = {"schema": "2.0", "stages": {
    "rtt@I": {"cmd": "python -m stages rtt --tower I", "outs": [{"path": "data/rtt/I.txt", "md5": "aaa"}]},
    "pretrain@I": {"cmd": "python -m stages pretrain", "params": {"params.yaml": {"seed": 42, "threads": 2}},
                   "outs": [{"path": "models/I", "md5": "bbb.dir"}, {"path": "reports/training/I.json", "md5": "eee"}]},
    "report": {"cmd": "python -m stages report", "outs": [{"path": "reports/tables", "md5": "ccc.dir"}]},
}}  # fmt: skip
# the report reads `dvc exp show` (the git history) too: dvc.yaml marks it always_changed
DVC_YAML = {"stages": {"report": {"cmd": "python -m stages report", "always_changed": True}}}
CLAIMS = {"claims": 3, "verdicts": {"holds": 1, "not_run": 2}}


def git(folder, *arguments):
    subprocess.run(["git", *arguments], cwd=folder, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "reports" / "metrics").mkdir(parents=True)
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    (tmp_path / "reports" / "claims.json").write_text(json.dumps(CLAIMS))
    (tmp_path / "reports" / "metrics" / "backbone.json").write_text(json.dumps(METRICS))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qm", "results")
    return tmp_path


def check(folder):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(folder)], capture_output=True, text=True)


def edit_metric(folder, change):
    path = folder / "reports" / "metrics" / "backbone.json"
    metrics = json.loads(path.read_text())
    metrics["STS12"]["subsets"]["MSRpar"] += change
    path.write_text(json.dumps(metrics, indent=2))


def test_committed_results_pass(project):
    result = check(project)
    assert result.returncode == 0, result.stdout
    assert "largest metric difference: 0" in result.stdout


def test_a_difference_within_the_tolerance_passes_and_is_printed(project):
    edit_metric(project, 0.004)
    result = check(project)
    assert result.returncode == 0, result.stdout
    assert "largest metric difference: 0.004 (reports/metrics/backbone.json: STS12.subsets.MSRpar)" in result.stdout


def test_a_metric_edited_by_a_tenth_fails(project):
    edit_metric(project, 0.1)
    result = check(project)
    assert result.returncode == 1
    assert "not reproduced: reports/metrics/backbone.json: STS12.subsets.MSRpar" in result.stdout


def edit_lock(folder, change):
    lock = yaml.safe_load((folder / "dvc.lock").read_text())
    change(lock["stages"])
    (folder / "dvc.lock").write_text(yaml.safe_dump(lock))


def test_a_different_round_trip_file_fails_even_with_equal_metrics(project):
    edit_lock(project, lambda stages: stages["rtt@I"]["outs"][0].update(md5="ccc"))
    result = check(project)
    assert result.returncode == 1
    assert "not reproduced: first output that differs: rtt@I data/rtt/I.txt: md5 ccc vs committed aaa" in result.stdout


def test_every_output_is_compared_and_the_first_that_differs_is_named(project):
    """Trained weights too, not only round trips: the same inputs, seed and thread count give the same bytes."""
    def change(stages):
        stages["pretrain@I"]["outs"][0]["md5"] = "ddd.dir"
        stages["pretrain@I"]["outs"][1]["md5"] = "fff"

    edit_lock(project, change)
    result = check(project)
    assert result.returncode == 1
    assert "outputs compared: 3" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("not reproduced:")]
    assert lines == [
        "not reproduced: first output that differs: pretrain@I models/I: md5 ddd.dir vs committed bbb.dir",
        "not reproduced: pretrain@I reports/training/I.json: md5 fff vs committed eee",
    ]


def test_a_missing_output_and_another_thread_count_are_named(project):
    def change(stages):
        stages["pretrain@I"]["params"]["params.yaml"]["threads"] = 1
        stages["pretrain@I"]["outs"].pop(1)

    edit_lock(project, change)
    result = check(project)
    assert result.returncode == 1
    assert "first output that differs: pretrain@I reports/training/I.json: md5 missing vs committed eee" in result.stdout
    assert "not reproduced: params differ: params.yaml:threads: 1 vs committed 2" in result.stdout


def test_a_missing_metrics_file_fails(project):
    (project / "reports" / "metrics" / "backbone.json").unlink()
    result = check(project)
    assert result.returncode == 1 and "not produced by this run" in result.stdout


def test_the_history_dependent_report_is_compared_by_its_numbers_not_its_hash(project):
    """A new commit changes what the report lists (experiments.md names commits): its hash may move,
    its verdict counts may not."""
    edit_lock(project, lambda stages: stages["report"]["outs"][0].update(md5="zzz.dir"))
    result = check(project)
    assert result.returncode == 0, result.stdout
    assert "not by hash: the outputs of report" in result.stdout
    (project / "reports" / "claims.json").write_text(json.dumps({"claims": 3, "verdicts": {"holds": 0, "not_run": 3}}))
    result = check(project)
    assert result.returncode == 1
    assert "reports/claims.json" in result.stdout


def test_a_run_on_another_cpu_names_the_machine_before_the_differences(project):
    record = project / "reports" / "training" / "details" / "pretrain-I.json"
    record.parent.mkdir(parents=True)
    environment = {"cpu": {"model": "Intel(R) Xeon(R) Processor", "capability": "AVX2"}, "threads": 2, "gpu": None}
    record.write_text(json.dumps({"environment": environment}))
    git(project, "add", ".")
    git(project, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qm", "record")
    assert "machine differs" not in check(project).stdout  # same machine, nothing differs: no note
    record.write_text(json.dumps({"environment": {**environment, "cpu": {"model": "AMD EPYC", "capability": "AVX512"}}}))
    edit_lock(project, lambda stages: stages["pretrain@I"]["outs"][0].update(md5="zzz.dir"))
    result = check(project)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    machine = next(index for index, line in enumerate(lines) if line.startswith("machine differs: cpu:"))
    assert "'AVX512'" in lines[machine] and "'AVX2'" in lines[machine] and "threads" not in result.stdout
    assert machine < next(index for index, line in enumerate(lines) if line.startswith("not reproduced:"))
