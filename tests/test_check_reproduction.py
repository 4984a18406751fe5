"""CI's reproduction check (scripts/check_reproduction.py over tools/reproduction.py): identical on the
same machine, equivalent on another machine when every verdict stands and every score moved by less than a
tenth of its 95% half-width, not reproduced otherwise — and never equivalent when an input differs."""

import copy
import hashlib
import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_reproduction.py"
ENVIRONMENT = {"device": "cpu", "gpu": None, "cpu": {"model": "Intel(R) Xeon(R) Processor", "capability": "AVX512"},
               "versions": {"python": "3.11.7", "torch": "2.13.0+cpu"}, "threads": 2, "world_size": 1, "per_device_batch": 16}
DETAILS = {
    "STS12": {"all": 71.5, "mean": 60.7, "subsets": {"MSRpar": 38.45, "SMTnews": 55.58}},
    "STSBenchmark": {"test": 71.56},
    "avg": 71.53,
    # half-widths: STS12 6.0, STS-B 7.0, avg 2.0
    "intervals": {"STS12": {"low": 65.5, "high": 77.5}, "STSBenchmark": {"low": 64.56, "high": 78.56},
                  "avg": {"low": 69.53, "high": 73.53}},
    "bootstrap": {"resamples": 1000, "seed": 42, "indices": "321c"},
    "model": "joint", "max_pairs": 300, "environment": ENVIRONMENT,
}
HEADLINE = {"STS12": 71.5, "STSBenchmark": 71.56, "avg": 71.53}
TRAINING = {"best_dev_stsb": 81.88, "steps": 12}
# the lock's md5s are the files' own, as `dvc repro` writes them (`relock`)
LOCK = {"schema": "2.0", "stages": {
    "download": {"cmd": "python -m stages download", "deps": [{"path": "pipeline/data"}],
                 "outs": [{"path": "data/raw/corpus.txt"}]},
    "joint": {"cmd": "python -m stages joint", "params": {"params.yaml": {"seed": 42, "threads": 2}},
              "deps": [{"path": "data/raw/corpus.txt"}, {"path": "pipeline/training"}],
              "outs": [{"path": "data/models/joint"}, {"path": "reports/training/joint.json"},
                       {"path": "reports/training/details/joint.json"}]},
    "evaluate": {"cmd": "python -m stages evaluate", "deps": [{"path": "data/models/joint"}],
                 "outs": [{"path": "reports/metrics/joint.json"}, {"path": "reports/metrics/details/joint.json"}]},
    "report": {"cmd": "python -m stages report", "outs": [{"path": "reports/tables"}, {"path": "reports/claims.json"}]},
}}  # fmt: skip
# the report reads `dvc exp show` (the git history) too: dvc.yaml marks it always_changed
DVC_YAML = {"stages": {"report": {"cmd": "python -m stages report", "always_changed": True}}}
CLAIMS = {"claims": 2, "verdicts": {"holds": 1, "not_run": 1},
          "by_claim": {"tncse-beats-tower-i": "holds", "tncse-bert-avg": "not run"},
          # the estimate the verdict is read from: h = 0.24
          "details": {"tncse-beats-tower-i": {"kind": "order", "verdict": "holds", "comparisons": [
              {"better": "TNCSE", "worse": "Tower I", "verdict": "holds", "difference": 0.25, "interval": [0.01, 0.49],
               "tau": 0.07}]}, "tncse-bert-avg": {"kind": "value", "verdict": "not run", "interval": None}}}
FILES = {
    "reports/metrics/details/joint.json": DETAILS,
    "reports/metrics/joint.json": HEADLINE,
    "reports/training/joint.json": TRAINING,
    "reports/training/details/joint.json": {**TRAINING, "best_step": 6, "environment": ENVIRONMENT},
    "reports/claims.json": CLAIMS,
    "params.yaml": {"seed": 42, "threads": 2},
}
TEXTS = {"pipeline/data/__init__.py": "READ = 1\n", "pipeline/training/__init__.py": "STEPS = 12\n",
         "data/raw/corpus.txt": "a sentence\n", "data/models/joint/model.bin": "weights",
         "reports/tables/main.md": "| avg | 71.53 |\n", ".gitignore": "/data/\n", ".dvcignore": "__pycache__/\n"}


def git(folder, *arguments):
    subprocess.run(["git", *arguments], cwd=folder, check=True, capture_output=True)


def md5(folder, path):
    """DVC's md5: of a file's bytes; of a folder, of the JSON listing of its files' md5s, plus ".dir"."""
    if (folder / path).is_file():
        return hashlib.md5((folder / path).read_bytes()).hexdigest()
    files = sorted(file for file in (folder / path).rglob("*") if file.is_file())
    listing = [{"md5": md5(folder, file.relative_to(folder)), "relpath": file.relative_to(folder / path).as_posix()}
               for file in files]
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir"


def relock(folder):
    """dvc.lock as a run writes it: every output and dependency with the md5 of the file here."""
    lock = yaml.safe_load((folder / "dvc.lock").read_text())
    for stage in lock["stages"].values():
        for entry in stage.get("deps", []) + stage.get("outs", []):
            entry["md5"] = md5(folder, entry["path"])
    (folder / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def write(folder, path, value):
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    (folder / path).write_text(json.dumps(value, indent=2) if path.endswith(".json") else yaml.safe_dump(value, sort_keys=False))


@pytest.fixture
def project(tmp_path):
    write(tmp_path, "dvc.lock", LOCK)
    write(tmp_path, "dvc.yaml", DVC_YAML)
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "cpu.txt").write_text("torch==2.13.0+cpu\n")
    for path, value in FILES.items():
        write(tmp_path, path, value)
    for path, text in TEXTS.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    relock(tmp_path)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qm", "results")
    return tmp_path


def check(folder, *arguments):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(folder), *arguments], capture_output=True, text=True)


def edit(folder, path, change):
    """A run that writes `path` so: an output is relocked, as `dvc repro` does (an edit of dvc.lock is not)."""
    value = json.loads((folder / path).read_text()) if path.endswith(".json") else yaml.safe_load((folder / path).read_text())
    change(value)
    write(folder, path, value)
    if path != "dvc.lock":
        relock(folder)


def retrain(folder, weights="other weights"):
    (folder / "data/models/joint/model.bin").write_text(weights)
    relock(folder)


def another_machine(folder, capability="AVX2"):
    """The run as another CPU kind makes it: other kernels, so other trained bytes."""
    for path in ("reports/metrics/details/joint.json", "reports/training/details/joint.json"):
        edit(folder, path, lambda record: record["environment"]["cpu"].update(capability=capability))
    retrain(folder)


def test_committed_results_are_identical(project):
    result = check(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: identical" in result.stdout
    assert "outputs compared by hash: 6, 0 differ" in result.stdout


def test_the_history_dependent_report_is_compared_by_its_verdicts_not_its_hash(project):
    (project / "reports/tables/main.md").write_text("| commits | 3 |\n")
    relock(project)
    assert "verdict: identical" in check(project).stdout


def test_another_output_on_the_same_machine_is_not_reproduced(project):
    """Bit identity stays required where every machine fact equals the committed run's."""
    committed = md5(project, "data/models/joint")
    retrain(project)
    result = check(project)
    assert result.returncode == 1
    assert (f"not reproduced: first output that differs: joint data/models/joint: md5 {md5(project, 'data/models/joint')} "
            f"vs committed {committed}") in result.stdout
    assert "machine facts equal" in result.stdout and "verdict: not reproduced" in result.stdout


def test_a_failure_on_the_same_machine_lists_the_stages_and_what_else_the_records_say(project):
    """Outputs that differ where the machine facts are equal: the check lists every differing output by
    stage and the fields of the records that differ besides the machine facts (data read, settings)."""
    retrain(project)
    edit(project, "reports/training/details/joint.json",
         lambda record: record["environment"].update(data_sha256={"data/raw/corpus.txt": "b2"}))
    result = check(project)
    assert result.returncode == 1
    assert "outputs that differ, by stage: joint (2)" in result.stdout
    assert ("record differs (not a machine fact): data_sha256.data/raw/corpus.txt: 'b2' here vs None in the "
            "committed run (reports/training/details/joint.json)") in result.stdout
    assert "machine differs" not in result.stdout


def test_another_cpu_within_a_tenth_of_every_half_width_is_equivalent(project):
    another_machine(project)
    # STS12's subset moves 0.5 of STS12's half-width 6.0 (ratio 0.083); avg 0.1 of 2.0 (0.05)
    edit(project, "reports/metrics/details/joint.json", lambda d: (d["STS12"]["subsets"].update(SMTnews=56.08), d.update(avg=71.63)))
    edit(project, "reports/metrics/joint.json", lambda d: d.update(avg=71.63))
    edit(project, "reports/training/joint.json", lambda d: d.update(best_dev_stsb=82.18))  # 0.3 of STS-B's 7.0
    result = check(project)
    assert result.returncode == 0, result.stdout
    assert "verdict: equivalent" in result.stdout
    # only the leaf that differs is named, not the whole CPU record
    assert ("machine differs: cpu.capability: 'AVX2' here vs 'AVX512' in the committed run "
            "(reports/training/details/joint.json)") in result.stdout
    assert "outputs that differ, by stage: joint (3), evaluate (2)" in result.stdout
    assert ("largest score movement: 0.083 of its 95% half-width (reports/metrics/details/joint.json: "
            "STS12.subsets.SMTnews") in result.stdout


def test_the_cpus_features_differ_as_two_sets_one_line_each(project):
    """Another CPU's feature list reads as what only one machine has, not as lists compared position by position."""
    def run_on(features, capability):
        for path in ("reports/metrics/details/joint.json", "reports/training/details/joint.json"):
            edit(project, path, lambda record: record["environment"]["cpu"].update(features=features, capability=capability))

    run_on(["avx", "avx2", "avx512f", "amx_bf16"], "AVX512")
    git(project, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qam", "the committed run, with AMX")
    run_on(["avx", "avx2", "fma"], "AVX2")
    retrain(project)
    lines = [line for line in check(project).stdout.splitlines() if line.startswith("machine differs")]
    assert lines == [
        "machine differs: cpu.capability: 'AVX2' here vs 'AVX512' in the committed run (reports/training/details/joint.json)",
        "machine differs: cpu.features: only here: fma; only in the committed run: amx_bf16, avx512f "
        "(reports/training/details/joint.json)",
    ]


def test_another_cpu_that_moves_a_score_too_far_is_not_reproduced(project):
    another_machine(project)
    edit(project, "reports/metrics/details/joint.json", lambda d: d["STS12"]["subsets"].update(MSRpar=39.45))  # 1/6
    result = check(project)
    assert result.returncode == 1
    assert "STS12.subsets.MSRpar moved 1 points, 0.167 of its 95% half-width 6 (allowed 0.1)" in result.stdout
    assert "first output that differs: joint data/models/joint" in result.stdout
    assert check(project, "--fraction", "0.2").returncode == 0  # the rule's share is a setting


def estimate(claims, **parts):
    """claims.json with the comparison's estimate moved (difference, low, high, tau) and its verdict word set."""
    comparison = claims["details"]["tncse-beats-tower-i"]["comparisons"][0]
    low, high = parts.pop("low", comparison["interval"][0]), parts.pop("high", comparison["interval"][1])
    comparison.update(parts, interval=[low, high])


def test_another_cpu_that_changes_a_verdict_word_with_no_estimate_is_not_reproduced(project):
    another_machine(project)
    edit(project, "reports/claims.json", lambda c: c["by_claim"].update({"tncse-bert-avg": "inconclusive"}))
    result = check(project)
    assert result.returncode == 1
    assert ("reports/claims.json: verdict changed with no estimate to judge it by: tncse-bert-avg: inconclusive vs "
            "committed not run") in result.stdout


def test_a_verdict_word_that_flips_inside_its_estimates_tolerance_is_equivalent_and_named(project):
    """The interval ended at the boundary: another CPU moves its low end by 0.02 (0.083 h) across 0, the word
    flips to inconclusive, the estimate stays: equivalent, and the line names the flip."""
    another_machine(project)
    edit(project, "reports/claims.json", lambda c: (estimate(c, low=-0.01, difference=0.24),
                                                     c["by_claim"].update({"tncse-beats-tower-i": "inconclusive"})))
    result = check(project)
    assert result.returncode == 0, result.stdout
    assert ("1 with every estimate inside its tolerance, accepted: tncse-beats-tower-i: inconclusive vs committed holds"
            in result.stdout)
    assert "largest estimate movement: 0.083 h" in result.stdout


@pytest.mark.parametrize("parts, moved", [
    ({"difference": -0.22, "low": -0.46, "high": 0.02}, "Δ̂ -0.2200 vs committed +0.2500, h 0.2400: moved 1.958 h"),
    ({"difference": 0.322}, "Δ̂ +0.3220 vs committed +0.2500, h 0.2400: moved 0.300 h"),
    ({"tau": 0.142}, "τ +0.1420 vs committed +0.0700, h 0.2400: moved 0.300 h"),
    ({"high": 0.56}, "high +0.5600 vs committed +0.4900, h 0.2400: moved 0.292 h"),
])
def test_an_estimate_that_moves_more_than_a_tenth_of_its_half_width_is_not_reproduced(project, parts, moved):
    """Whatever the words say: the verdict word is left as committed (holds), or flips to inconclusive."""
    another_machine(project)
    edit(project, "reports/claims.json", lambda c: estimate(c, **parts))
    result = check(project)
    assert result.returncode == 1
    assert f"reports/claims.json: tncse-beats-tower-i (TNCSE − Tower I): {moved} (allowed 0.1 h)" in result.stdout
    edit(project, "reports/claims.json", lambda c: c["by_claim"].update({"tncse-beats-tower-i": "inconclusive"}))
    assert check(project).returncode == 1


def test_another_step_count_is_not_reproduced(project):
    another_machine(project)
    edit(project, "reports/training/joint.json", lambda d: d.update(steps=11))
    assert "reports/training/joint.json: steps = 11 vs committed 12" in check(project).stdout


@pytest.mark.parametrize("path, text, named", [
    ("pipeline/training/__init__.py", "STEPS = 11\n", "code or configuration pipeline/training"),
    ("params.yaml", "seed: 42\nthreads: 1\n", "param params.yaml:threads: 1"),
    ("data/raw/corpus.txt", "another sentence\n", "data data/raw/corpus.txt (stage download)"),
])  # fmt: skip
def test_changed_inputs_are_never_equivalent(project, path, text, named):
    """Even with another machine and unchanged numbers: other code, params or data is another experiment
    (committed and rerun, so the workspace is what its lock records; compared with the commit before)."""
    another_machine(project)
    (project / path).write_text(text)
    relock(project)
    edit(project, "dvc.lock", lambda lock: lock["stages"]["joint"]["params"]["params.yaml"].update(yaml.safe_load(
        (project / "params.yaml").read_text())))
    git(project, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qam", "another experiment")
    result = check(project, "--ref", "HEAD~1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "verdict: not reproduced (inputs differ)" in result.stdout
    assert f"first input that differs: {named}" in result.stdout


def test_another_requirements_lock_is_an_input(project):
    (project / "requirements" / "cpu.txt").write_text("torch==2.14.1+cpu\n")
    git(project, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qam", "new lock")
    result = check(project, "--ref", "HEAD~1")
    assert result.returncode == 1 and "requirements/cpu.txt: differs from the committed lock" in result.stdout


@pytest.mark.parametrize("arguments, message", [
    (["--ref", "no-such-ref"], "--ref 'no-such-ref': no such commit"),
    (["--fraction", "nan"], "--fraction nan: must be a number in (0, 1]"),
    (["--fraction", "0"], "--fraction 0.0: must be a number in (0, 1]"),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(project, arguments, message):
    result = check(project, *arguments)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and message in result.stderr
    assert "Traceback" not in result.stderr


def test_no_dvc_lock_is_one_line_and_exit_2(project):
    (project / "dvc.lock").unlink()
    result = check(project)
    assert result.returncode == 2 and "dvc.lock: none here (run `dvc repro` first)" in result.stderr


def test_a_corrupt_metrics_file_is_named(project):
    another_machine(project)
    (project / "reports" / "metrics" / "joint.json").write_text('{"avg": 7')
    relock(project)  # the run wrote it so
    result = check(project)
    assert result.returncode == 2 and "reports/metrics/joint.json (this run): not valid JSON" in result.stderr


@pytest.mark.parametrize("path, damage", [
    ("reports/metrics/joint.json", lambda text: text.replace("71.53", "17.53")),
    ("reports/training/details/joint.json", lambda text: text[: len(text) // 2]),  # truncated
    ("data/raw/corpus.txt", lambda text: text + "one more\n"),
])  # fmt: skip
def test_an_output_changed_after_the_run_is_not_reproduced(project, path, damage):
    """The check hashes the files here: an output that is not what dvc.lock records is named, never identical."""
    (project / path).write_text(damage((project / path).read_text()))
    result = check(project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"first file that differs from dvc.lock or git: output {path} (stage " in result.stdout
    assert f"here vs {md5_committed(project, path)} in dvc.lock" in result.stdout
    assert "verdict: not reproduced (the workspace is not what the run recorded)" in result.stdout


def md5_committed(folder, path):
    lock = yaml.safe_load((folder / "dvc.lock").read_text())
    return next(out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", []) if out["path"] == path)


def test_a_changed_file_in_an_output_folder_is_named_from_the_cache_listing(project):
    listing = [{"md5": md5(project, "data/models/joint/model.bin"), "relpath": "model.bin"}]
    recorded = md5_committed(project, "data/models/joint")
    cached = project / ".dvc/cache/files/md5" / recorded[:2] / recorded[2:]
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(listing))
    (project / "data/models/joint/model.bin").write_text("damaged")
    (project / "data/models/joint/__pycache__").mkdir()  # what .dvcignore ignores is not part of the folder
    (project / "data/models/joint/__pycache__/x.pyc").write_text("bytecode")
    result = check(project)
    assert result.returncode == 1
    assert "output data/models/joint (stage joint)" in result.stdout
    assert "(first file that differs: data/models/joint/model.bin, changed)" in result.stdout


@pytest.mark.parametrize("path, text, named", [
    ("pipeline/training/__init__.py", "STEPS = 11\n", "code or configuration pipeline/training (stage joint): md5 "),
    ("params.yaml", "seed: 42\nthreads: 1\n", "param params.yaml:threads (stage joint): 1 here vs 2 in dvc.lock"),
    ("dvc.yaml", "stages: {}\n", "dvc.yaml: changed since the last commit (git status M)"),
])  # fmt: skip
def test_a_dirty_workspace_is_not_reproduced(project, path, text, named):
    """Code, params or a tracked file edited without a rerun: the lock no longer describes the workspace."""
    (project / path).write_text(text)
    result = check(project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"not reproduced: {named}" in result.stdout
    assert "verdict: identical" not in result.stdout


def test_a_runs_own_provenance_is_no_dirt(project):
    """Each stage rewrites reports/provenance/<stage>.json (commit, host, time): a fresh clone's run
    always changes it, and the check must still say identical."""
    write(project, "reports/provenance/joint.json", {"stage": "joint", "git_commit": "0" * 40})
    git(project, "add", ".")
    git(project, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "commit", "-qm", "provenance")
    write(project, "reports/provenance/joint.json", {"stage": "joint", "git_commit": "1" * 40})
    result = check(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verdict: identical" in result.stdout


def test_a_missing_root_is_one_line_and_exit_2(tmp_path):
    result = check(tmp_path / "no-such-folder")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "no such folder" in result.stderr
