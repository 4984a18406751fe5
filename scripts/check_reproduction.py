"""Did this run reproduce the committed results? For CI, after `dvc repro` on a fresh clone.

The round-trip files must be byte-identical to the committed run (their hashes in dvc.lock), and
every number in reports/metrics/*.json and reports/metrics/details/*.json (the headline and every
score) within --tolerance points of the committed value (room for
floating-point differences between CPUs). Prints the largest metric difference; exits 1 otherwise.

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

METRICS_DIR = "reports/metrics"
ROUND_TRIP_STAGE = "rtt"  # dvc.lock names its instances rtt@I, rtt@II


def committed(root: Path, ref: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=root, capture_output=True, text=True, check=True).stdout


def round_trip_hashes(lock_text: str) -> dict[str, str]:
    """output path → md5 of every output of the round-trip stages in a dvc.lock."""
    stages = yaml.safe_load(lock_text).get("stages", {})
    return {
        out["path"]: out.get("md5", "")
        for name, stage in stages.items()
        if name.split("@")[0] == ROUND_TRIP_STAGE
        for out in stage.get("outs", [])
    }


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


def check(root: Path, ref: str, tolerance: float) -> int:
    problems: list[str] = []
    expected_hashes = round_trip_hashes(committed(root, ref, "dvc.lock"))
    actual_hashes = round_trip_hashes((root / "dvc.lock").read_text(encoding="utf-8"))
    if not expected_hashes:
        problems.append(f"dvc.lock at {ref} has no {ROUND_TRIP_STAGE} outputs to compare")
    for path, digest in expected_hashes.items():
        if actual_hashes.get(path) != digest:
            problems.append(f"{path}: md5 {actual_hashes.get(path)} vs committed {digest}")

    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, f"{METRICS_DIR}/"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    metric_files = sorted(path for path in listing if path.endswith(".json"))
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

    print(f"round-trip files compared: {len(expected_hashes)}; metrics files compared: {len(metric_files)}")
    print(f"largest metric difference: {largest[0]:.3g} ({largest[1] or 'none'}); tolerance {tolerance}")
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
