"""Settling a claim (tools/settle/): rounds of seeds in the plan's order, each seed run once, a kill resumed
from the finished seeds, a stop at a decision, and a look never past the budget."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
from pipeline.errors import PipelineError
from pipeline.verdicts import sequential
from pipeline.writeup.decidability import settled_records
from pipeline.reporting.seed_record import SeedRecord
from tools.settle.lock import settling_lock
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


# --- the command at the door: every budget a plan or one line, one settling per claim, a corrupt record -----------


@pytest.fixture
def in_the_repository(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)


def settle_cli(*arguments: str):
    from typer.testing import CliRunner

    from stages.cli import app

    return CliRunner().invoke(app, ["settle", *arguments])


@pytest.mark.parametrize("arguments, planned", [
    (["--budget", "1e6"], True), (["--max-seeds", "100000"], True), (["--budget", "100"], True),
    (["--budget", "0"], False), (["--budget", "-1"], False), (["--budget", "nan"], False), (["--budget", "inf"], False),
    (["--budget-gpu-hours", "-3"], False), (["--budget", "0.3"], False), (["--max-seeds", "1"], False),
    (["--max-seeds", "100001"], False), (["--effect", "0.01"], False), (["--power", "1"], False),
])
def test_every_budget_is_a_plan_or_one_line_and_exit_2(in_the_repository, arguments, planned):
    result = settle_cli("tncse-beats-simcse-bert", "--plan", "--scale", "paper", *arguments)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if planned:
        assert result.exit_code == 0 and "looks at 2, 3, 5 seeds per arm" in result.output
        assert "at the planned effect (3.33)" in result.output
        expected = float(result.output.split("holds 99%), ")[1].split(" seeds")[0]) if "holds 99%)" in result.output else None
        assert expected is None or expected <= 6
    else:
        assert result.exit_code == 2 and result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_the_budget_is_in_the_scales_unit(in_the_repository):
    refused = settle_cli("tncse-beats-simcse-bert", "--plan", "--budget-gpu-hours", "4")
    assert refused.exit_code == 2 and "--budget-gpu-hours prices GPU hours" in refused.output and "CPU hours here" in refused.output
    paper = settle_cli("tncse-beats-simcse-bert", "--plan", "--scale", "paper", "--budget-gpu-hours", "4")
    assert paper.exit_code == 0 and "budget 4 GPU hours" in paper.output


def test_a_second_settling_of_a_claim_is_refused_naming_the_first(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom tools.settle.lock import settling_lock\n"
         f"with settling_lock('a-beats-b', Path({str(tmp_path)!r})):\n    print('held', flush=True)\n    time.sleep(60)"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PipelineError, match=rf"a-beats-b is being settled already \(pid {holder.pid} on .*lock"):
            with settling_lock("a-beats-b", tmp_path):
                pytest.fail("two settlings of one claim ran at once")
        with settling_lock("another-claim", tmp_path):
            pass  # another claim's settling is not held up
    finally:
        holder.kill()
        holder.wait()
    with settling_lock("a-beats-b", tmp_path):  # the holder gone (killed), the lock is free again
        pass


def test_a_corrupt_settle_record_is_left_out_in_one_line_and_the_report_goes_on(tmp_path, caplog):
    good = {"claim": "good", "looks": [{"seeds_per_arm": 5}], "outcome": "futile", "budget": {"unit": "GPU hours"},
            "hours_spent": 0.0, "design": {"looks": [5]}}
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "truncated.json").write_text('{"claim": "truncated", "looks": [')
    (tmp_path / "a-list.json").write_text("[1, 2]")
    (tmp_path / "no-looks.json").write_text(json.dumps(good | {"looks": []}))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "old-rule.json").write_text(json.dumps({key: value for key, value in good.items() if key != "design"}))
    with caplog.at_level("WARNING"):
        records = settled_records(tmp_path)
    assert list(records) == ["good"]
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 5 and all("\n" not in line and "left out of the report" in line for line in warned)
    assert any("truncated.json: not readable JSON (JSONDecodeError" in line for line in warned)
    assert any("old-rule.json: made by the budget-sized rule, which spent the claim's error twice" in line for line in warned)


# --- one error budget: the published verdict is look 1 of the claim's own design -----------------------------------


def test_the_report_judges_a_settleable_claim_at_its_designs_first_look_as_settle_does(tiny_params_dict):
    """Through the report's own judging: a claim with paired seeds of the record and a paper gap the seeds can reach
    is judged at look 1 of its settling design (not at 95 %), with the very interval settle's look 1 computes, and
    claims.json carries the design settle continues."""
    from pipeline.reporting.seed_record import settings_digest
    from pipeline.verdicts.sizing import plan_of_record
    from pipeline.writeup.decidability import claim_record
    from test_claims import claims_file, evaluate, files_of, order_claim

    rng = np.random.default_rng(5)
    seeds = [42, 1, 2, 3, 4]
    joint, ensemble = 73.3 + rng.normal(0, 0.3, 5), 73.0 + rng.normal(0, 0.3, 5)
    shared = rng.normal(0, 1.0, 1000)
    files = files_of({"joint": (joint[0], joint[0] + shared + rng.normal(0, 0.02, 1000)),
                      "ensemble": (ensemble[0], ensemble[0] + shared + rng.normal(0, 0.02, 1000))})
    values = {model: {"avg": list(arm)} for model, arm in (("joint", joint), ("ensemble", ensemble))}
    record = SeedRecord("tiny", tiny_params_dict["backbone"]["name"], settings_digest(tiny_params_dict), seeds, values)
    claim = order_claim(paper="TNCSE 79.58 > untrained twin 79.33 (Table 1)")  # the paper's gap 0.25
    (result,) = evaluate(claims_file(claim), tiny_params_dict, files, record=record)
    (pair,) = result.comparisons
    design = result.settling_design
    assert design is not None and design["looks"][0] == 5 and len(design["looks"]) > 1
    assert pair.estimate.level < 0.95 or pair.estimate.half_width > 0  # judged at the look's own level
    assert "judged at look 1 of its settling design" in pair.note
    look = sequential.judge_look(plan_of_record(design), 0, joint - ensemble, None, pair.estimate.tau ** 2, 0.0, paired=True)
    assert pair.interval == pytest.approx(look["interval"], abs=1e-9)
    assert pair.verdict == (look["decision"] if look["decision"] in ("holds", "contradicted") else "inconclusive")
    assert claim_record(result, "bert", "tiny")["settling_design"] == design
