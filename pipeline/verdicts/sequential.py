"""Settling a claim within a GPU budget (issue 57): add seeds in looks and stop as soon as the claim is
decided, keeping the false-decision rate across all looks at the 2.5 % per side every fixed rule spends.

- `planned_looks`: seeds per arm at each look, 2, 3, 5, 8, 13, … ending on the budget.
- `spending_boundaries`: Lan–DeMets α-spending with O'Brien–Fleming-type α(t) = 2 − 2Φ(z_{1−α/2}/√t)
  (two-sided α = 0.05, symmetric), the z-boundaries solved exactly for the canonical joint normal
  (corr(Z_j, Z_k) = √(t_j/t_k), t_k = n_k/n_max) by recursive numerical integration.
- `judge_look`: at look k the interval is Δ̂ ± h_k, h_k = √(t_{ν,k}²·V_s + z_k²·τ²) — `half_width` at the
  look's nominal level 2Φ(z_k) − 1, so the seed noise re-estimated at each look gets its t quantile on
  the look's df (paired n − 1, unpaired Welch: `compare_many`), the pair noise its normal one. A plug-in
  z on s instead decides 2-seed looks far too often (tests/test_sequential.py).
- Futility (non-binding): stop when the conditional power to decide at the last look, at the current
  estimate, is below a threshold; it only ever stops a trial earlier, so the error bound ignores it.
- `simulate`: the probability of deciding, the expected seeds and the look of stopping, by simulation.

Why the error holds with n-based fractions: a difference's pair noise is one draw shared by every look
(the same test pairs), so Var Δ̂_k = σ²/n_k + τ² and consecutive looks are more correlated than
√(n_j/n_k); more correlation only lowers the chance of crossing any boundary, and each look's marginal
level is exact. Paired looks use t critical values calibrated on the joint law of the looks' t statistics
(`paired_t_boundaries`: pivotal, so one seeded simulation serves every claim): at τ = 0 the rule spends
the planned 5 % (measured 4.9–5.0 %), with τ > 0 less. Unpaired looks convert each z-boundary to a t
quantile at the look's nominal level (approximate: measured ≤ 5.1 %). Trend claims: a monotone sweep's endpoints are an
order comparison of the first point against the last: pass those two arms to `judge_look`; its steps only veto a
hold (`rules.trend_verdict`: none against the shape beyond chance), which can lower its error, never raise it.
A leaf but for the estimates, rules, decidable and verdict names: numpy, scipy and the standard library.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from pipeline.verdicts.decidable import seeds_needed
from pipeline.verdicts.estimates import LEVEL, Batch, compare_many
from pipeline.verdicts.rules import order_verdicts, value_verdicts
from pipeline.verdicts.verdict_names import CONTRADICTED, DECIDED, HOLDS, INCONCLUSIVE

ALPHA_PER_SIDE = (1 - LEVEL) / 2  # 2.5 %, as every fixed rule spends on each side
FUTILITY_POWER = 0.10
FUTILITY_FROM = 1 / 3
CONTINUE, FUTILE = "continue", "futile"
# A nominal level closer to 1 than this is read as this: `half_width`'s quantile needs level < 1 in
# floating point, and an interval that wide decides nothing (its spending, ≤ 1e-15, is lost).
MAX_LEVEL = 1 - 1e-15
GRID_STEPS_PER_SD = 20  # integration grid: points per sd of the smallest increment (boundaries to ~1e-6)


def planned_looks(max_seeds: int, first: int = 2) -> tuple[int, ...]:
    """Seeds per arm at each look: a Fibonacci-like 2, 3, 5, 8, 13, 21, … from `first`, capped at and
    ending on `max_seeds`. Growing looks keep early stops cheap while later looks add information
    in steps that still matter; ≥ 2 seeds so the seed noise is measured at every look."""
    if first < 2 or max_seeds < first:
        raise ValueError(f"looks need 2 ≤ first ≤ max_seeds, not first={first}, max_seeds={max_seeds}")
    looks, previous = [first], first - 1
    while looks[-1] < max_seeds:
        looks.append(min(looks[-1] + previous, max_seeds))
        previous = looks[-2]
    return tuple(looks)


def spent(fraction: np.ndarray | float, alpha_per_side: float = ALPHA_PER_SIDE) -> np.ndarray:
    """α(t)/2, the error per side spent by information fraction t: O'Brien–Fleming-type
    2 − 2Φ(z_{1−α/2}/√t), which spends almost nothing at the first looks (the noisiest)."""
    return stats.norm.sf(stats.norm.isf(alpha_per_side) / np.sqrt(np.asarray(fraction, dtype=float)))


def _simpson_grid(half: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Points on [−half, half] at most `step` apart and their Simpson weights."""
    points = max(101, math.ceil(2 * half / step) | 1)
    grid = np.linspace(-half, half, points)
    weights = np.ones(points)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    return grid, weights * (grid[1] - grid[0]) / 3


def spending_boundaries(fractions: tuple[float, ...], alpha_per_side: float = ALPHA_PER_SIDE) -> np.ndarray:
    """The symmetric z-boundaries c_k: P(|Z_j| < c_j for j < k, |Z_k| ≥ c_k) = 2(α(t_k) − α(t_{k−1}))/2
    under the canonical joint normal. Exact by recursion on the score S_k = Z_k√t_k (independent
    N(0, t_k − t_{k−1}) steps): the sub-density of S_k on the continuation region, on a Simpson grid,
    is carried look to look, and each c_k solved by root finding on the crossing probability."""
    fractions = np.asarray(fractions, dtype=float)
    if fractions.ndim != 1 or not np.all(np.diff(fractions) > 0) or not 0 < fractions[0] <= fractions[-1] <= 1:
        raise ValueError(f"information fractions must increase within (0, 1], not {fractions}")
    spending, steps = spent(fractions, alpha_per_side), np.sqrt(np.diff(fractions, prepend=0.0))
    step = steps.min() / GRID_STEPS_PER_SD
    boundaries = [float(stats.norm.isf(spending[0]))]
    grid, weights = _simpson_grid(boundaries[0] * math.sqrt(fractions[0]), step)
    mass = weights * stats.norm.pdf(grid, scale=steps[0])
    for look in range(1, fractions.size):
        scale, target = math.sqrt(fractions[look]), 2 * (spending[look] - spending[look - 1])

        def crossing(z: float) -> float:
            edge = z * scale
            return float(mass @ (stats.norm.cdf((-edge - grid) / steps[look]) + stats.norm.sf((edge - grid) / steps[look])))

        boundaries.append(optimize.brentq(lambda z: crossing(z) - target, 0.0, 40.0, xtol=1e-10))
        next_grid, next_weights = _simpson_grid(boundaries[-1] * scale, step)
        density = stats.norm.pdf(next_grid[:, None] - grid[None, :], scale=steps[look]) @ mass
        grid, mass = next_grid, next_weights * density
    return np.array(boundaries)


CALIBRATION_TRIALS = 200_000
CALIBRATION_SEED = 20_570  # fixed: a plan's boundaries are a function of its looks alone
MIN_CROSSINGS = 200  # fewer planned crossings than this in the calibration: the marginal t quantile (exact alone)


def _null_paired_t(looks: tuple[int, ...], chunk: int = 20_000) -> np.ndarray:
    """|T_k| of every look for CALIBRATION_TRIALS seeded trials of standard normal seeds (in chunks: a
    budget of hundreds of seeds stays within memory)."""
    rng, n = np.random.default_rng(CALIBRATION_SEED), np.asarray(looks)
    parts = []
    for start in range(0, CALIBRATION_TRIALS, chunk):
        draws = rng.standard_normal((min(chunk, CALIBRATION_TRIALS - start), looks[-1]))
        means = np.cumsum(draws, axis=1)[:, n - 1] / n
        squares = np.cumsum(draws ** 2, axis=1)[:, n - 1]
        parts.append(np.abs(means) / np.sqrt((squares - n * means ** 2) / (n - 1) / n))
    return np.concatenate(parts)


def paired_t_boundaries(looks: tuple[int, ...], spending: np.ndarray) -> tuple[float, ...]:
    """Critical values q_k of the paired looks' t statistics T_k = d̄_k/(s_k/√n_k) with
    P(|T_j| ≤ q_j, j < k; |T_k| > q_k) = 2(α(t_k) − α(t_{k−1})) under no difference. The T_k share
    their seeds, so their joint law is not the canonical normal's; it is free of σ (T is pivotal), so one
    seeded simulation of standard normal seeds calibrates every claim. A look whose planned crossings
    are too few to count (the first, O'Brien–Fleming spends almost nothing there) keeps the marginal t
    quantile, exact for a look alone."""
    t = _null_paired_t(looks)
    increments = 2 * np.diff(np.asarray(spending, dtype=float), prepend=0.0)
    open_, critical = np.ones(CALIBRATION_TRIALS, dtype=bool), []
    for look, (seeds, share) in enumerate(zip(looks, increments)):
        crossings = int(round(share * CALIBRATION_TRIALS))
        if crossings < MIN_CROSSINGS:
            q = float(stats.t.isf(share / 2, seeds - 1)) if share > 0 else math.inf
        else:
            still = np.sort(t[open_, look])[::-1]
            q = float(still[crossings - 1]) if crossings <= still.size else 0.0
        critical.append(q)
        open_ &= t[:, look] <= q
    return tuple(critical)


@dataclass(frozen=True)
class SequentialPlan:
    """Looks (seeds per arm), their z-boundaries and the error per side they keep. `futility_power`:
    stop for futility below this conditional power (None: never). `plug_in`: normal quantiles for
    the seed part too — the naive z-boundary on the plugged-in s, kept only to show it fails."""

    looks: tuple[int, ...]
    boundaries_z: tuple[float, ...]
    alpha_per_side: float = ALPHA_PER_SIDE
    futility_power: float | None = FUTILITY_POWER
    futility_from: float = FUTILITY_FROM
    plug_in: bool = False
    # paired looks: the critical value of each look's t statistic, calibrated so that, at τ = 0, the
    # sequence of t statistics spends exactly the planned error (`paired_t_boundaries`); None: the t
    # quantile at the look's nominal level (unpaired looks, and a plan built by hand)
    paired_t: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.looks) != len(self.boundaries_z) or not self.looks:
            raise ValueError(f"one boundary per look: {len(self.looks)} looks, {len(self.boundaries_z)} boundaries")
        if self.looks[0] < 2 or any(b <= a for a, b in zip(self.looks, self.looks[1:])):
            raise ValueError(f"looks must increase from ≥ 2 seeds, not {self.looks}")

    @property
    def fractions(self) -> np.ndarray:
        return np.asarray(self.looks, dtype=float) / self.looks[-1]

    @property
    def nominal_levels(self) -> np.ndarray:
        """Each boundary as the two-sided level of a fixed interval, 2Φ(z_k) − 1 (≤ MAX_LEVEL)."""
        return np.minimum(1 - 2 * stats.norm.sf(np.asarray(self.boundaries_z)), MAX_LEVEL)


def plan(max_seeds: int, first: int = 2, alpha_per_side: float = ALPHA_PER_SIDE,
         futility_power: float | None = FUTILITY_POWER, looks: tuple[int, ...] | None = None) -> SequentialPlan:
    """The plan for a budget of `max_seeds` per arm: `planned_looks` (or the given looks, ending on
    max_seeds) and their α-spending boundaries at t_k = n_k / n_max."""
    looks = planned_looks(max_seeds, first) if looks is None else tuple(looks)
    if looks[-1] != max_seeds:
        raise ValueError(f"the last look must spend the budget: {looks[-1]} ≠ {max_seeds}")
    fractions = tuple(np.asarray(looks, dtype=float) / max_seeds)
    boundaries = spending_boundaries(fractions, alpha_per_side)
    return SequentialPlan(looks, tuple(float(z) for z in boundaries), alpha_per_side, futility_power,
                          paired_t=paired_t_boundaries(looks, spent(np.asarray(fractions), alpha_per_side)))


def naive_plan(sequential: SequentialPlan) -> SequentialPlan:
    """The same looks, each read with the fixed 95 % interval (plain `half_width`): what repeated
    looking does without boundaries."""
    fixed = float(stats.norm.isf((1 - LEVEL) / 2))
    return dataclasses.replace(sequential, boundaries_z=(fixed,) * len(sequential.looks), futility_power=None, paired_t=None)


# --- one look -------------------------------------------------------------------------------------------


def look_interval(sequential: SequentialPlan, look: int, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Δ̂ ± h_k, h_k = √(t_{ν,k}²·V_s + z_k²·τ²): `half_width` at the look's nominal level."""
    if sequential.plug_in:
        batch = dataclasses.replace(batch, df=np.full(batch.df.shape, np.inf))
    paired = np.all(batch.df == sequential.looks[look] - 1)
    if sequential.paired_t is None or sequential.plug_in or not paired:
        return batch.interval(float(sequential.nominal_levels[look]))
    half = paired_look_half_width(sequential, look, batch.seed_var, np.asarray(batch.tau2, dtype=float))
    return batch.difference - half, batch.difference + half


def paired_look_half_width(sequential: SequentialPlan, look: int, seed_var, tau2):
    """h_k of a paired look: √(q_k² V_s + z_k² τ²), the calibrated q_k on the seed part, z_k on the pair noise."""
    return np.sqrt(sequential.paired_t[look] ** 2 * seed_var + sequential.boundaries_z[look] ** 2 * tau2)


def conditional_power(sequential: SequentialPlan, look: int, batch: Batch, margin: float, paired: bool) -> np.ndarray:
    """The chance the last look's interval excludes `margin`, were the true effect the current Δ̂
    ("current trend": needs no planned effect, and counts both directions alike). The rest of the
    seeds move Δ̂ by N(0, σ̂²(n_K − n_k)/n_K²), σ̂² = n_k·V_s the per-seed variance; τ² is a shared
    draw already in Δ̂. The last look's df is the planning one (paired n_K − 1, else 2n_K − 2)."""
    n, last = sequential.looks[look], sequential.looks[-1]
    per_seed = n * batch.seed_var
    final_df = last - 1 if paired else 2 * last - 2
    final = Batch(batch.difference, per_seed / last, np.full(batch.df.shape, float(final_df)), batch.tau2,
                  batch.seed_sd, batch.seed_df, batch.source)
    low, high = look_interval(sequential, len(sequential.looks) - 1, final)
    spread = np.sqrt(per_seed * (last - n)) / last
    with np.errstate(divide="ignore", invalid="ignore"):
        above = stats.norm.cdf(np.where(spread > 0, (low - margin) / spread, np.sign(low - margin) * np.inf))
        below = stats.norm.cdf(np.where(spread > 0, (margin - high) / spread, np.sign(margin - high) * np.inf))
    return above + below


def look_decisions(sequential: SequentialPlan, look: int, batch: Batch, margin: float, paired: bool) -> np.ndarray:
    """Each claim's decision at `look`: HOLDS / CONTRADICTED (the interval wholly above / below the
    margin, `order_verdicts`, so a degenerate comparison never decides), else FUTILE (conditional
    power below the plan's threshold), CONTINUE, or INCONCLUSIVE at the last look."""
    low, high = look_interval(sequential, look, batch)
    decisions = order_verdicts(low, high, batch.se, margin).astype(object)
    open_ = decisions == INCONCLUSIVE
    if look == len(sequential.looks) - 1:
        return decisions
    decisions[open_] = CONTINUE
    if sequential.futility_power is not None and sequential.fractions[look] >= sequential.futility_from:
        futile = open_ & (conditional_power(sequential, look, batch, margin, paired) < sequential.futility_power)
        decisions[futile] = FUTILE
    return decisions


def _batch(a: np.ndarray, b: np.ndarray | None, tau2: float, paired: bool) -> Batch:
    """One claim's batch: `a` the within-run differences (b None, paired) or two arms' scores."""
    a = np.asarray(a, dtype=float)
    if b is None:
        if not paired:
            raise ValueError("unpaired arms need both arrays of scores")
        b = np.zeros_like(a)
    return compare_many(a[None], np.asarray(b, dtype=float)[None], tau2, paired)


def judge_look(sequential: SequentialPlan, look_index: int, a: np.ndarray, b: np.ndarray | None = None,
               tau2: float = 0.0, margin: float = 0.0, paired: bool = True) -> dict:
    """One order claim at one look: `a` the within-run differences A − B (paired, b None) or arm A's
    scores with arm B's in `b`, one per seed, as many seeds per arm as the look plans. Returns the
    record: seeds per arm, Δ̂, the interval, the boundary (z_k and nominal level), the decision."""
    seeds = sequential.looks[look_index]
    if len(a) != seeds or (b is not None and len(b) != seeds):
        raise ValueError(f"look {look_index} plans {seeds} seeds per arm, got {len(a)}" + ("" if b is None else f" and {len(b)}"))
    batch = _batch(a, b, tau2, paired)
    low, high = look_interval(sequential, look_index, batch)
    decision = str(look_decisions(sequential, look_index, batch, margin, paired)[0])
    return {
        "look": look_index, "seeds_per_arm": seeds, "difference": float(batch.difference[0]),
        "interval": (float(low[0]), float(high[0])), "boundary_z": sequential.boundaries_z[look_index],
        "nominal_level": float(sequential.nominal_levels[look_index]), "margin": margin, "decision": decision,
        "verdict": None if decision == CONTINUE else (INCONCLUSIVE if decision == FUTILE else decision),
    }


def value_look_decisions(sequential: SequentialPlan, look: int, ours: np.ndarray, paper: np.ndarray, epsilon: float,
                         tau2: float = 0.0, against: str = "mean") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Value claims at one look, `ours` (claims, n_k) against the paper's number each: `rules.value_verdicts`
    at the look's nominal level (our mean's interval, or with `against` "one run" a prediction of one more
    run; t on n − 1 df; τ² 0 by default: the paper scored the same test pairs). A decided verdict (reproduced, higher, not reproduced) stops; else
    CONTINUE, and at the last look the fixed rule's verdict (consistent or inconclusive) stands. No
    futility: "consistent" is an end of its own. Returns (decisions, low, high)."""
    level = float(sequential.nominal_levels[look])
    verdicts, low, high = value_verdicts(ours, paper, epsilon, tau2, None, level, against)
    if look < len(sequential.looks) - 1:
        verdicts = np.where(np.isin(verdicts, DECIDED), verdicts, CONTINUE)
    return verdicts, low, high


def judge_value_look(sequential: SequentialPlan, look_index: int, ours: np.ndarray, paper: float,
                     epsilon: float, tau2: float = 0.0, against: str = "mean") -> dict:
    """One value claim at one look (`value_look_decisions`): our seeds, as many as the look plans,
    against the paper's number with the band ±ε. Returns the record, as `judge_look`'s."""
    seeds = sequential.looks[look_index]
    ours = np.asarray(ours, dtype=float)
    if ours.shape != (seeds,):
        raise ValueError(f"look {look_index} plans {seeds} seeds, got {ours.shape}")
    decisions, low, high = value_look_decisions(sequential, look_index, ours[None], np.array([paper]), epsilon, tau2, against)
    return {
        "look": look_index, "seeds": seeds, "difference": float(ours.mean() - paper),
        "interval": (float(low[0]), float(high[0])), "boundary_z": sequential.boundaries_z[look_index],
        "nominal_level": float(sequential.nominal_levels[look_index]), "epsilon": epsilon, "decision": str(decisions[0]),
    }


# --- power and expected seeds, by simulation --------------------------------------------------------------


@dataclass(frozen=True)
class Simulated:
    """`simulate`'s answer: the share of trials ending in each way, the expected seeds per arm at the
    stop, and the share stopping at each look (decided, futile, or the last look reached)."""

    holds: float
    contradicted: float
    futile: float
    expected_seeds: float
    stop_look: tuple[float, ...]

    @property
    def decided(self) -> float:
        return self.holds + self.contradicted


def simulated_arms(rng: np.random.Generator, trials: int, seeds: int, effect: float, sd: float, tau2: float,
                   paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """Scores of `trials` claims: paired, the within-run differences (sd `sd`) against zeros; else two
    arms of per-arm sd `sd`. One pair-noise draw per claim, shared by every seed and every look (the
    same test pairs score them all)."""
    pair_noise = math.sqrt(tau2) * rng.standard_normal((trials, 1))
    a = effect + pair_noise + sd * rng.standard_normal((trials, seeds))
    b = np.zeros_like(a) if paired else sd * rng.standard_normal((trials, seeds))
    return a, b


def simulate(sequential: SequentialPlan, effect: float, sd: float, tau2: float, margin: float = 0.0,
             paired: bool = True, trials: int = 20000, seed: int = 0) -> Simulated:
    """The plan run on `trials` simulated claims whose true difference is `effect` (seeded, vectorised
    over trials: one `compare_many` per look on the seeds so far). `sd`: of the within-run difference
    when paired, else of one arm's score."""
    a, b = simulated_arms(np.random.default_rng(seed), trials, sequential.looks[-1], effect, sd, tau2, paired)
    stopped_at = np.full(trials, -1)
    outcome = np.full(trials, INCONCLUSIVE, dtype=object)
    for look, seeds in enumerate(sequential.looks):
        running = np.flatnonzero(stopped_at < 0)
        batch = compare_many(a[running, :seeds], b[running, :seeds], tau2, paired)
        decisions = look_decisions(sequential, look, batch, margin, paired)
        stops = decisions != CONTINUE
        stopped_at[running[stops]], outcome[running[stops]] = look, decisions[stops]
    seeds_at_stop = np.asarray(sequential.looks)[stopped_at]
    return Simulated(
        holds=float(np.mean(outcome == HOLDS)), contradicted=float(np.mean(outcome == CONTRADICTED)),
        futile=float(np.mean(outcome == FUTILE)), expected_seeds=float(seeds_at_stop.mean()),
        stop_look=tuple(float(share) for share in np.bincount(stopped_at, minlength=len(sequential.looks)) / trials),
    )


def fixed_design_seeds(effect: float, sd: float, tau2: float, paired: bool, power: float = 0.80) -> int | None:
    """Seeds per arm a single look at 95 % needs for `power` against `effect` (`decidable.seeds_needed`):
    what the sequential plan's expected seeds are measured against."""
    return seeds_needed(effect, sd, tau2, paired=paired, power=power)
