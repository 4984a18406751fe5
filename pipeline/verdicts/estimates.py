"""The interval of a difference of two arms, counting both sources of noise in a score: the sampling of the
test pairs and the training seed.

- pair noise: a paired bootstrap over the test pairs gives τ², the variance of a difference (or of a
  score) over resampled test pairs. It comes from thousands of pairs, so it is treated as known: it
  widens an interval but contributes no degrees of freedom.
- seed noise: the between-run variance of a quantity. Measured from the runs when an arm has ≥ 2
  seeds (Welch, or paired on the within-run difference), else taken from a stated `SeedNoise` prior
  (its own degrees of freedom, or None for a prior treated as known → normal quantiles).

The two add: the standard error of a difference is √(V_s + τ²). The interval's half-width adds
each noise's own half-width in quadrature, √(t_ν²·V_s + z²·τ²) (ν: Welch's, n − 1 paired, or the
prior's), rather than t on Welch–Satterthwaite's ν over V_s + τ², which simulation shows too narrow
at 2–3 seeds (`half_width`).

`compare_arms` gives one `Estimate`; `compare_many`, its vectorised form, a `Batch` (what the rules of
`pipeline.verdicts.rules` call; tests/test_noise.py calibrates them on simulated claims). Scores are in
points (Spearman × 100). This module is a leaf: numpy, scipy and the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95
# A standard error below this (points) means nothing varied at the precision scores are printed to
# (0.01): no evidence of the noise level, which is not evidence of no noise, so nothing is decided.
RESOLUTION = 1e-3


@dataclass(frozen=True)
class SeedNoise:
    """The per-run sd of a quantity (a model's score, or a within-run difference of two models), its
    degrees of freedom (None: a prior treated as known → normal quantiles) and where it comes from
    (the text the report shows)."""

    sd: float
    df: float | None
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sd) and self.sd >= 0):
            raise ValueError(f"seed noise sd must be finite and ≥ 0, not {self.sd}")
        if self.df is not None and not self.df > 0:
            raise ValueError(f"seed noise df must be > 0 or None (known), not {self.df}")


PAPER_SCALE_PRIOR = SeedNoise(
    0.79, None,
    "prior: paper scale, sd 0.79 per run (50-seed study of unsupervised SimCSE-BERT-base: range 3.54 / d2(50) = 4.50)",
)


@dataclass(frozen=True)
class Estimate:
    """A difference arm A − arm B (A the claimed-better model) with its pair + seed interval.

    `interval` counts both noises; `pair_interval` (Δ̂ ± z·τ) only the test pairs, for a thin bar in a
    plot. `se` = √(V_s + τ²) is the standard error; `seed_se` = √V_s and `df` (the degrees of freedom
    of the seed part, math.inf when normal) let `half_width_at` recompute the interval at another
    level (`trend_verdict` does, for Bonferroni)."""

    difference: float
    interval: tuple[float, float]
    pair_interval: tuple[float, float]
    half_width: float
    se: float
    df: float
    seeds: tuple[int, int]
    seed_sd: float
    seed_df: float | None
    seed_source: str
    tau: float
    seed_se: float = 0.0
    level: float = LEVEL
    resolution: float = RESOLUTION  # the metric's own "nothing varied" (STS points: RESOLUTION)

    @property
    def degenerate(self) -> bool:
        """True when the standard error is below the metric's resolution: nothing varied, nothing can be decided."""
        return self.se <= self.resolution

    def half_width_at(self, level: float) -> float:
        return float(half_width(self.seed_se ** 2, self.df, self.tau ** 2, level))


@dataclass(frozen=True)
class Batch:
    """`compare_many`'s answer: one entry per claim (arrays of shape (m,))."""

    difference: np.ndarray
    seed_var: np.ndarray
    df: np.ndarray
    tau2: np.ndarray
    seed_sd: np.ndarray
    seed_df: float | None
    source: str

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(self.seed_var + self.tau2)

    def interval(self, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
        half = half_width(self.seed_var, self.df, self.tau2, level)
        return self.difference - half, self.difference + half


# --- quantiles, degrees of freedom and the half-width ---------------------------------------------


def quantile(level: float, df: float | np.ndarray | None) -> np.ndarray:
    """The two-sided quantile at `level` of Student's t with `df` (None or inf: the normal)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), not {level}")
    df = np.inf if df is None else df
    return stats.t.ppf(0.5 + level / 2, np.asarray(df, dtype=float))


def satterthwaite(parts: Sequence[np.ndarray], dfs: Sequence[float]) -> np.ndarray:
    """Welch–Satterthwaite ν = (Σ parts)² / Σ part²/df of estimated variance parts (all 0: ν = inf)."""
    total = sum(parts)
    denominator = sum(np.asarray(part) ** 2 / df for part, df in zip(parts, dfs))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, total ** 2 / np.where(denominator > 0, denominator, 1.0), np.inf)


def half_width(seed_var: np.ndarray | float, df: np.ndarray | float | None, tau2: np.ndarray | float,
               level: float = LEVEL) -> np.ndarray:
    """h = √(t_ν²·V_s + z²·τ²): each noise's half-width, added in quadrature.

    Why not t_ν'·√(V_s + τ²) with ν' by Welch–Satterthwaite counting τ² as known: with 2–3 seeds the
    plug-in ν' is large exactly when s² came out small, and simulation (tests/test_noise.py) puts
    its error rate at up to 6–8 % (Welch, 2 seeds) and 12 % (paired, 2 seeds) for a nominal 5 %.
    The quadrature rule is exact when either noise is 0 (t_ν, or z) and conservative in between."""
    seed_part = quantile(level, df) ** 2 * np.asarray(seed_var, dtype=float)
    return np.sqrt(seed_part + quantile(level, None) ** 2 * np.asarray(tau2, dtype=float))


# --- comparing two arms ----------------------------------------------------------------------------


def as_claims(scores: np.ndarray, name: str) -> np.ndarray:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[1] < 1:
        raise ValueError(f"{name}: expected (claims, seeds) scores with ≥ 1 seed, got shape {scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{name}: scores must be finite")
    return scores


def _measured(a: np.ndarray, b: np.ndarray, tau2: np.ndarray, paired: bool) -> Batch:
    """Both arms ≥ 2 seeds: V_s from the runs themselves (Welch, or the paired within-run difference)."""
    n_a, n_b = a.shape[1], b.shape[1]
    difference = a.mean(axis=1) - b.mean(axis=1)
    if paired:
        var_d = (a - b).var(axis=1, ddof=1)
        seed_var, df = var_d / n_a, np.full(difference.shape, n_a - 1.0)
        seed_sd, seed_df, source = np.sqrt(var_d), n_a - 1, f"measured: {n_a} paired seeds (within-run difference)"
    else:
        var_a, var_b = a.var(axis=1, ddof=1), b.var(axis=1, ddof=1)
        seed_var, df = var_a / n_a + var_b / n_b, satterthwaite([var_a / n_a, var_b / n_b], [n_a - 1, n_b - 1])
        # Pooled sd for display only; the interval uses the Welch parts.
        pooled = ((n_a - 1) * var_a + (n_b - 1) * var_b) / (n_a + n_b - 2)
        seed_sd, seed_df, source = np.sqrt(pooled), n_a + n_b - 2, f"measured: {n_a} + {n_b} seeds (Welch)"
    return Batch(difference, seed_var, df, tau2, seed_sd, float(seed_df), source)


def _from_prior(a: np.ndarray, b: np.ndarray, tau2: np.ndarray, paired: bool, noise: SeedNoise | None) -> Batch:
    """An arm of 1 seed has no spread of its own: V_s from the stated prior (of the within-run
    difference when paired, else of one model's score)."""
    n_a, n_b = a.shape[1], b.shape[1]
    if noise is None:
        raise ValueError(
            f"an arm has a single seed ({n_a} vs {n_b}): pass noise=SeedNoise(...) — a measured seed sd "
            "(e.g. from reports/seed_noise.json) or PAPER_SCALE_PRIOR — or run ≥ 2 seeds per arm"
        )
    difference = a.mean(axis=1) - b.mean(axis=1)
    var = noise.sd ** 2 / n_a if paired else noise.sd ** 2 * (1 / n_a + 1 / n_b)
    df = np.full(difference.shape, np.inf if noise.df is None else float(noise.df))
    return Batch(difference, np.full(difference.shape, var), df, tau2, np.full(difference.shape, noise.sd), noise.df, noise.source)


def scale_resolution(*arms: np.ndarray) -> float:
    """"Nothing varied" on a metric's own scale: a millionth of its size (an energy ratio of 0.0005 that moves by
    0.0004 across seeds varied; RESOLUTION is in STS points)."""
    size = max((float(np.abs(arm).max()) for arm in arms if np.size(arm)), default=0.0)
    return 1e-6 * size if size > 0 else RESOLUTION


def compare_many(a: np.ndarray, b: np.ndarray, tau2: float | np.ndarray, paired: bool = False,
                 noise: SeedNoise | None = None) -> Batch:
    """`compare_arms` over many claims at once: `a` (claims, n_A), `b` (claims, n_B), τ² scalar or per claim."""
    a, b = as_claims(a, "arm A"), as_claims(b, "arm B")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"arms disagree on the number of claims: {a.shape[0]} vs {b.shape[0]}")
    if paired and a.shape[1] != b.shape[1]:
        raise ValueError(f"paired arms come from the same runs, so need equal seeds: {a.shape[1]} vs {b.shape[1]}")
    tau2 = np.broadcast_to(np.asarray(tau2, dtype=float), (a.shape[0],))
    if np.any(tau2 < 0) or not np.all(np.isfinite(tau2)):
        raise ValueError("τ² must be finite and ≥ 0")
    if min(a.shape[1], b.shape[1]) >= 2:
        return _measured(a, b, tau2, paired)
    return _from_prior(a, b, tau2, paired, noise)


def compare_arms(a: np.ndarray, b: np.ndarray, tau2: float, paired: bool = False, noise: SeedNoise | None = None,
                 level: float = LEVEL, resolution: float = RESOLUTION) -> Estimate:
    """The difference mean(a) − mean(b) of one score per training seed, with a pair + seed interval.

    Both arms ≥ 2 seeds: V_s = s_A²/n_A + s_B²/n_B with Welch's ν (or s_d²/n of d = a − b on n − 1 df
    when `paired`: same runs, same seeds); `noise` is then ignored — measured wins. An arm of 1 seed:
    V_s from `noise` (required) on noise.df (normal when None): σ²/n when paired (σ of the within-run
    difference), else σ²(1/n_A + 1/n_B). Half-width √(t_ν²·V_s + z²·τ²) — see `half_width` for why
    not t on Welch–Satterthwaite's ν over V_s + τ²."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError("compare_arms takes one 1-D array of scores per arm (one score per seed)")
    batch = compare_many(a[None], b[None], tau2, paired, noise)
    difference, seed_var, df = float(batch.difference[0]), float(batch.seed_var[0]), float(batch.df[0])
    half = float(half_width(seed_var, df, tau2, level))
    tau = math.sqrt(tau2)
    pair_half = float(quantile(level, None)) * tau
    return Estimate(
        difference=difference, interval=(difference - half, difference + half),
        pair_interval=(difference - pair_half, difference + pair_half), half_width=half,
        se=math.sqrt(seed_var + tau2), df=df, seeds=(a.size, b.size), seed_sd=float(batch.seed_sd[0]),
        seed_df=batch.seed_df, seed_source=batch.source, tau=tau, seed_se=math.sqrt(seed_var), level=level,
        resolution=resolution,
    )
