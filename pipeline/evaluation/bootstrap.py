"""Bootstrap uncertainty of STS scores (docs/method.md, "Evaluation: intervals and capped pairs").

The files it writes (the report's claims read them; `intervals.py` pairs them):

- Details metrics `reports/metrics/details/<model>.json` gain
    "intervals": {"<task>": {"low": float, "high": float, "se": float}, ..., "avg": {...}}
    "bootstrap": {"resamples": int, "seed": int, "indices": "<sha256 of the resample indices>"}
  (absent when `eval.bootstrap: 0`).
- Per-resample scores, a plain output: `reports/metrics/bootstrap/<model>.json`
    {"resamples": int, "seed": int, "indices": "<sha256>", "scores": {"<task>": [float × resamples], ..., "avg": [...]}}
  Two models' files pair only when their "indices" are equal (same seed, same pairs).

What it computes (every STS number has an interval): `eval.bootstrap` resamples
of each task's test pairs, drawn with replacement and seeded with the run's `seed`:
- STS12–16 are resampled WITHIN EACH SUBSET (stratified: every subset keeps its size) and the score
  the table shows is recomputed, the "all" Spearman over the resampled subsets concatenated
  (SentEval's "all"); STS-B and SICK-R over their test pairs;
- "avg" per resample is the plain mean of that resample's scores of the papers' seven tasks, NOT rounded to two decimals
  as `score_tasks` rounds the headline avg (SimCSE's printed digits; rounding each resample would
  only add a ±0.005 step to the distribution);
- the indices are a function of the seed and of each task's name and subset sizes only
  (`draw_resamples`), never of the model, so every model of a run sees the same resamples and two
  models' difference has a paired interval (`intervals.paired_interval` on their per-resample scores);
- each pair's cosine is computed once (`task_similarities`); the Spearman of all resamples at once
  is a row-wise Pearson of average ranks (ties averaged as `scipy.stats.spearmanr` does), the ranks
  counted from each pair's copies in the resample (`resampled_ranks`: no sort, 4× faster than
  `rankdata(axis=1)` on the gathered values, the same numbers), in blocks of `BLOCK` resamples;
- interval: the 95 % percentile interval; se: the standard deviation of the resample scores (ddof 1).
  Both come from the unrounded scores; the per-resample file rounds to 4 decimals (its size).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.declarations.sts_tasks import AVERAGE, averaged
from pipeline.evaluation.intervals import percentile_interval
from pipeline.evaluation.sts import EmbeddingTable, StsTask, score_tasks, task_rng, task_similarities

BLOCK = 256  # resamples scored at once: a (BLOCK, pairs) float64 matrix per array (SICK-R: 10 MB)
STORED_DECIMALS = 4


@dataclass(frozen=True)
class Resamples:
    """The resamples of a run: per task a (count, pairs) array of positions into the task's pairs
    concatenated in subset order, each subset's positions drawn within that subset."""

    count: int
    seed: int
    positions: dict[str, np.ndarray]

    @property
    def digest(self) -> str:
        """sha256 over each task's name and its positions (int32, little-endian, row-major)."""
        digest = hashlib.sha256()
        for name, positions in self.positions.items():
            digest.update(name.encode() + b"\0")
            digest.update(np.ascontiguousarray(positions, dtype="<i4").tobytes())
        return digest.hexdigest()


def draw_resamples(tasks: Sequence[StsTask], count: int, seed: int) -> Resamples:
    """`count` stratified resamples of each task's pairs with replacement; a task's draws depend on
    the seed, its name and its subset sizes only (never on a model or on the other tasks)."""
    positions = {}
    for task in tasks:
        rng, offset, columns = task_rng(seed, "bootstrap", task.name), 0, []
        for pairs in task.subsets.values():
            columns.append(rng.integers(0, len(pairs), size=(count, len(pairs)), dtype=np.int32) + np.int32(offset))
            offset += len(pairs)
        positions[task.name] = np.concatenate(columns, axis=1)
    return Resamples(count, seed, positions)


def resampled_ranks(codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The average ranks (as `scipy.stats.rankdata`) of each row of values[positions], where `codes`
    are the values' dense ranks (equal values, equal code): by counting each code's copies in the row
    (the ranks below it + (copies + 1) / 2), O(rows × pairs) with no sort."""
    rows, distinct = len(positions), int(codes.max()) + 1
    coded = codes[positions]
    counts = np.bincount((coded + (np.arange(rows) * distinct)[:, None]).ravel(), minlength=rows * distinct)
    counts = counts.reshape(rows, distinct)
    below = np.cumsum(counts, axis=1) - counts
    return np.take_along_axis(below + (counts + 1) / 2, coded, axis=1)


def resampled_spearman(predicted: np.ndarray, gold: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Spearman × 100 of predicted vs gold over each resample (a row of `positions`): the row-wise
    Pearson correlation of their average ranks, `BLOCK` resamples at a time."""
    codes = [np.unique(values, return_inverse=True)[1].reshape(-1) for values in (predicted, gold)]
    scores = []
    for block in np.array_split(positions, max(1, -(-len(positions) // BLOCK))):
        ranks = [resampled_ranks(code, block) for code in codes]
        centred = [rank - rank.mean(axis=1, keepdims=True) for rank in ranks]
        with np.errstate(invalid="ignore", divide="ignore"):  # a constant resample is NaN, as spearmanr gives
            scores.append(100 * (centred[0] * centred[1]).sum(1) / np.sqrt((centred[0] ** 2).sum(1) * (centred[1] ** 2).sum(1)))
    return np.concatenate(scores)


@dataclass(frozen=True)
class BootstrapScores:
    """One model's score of every resample: per task (its reported score) and "avg"."""

    resamples: Resamples
    scores: dict[str, np.ndarray]

    def intervals(self) -> dict[str, dict[str, float]]:
        intervals = {}
        for name, samples in self.scores.items():
            low, high = percentile_interval(samples)
            intervals[name] = {"low": low, "high": high, "se": float(np.std(samples, ddof=1))}
        return intervals

    def about(self) -> dict:
        return {"resamples": self.resamples.count, "seed": self.resamples.seed, "indices": self.resamples.digest}

    def details(self) -> dict:
        """The keys the details metrics gain: "intervals" and "bootstrap" (the module doc)."""
        return {"intervals": self.intervals(), "bootstrap": self.about()}

    def record(self) -> dict:
        """The per-resample file reports/metrics/bootstrap/<model>.json."""
        rounded = {name: np.round(samples, STORED_DECIMALS).tolist() for name, samples in self.scores.items()}
        return {**self.about(), "scores": rounded}


def no_bootstrap_record(seed: int) -> dict:
    """The per-resample file when `eval.bootstrap` is 0: no resamples, no scores (the file a DVC output needs)."""
    return {"resamples": 0, "seed": seed, "indices": None, "scores": {}}


def bootstrap_scores(table: EmbeddingTable, tasks: Sequence[StsTask], resamples: Resamples) -> BootstrapScores:
    """Every resample's reported score of each task (the "all" Spearman for STS12–16) and their mean."""
    scores = {}
    for task in tasks:
        similarities, golds = task_similarities(table, task)
        predicted, gold = np.concatenate(list(similarities.values())), np.concatenate(list(golds.values()))
        positions = resamples.positions[task.name]
        if positions.shape[1] != predicted.size:
            raise ValueError(f"{task.name}: resamples drawn for {positions.shape[1]} pairs, the task has {predicted.size}")
        scores[task.name] = resampled_spearman(predicted, gold, positions)
    papers = averaged(scores)
    if papers:  # the headline average's: over the papers' seven among the tasks (`score_tasks`)
        scores[AVERAGE] = np.mean([scores[name] for name in papers], axis=0)
    return BootstrapScores(resamples, scores)


def scores_with_intervals(table: EmbeddingTable, tasks: Sequence[StsTask],
                          resamples: Resamples | None) -> tuple[dict, BootstrapScores | None]:
    """`score_tasks`' results, with "intervals" and "bootstrap" when there are `resamples`; and the
    bootstrap scores (None without resamples)."""
    results = score_tasks(table, tasks)
    if resamples is None:
        return results, None
    scores = bootstrap_scores(table, tasks, resamples)
    return results | scores.details(), scores
