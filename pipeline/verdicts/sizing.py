"""A settling's design sized by the effect it is to detect, not by the budget (issue 66): the budget only caps it.

- The fixed design: the seeds per arm a single 95 % look needs for `power` against `effect`
  (`decidable.seeds_needed`, t quantiles on the look's df).
- The inflation: α-spending's boundaries lie above 1.96, so the last look needs more information than a
  fixed design for the same power. The factor is (θ / (z_{α/2} + z_power))², θ the drift of the canonical
  process at which the plan's boundaries are crossed upwards with `power` (seeded simulation of the
  canonical joint normal); the design's seeds are the fixed design's times the factor, rounded up.
- The cap: a budget that pays for fewer seeds ends the plan there; the design then says so and what power
  the capped plan keeps (simulated with the plan's own rule, `sequential.simulate`).
- No look that cannot stop: a look that stops fewer than MIN_STOP_SHARE of the planned-effect trials (its
  boundary out of reach: z 8 at 2 seeds of a 100-seed plan) is dropped and the boundaries recomputed; the
  spending it had passes to the next look. The first look is kept when it is `first_fixed` (the seeds the
  published verdict saw: the design's look of record).
- The floor: with pair noise τ (the same test pairs score every seed) no number of seeds decides an effect
  below (z_{α/2} + z_power)·τ; below it the design is refused, naming the floor.

A leaf but for the estimates, decidable and sequential: numpy, scipy and the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from pipeline.verdicts import sequential
from pipeline.verdicts.decidable import seeds_needed
from pipeline.verdicts.estimates import LEVEL

DESIGN_POWER = 0.90
MIN_STOP_SHARE = 0.01
CANONICAL_TRIALS = 20_000
CANONICAL_SEED = 66  # fixed: a design is a function of its inputs alone
MAX_SEEDS = 100_000  # beyond this no plan is drawn: the effect is out of reach of seeds
# τ of a difference of two models on the papers' full test sets (the 7-STS average): the committed run's paired
# bootstrap τ of its model pairs (0.061–0.199 at 300 pairs per task) times √(mean over the tasks of 300 / their full
# size) = 0.38 (docs/method.md, "Settling a claim"): 0.023–0.076, stated as this bracket.
PAPER_TAU_BRACKET = (0.02, 0.08)


@dataclass(frozen=True)
class Design:
    """A settling's plan and the numbers it was sized from."""

    plan: sequential.SequentialPlan
    effect: float
    power: float  # asked
    fixed_seeds: int  # a single look at 95 % for `power`
    designed_seeds: int  # the fixed design inflated for the looks, before any cap
    capped: bool  # the budget ended the plan before the designed seeds
    achieved_power: float  # the plan's, simulated at `effect`
    expected_seeds: float  # seeds per arm expected at `effect`

    @property
    def max_seeds(self) -> int:
        return self.plan.looks[-1]


def claim_effect(paper_gap: float | None, margin: float, band: float) -> tuple[float, str] | None:
    """The effect a claim's settling design detects, beyond its margin, and where it comes from: the paper's gap
    beyond the margin (and band); else, where the paper states none, the claim's margin and band; else None."""
    if paper_gap is not None and paper_gap > margin + band:
        return paper_gap - margin, "the paper's gap"
    if paper_gap is None and (margin or band):
        return abs(margin) + band, "the claim's margin and band"
    return None


def of_record(effect: float, seed_sd: float, tau2: float, seeds: int, power: float = DESIGN_POWER) -> Design | None:
    """The claim's own settling design, whose first look is the published verdict's seeds (`seeds` paired runs of
    the seed record): sized for `effect` at `power` with the record's noise, no budget cap. None where no number
    of seeds decides the effect (below the pair-noise floor, or beyond MAX_SEEDS)."""
    try:
        return design(effect, seed_sd, tau2, paired=True, power=power, first=max(2, seeds), first_fixed=True)
    except ValueError:
        return None


def design_record(found: Design, effect_source: str) -> dict:
    """A design as numbers (reports/claims.json, reports/settle/<claim id>.json): settling reads the published one back."""
    plan = found.plan
    return {"effect": round(found.effect, 6), "effect_source": effect_source, "power": found.power,
            "fixed_seeds": found.fixed_seeds, "designed_seeds": found.designed_seeds, "capped": found.capped,
            "achieved_power": round(found.achieved_power, 4), "expected_seeds": round(found.expected_seeds, 3),
            "looks": list(plan.looks), "boundaries_z": [round(z, 10) for z in plan.boundaries_z],
            "paired_t": None if plan.paired_t is None else [round(q, 10) for q in plan.paired_t]}


def plan_of_record(record: dict, cap: int | None = None) -> sequential.SequentialPlan:
    """The plan a design record holds, truncated at `cap` seeds per arm (its boundaries kept: a look never reached
    spends nothing, so the error only falls)."""
    keep = [index for index, seeds in enumerate(record["looks"]) if cap is None or seeds <= cap] or [0]
    paired_t = record.get("paired_t")
    return sequential.SequentialPlan(tuple(record["looks"][index] for index in keep),
                                     tuple(record["boundaries_z"][index] for index in keep),
                                     paired_t=None if paired_t is None else tuple(paired_t[index] for index in keep))


def design_of_record(record: dict, cap: int | None = None) -> Design:
    """The design a record holds (`design_record`), its plan truncated at `cap` (`plan_of_record`)."""
    plan = plan_of_record(record, cap)
    return Design(plan, record["effect"], record["power"], record["fixed_seeds"], record["designed_seeds"],
                  plan.looks[-1] < record["looks"][-1], record["achieved_power"], record["expected_seeds"])


def pair_noise_floor(tau2: float, power: float = DESIGN_POWER, level: float = LEVEL) -> float:
    """The smallest effect any number of seeds can decide with `power` when every seed shares pair noise τ²."""
    return (stats.norm.isf((1 - level) / 2) + stats.norm.ppf(power)) * math.sqrt(max(tau2, 0.0))


def canonical_drift(fractions: np.ndarray, boundaries: np.ndarray, power: float) -> float:
    """θ at which the canonical process Z_k = (θ t_k + W(t_k)) / √t_k crosses an upper boundary (before any
    crossing either way) with probability `power`."""
    rng = np.random.default_rng(CANONICAL_SEED)
    steps = rng.standard_normal((CANONICAL_TRIALS, fractions.size)) * np.sqrt(np.diff(fractions, prepend=0.0))
    walk, root = np.cumsum(steps, axis=1), np.sqrt(fractions)

    def upward(theta: float) -> float:
        z = (theta * fractions + walk) / root
        crossed = np.abs(z) >= boundaries
        first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
        hit = first >= 0
        return float(np.mean(hit & (z[np.arange(z.shape[0]), first] > 0)))

    return float(optimize.brentq(lambda theta: upward(theta) - power, 0.0, 50.0, xtol=1e-6))


def inflation(looks: tuple[int, ...], power: float) -> float:
    """The information the plan's last look needs over a fixed design's, for the same power."""
    fractions = np.asarray(looks, dtype=float) / looks[-1]
    boundaries = sequential.spending_boundaries(tuple(fractions))
    fixed = stats.norm.isf((1 - LEVEL) / 2) + stats.norm.ppf(power)
    return max(1.0, (canonical_drift(fractions, boundaries, power) / fixed) ** 2)


def design(effect: float, sd: float, tau2: float, paired: bool = True, power: float = DESIGN_POWER,
           cap: int | None = None, first: int = 2, first_fixed: bool = False) -> Design:
    """The plan for detecting `effect` (> 0, in the claim's direction beyond its margin) with `power`: the fixed
    design's seeds inflated for the looks, capped at `cap` seeds per arm, looks from `first` (Fibonacci-like)
    with none that cannot stop. ValueError, in words, when no number of seeds decides the effect."""
    if not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"the effect to detect must be a positive number of points, not {effect}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), not {power}")
    fixed = seeds_needed(effect, sd, tau2, paired=paired, power=power, max_seeds=MAX_SEEDS)
    if fixed is None:
        floor = pair_noise_floor(tau2, power)
        why = (f"the pair noise τ {math.sqrt(tau2):.3f} alone puts the floor at {floor:.3f}: below it no number of "
               "seeds decides; more test pairs would" if effect <= floor else f"it needs more than {MAX_SEEDS:,} seeds per arm")
        raise ValueError(f"an effect of {effect:.3g} cannot be settled by seeds: {why}")
    designed = fixed
    for _ in range(2):  # the looks depend on the seeds, the inflation on the looks: twice settles it
        designed = max(first, math.ceil(fixed * inflation(sequential.planned_looks(max(designed, first), first), power) - 1e-9))
    if cap is not None and cap < first:
        raise ValueError(f"a budget of {cap} seeds per arm is below the first look's {first}")
    while True:  # t quantiles and dropped looks cost a little power: add seeds until the plan keeps it
        top = designed if cap is None else min(designed, cap)
        plan, run = _stoppable_plan(top, first, first_fixed, effect, sd, tau2, paired)
        if run.holds >= power or top < designed or designed >= MAX_SEEDS:
            return Design(plan, effect, power, fixed, designed, top < designed, run.holds, run.expected_seeds)
        designed = min(MAX_SEEDS, designed + max(1, designed // 20))


def _stoppable_plan(top: int, first: int, first_fixed: bool, effect: float, sd: float, tau2: float,
                    paired: bool) -> tuple[sequential.SequentialPlan, sequential.Simulated]:
    """The plan to `top` seeds per arm with every look that stops fewer than MIN_STOP_SHARE of trials at `effect`
    dropped (the last kept always, the first when `first_fixed`), and its run at `effect`."""
    plan = sequential.plan(top, first)
    while True:
        run = sequential.simulate(plan, effect, sd, tau2, paired=paired, trials=4000)
        last = len(plan.looks) - 1
        kept = tuple(seeds for index, (seeds, share) in enumerate(zip(plan.looks, run.stop_look))
                     if index == last or share >= MIN_STOP_SHARE or (first_fixed and index == 0))
        if kept == plan.looks:
            return plan, run
        plan = sequential.plan(top, first, looks=kept)
