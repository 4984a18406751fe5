"""Verdict rules that count both sources of noise in a score: the sampling of the test pairs and the
training seed.

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

Rules (all at `level`, 0.95 by default):
- `compare_arms` + `order_verdict`: one model beats another (HOLDS / CONTRADICTED / INCONCLUSIVE);
- `value_verdict`: our number against the paper's single run, a prediction interval against ±ε;
- `trend_verdict`: a family of order comparisons, contradictions Bonferroni-corrected; a monotone
  sweep holds on its endpoints with no step contradicted;
- `correlation_verdict`: Spearman ρ with a permutation p-value, 2.5 % each side;
- `spread_verdict`: which of two models varies less over the same seeds (Pitman–Morgan), 2.5 % each side;
- `decidable_gap` / `seeds_needed`: what a comparison can decide, and what it would take;
- `expected_by_chance` / `benjamini_hochberg`: a report-wide multiplicity note.

The vectorised forms (`compare_many`, `order_verdicts`, `value_verdicts`, `family_verdicts`) are what
the scalar rules call; tests/test_noise.py calibrates them on simulated claims.

Scores are in points (Spearman × 100). This module is a leaf: numpy, scipy and the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
from scipy import stats

HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
REPRODUCED, HIGHER, NOT_REPRODUCED = "reproduced", "reproduced, higher", "not reproduced"
CONSISTENT = "consistent within seed noise"
LEVEL = 0.95
# A standard error below this (points) means nothing varied at the precision scores are printed to
# (0.01): no evidence of the noise level, which is not evidence of no noise, so nothing is decided.
RESOLUTION = 1e-3
_TOLERANCE = 1e-9  # |Δ| = ε exactly counts as inside the band, whatever the float rounding
# A decided verdict this close to its boundary (a share of its half-width) is "at the edge": another CPU's last
# bits move a score by up to this much (docs/reproducing.md), so the verdict may flip there; the reproduction
# check allows scores to move by as much.
EDGE_FRACTION = 0.1
TREND_SHAPES = ("first-best", "decreasing", "increasing", "flat")
MONOTONE = ("decreasing", "increasing")  # judged by their endpoints, the steps only for contradiction
CORRELATION_ALPHA = 0.025  # each side, as every other rule spends


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

    @property
    def degenerate(self) -> bool:
        """True when the standard error is below RESOLUTION: nothing varied, nothing can be decided."""
        return self.se <= RESOLUTION

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


def _as_claims(scores: np.ndarray, name: str) -> np.ndarray:
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


def compare_many(a: np.ndarray, b: np.ndarray, tau2: float | np.ndarray, paired: bool = False,
                 noise: SeedNoise | None = None) -> Batch:
    """`compare_arms` over many claims at once: `a` (claims, n_A), `b` (claims, n_B), τ² scalar or per claim."""
    a, b = _as_claims(a, "arm A"), _as_claims(b, "arm B")
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
                 level: float = LEVEL) -> Estimate:
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
    )


def order_verdicts(low: np.ndarray, high: np.ndarray, se: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """`order_verdict` over many claims: arrays of interval ends and standard errors → verdicts."""
    low, high, se = np.asarray(low), np.asarray(high), np.asarray(se)
    decided = se > RESOLUTION
    return np.select([decided & (low > margin), decided & (high < margin)], [HOLDS, CONTRADICTED], INCONCLUSIVE)


def order_verdict(estimate: Estimate, margin: float = 0.0) -> str:
    """The interval of A − B against `margin`: wholly above (low > margin) → HOLDS; wholly below
    (high < margin) → CONTRADICTED; else INCONCLUSIVE.

    Degenerate rule: when the standard error √(V_s + τ²) is ≤ RESOLUTION (1e-3 points) — identical
    scores across seeds and τ² ≈ 0, or a zero prior — the interval has (almost) zero width because
    nothing varied, not because the noise is known to be zero. Such a comparison is INCONCLUSIVE,
    whatever its Δ̂: no evidence of the noise level is not evidence of no noise."""
    low, high = estimate.interval
    return str(order_verdicts(np.array([low]), np.array([high]), np.array([estimate.se]), margin)[0])


# --- our number against the paper's single run ----------------------------------------------------


def value_verdicts(ours: np.ndarray, paper: np.ndarray, epsilon: float, tau2: float | np.ndarray,
                   noise: SeedNoise | None, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`value_verdict` over many claims: `ours` (claims, n), `paper` (claims,) → (verdicts, low, high)."""
    ours = _as_claims(ours, "ours")
    paper = np.broadcast_to(np.asarray(paper, dtype=float), (ours.shape[0],))
    tau2 = np.broadcast_to(np.asarray(tau2, dtype=float), (ours.shape[0],))
    if not epsilon >= 0:
        raise ValueError(f"ε is a stated tolerance ≥ 0, not {epsilon}")
    n = ours.shape[1]
    if n >= 2:
        # Prediction of one more run: our mean's error (s²/n) plus the paper run's own (s²).
        part, df = ours.var(axis=1, ddof=1) * (1 + 1 / n), n - 1
    elif noise is None:
        raise ValueError("a single seed of ours has no spread: pass noise=SeedNoise(...) (measured, or PAPER_SCALE_PRIOR), or run ≥ 2 seeds")
    else:
        part, df = np.full(ours.shape[0], 2 * noise.sd ** 2), noise.df  # our run and the paper's: two runs' noise
    se = np.sqrt(part + tau2)
    half = half_width(part, df, tau2, level)
    delta = ours.mean(axis=1) - paper
    low, high = delta - half, delta + half
    verdicts = np.select(
        [se <= RESOLUTION, (low >= -epsilon - _TOLERANCE) & (high <= epsilon + _TOLERANCE), low > epsilon + _TOLERANCE,
         high < -epsilon - _TOLERANCE, (low <= 0) & (high >= 0)],
        [INCONCLUSIVE, REPRODUCED, HIGHER, NOT_REPRODUCED, CONSISTENT], INCONCLUSIVE,
    )
    return verdicts, low, high


def value_verdict(ours: np.ndarray, paper: float, epsilon: float, tau2: float, noise: SeedNoise | None,
                  level: float = LEVEL) -> tuple[str, tuple[float, float]]:
    """Our seeds' mean against the paper's number, which is ONE run: a prediction interval of
    ours − paper, [Δ − h, Δ + h] with Δ = mean(ours) − paper.

    n ≥ 2 seeds: h = √(t_{n−1}²·s²(1 + 1/n) + z²·τ²) (t_{n−1}·√(s²(1 + 1/n) + τ²) when τ² = 0; with
    τ² > 0 neither plain t_{n−1} on the whole, too wide, nor Welch–Satterthwaite, too narrow at 3
    seeds in simulation — see `half_width`); `noise` is ignored. n = 1: `noise` required,
    h = √(q²·2σ² + z²·τ²), q the t quantile on noise.df (normal when None).
    Wholly inside [−ε, ε] → REPRODUCED; wholly above +ε → HIGHER; wholly below −ε → NOT_REPRODUCED;
    containing 0 but not inside ±ε → CONSISTENT; else (straddling ±ε, excluding 0) INCONCLUSIVE.
    ε is a stated tolerance, never the sample sd. A degenerate interval (standard error ≤ RESOLUTION:
    nothing varied) is INCONCLUSIVE, as in `order_verdict`."""
    ours = np.asarray(ours, dtype=float)
    if ours.ndim != 1:
        raise ValueError("value_verdict takes one 1-D array of our scores (one per seed)")
    verdicts, low, high = value_verdicts(ours[None], np.array([paper]), epsilon, tau2, noise, level)
    return str(verdicts[0]), (float(low[0]), float(high[0]))


# --- a family of comparisons: trends ----------------------------------------------------------------


def family_verdicts(difference: np.ndarray, seed_var: np.ndarray, df: np.ndarray, tau2: np.ndarray,
                    level: float = LEVEL, required: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`trend_verdict` over many families: arrays (families, pairs) → (family verdicts, pair verdicts).
    `required`: which pairs must hold for the family to hold (default every one)."""
    difference, seed_var, df, tau2 = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (difference, seed_var, df, tau2))
    pairs = difference.shape[1]
    required = np.ones(pairs, dtype=bool) if required is None else np.asarray(required, dtype=bool)
    if required.shape != (pairs,) or not required.any():
        raise ValueError(f"required names which of the {pairs} pairs must hold, at least one")
    # Contradiction at 1 − α/m two-sided (Bonferroni): any of m pairs falsely below 0 with chance ≤ α/2.
    corrected = half_width(seed_var, df, tau2, 1 - (1 - level) / pairs)
    ordinary = half_width(seed_var, df, tau2, level)
    decided = np.sqrt(seed_var + tau2) > RESOLUTION
    pair = np.select([decided & (difference + corrected < 0), decided & (difference - ordinary > 0)],
                     [CONTRADICTED, HOLDS], INCONCLUSIVE)
    # Holding needs every required pair to hold (intersection–union: no correction needed) and none contradicted.
    family = np.select([(pair == CONTRADICTED).any(axis=1), (pair[:, required] == HOLDS).all(axis=1)],
                       [CONTRADICTED, HOLDS], INCONCLUSIVE)
    return family, pair


def trend_verdict(estimates: list[Estimate], shape: str, level: float = LEVEL, margin: float = 0.0) -> tuple[str, list[str]]:
    """A sweep's shape as the family of m = len(estimates) order comparisons the caller built (A the
    model that should be better): `first-best` first vs each other; `decreasing` / `increasing` each
    neighbour step plus, last, the endpoints (first vs last; with two points the one step is both);
    `flat` every ordered pair, against `margin` = −width (A keeps within the width of B).

    A pair is CONTRADICTED when its interval at 1 − α/m (Bonferroni: `half_width` with quantiles
    1 − α/(2m), from its seed_se, df and tau) lies wholly below `margin`, HOLDS when its interval at
    `level` lies wholly above it, else INCONCLUSIVE (always for a degenerate pair). The family is
    CONTRADICTED if any pair is. It HOLDS, for first-best and flat, when every pair holds; for a
    monotone shape when the endpoints hold (and no step is contradicted): requiring every step to hold
    would almost never decide a sweep of small steps (simulated: 7 points 0.5 apart, 5 seeds, sd 0.5,
    hold 0 % of the time), while the endpoints alone keep false holds at 2.5 %. Else INCONCLUSIVE.
    Returns (family, per-pair verdicts)."""
    if shape not in TREND_SHAPES:
        raise ValueError(f"trend shape must be one of {TREND_SHAPES}, not {shape!r}")
    if not estimates:
        raise ValueError("a trend needs at least one pair of models")
    difference, seed_var, df, tau2 = (np.array([[value(estimate) for estimate in estimates]]) for value in (
        lambda e: e.difference, lambda e: e.seed_se ** 2, lambda e: e.df, lambda e: e.tau ** 2))
    required = [index == len(estimates) - 1 for index in range(len(estimates))] if shape in MONOTONE else None
    family, pair = family_verdicts(difference - margin, seed_var, df, tau2, level=level, required=required)
    return str(family[0]), [str(verdict) for verdict in pair[0]]


# --- correlations -------------------------------------------------------------------------------------


def correlation_verdict(x: np.ndarray, y: np.ndarray, claimed_sign: int = +1, threshold: float = 0.0,
                        permutations: int = 10000, seed: int = 0, alpha: float = CORRELATION_ALPHA) -> tuple[str, float, float]:
    """Spearman ρ of x and y with a one-sided permutation p-value in the claimed direction,
    p = (1 + #{sign·ρ_perm ≥ sign·ρ}) / (1 + permutations). HOLDS when p < alpha and ρ is on the
    claimed side of `threshold`; CONTRADICTED when the opposite one-sided p < alpha; else INCONCLUSIVE.
    `alpha` is spent on each side (2.5 %: a false decision either way ≤ 5 %, as the order rules).
    A constant x or y has no ρ: (INCONCLUSIVE, nan, nan). Returns (verdict, ρ, p)."""
    if claimed_sign not in (1, -1):
        raise ValueError(f"claimed_sign must be +1 or −1, not {claimed_sign}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size < 3:
        raise ValueError(f"correlation needs two 1-D arrays of equal length ≥ 3, got {x.shape} and {y.shape}")
    rank_x, rank_y = stats.rankdata(x) - (x.size + 1) / 2, stats.rankdata(y) - (y.size + 1) / 2
    norm = math.sqrt(float(rank_x @ rank_x) * float(rank_y @ rank_y))
    if norm == 0:
        return INCONCLUSIVE, math.nan, math.nan
    rho = float(rank_x @ rank_y) / norm  # Pearson on centred ranks = Spearman (ties averaged)
    shuffled = np.random.default_rng(seed).permuted(np.tile(rank_y, (permutations, 1)), axis=1)
    null = claimed_sign * (shuffled @ rank_x) / norm
    observed, slack = claimed_sign * rho, 1e-12  # ties of ρ_perm with ρ count as at least as extreme
    p = (1 + np.count_nonzero(null >= observed - slack)) / (1 + permutations)
    p_opposite = (1 + np.count_nonzero(null <= observed + slack)) / (1 + permutations)
    if p < alpha and claimed_sign * (rho - threshold) > 0:
        return HOLDS, rho, float(p)
    if p_opposite < alpha:
        return CONTRADICTED, rho, float(p)
    return INCONCLUSIVE, rho, float(p)


def at_the_edge(interval: tuple[float, float], boundaries: Sequence[float], fraction: float = EDGE_FRACTION) -> bool:
    """Whether an interval's end lies within `fraction` of its half-width of a boundary its verdict is
    read against (a margin, ±ε, 0): a verdict another machine's last bits could flip."""
    low, high = interval
    slack = fraction * (high - low) / 2
    return any(abs(end - boundary) <= slack for end in (low, high) for boundary in boundaries)


# --- spreads: which of two models varies less across the same seeds ------------------------------------


def spread_verdict(steadier: np.ndarray, other: np.ndarray, alpha: float = CORRELATION_ALPHA) -> tuple[str, float, float]:
    """Whether `steadier` varies less across training seeds than `other`, both measured on the same seeds
    (paired: the same runs), by the Pitman–Morgan test: var(a) − var(b) = cov(a + b, a − b), so equal
    variances are r = corr(a + b, a − b) = 0, t = r √(n − 2) / √(1 − r²) on n − 2 df. HOLDS when the
    one-sided p (steadier's variance lower) < alpha; CONTRADICTED when the opposite one-sided p < alpha
    (2.5 % each way); else INCONCLUSIVE (always below 3 seeds, or when nothing varied). Returns
    (verdict, sd ratio steadier / other, the one-sided p in the claimed direction)."""
    a, b = np.asarray(steadier, dtype=float), np.asarray(other, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"a spread compares two 1-D arrays over the same seeds, got {a.shape} and {b.shape}")
    n = a.size
    sd_a, sd_b = (float(np.std(x, ddof=1)) if n >= 2 else math.nan for x in (a, b))
    ratio = sd_a / sd_b if sd_b > 0 else math.nan
    total, difference = a + b, a - b
    if n < 3 or np.std(total) == 0 or np.std(difference) == 0:
        return INCONCLUSIVE, ratio, math.nan
    r = float(np.corrcoef(total, difference)[0, 1])
    r = min(max(r, -1 + 1e-12), 1 - 1e-12)
    t = r * math.sqrt(n - 2) / math.sqrt(1 - r * r)
    p_lower, p_higher = float(stats.t.cdf(t, n - 2)), float(stats.t.sf(t, n - 2))  # r < 0: steadier varies less
    if p_lower < alpha:
        return HOLDS, ratio, p_lower
    if p_higher < alpha:
        return CONTRADICTED, ratio, p_lower
    return INCONCLUSIVE, ratio, p_lower


# --- what it would take ------------------------------------------------------------------------------


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
