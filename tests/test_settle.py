"""Settling a claim (tools/settle/): rounds of seeds in the plan's order, each seed run once, a kill resumed
from the finished seeds, a stop at a decision, and a look never past the budget."""

import json

import numpy as np
import pytest

from pipeline.verdicts import sequential
from tools.settle.rounds import SeedSource, seed_order
from tools.settle.settling import Budget, Settling, run_settling
from tools.settle.target import SettleTarget

TARGET = SettleTarget("a-beats-b", "a", "b", "avg", 0.0, False, "bert", 1.0)


class Killed(Exception):
    pass


class FakeSeeds(SeedSource):
    """Runs of a true improvement `effect` (sd 0.5 per seed); `kill_after` finished runs, the process dies."""

    def __init__(self, recorded: dict, effect: float, kill_after: int | None = None, finished: dict | None = None):
        self.runs = dict(recorded) | dict(finished or {})
        self.effect, self.kill_after, self.queued, self.ran = effect, kill_after, [], []

    def observed(self):
        return dict(self.runs)

    def pending(self):
        return set()

    def queue(self, seeds):
        self.queued += seeds

    def wait(self, seeds):
        for seed in seeds:
            if seed in self.runs:
                continue
            if self.kill_after is not None and len(self.ran) == self.kill_after:
                raise Killed
            rng = np.random.default_rng(seed)
            self.runs[seed] = (70.0 + self.effect + 0.5 * rng.standard_normal(), 70.0)
            self.ran.append(seed)


RECORDED = {seed: (70.0 + 0.05 * index, 70.0) for index, seed in enumerate((1, 2, 3, 4, 42))}


def _settling(max_seeds: int) -> Settling:
    budget = Budget(hours=(max_seeds - len(RECORDED)) * 0.1, per_seed=0.1, unit="GPU hours", paid_seeds=len(RECORDED))
    return Settling(TARGET, sequential.plan(budget.max_seeds), budget, tau2=0.0)


def test_the_seed_order_is_the_records_then_the_smallest_unused():
    assert seed_order([1, 2, 3, 4, 42], 3) == [1, 2, 3, 4, 42, 0, 5, 6]


def test_a_kill_during_a_round_resumes_without_rerunning_a_finished_seed(tmp_path):
    first = FakeSeeds(RECORDED, effect=0.0, kill_after=2)
    with pytest.raises(Killed):
        run_settling(_settling(13), first, list(RECORDED), tmp_path)
    assert len(first.ran) == 2
    again = FakeSeeds(RECORDED, effect=0.0, finished={seed: first.runs[seed] for seed in first.ran})
    settling = run_settling(_settling(13), again, list(RECORDED), tmp_path)
    assert not set(again.ran) & set(first.ran)  # the finished seeds are read back, never run again
    assert set(again.queued) & set(first.ran) == set()
    written = json.loads((tmp_path / "a-beats-b.json").read_text())
    assert [look["seeds_per_arm"] for look in written["looks"]] == [look["seeds_per_arm"] for look in settling.looks]
    assert (tmp_path / "a-beats-b.png").is_file()


def test_a_clear_effect_stops_at_the_first_look_that_decides_it_and_spends_no_more(tmp_path):
    noisy = {seed: (70.0 + 1.0 + 0.5 * np.random.default_rng(seed).standard_normal(), 70.0) for seed in RECORDED}
    source = FakeSeeds(noisy, effect=1.0)
    settling = run_settling(_settling(21), source, list(RECORDED), tmp_path)
    assert settling.outcome == "holds"
    stop = settling.looks[-1]["seeds_per_arm"]
    assert len(source.ran) == stop - len(RECORDED) > 0 and stop < 21  # a round or more, not the whole budget
    assert settling.record()["hours_spent"] == pytest.approx(len(source.ran) * 0.1)


def test_no_look_is_planned_past_what_the_budget_pays_for(tmp_path):
    source = FakeSeeds(RECORDED, effect=0.0)
    settling = run_settling(_settling(8), source, list(RECORDED), tmp_path)
    assert settling.plan.looks[-1] == 8 and len(source.ran) <= 3
    assert settling.outcome in ("inconclusive", "futile", "holds", "contradicted")
