"""Regressions planted in a run of the committed results, judged end to end: the real report stage
(`python -m stages report`) rewrites the claims from the planted numbers, then the real check
(scripts/check_reproduction.py) compares them with the committed run (docs/reproducing.md, "Did it
reproduce?"). Each plant is what another machine could hand back: its environment records say AVX2, so
the check takes the "equivalent" path, where only the estimates and numbers decide.

The project is a copy of this checkout's tracked files — the committed reports/, dvc.lock and seed record —
with a stand-in file for each data/ output (models and corpora are not in git; the check hashes them, the
report never reads them), committed as the run to reproduce.
"""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import REPO_ROOT
from tools.workspace import _ignored, dvc_md5

CHECK = REPO_ROOT / "scripts" / "check_reproduction.py"
CLAIM = "tncse-beats-untrained"  # TNCSE (joint) − the untrained twin (ensemble) on the 7-STS average
TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")

pytestmark = pytest.mark.skipif(not (REPO_ROOT / "reports" / "seed_noise.json").is_file(),
                                reason="needs the committed reports/ (reports/seed_noise.json)")


def git(folder, *arguments):
    return subprocess.run(["git", *arguments], cwd=folder, check=True, capture_output=True, text=True).stdout


def relock(folder, entries=("outs", "deps")):
    """dvc.lock with each entry's md5 as DVC would record the file here (a run's `dvc repro`)."""
    lock = yaml.safe_load((folder / "dvc.lock").read_text())
    ignored = _ignored(folder)
    for stage in lock["stages"].values():
        for entry in (item for kind in entries for item in stage.get(kind, [])):
            digest = dvc_md5(folder, entry["path"], ignored)
            if digest is not None:
                entry["md5"] = digest
    (folder / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    root = tmp_path_factory.mktemp("committed")
    for name in git(REPO_ROOT, "ls-files").splitlines():
        if (REPO_ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, root / name)
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    for stage in lock["stages"].values():
        for out in stage.get("outs", []):
            if out["path"].startswith("data/"):
                place = root / out["path"] / "stand-in" if out.get("md5", "").endswith(".dir") else root / out["path"]
                place.parent.mkdir(parents=True, exist_ok=True)
                place.write_text(f"the committed {out['path']}\n")
    relock(root)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qm", "the committed run")
    return root


@pytest.fixture
def rerun(committed, tmp_path):
    """A copy of the committed run, as another CPU kind reran it: its records say AVX2, its models differ."""
    folder = tmp_path / "run"
    shutil.copytree(committed, folder, symlinks=True)
    for record in [*folder.glob("reports/metrics/details/*.json"), *folder.glob("reports/training/details/*.json")]:
        edit(folder, record.relative_to(folder).as_posix(), lambda r: r["environment"]["cpu"].update(capability="AVX2"))
    (folder / "data/models/joint/stand-in").write_text("weights trained on AVX2\n")
    return folder


def edit(folder, path, change):
    value = json.loads((folder / path).read_text())
    change(value)
    (folder / path).write_text(json.dumps(value, indent=2))


def shift(folder, model, points):
    """Every STS score of `model` moved by `points` — headline, details (with their intervals) and every
    bootstrap resample — as a run whose embeddings moved would write them."""
    def headline(metrics):
        for key in (*TASKS, "avg"):
            metrics[key] += points

    def details(metrics):
        for task in TASKS:
            split = "all" if "all" in metrics[task] else "test"
            metrics[task][split] += points
        metrics["avg"] += points
        for interval in metrics["intervals"].values():
            interval["low"] += points
            interval["high"] += points

    edit(folder, f"reports/metrics/{model}.json", headline)
    edit(folder, f"reports/metrics/details/{model}.json", details)
    edit(folder, f"reports/metrics/bootstrap/{model}.json",
         lambda b: b["scores"].update({task: [s + points for s in scores] for task, scores in b["scores"].items()}))


def widen_resamples(folder, model, factor):
    """The model's bootstrap resamples spread `factor` times wider about their mean, its scores untouched:
    what a bug in the resampling path would write."""
    def widen(bootstrap):
        for task, scores in bootstrap["scores"].items():
            values = np.asarray(scores)
            bootstrap["scores"][task] = (values.mean() + factor * (values - values.mean())).tolist()

    edit(folder, f"reports/metrics/bootstrap/{model}.json", widen)


def report_then_check(folder):
    """The report stage on the planted run, the outputs relocked as `dvc repro` would, then the check."""
    report = subprocess.run([sys.executable, "-m", "stages", "report"], cwd=folder, capture_output=True, text=True)
    relock(folder, ("outs",))
    check = subprocess.run([sys.executable, str(CHECK), "--root", str(folder)], capture_output=True, text=True)
    return report, check


def committed_estimate(folder):
    comparison = json.loads((folder / "reports/claims.json").read_text())["details"][CLAIM]["comparisons"][0]
    return comparison["difference"], (comparison["interval"][1] - comparison["interval"][0]) / 2


def estimate_line(check, part):
    return [line for line in check.stdout.splitlines()
            if line.startswith(f"not reproduced: reports/claims.json: {CLAIM} (TNCSE − untrained twin): {part} ")]


def test_the_last_bits_of_another_cpu_are_equivalent_with_no_verdict_changed(rerun):
    """Joint's average +0.009 (the cross-CPU move docs/reproducing.md reports) and one task score rounded to two
    decimals: the seed record still matches, the arms stay paired, every verdict stands."""
    edit(rerun, "reports/metrics/joint.json", lambda m: m.update(avg=m["avg"] + 0.009))
    edit(rerun, "reports/metrics/details/joint.json", lambda m: (m.update(avg=m["avg"] + 0.009),
                                                               m["STS12"].update(all=round(m["STS12"]["all"], 2))))
    edit(rerun, "reports/metrics/joint.json", lambda m: m.update(STS12=round(m["STS12"], 2)))
    report, check = report_then_check(rerun)
    assert report.returncode == 0, report.stderr[-2000:]
    assert check.returncode == 0, check.stdout[-3000:]
    assert "verdict: equivalent" in check.stdout
    verdicts = next(line for line in check.stdout.splitlines() if line.startswith("claims' verdicts compared"))
    assert verdicts.endswith(", 0 changed"), verdicts
    assert " 0 claims beyond 0.1 h" in check.stdout


def test_a_paired_difference_moved_by_three_tenths_of_its_half_width_is_not_reproduced(rerun):
    """Joint down and the untrained twin up by the same x on every score, each well inside its own score gate
    (a tenth of its half-width: ~0.23 on the average): Δ̂ over the record's five paired seeds moves 2x/5 = 0.3 h."""
    difference, h = committed_estimate(rerun)
    points = 0.3 * h * 5 / 2
    shift(rerun, "joint", -points)
    shift(rerun, "ensemble", points)
    report, check = report_then_check(rerun)
    assert report.returncode == 0, report.stderr[-2000:]
    assert check.returncode == 1, check.stdout[-3000:]
    moved = estimate_line(check, "Δ̂")
    assert moved and "moved 0.300 h (allowed 0.1 h)" in moved[0], check.stdout[-3000:]
    assert "largest score movement" in check.stdout and "verdict: not reproduced" in check.stdout


def test_a_paired_difference_reversed_in_sign_is_not_reproduced_and_the_record_is_named(rerun):
    """Δ̂ moved by 2 h (0.25 → −0.22): joint's seed-42 numbers are then far from the seed record's, which the
    report refuses in one line naming both numbers and the command that remakes the record — never a silent
    switch to one-run arms — and the check names the scores that moved."""
    difference, h = committed_estimate(rerun)
    points = 2 * h * 5 / 2
    shift(rerun, "joint", -points)
    shift(rerun, "ensemble", points)
    report, check = report_then_check(rerun)
    assert report.returncode == 2, report.stdout[-1000:] + report.stderr[-2000:]
    error = report.stderr.strip().splitlines()[-1]
    assert "reports/seed_noise.json: joint " in error and "python scripts/seed_noise.py" in error, error
    assert "Traceback" not in report.stderr
    assert check.returncode == 1
    assert "reports/metrics/joint.json: avg moved" in check.stdout


def test_resamples_widened_so_that_tau_moves_three_tenths_of_a_half_width_are_not_reproduced(rerun):
    """The untrained twin's resamples 1.4× wider about their mean, its scores untouched: τ(joint − ensemble)
    moves by more than 0.3 h though no score, interval or resample mean moved at all."""
    widen_resamples(rerun, "ensemble", 1.4)
    report, check = report_then_check(rerun)
    assert report.returncode == 0, report.stderr[-2000:]
    assert check.returncode == 1, check.stdout[-3000:]
    moved = estimate_line(check, "τ")
    assert moved, check.stdout[-3000:]
    assert float(moved[0].split("moved ")[1].split(" h")[0]) >= 0.3


def test_an_mteb_task_moved_by_ten_points_is_not_reproduced(rerun):
    def lower(results):
        suite = results["suites"]["local-sts"]
        suite["tasks"]["LocalSTSBenchmark"]["main"] -= 10
        suite["tasks"]["LocalSTSBenchmark"]["subsets"]["default"] -= 10
        suite["avg"] -= 10

    edit(rerun, "reports/mteb/backbone.json", lower)
    report, check = report_then_check(rerun)
    assert report.returncode == 0, report.stderr[-2000:]
    assert check.returncode == 1, check.stdout[-3000:]
    assert "not reproduced: reports/mteb/backbone.json: suites.local-sts.tasks.LocalSTSBenchmark.main = " in check.stdout
