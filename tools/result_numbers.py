"""Every numeric result of a reproduction against the committed run's (`tools.reproduction`; the rule:
docs/reproducing.md, "Did it reproduce?").

A number with an interval moves at most `fraction` of its 95% half-width: the scores of the metrics files
(a task's "all", "mean" and subsets, test splits, avg), the ends and standard error of their intervals, the
mean and sd of their bootstrap resamples per task, a training stage's best STS-B dev score. A number without
one (MTEB, the analyses, the public checkpoints' scores, training curves, a correlation's ρ) moves at most
`RELATIVE_TOLERANCE` of its size. Counts (`steps`) and labels are equal. Binned plot data, figures and the
rendered tables are not compared by number (they are drawn from the numbers above): where they differ,
the check names them.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import paths
from pipeline.declarations.sts_tasks import STS_BENCHMARK
from pipeline.io import dotted_leaves
from pipeline.verdicts.rules import NEAR_ZERO, RELATIVE_TOLERANCE

# A training stage's best STS-B dev score is held to the narrowest STS-B test half-width of the run (the same
# benchmark; as many pairs at the tiny scale, 1,500 dev against 1,379 test pairs at the paper's).
DEV_SCORE, DEV_TASK = "best_dev_stsb", STS_BENCHMARK.name
EXACT_KEYS = ("steps",)  # counts, equal or not
# Compared by number without an interval: (folder or file, glob).
BY_TOLERANCE = ((paths.MTEB, "*.json"), (paths.ANALYSIS, "*.json"), (paths.REPORTS, "checkpoints.json"),
                (paths.ANALYSIS, "align_uniform.csv"), (paths.ANALYSIS, "cls_energy.csv"),
                (paths.TRAINING_REPORTS, "*.csv"))


@dataclass
class Largest:
    """The largest movement seen and where."""

    ratio: float = 0.0
    where: str = ""

    def offer(self, ratio: float, where: str) -> None:
        if ratio > self.ratio or (not self.where and ratio == self.ratio):
            self.ratio, self.where = ratio, where

    def text(self, unit: str, percent: bool = False) -> str:
        shown = f"{self.ratio:.3%}" if percent else f"{self.ratio:.3f}"
        return f"{shown} {unit} ({self.where or 'none'})"


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def relative_change(before: float, after: float) -> float:
    return abs(after - before) / max(abs(before), abs(after), NEAR_ZERO)


def numbers_within(before, after, tolerance: float, largest: Largest | None = None, where: str = "") -> list[str]:
    """Each leaf of `before` against `after`'s: a number within `tolerance` of its size, anything else equal;
    each number's relative change offered to `largest` (named `where: key`)."""
    then, now = dotted_leaves(before, into_lists=True), dotted_leaves(after, into_lists=True)
    problems = []
    for key, value in then.items():
        current = now.get(key, "missing")
        if finite(value) and finite(current):
            if largest is not None:
                largest.offer(relative_change(value, current), f"{where}: {key} ({current!r} vs {value!r})")
            if relative_change(value, current) > tolerance:
                problems.append(f"{key} = {current!r} vs committed {value!r}: moved {relative_change(value, current):.2%} "
                                f"of its size (allowed {tolerance:.0%})")
        elif current != value:
            problems.append(f"{key} = {current!r} vs committed {value!r}")
    problems += [f"{key}: not in the committed run" for key in sorted(now.keys() - then.keys())]
    return problems


# --- scores against their intervals -----------------------------------------------------------------


def half_widths(details: dict) -> dict[str, float]:
    """task → half of its 95% interval in a details file (`intervals.<task>.low/high`)."""
    found = {}
    for task, interval in (details.get("intervals") or {}).items():
        if isinstance(interval, dict) and finite(interval.get("low")) and finite(interval.get("high")):
            found[task] = (interval["high"] - interval["low"]) / 2
    return found


def score_leaves(details: dict) -> Iterator[tuple[str, str, float]]:
    """(dotted path, task, number) of every score of a details or headline metrics file — a task's "all",
    "mean" and subsets, test splits, avg — and of its intervals (low, high, se: in the task's units)."""
    for task, value in details.items():
        if task in ("environment", "bootstrap"):
            continue
        if task == "intervals":
            for path, leaf in dotted_leaves(value, "intervals.").items():
                if finite(leaf):
                    yield path, path.split(".")[1], float(leaf)
            continue
        for path, leaf in dotted_leaves(value, f"{task}.", into_lists=True).items():
            if finite(leaf):
                yield path, task, float(leaf)


def compare_scores(path: str, expected: dict, actual: dict, widths: dict[str, float], fraction: float,
                   check, largest: Largest) -> None:
    """Each score of `path` against the committed one, relative to its task's half-width."""
    now = {leaf: score for leaf, _, score in score_leaves(actual)}
    for leaf, task, score in score_leaves(expected):
        if leaf not in now:
            check.problems.append(f"{path}: {leaf} missing (committed {score})")
            continue
        width = widths.get(task)
        if width is None or width <= 0:
            if now[leaf] != score:
                check.problems.append(f"{path}: {leaf} = {now[leaf]} vs committed {score}, and no interval to judge it by")
            continue
        ratio = abs(now[leaf] - score) / width
        largest.offer(ratio, f"{path}: {leaf} ({now[leaf]:.4f} vs {score:.4f}, half-width {width:.3f})")
        if ratio > fraction:
            check.problems.append(f"{path}: {leaf} moved {abs(now[leaf] - score):.4g} points, {ratio:.3f} of its "
                                  f"95% half-width {width:.3g} (allowed {fraction})")


def compare_labels(path: str, expected: dict, actual: dict, check) -> None:
    """Everything of a metrics file that is not a score (labels, counts) must be equal, the environment aside."""
    scores = {leaf for leaf, _, _ in score_leaves(expected)}
    kept = {key: value for key, value in expected.items() if key not in ("environment", "scores")}
    after = dotted_leaves({key: value for key, value in actual.items() if key not in ("environment", "scores")}, into_lists=True)
    for key, value in dotted_leaves(kept, into_lists=True).items():
        if key not in scores and after.get(key, "missing") != value:
            check.problems.append(f"{path}: {key} = {after.get(key, 'missing')!r} vs committed {value!r}")


def resample_summary(bootstrap: dict) -> dict[str, dict[str, float]]:
    """task → the mean and sd of its bootstrap resamples' scores (a bootstrap file's `scores.<task>`)."""
    found = {}
    for task, scores in (bootstrap.get("scores") or {}).items():
        values = np.asarray(scores, dtype=float) if isinstance(scores, list) and scores else None
        if values is not None and np.isfinite(values).all():
            found[task] = {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if values.size > 1 else 0.0}
    return found


def compare_training(path: str, expected: dict, actual: dict, dev_width: float | None, fraction: float,
                     check, largest: Largest) -> None:
    """A training record: its step counts equal, its best STS-B dev score against the run's STS-B half-width."""
    for key in EXACT_KEYS:
        if key in expected and actual.get(key) != expected[key]:
            check.problems.append(f"{path}: {key} = {actual.get(key)} vs committed {expected[key]}")
    def dev_only(record: dict) -> dict:
        return {DEV_SCORE: record[DEV_SCORE]} if DEV_SCORE in record else {}

    compare_scores(path, dev_only(expected), dev_only(actual), {DEV_SCORE: dev_width} if dev_width else {},
                   fraction, check, largest)


# --- numbers without an interval --------------------------------------------------------------------


def table_numbers(text: str) -> dict:
    """A CSV file as {column: [cell per row]} (cells as pandas reads them: numbers as floats, NaN as None)."""
    frame = pd.read_csv(io.StringIO(text))
    return {column: [None if isinstance(cell, float) and math.isnan(cell) else cell for cell in frame[column].tolist()]
            for column in frame.columns}


def compare_by_tolerance(path: str, committed_text: str, current_text: str, tolerance: float, check, largest: Largest) -> None:
    """A file of numbers without intervals: each number within `tolerance` of its size, the rest equal."""
    read = table_numbers if path.endswith(".csv") else json.loads
    before, after = read(committed_text), read(current_text)
    if not path.endswith(".csv"):
        before, after = _without_environment(before), _without_environment(after)
    check.problems += [f"{path}: {problem}" for problem in numbers_within(before, after, tolerance, largest, path)]


def _without_environment(tree):
    return {key: value for key, value in tree.items() if key != "environment"} if isinstance(tree, dict) else tree


def tolerance_files(listing) -> list[str]:
    """The files compared by tolerance, among `listing` (paths relative to the repository)."""
    return sorted(path for path in listing
                  if any(Path(path).parent == folder and Path(path).match(pattern) for folder, pattern in BY_TOLERANCE))
