"""A settling's design sized by the effect (pipeline/verdicts/sizing.py), held to its promises by simulation: at
every budget from 2 to 10,000 GPU hours the expected seeds per arm at the planned effect are no more than a single
look's at the same power, the error under no difference stays ≤ 5 % across all looks, no look is out of reach, and
an effect below the pair-noise floor is refused in words. The budget-sized plan it replaces spent 33.8 expected
seeds per arm at 100 GPU hours where a single look needs 4."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.verdicts import sequential
from pipeline.verdicts.estimates import compare_many
from pipeline.verdicts.rules import order_verdicts
from pipeline.verdicts.sizing import MIN_STOP_SHARE, PAPER_TAU_BRACKET, design, of_record, pair_noise_floor

TRIALS = 20000
FIVE = 0.055  # 5 % + ~3 Monte Carlo sd at 20,000 trials
PAPER_SD = math.sqrt(2) * 0.79  # a difference of two paper-scale runs (the prior), as settle plans it
PAPER_GAP, PER_SEED = 3.33, 0.299  # tncse-beats-simcse-bert: the paper's gap, GPU hours per seed of both arms
BUDGETS = (2, 3, 5, 10, 40, 100, 1000, 10_000)


def caps(per_seed: float) -> list[int]:
    return [math.floor(budget / per_seed) for budget in BUDGETS]


@pytest.mark.parametrize("effect, sd, tau, per_seed", [
    (PAPER_GAP, PAPER_SD, PAPER_TAU_BRACKET[1], PER_SEED),  # the paper's gap at paper scale
    (0.6, 0.5, 0.1, 1.0),  # a small effect: many looks, and budgets that cap it
])
def test_at_every_budget_the_design_spends_no_more_than_a_single_look_and_keeps_its_error(effect, sd, tau, per_seed):
    for cap in caps(per_seed):
        if cap < 2:
            continue
        planned = design(effect, sd, tau ** 2, cap=cap)
        at_effect = sequential.simulate(planned.plan, effect, sd, tau ** 2, trials=TRIALS, seed=1)
        single = sequential.fixed_design_seeds(effect, sd, tau ** 2, paired=True, power=min(at_effect.holds, 0.999))
        assert at_effect.expected_seeds <= single, (cap, planned.plan.looks, at_effect.expected_seeds, single)
        if not planned.capped:
            assert at_effect.holds >= planned.power - 0.02  # the asked power, within Monte Carlo
        assert planned.max_seeds <= cap and (planned.capped == (cap < planned.designed_seeds))
        at_zero = sequential.simulate(planned.plan, 0.0, sd, tau ** 2, trials=TRIALS, seed=2)
        assert at_zero.decided <= FIVE
        assert min(at_effect.stop_look[:-1], default=1.0) >= MIN_STOP_SHARE / 2  # no look out of reach


def test_the_budget_sized_plan_spent_more_the_larger_the_budget():
    """The old rule: the plan's horizon was the whole budget (100 GPU hours: 334 seeds per arm), so its first looks
    could never stop and it expected far more seeds than a single look needs."""
    single = sequential.fixed_design_seeds(PAPER_GAP, PAPER_SD, 0.0, paired=True, power=0.9)
    old = sequential.plan(math.floor(10 / PER_SEED))
    spent_old = sequential.simulate(old, PAPER_GAP, PAPER_SD, 0.0, trials=4000, seed=3).expected_seeds
    new = design(PAPER_GAP, PAPER_SD, 0.0, cap=math.floor(10 / PER_SEED))
    spent_new = sequential.simulate(new.plan, PAPER_GAP, PAPER_SD, 0.0, trials=4000, seed=3).expected_seeds
    assert spent_old > 2 * single and spent_new <= 6 < spent_old
    assert new.plan.looks == design(PAPER_GAP, PAPER_SD, 0.0, cap=math.floor(100 / PER_SEED)).plan.looks  # budget only caps


def test_a_cap_below_the_design_says_what_power_is_left():
    full = design(0.6, 0.5, 0.01)
    capped = design(0.6, 0.5, 0.01, cap=8)
    assert not full.capped and capped.capped and capped.max_seeds == 8
    assert capped.achieved_power < full.achieved_power and 0 < capped.achieved_power < 0.9


def test_below_the_pair_noise_floor_no_design_is_drawn():
    floor = pair_noise_floor(0.065 ** 2)
    assert floor == pytest.approx((1.959964 + 1.281552) * 0.065, rel=1e-5)
    with pytest.raises(ValueError, match=r"floor at 0\.211.*more test pairs"):
        design(0.12, 0.3, 0.065 ** 2)
    with pytest.raises(ValueError, match="positive"):
        design(float("nan"), 0.3, 0.0)


def test_the_first_look_of_record_is_kept_and_later_looks_grow_from_it():
    planned = design(0.3, 0.4, 0.0, first=5, first_fixed=True)
    assert planned.plan.looks[0] == 5 and len(planned.plan.looks) > 1
    assert np.all(np.diff(planned.plan.looks) > 0)


def test_the_report_then_settle_spend_one_error_budget():
    """The procedure as a user runs it: read the report's verdict at the record's 5 seeds, then settle. With the
    published verdict as look 1 of the claim's own design (`of_record`), no difference is decided ≤ 5 % in all; the
    old procedure (the fixed 95 % verdict published, then a budget plan of 2, 3, 5, 8, 13 seeds reusing those 5 seeds
    as its first looks) decided more: the error spent twice."""
    sd, tau2 = 0.5, 0.0
    found = of_record(0.6, sd, tau2, 5)
    assert found is not None and found.plan.looks[0] == 5 and len(found.plan.looks) > 1
    trials = 40000
    a, b = sequential.simulated_arms(np.random.default_rng(4), trials, 13, 0.0, sd, tau2, paired=True)
    new = sequential.simulate(found.plan, 0.0, sd, tau2, trials=trials, seed=4)  # look 1 is the report's
    assert new.decided <= FIVE
    published = compare_many(a[:, :5], b[:, :5], tau2, paired=True)
    decided_at_95 = order_verdicts(*published.interval(), published.se) != "inconclusive"
    old_plan = sequential.plan(13)
    settled = np.zeros(trials, dtype=bool)
    running = np.flatnonzero(~decided_at_95)
    for look, seeds in enumerate(old_plan.looks):
        batch = compare_many(a[running, :seeds], b[running, :seeds], tau2, paired=True)
        decisions = sequential.look_decisions(old_plan, look, batch, 0.0, True)
        settled[running[np.isin(decisions, ("holds", "contradicted"))]] = True
        running = running[decisions == sequential.CONTINUE]
    assert (decided_at_95 | settled).mean() > 0.06  # the old procedure: ≈ 7.8 % at τ 0
