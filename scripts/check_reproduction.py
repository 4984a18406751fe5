"""Did this run reproduce the committed results? For CI, after `dvc repro` on a fresh clone.

Every output in dvc.lock must be byte-identical to the committed run's (its md5): the first that
differs is named by stage and path, in dvc.lock's order (upstream first, so it is where a
difference starts), with the params that differ from the committed ones (e.g. `threads`, the CPU
thread count that decides the last bits of trained weights). Every number in reports/metrics/*.json
and reports/metrics/details/*.json (the headline and every score) must also be within --tolerance
points of the committed value; the largest metric difference is printed either way, so a run on
another CPU that moved only last bits says by how much, and where anything differs the machine facts
of the environment record that differ (CPU model and vector ISA, threads, GPU) are printed first.
Exits 1 on any difference.

One exception to byte identity: the outputs of stages dvc.yaml marks `always_changed` (the report)
are views of the git history as well as of the pipeline (their rows may come from the commits and
DVC experiments `dvc exp show` lists, and experiments.md names those commits), so the commit that
adds the results changes them. Their hashes are listed as not compared; their numbers are compared
like the metrics (reports/claims.json: the verdict counts).

    python scripts/check_reproduction.py [--ref HEAD] [--tolerance 0.01]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline import paths

METRICS_DIR = paths.METRICS.as_posix()
HISTORY_METRICS = ("reports/claims.json",)  # numbers of the history-dependent stage, compared with the metrics


def committed(root: Path, ref: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=root, capture_output=True, text=True, check=True).stdout


def output_hashes(lock_text: str) -> dict[tuple[str, str], str]:
    """(stage, output path) → md5 of every output in a dvc.lock, in the lock's order."""
    stages = yaml.safe_load(lock_text).get("stages", {})
    return {(name, out["path"]): out.get("md5", "") for name, stage in stages.items() for out in stage.get("outs", [])}


def committed_paths(root: Path, ref: str) -> set[str]:
    return set(subprocess.run(["git", "ls-tree", "-r", "--name-only", ref], cwd=root, capture_output=True, text=True, check=True).stdout.split())


def stage_params(lock_text: str) -> dict[str, object]:
    """'<params file>:<key>' → value, over the params every stage of a dvc.lock was run with."""
    stages = yaml.safe_load(lock_text).get("stages", {})
    return {
        f"{file}:{path}": value
        for stage in stages.values()
        for file, values in stage.get("params", {}).items()
        for path, value in numbers(values).items()
    }


def history_stages(dvc_yaml: str) -> set[str]:
    """The stages marked `always_changed` in dvc.yaml: their outputs also depend on the git history."""
    stages = yaml.safe_load(dvc_yaml).get("stages", {})
    return {name for name, stage in stages.items() if isinstance(stage, dict) and stage.get("always_changed")}


def compare_outputs(expected_lock: str, actual_lock: str, skipped: set[str] = frozenset()) -> list[str]:
    """One problem per committed output whose md5 differs or that is missing, the first named as such;
    the outputs of the `skipped` stages are left out."""
    expected, actual = output_hashes(expected_lock), output_hashes(actual_lock)
    expected = {key: digest for key, digest in expected.items() if key[0] not in skipped}
    actual = {key: digest for key, digest in actual.items() if key[0] not in skipped}
    problems = [
        f"{stage} {path}: md5 {actual.get((stage, path), 'missing')} vs committed {digest}"
        for (stage, path), digest in expected.items()
        if actual.get((stage, path)) != digest
    ]
    problems += [f"{stage} {path}: not in the committed dvc.lock" for stage, path in actual.keys() - expected.keys()]
    if problems:
        problems[0] = f"first output that differs: {problems[0]}"
    return problems


def compare_params(expected_lock: str, actual_lock: str) -> list[str]:
    """The params this run's stages ran with that differ from the committed run's."""
    expected, actual = stage_params(expected_lock), stage_params(actual_lock)
    return [
        f"{path}: {actual.get(path, 'missing')!r} vs committed {value!r}"
        for path, value in expected.items()
        if actual.get(path, "missing") != value
    ]


def numbers(tree, prefix: str = "") -> dict[str, object]:
    """Leaves of a metrics JSON by dotted path (numbers and the strings that label them)."""
    if isinstance(tree, dict):
        return {path: value for key, sub in tree.items() for path, value in numbers(sub, f"{prefix}{key}.").items()}
    if isinstance(tree, list):
        return {path: value for index, sub in enumerate(tree) for path, value in numbers(sub, f"{prefix}{index}.").items()}
    return {prefix.rstrip("."): tree}


def compare_metrics(expected: dict, actual: dict, tolerance: float) -> tuple[list[str], tuple[float, str]]:
    """(problems, (largest numeric difference, its path)) between two metrics files."""
    problems, largest = [], (0.0, "")
    want, got = numbers(expected), numbers(actual)
    for path, value in want.items():
        if path not in got:
            problems.append(f"{path}: missing (committed {value})")
            continue
        new = got[path]
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if numeric and isinstance(new, (int, float)) and not isinstance(new, bool):
            difference = abs(new - value) if math.isfinite(new) else math.inf
            if difference > largest[0]:
                largest = (difference, path)
            if difference > tolerance:
                problems.append(f"{path}: {new} vs committed {value} (difference {difference:.4g} > {tolerance})")
        elif new != value:
            problems.append(f"{path}: {new!r} vs committed {value!r}")
    problems += [f"{path}: not in the committed file" for path in got.keys() - want.keys()]
    return problems, largest


ENVIRONMENT_RECORD = (paths.TRAINING_DETAILS / "pretrain-I.json").as_posix()  # every record holds the environment; the first stage's


def machine_differences(root: Path, ref: str) -> list[str]:
    """What of the machine (CPU model and vector ISA, threads, GPU) differs between the committed run's
    environment record and this run's: a likely reason why trained weights differ in their last bits."""
    current = root / ENVIRONMENT_RECORD
    if not current.is_file() or ENVIRONMENT_RECORD not in committed_paths(root, ref):
        return []
    then = json.loads(committed(root, ref, ENVIRONMENT_RECORD)).get("environment", {})
    now = json.loads(current.read_text(encoding="utf-8")).get("environment", {})
    return [f"{key}: {now.get(key)!r} here vs {then.get(key, 'not recorded')!r} in the committed run"
            for key in ("cpu", "threads", "gpu") if now.get(key) != then.get(key, "not recorded")]


def check(root: Path, ref: str, tolerance: float) -> int:
    expected_lock = committed(root, ref, "dvc.lock")
    actual_lock = (root / "dvc.lock").read_text(encoding="utf-8")
    outputs = output_hashes(expected_lock)
    skipped = history_stages((root / "dvc.yaml").read_text(encoding="utf-8"))
    problems: list[str] = [] if outputs else [f"dvc.lock at {ref} has no outputs to compare"]
    problems += compare_outputs(expected_lock, actual_lock, skipped)
    params = compare_params(expected_lock, actual_lock)
    problems += [f"params differ: {difference}" for difference in params]

    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, f"{METRICS_DIR}/"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    metric_files = sorted(path for path in listing if path.endswith(".json")) + [
        path for path in HISTORY_METRICS if path in committed_paths(root, ref)
    ]
    if not metric_files:
        problems.append(f"no {METRICS_DIR}/*.json committed at {ref}")
    largest = (0.0, "")
    for path in metric_files:
        current = root / path
        if not current.is_file():
            problems.append(f"{path}: not produced by this run")
            continue
        file_problems, file_largest = compare_metrics(
            json.loads(committed(root, ref, path)), json.loads(current.read_text(encoding="utf-8")), tolerance
        )
        problems += [f"{path}: {problem}" for problem in file_problems]
        if file_largest[0] > largest[0]:
            largest = (file_largest[0], f"{path}: {file_largest[1]}")

    unhashed = sorted({stage for stage, _ in outputs if stage in skipped})
    print(f"outputs compared: {sum(stage not in skipped for stage, _ in outputs)} (not by hash: the outputs of "
          f"{', '.join(unhashed) or 'no stage'}, which also read the git history); metrics files compared: {len(metric_files)}")
    print(f"largest metric difference: {largest[0]:.3g} ({largest[1] or 'none'}); tolerance {tolerance}")
    if problems:
        for difference in machine_differences(root, ref):
            print(f"machine differs: {difference} (CPU kernels and MKL choose their code by the CPU: other last bits)")
    for problem in problems:
        print(f"not reproduced: {problem}")
    print("reproduced the committed results" if not problems else f"{len(problems)} differences from {ref}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="the git revision holding the committed results")
    parser.add_argument("--tolerance", type=float, default=0.01, help="largest allowed metric difference, in points")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    arguments = parser.parse_args()
    return check(arguments.root, arguments.ref, arguments.tolerance)


if __name__ == "__main__":
    sys.exit(main())
