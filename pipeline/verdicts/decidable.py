"""What a comparison can decide, what it would take to decide it, and how many verdicts chance alone
would decide: the smallest decidable gap, the seeds a gap needs (power), and a report-wide multiplicity
note. A leaf but for the estimates: numpy, scipy and the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

from pipeline.verdicts.estimates import LEVEL, Estimate

def decidable_gap(estimate: Estimate, margin: float = 0.0) -> float:
    """The smallest |Δ − margin| this comparison could decide: its half-width (margin only shifts
    where the gap is measured from). A degenerate comparison decides nothing: inf."""
    return math.inf if estimate.degenerate else estimate.half_width


def seeds_needed(gap: float, seed_sd: float, tau2: float, paired: bool = False, level: float = LEVEL,
                 power: float = 0.80, max_seeds: int = 10000) -> int | None:
    """Seeds per arm n for a two-sided test at `level` to have `power` against a true difference `gap`:
    the smallest n ≥ 2 with (t_{1−α/2} + t_power)·√(k·σ²/n + τ²) ≤ |gap|, t on 2n − 2 df (k = 2,
    independent arms) or n − 1 (k = 1, paired, σ the sd of the within-run difference); the normal
    answer is the starting point. None when τ² alone rules it out ((|gap|/(z + z))² ≤ τ²: more test
    pairs needed, not seeds) or n > max_seeds."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), not {power}")
    alpha = 1 - level
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    budget = (abs(gap) / z) ** 2 - tau2
    if not budget > 0:
        return None
    k = 1 if paired else 2
    start = max(2, math.ceil(k * seed_sd ** 2 / budget) - 1)  # −1: float slack; t only pushes n up
    if start > max_seeds:
        return None
    n = np.arange(start, max_seeds + 1)
    df = n - 1 if paired else 2 * n - 2
    needed = (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * np.sqrt(k * seed_sd ** 2 / n + tau2)
    enough = np.flatnonzero(needed <= abs(gap))
    return int(n[enough[0]]) if enough.size else None


def seeds_to_reproduce(epsilon: float, seed_sd: float, level: float = LEVEL, power: float = 0.80,
                       max_seeds: int = 10000) -> int | None:
    """Seeds n of ours for a value claim (its seeds' mean against the paper's number, `rules.value_verdict`) to
    read "reproduced" with `power` when our model's mean is exactly the paper's: the smallest n ≥ 2 with
    (t_{1−α/2} + t_{(1+power)/2})·σ/√n ≤ ε, t on n − 1 df (|Δ̂| must stay inside ε less the half-width, both
    sides). None when n > max_seeds or σ or ε is 0 (nothing varies: no interval decides)."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), not {power}")
    if not (epsilon > 0 and seed_sd > 0):
        return None
    alpha = 1 - level
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf((1 + power) / 2)
    start = max(2, math.floor((z * seed_sd / epsilon) ** 2))  # the normal answer; t only pushes n up
    if start > max_seeds:
        return None
    n = np.arange(start, max_seeds + 1)
    needed = (stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf((1 + power) / 2, n - 1)) * seed_sd / np.sqrt(n)
    enough = np.flatnonzero(needed <= epsilon)
    return int(n[enough[0]]) if enough.size else None


# --- report-wide multiplicity ------------------------------------------------------------------------


def expected_by_chance(n_judged: int, alpha: float = 0.05) -> float:
    """How many of `n_judged` claims would be decided (holds/contradicted) by chance alone if none
    had a real effect: each rule's false-decision rate is at most alpha."""
    return n_judged * alpha


def benjamini_hochberg(p_values: Sequence[float], q: float = 0.05) -> list[bool]:
    """Which p-values are discoveries at false-discovery rate q (Benjamini–Hochberg step-up), in input order."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    below = p[order] <= q * np.arange(1, p.size + 1) / p.size
    count = int(np.flatnonzero(below)[-1]) + 1 if below.any() else 0
    discovered = np.zeros(p.size, dtype=bool)
    discovered[order[:count]] = True
    return discovered.tolist()


def bh_adjusted(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg-adjusted p-values, in input order: a claim survives a false-discovery rate q where its
    adjusted p ≤ q (the same discoveries as `benjamini_hochberg`)."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = p[order] * p.size / np.arange(1, p.size + 1)
    adjusted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    result = np.empty(p.size)
    result[order] = adjusted
    return result.tolist()


def interval_p_value(estimate: Estimate, margin: float = 0.0) -> float:
    """The two-sided p-value of an estimate against `margin`, by the rule's own interval: one minus the level at
    which the interval just reaches the margin (1 where nothing varied or Δ̂ is the margin)."""
    distance = abs(estimate.difference - margin)
    if estimate.degenerate or distance == 0:
        return 1.0
    reaches = lambda level: estimate.half_width_at(level) - distance  # noqa: E731 — rises with the level
    if reaches(1 - 1e-12) < 0:
        return 1e-12
    return float(1 - optimize.brentq(reaches, 1e-12, 1 - 1e-12, xtol=1e-12))
