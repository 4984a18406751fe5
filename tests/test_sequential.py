"""The sequential rule (pipeline/verdicts/sequential.py) held to its stated error by simulation: a claim
judged at looks of 2, 3, 5, 8, 13 seeds per arm is falsely decided at most 5 % of the time across all
looks (2.5 % per side), where reading each look with the fixed 95 % interval is not; it keeps ≥ 80 %
power at the planned effect with fewer expected seeds than a fixed design. Simulated claims are seeded
and vectorised over trials (`simulate`); rates pass at 5.5 % (2.75 % per side): nominal + ~3 Monte Carlo sd.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from pipeline.verdicts.sequential import (
    CONTINUE, FUTILE, fixed_design_seeds, judge_look, judge_value_look, naive_plan, plan, planned_looks, simulate,
    spending_boundaries, spent, value_look_decisions,
)
from pipeline.verdicts.verdict_names import CONSISTENT, CONTRADICTED, HIGHER, HOLDS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED

TRIALS = 40000
FIVE, PER_SIDE = 0.055, 0.0275
SD, TAU2 = 0.5, 0.1 ** 2  # paired within-run difference sd, pair noise τ = 0.1 points
# The planned effect: a fixed design of 13 paired seeds has 89.6 % power for it (t on 12 df), so
# the 13-seed budget is the fixed design's n at ≈ 90 % power.
EFFECT = 0.6


@pytest.fixture(scope="module")
def budget13():
    return plan(13)


def test_looks_grow_like_fibonacci_and_end_on_the_budget():
    assert planned_looks(13) == (2, 3, 5, 8, 13)
    assert planned_looks(30) == (2, 3, 5, 8, 13, 21, 30)
    assert planned_looks(10) == (2, 3, 5, 8, 10)
    assert planned_looks(2) == (2,)
    with pytest.raises(ValueError):
        planned_looks(1)


def test_boundaries_spend_the_error_on_the_canonical_normal(budget13):
    """The z-boundaries, checked against 400,000 draws of the canonical joint normal: each look crosses
    with the increment of α(t) it is given, 2.5 % per side in all; one look is the fixed 1.96."""
    fractions = budget13.fractions
    assert budget13.boundaries_z[0] == pytest.approx(stats.norm.isf(0.025) / np.sqrt(fractions[0]))
    assert spending_boundaries((1.0,))[0] == pytest.approx(stats.norm.isf(0.025))
    steps = np.random.default_rng(11).standard_normal((400000, fractions.size)) * np.sqrt(np.diff(fractions, prepend=0))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    upper, lower = z >= np.array(budget13.boundaries_z), z <= -np.array(budget13.boundaries_z)
    crossed = np.cumsum(upper | lower, axis=1) > 0
    assert crossed.mean(axis=0) == pytest.approx(2 * spent(fractions), abs=0.0012)
    assert upper.any(axis=1).mean() == pytest.approx(0.025, abs=0.0008)
    assert np.all(np.diff(budget13.boundaries_z) < 0) and budget13.boundaries_z[-1] > stats.norm.isf(0.025)


def test_no_difference_is_decided_at_most_five_percent_across_all_looks(budget13):
    without_futility = dataclasses.replace(budget13, futility_power=None)
    result = simulate(without_futility, 0.0, SD, TAU2, trials=TRIALS, seed=1)
    assert result.decided <= FIVE and result.holds <= PER_SIDE and result.contradicted <= PER_SIDE
    shifted = simulate(without_futility, 0.3, SD, TAU2, margin=0.3, trials=TRIALS, seed=2)  # true Δ = margin
    assert shifted.decided <= FIVE and shifted.holds <= PER_SIDE and shifted.contradicted <= PER_SIDE


@pytest.mark.parametrize("sd, tau", [(0.3, 0.0), (0.8, 0.35)])
def test_unpaired_arms_keep_the_error(sd, tau):
    result = simulate(plan(13, futility_power=None), 0.0, sd, tau ** 2, paired=False, trials=TRIALS, seed=3)
    assert result.decided <= FIVE and result.holds <= PER_SIDE and result.contradicted <= PER_SIDE


def test_the_fixed_interval_at_every_look_decides_far_more_than_five_percent(budget13):
    naive = simulate(naive_plan(budget13), 0.0, SD, TAU2, trials=TRIALS, seed=1)
    assert naive.decided > 0.06


def test_two_seeds_at_the_first_look_keep_the_error_with_t_quantiles():
    """Looks of 2 and 3 seeds: the first spends 1.6 % at z 2.40. On 1 df that is t ≈ 39; a z-boundary on
    the plugged-in s decides equal arms ~20 % of the time. τ = 0: the paired t critical values are
    calibrated on the looks' joint t law (the z-boundaries' nominal t quantiles measured 5.4 % here)."""
    two_looks = plan(3, futility_power=None)
    assert two_looks.looks == (2, 3)
    kept = simulate(two_looks, 0.0, SD, TAU2, trials=TRIALS, seed=4)
    assert kept.decided <= FIVE and kept.holds <= PER_SIDE and kept.contradicted <= PER_SIDE
    without_pair_noise = simulate(two_looks, 0.0, SD, 0.0, trials=TRIALS, seed=4)
    assert without_pair_noise.decided <= FIVE and max(without_pair_noise.holds, without_pair_noise.contradicted) <= PER_SIDE
    uncalibrated = dataclasses.replace(two_looks, paired_t=None)  # each look's marginal t quantile alone
    assert simulate(uncalibrated, 0.0, SD, 0.0, trials=TRIALS, seed=4).decided > simulate(two_looks, 0.0, SD, 0.0, trials=TRIALS, seed=4).decided
    plug_in = simulate(dataclasses.replace(two_looks, plug_in=True), 0.0, SD, TAU2, trials=TRIALS, seed=4)
    assert plug_in.decided > 0.15


def test_power_at_the_planned_effect_with_fewer_expected_seeds_than_the_fixed_design(budget13):
    """≥ 80 % power at the effect a fixed 13-seed design has ≈ 90 % power for, with and without
    futility; the expected seeds per arm stay below what a fixed design needs for the same power."""
    for futility in (None, budget13.futility_power):
        result = simulate(dataclasses.replace(budget13, futility_power=futility), EFFECT, SD, TAU2, trials=TRIALS, seed=5)
        assert result.holds >= 0.80 and result.contradicted < 0.001
        fixed = fixed_design_seeds(EFFECT, SD, TAU2, paired=True, power=result.holds)
        assert result.expected_seeds < fixed - 1.5, (result, fixed)
        assert sum(result.stop_look) == pytest.approx(1.0)


def test_futility_saves_seeds_under_no_effect_without_adding_false_decisions(budget13):
    off = simulate(dataclasses.replace(budget13, futility_power=None), 0.0, SD, TAU2, trials=TRIALS, seed=6)
    on = simulate(budget13, 0.0, SD, TAU2, trials=TRIALS, seed=6)
    assert on.expected_seeds < off.expected_seeds - 4 and on.futile > 0.5
    assert on.decided <= off.decided <= FIVE


def test_judge_look_reads_the_interval_at_the_looks_boundary(budget13):
    differences = np.array([0.9, 1.1, 1.0, 1.2, 0.8])  # look 2: 5 paired seeds, mean 1.0, s² 0.025
    record = judge_look(budget13, 2, differences, tau2=0.01, margin=0.0)
    z, seed_quantile = budget13.boundaries_z[2], budget13.paired_t[2]  # the calibrated paired t critical value
    assert seed_quantile == pytest.approx(stats.t.isf(stats.norm.sf(z), 4), rel=0.02)  # near the nominal t quantile
    half = np.sqrt(seed_quantile ** 2 * 0.025 / 5 + z ** 2 * 0.01)
    assert record["interval"] == pytest.approx((1.0 - half, 1.0 + half))
    assert record["nominal_level"] == pytest.approx(1 - 2 * stats.norm.sf(z))
    assert (record["decision"], record["verdict"], record["seeds_per_arm"]) == (HOLDS, HOLDS, 5)
    assert judge_look(budget13, 2, differences, tau2=0.01, margin=1.7)["decision"] == CONTRADICTED
    assert judge_look(budget13, 0, np.array([1.0, 1.2]), tau2=0.01)["decision"] == CONTINUE


def test_judge_look_on_two_arms_and_its_last_and_futile_looks():
    short = plan(3)
    a, b = np.array([70.0, 70.4, 70.2]), np.array([70.1, 70.3, 70.2])
    record = judge_look(short, 1, a, b, tau2=0.0, paired=False)
    assert record["decision"] == INCONCLUSIVE and record["difference"] == pytest.approx(0.0)
    futile = judge_look(plan(13), 2, np.array([0.1, -0.1, 0.0, 0.05, -0.05]), tau2=0.01)
    assert (futile["decision"], futile["verdict"]) == (FUTILE, INCONCLUSIVE)
    with pytest.raises(ValueError):
        judge_look(short, 0, np.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("against", ("mean", "one run"))
def test_value_claims_stop_on_a_decided_verdict_and_keep_each_side(budget13, against):
    """Our mean on the paper's number (or, read as one run, the paper's run drawn from our own distribution):
    "not reproduced" / "higher" ≤ 2.75 % each; a true gap of exactly ε: "reproduced" ≤ 2.75 %."""
    rng = np.random.default_rng(8)
    paper_sd = SD if against == "one run" else 0.0
    for gap, wrong in ((0.0, (NOT_REPRODUCED, HIGHER)), (0.5, (REPRODUCED,))):
        ours, paper = gap + SD * rng.standard_normal((TRIALS, 13)), paper_sd * rng.standard_normal(TRIALS)
        outcome, running = np.full(TRIALS, CONTINUE, dtype=object), np.arange(TRIALS)
        for look, seeds in enumerate(budget13.looks):
            decisions, _, _ = value_look_decisions(budget13, look, ours[running, :seeds], paper[running], 0.5, against=against)
            outcome[running] = decisions
            running = running[decisions == CONTINUE]
        for verdict in wrong:
            assert np.mean(outcome == verdict) <= PER_SIDE
        assert np.all(outcome != CONTINUE)
        if against == "one run":
            assert np.mean(outcome == CONSISTENT) > 0.5
    record = judge_value_look(budget13, 4, np.full(13, 75.0) + np.linspace(-0.1, 0.1, 13), 75.0, 0.5)
    assert record["decision"] == REPRODUCED and record["interval"][0] > -0.5
