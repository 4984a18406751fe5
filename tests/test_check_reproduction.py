"""CI's reproduction check: it passes on the committed results and fails on a moved metric or a
different round-trip file."""

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
    "pretrain@I": {"cmd": "python -m stages pretrain", "outs": [{"path": "models/I", "md5": "bbb.dir"}]},
}}  # fmt: skip


def git(folder, *arguments):
    subprocess.run(["git", *arguments], cwd=folder, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "reports" / "metrics").mkdir(parents=True)
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
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


def test_a_different_round_trip_file_fails_even_with_equal_metrics(project):
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    lock["stages"]["rtt@I"]["outs"][0]["md5"] = "ccc"
    lock["stages"]["pretrain@I"]["outs"][0]["md5"] = "ddd.dir"  # not compared: training may differ by CPU
    (project / "dvc.lock").write_text(yaml.safe_dump(lock))
    result = check(project)
    assert result.returncode == 1
    assert "data/rtt/I.txt: md5 ccc vs committed aaa" in result.stdout
    assert "models/I" not in result.stdout


def test_a_missing_metrics_file_fails(project):
    (project / "reports" / "metrics" / "backbone.json").unlink()
    result = check(project)
    assert result.returncode == 1 and "not produced by this run" in result.stdout
