"""The verdict rules: from the interval of a difference (`pipeline.verdicts.estimates`), or from the runs
themselves, to a verdict. All at `level`, 0.95 by default:

- `order_verdict`: one model beats another (HOLDS / CONTRADICTED / INCONCLUSIVE);
- `value_verdict`: our seeds' mean against the paper's number within ±ε (or a prediction of one more run);
- `trend_verdict`: a family of order comparisons, contradictions Bonferroni-corrected; a monotone
  sweep holds on its endpoints with no step against the shape beyond chance (`against_the_shape`);
- `correlation_verdict`: Spearman ρ with a permutation p-value, 2.5 % each side;
- `spread_verdict`: which of two models varies less over the same seeds (a paired permutation test), 2.5 % each side;
- `at_the_edge` / `p_at_the_edge`: a decided verdict another machine's last bits could flip.

The vectorised forms (`order_verdicts`, `value_verdicts`, `family_verdicts`) are what the scalar rules
call; tests/test_noise.py calibrates them on simulated claims. A leaf but for the estimates and the
verdict names: numpy, scipy and the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from pipeline.verdicts.estimates import LEVEL, RESOLUTION, Estimate, SeedNoise, as_claims, half_width
from pipeline.verdicts.verdict_names import CONSISTENT, CONTRADICTED, HIGHER, HOLDS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED

TOLERANCE = 1e-9  # |Δ| = ε exactly counts as inside the band, whatever the float rounding
# A decided verdict this close to its boundary (a share of its half-width) is "at the edge": another CPU's last
# bits move a score by up to this much (docs/reproducing.md), so the verdict may flip there; the reproduction
# check allows scores to move by as much.
EDGE_FRACTION = 0.1
# A number without an interval (an analysis metric, an MTEB score, a training loss): another CPU's last bits move it
# by at most this share of its size (measured over the whole pipeline on torch's AVX2 kernels: docs/reproducing.md);
# a number smaller than NEAR_ZERO is held to NEAR_ZERO's share instead (a relative change of nothing means nothing).
RELATIVE_TOLERANCE = 0.01
NEAR_ZERO = 1e-3
TREND_SHAPES = ("first-best", "decreasing", "increasing", "flat")
MONOTONE = ("decreasing", "increasing")  # held on their endpoints, every step also not against the shape
# A monotone sweep's step is "against the shape beyond chance" when a one-sided test of it going the wrong way
# rejects at this level. Not corrected for the number of steps: a step flagged wrongly costs a hold (the
# conservative error), so more steps make holding harder, never easier. 0.25 by simulation (tests/test_noise.py):
# 7 points 0.5 apart, 5 seeds, sd 0.5 hold ~93 % (≥ 80 % asked); the same sweep with any two steps reversed holds
# ≤ 4 % (3.7 % at worst; the endpoints-only rule: 67 %). One step reversed alone is caught ~83 % of the time: docs/method.md.
STEP_ALPHA = 0.25
CORRELATION_ALPHA = 0.025  # each side, as every other rule spends


# --- one model against another -----------------------------------------------------------------------


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


VALUE_TARGETS = ("mean", "one run")  # what a value claim's interval is of: docs/method.md, "Claims and verdicts"


def value_verdicts(ours: np.ndarray, paper: np.ndarray, epsilon: float, tau2: float | np.ndarray,
                   noise: SeedNoise | None, level: float = LEVEL, against: str = "mean") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`value_verdict` over many claims: `ours` (claims, n), `paper` (claims,) → (verdicts, low, high)."""
    ours = as_claims(ours, "ours")
    paper = np.broadcast_to(np.asarray(paper, dtype=float), (ours.shape[0],))
    tau2 = np.broadcast_to(np.asarray(tau2, dtype=float), (ours.shape[0],))
    if not epsilon >= 0:
        raise ValueError(f"ε is a stated tolerance ≥ 0, not {epsilon}")
    if against not in VALUE_TARGETS:
        raise ValueError(f"a value claim is judged against one of {VALUE_TARGETS}, not {against!r}")
    n = ours.shape[1]
    # "mean": our seeds' mean against the paper's number as the target (σ²/n); "one run": a prediction of one more
    # run, the paper's being one (σ²/n for our mean plus σ² for its run), which no number of seeds narrows below z·σ.
    paper_run = 1.0 if against == "one run" else 0.0
    if n >= 2:
        part, df = ours.var(axis=1, ddof=1) * (paper_run + 1 / n), n - 1
    elif noise is None:
        raise ValueError("a single seed of ours has no spread: pass noise=SeedNoise(...) (measured, or PAPER_SCALE_PRIOR), or run ≥ 2 seeds")
    else:
        part, df = np.full(ours.shape[0], (1 + paper_run) * noise.sd ** 2), noise.df
    se = np.sqrt(part + tau2)
    half = half_width(part, df, tau2, level)
    delta = ours.mean(axis=1) - paper
    low, high = delta - half, delta + half
    verdicts = np.select(
        [se <= RESOLUTION, (low >= -epsilon - TOLERANCE) & (high <= epsilon + TOLERANCE), low > epsilon + TOLERANCE,
         high < -epsilon - TOLERANCE, (low <= 0) & (high >= 0)],
        [INCONCLUSIVE, REPRODUCED, HIGHER, NOT_REPRODUCED, CONSISTENT], INCONCLUSIVE,
    )
    return verdicts, low, high


def value_verdict(ours: np.ndarray, paper: float, epsilon: float, tau2: float, noise: SeedNoise | None,
                  level: float = LEVEL, against: str = "mean") -> tuple[str, tuple[float, float]]:
    """Our seeds' mean against the paper's number: an interval of ours − paper, [Δ − h, Δ + h] with
    Δ = mean(ours) − paper.

    `against` "mean" (the default): the paper's number is the target, and the interval is our mean's,
    h = t_{n−1}·s/√n for n ≥ 2 seeds (with τ² > 0, √(t²·s²/n + z²·τ²): see `half_width`); n = 1: `noise`
    required, h = q·σ, q the t quantile on noise.df (normal when None). More seeds narrow it without bound.
    `against` "one run": the paper's number is one run of the same noise, so the interval predicts one
    more run, s²(1 + 1/n) (one seed: 2σ²); it never narrows below z·σ.
    Wholly inside [−ε, ε] → REPRODUCED; wholly above +ε → HIGHER; wholly below −ε → NOT_REPRODUCED;
    containing 0 but not inside ±ε → CONSISTENT; else (straddling ±ε, excluding 0) INCONCLUSIVE.
    ε is a stated tolerance, never the sample sd. A degenerate interval (standard error ≤ RESOLUTION:
    nothing varied) is INCONCLUSIVE, as in `order_verdict`."""
    ours = np.asarray(ours, dtype=float)
    if ours.ndim != 1:
        raise ValueError("value_verdict takes one 1-D array of our scores (one per seed)")
    verdicts, low, high = value_verdicts(ours[None], np.array([paper]), epsilon, tau2, noise, level, against)
    return str(verdicts[0]), (float(low[0]), float(high[0]))


# --- a family of comparisons: trends ----------------------------------------------------------------


def against_the_shape(difference: np.ndarray, seed_var: np.ndarray, df: np.ndarray, tau2: np.ndarray,
                      alpha: float = STEP_ALPHA) -> np.ndarray:
    """Whether each difference (oriented so the shape says > 0) goes the wrong way beyond chance: below its
    one-sided (1 − alpha) bound, `half_width` at two-sided level 1 − 2·alpha (degenerate ones never)."""
    bound = half_width(seed_var, df, tau2, 1 - 2 * alpha)
    return (np.sqrt(np.asarray(seed_var) + np.asarray(tau2)) > RESOLUTION) & (np.asarray(difference) + bound < 0)


def family_verdicts(difference: np.ndarray, seed_var: np.ndarray, df: np.ndarray, tau2: np.ndarray,
                    level: float = LEVEL, required: Sequence[bool] | None = None,
                    steps: Sequence[bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`trend_verdict` over many families: arrays (families, pairs) → (family verdicts, pair verdicts).
    `required`: which pairs must hold for the family to hold (default every one); `steps`: which pairs must
    not go against the shape beyond chance (`against_the_shape`) for it to hold (default none)."""
    difference, seed_var, df, tau2 = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (difference, seed_var, df, tau2))
    pairs = difference.shape[1]
    required = np.ones(pairs, dtype=bool) if required is None else np.asarray(required, dtype=bool)
    steps = np.zeros(pairs, dtype=bool) if steps is None else np.asarray(steps, dtype=bool)
    if required.shape != (pairs,) or not required.any() or steps.shape != (pairs,):
        raise ValueError(f"required (at least one) and steps name which of the {pairs} pairs they cover")
    # Contradiction at 1 − α/m two-sided (Bonferroni): any of m pairs falsely below 0 with chance ≤ α/2.
    corrected = half_width(seed_var, df, tau2, 1 - (1 - level) / pairs)
    ordinary = half_width(seed_var, df, tau2, level)
    decided = np.sqrt(seed_var + tau2) > RESOLUTION
    pair = np.select([decided & (difference + corrected < 0), decided & (difference - ordinary > 0)],
                     [CONTRADICTED, HOLDS], INCONCLUSIVE)
    # Holding needs every required pair to hold (intersection–union: no correction needed), no step against the
    # shape beyond chance, and none contradicted.
    against = (against_the_shape(difference, seed_var, df, tau2) & steps).any(axis=1)
    family = np.select([(pair == CONTRADICTED).any(axis=1), (pair[:, required] == HOLDS).all(axis=1) & ~against],
                       [CONTRADICTED, HOLDS], INCONCLUSIVE)
    return family, pair


def trend_pairs(shape: str, pairs: int) -> tuple[list[bool] | None, list[bool] | None]:
    """(required, steps) of `family_verdicts` for a family built as `trend_verdict` says: a monotone sweep's
    last pair (its endpoints) is required, the others are its steps; other shapes require every pair."""
    if shape not in MONOTONE:
        return None, None
    return [index == pairs - 1 for index in range(pairs)], [index < pairs - 1 for index in range(pairs)]


def trend_verdict(estimates: list[Estimate], shape: str, level: float = LEVEL, margin: float = 0.0) -> tuple[str, list[str]]:
    """A sweep's shape as the family of m = len(estimates) order comparisons the caller built (A the
    model that should be better): `first-best` first vs each other; `decreasing` / `increasing` each
    neighbour step plus, last, the endpoints (first vs last; with two points the one step is both);
    `flat` every ordered pair, against `margin` = −width (A keeps within the width of B).

    A pair is CONTRADICTED when its interval at 1 − α/m (Bonferroni: `half_width` with quantiles
    1 − α/(2m), from its seed_se, df and tau) lies wholly below `margin`, HOLDS when its interval at
    `level` lies wholly above it, else INCONCLUSIVE (always for a degenerate pair). The family is
    CONTRADICTED if any pair is. It HOLDS, for first-best and flat, when every pair holds; for a
    monotone shape when the endpoints hold and no step goes against the shape beyond chance (a one-sided
    test at STEP_ALPHA per step). Requiring every step to hold would almost never decide a sweep of small
    steps (simulated: 7 points 0.5 apart, 5 seeds, sd 0.5, hold 0 % of the time); the endpoints alone
    would hold a sweep that rises for two of its six steps 67 % of the time. Else INCONCLUSIVE.
    Returns (family, per-pair verdicts)."""
    if shape not in TREND_SHAPES:
        raise ValueError(f"trend shape must be one of {TREND_SHAPES}, not {shape!r}")
    if not estimates:
        raise ValueError("a trend needs at least one pair of models")
    difference, seed_var, df, tau2 = _family_arrays(estimates)
    required, steps = trend_pairs(shape, len(estimates))
    family, pair = family_verdicts(difference - margin, seed_var, df, tau2, level=level, required=required, steps=steps)
    return str(family[0]), [str(verdict) for verdict in pair[0]]


def steps_against(estimates: list[Estimate], shape: str, margin: float = 0.0) -> list[int]:
    """The indices of a monotone family's steps that go against its shape beyond chance (none for other shapes)."""
    _, steps = trend_pairs(shape, len(estimates))
    if steps is None:
        return []
    difference, seed_var, df, tau2 = _family_arrays(estimates)
    against = against_the_shape(difference - margin, seed_var, df, tau2)[0] & np.asarray(steps)
    return [int(index) for index in np.flatnonzero(against)]


def _family_arrays(estimates: list[Estimate]) -> tuple[np.ndarray, ...]:
    return tuple(np.array([[value(estimate) for estimate in estimates]]) for value in (
        lambda e: e.difference, lambda e: e.seed_se ** 2, lambda e: e.df, lambda e: e.tau ** 2))


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


def smaller_than_paper(interval: tuple[float, float], paper_gap: float | None, margin: float = 0.0) -> bool:
    """Whether an undecided order's interval of better − worse lies wholly below the paper's own gap (a gap
    that supports the claim: above its margin): the effect here is smaller than the paper's. A two-sided 95%
    interval does so 2.5% of the time when the true difference is the paper's gap."""
    return paper_gap is not None and paper_gap > margin and interval[1] < paper_gap


def reproduction_slack(value: float, half_width: float | None) -> float:
    """How far another machine's last bits may move `value`: EDGE_FRACTION of its 95% half-width where it has
    one, else RELATIVE_TOLERANCE of its size (the reproduction check's rule, and the seed record's match)."""
    if half_width is not None and half_width > 0:
        return EDGE_FRACTION * half_width
    return RELATIVE_TOLERANCE * max(abs(value), NEAR_ZERO)


def p_at_the_edge(p_value: float | None) -> bool:
    """A permutation or t p-value within a tenth of the 2.5 % it is read against: another CPU may flip it."""
    return p_value is not None and abs(p_value - CORRELATION_ALPHA) <= EDGE_FRACTION * CORRELATION_ALPHA


# --- spreads: which of two models varies less across the same seeds ------------------------------------


def spread_verdict(steadier: np.ndarray, other: np.ndarray, alpha: float = CORRELATION_ALPHA,
                   permutations: int = 4000, seed: int = 0) -> tuple[str, float, float]:
    """Whether `steadier` varies less across training seeds than `other`, both measured on the same seeds
    (paired: the same runs), by a paired permutation test: with equal noise the two models' numbers of one seed
    are exchangeable, so swapping them seed by seed gives the statistic's null law, var(a) − var(b), whatever
    the noise's shape (the Pitman–Morgan t-test keeps 5 % only for normal seed noise). Every swap when 2ⁿ ≤
    `permutations`, else that many seeded random ones. HOLDS when the one-sided p (steadier's variance lower)
    < alpha; CONTRADICTED when the opposite one-sided p < alpha (2.5 % each way); else INCONCLUSIVE (always
    below 3 seeds or when nothing varied; at 5 seeds the smallest p is 1/32, so it cannot decide there).
    Returns (verdict, sd ratio steadier / other, the one-sided p in the claimed direction)."""
    a, b = np.asarray(steadier, dtype=float), np.asarray(other, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"a spread compares two 1-D arrays over the same seeds, got {a.shape} and {b.shape}")
    n = a.size
    sd_a, sd_b = (float(np.std(x, ddof=1)) if n >= 2 else math.nan for x in (a, b))
    ratio = sd_a / sd_b if sd_b > 0 else math.nan
    if n < 3 or np.std(a + b) == 0 or np.std(a - b) == 0:
        return INCONCLUSIVE, ratio, math.nan
    exact = 2 ** n <= permutations
    swaps = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool) if exact else \
        np.random.default_rng(seed).random((permutations, n)) < 0.5
    null = np.where(swaps, b, a).var(axis=1, ddof=1) - np.where(swaps, a, b).var(axis=1, ddof=1)
    observed, slack = float(np.var(a, ddof=1) - np.var(b, ddof=1)), 1e-12 * float(np.var(a) + np.var(b))
    count_lower, count_higher = np.count_nonzero(null <= observed + slack), np.count_nonzero(null >= observed - slack)
    # exact: the identity is among the swaps; sampled: counted once more, so that p is never 0
    p_lower, p_higher = (float(count / null.size if exact else (1 + count) / (1 + null.size)) for count in (count_lower, count_higher))
    if p_lower < alpha:
        return HOLDS, ratio, p_lower
    if p_higher < alpha:
        return CONTRADICTED, ratio, p_lower
    return INCONCLUSIVE, ratio, p_lower