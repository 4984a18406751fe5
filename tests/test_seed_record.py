"""The committed seed record (pipeline/reporting/seed_record.py) and the arms it gives a claim
(pipeline/verdicts/arms.py)."""

import json

import numpy as np
import pytest

from pipeline.errors import PipelineError
from pipeline.verdicts.arms import arm_of, borrowed_noise, paired
from pipeline.reporting.runs import Run
from pipeline.reporting.seed_record import SeedRecord, build_record, load_record, settings_digest
from pipeline.reporting.tables import Row

from conftest import tiny_preset


def seed_run(params: dict, seed: int, avg: float, indices: str = "shared") -> Run:
    files = {"reports/metrics/details/joint.json": {"avg": avg, "STS12": {"all": avg}},
             "reports/metrics/bootstrap/joint.json": {"resamples": 2, "seed": 42, "indices": indices,
                                                      "scores": {"avg": [avg - 0.1, avg + 0.1]}}}
    return Run(f"exp seed-{seed}", params | {"seed": seed}, files)


def test_runs_differing_in_the_training_seed_alone_share_the_settings_digest():
    params = tiny_preset()
    assert settings_digest(params | {"seed": 1, "threads": 8}) == settings_digest(params)
    assert settings_digest(params | {"data": params["data"] | {"mirror": "/elsewhere"}}) == settings_digest(params)
    changed = params | {"train": params["train"] | {"cael": 4}}
    assert settings_digest(changed) != settings_digest(params)


def test_deterministic_kernels_are_no_setting_of_an_arm():
    """`deterministic` picks CUDA kernels, as `threads` picks CPU ones: a record made before the setting
    existed, or with it on, still holds the runs of the same arm."""
    params = tiny_preset()
    asked = params | {"train": params["train"] | {"deterministic": True},
                      "pretrain": params["pretrain"] | {"deterministic": True}}
    assert settings_digest(asked) == settings_digest(params)
    assert load_record().matches(params)  # the committed record is the committed params' arm


def test_a_record_is_built_from_seed_runs_and_read_back(tmp_path):
    params = tiny_preset()
    runs = [seed_run(params, seed, avg) for seed, avg in ((42, 72.0), (1, 71.0), (2, 73.0))]
    record = build_record(runs, ["joint"], ["avg"], ["dvc exp run -n seed-1 -S seed=1"], {"device": "cpu"})
    assert record["seeds"] == [1, 2, 42] and record["models"]["joint"]["avg"] == [71.0, 73.0, 72.0]
    assert record["sd"]["joint"]["avg"] == pytest.approx(1.0) and record["df"] == 2 and record["indices"] == "shared"
    path = tmp_path / "seed_noise.json"
    path.write_text(json.dumps(record))
    loaded = load_record(path)
    assert loaded.matches(params) and list(loaded.arm("joint", "avg")) == [71.0, 73.0, 72.0]
    assert loaded.arm("joint", "STS12.all") is None and load_record(tmp_path / "none.json") is None


def test_seed_runs_that_do_not_share_settings_or_test_pairs_are_refused():
    params = tiny_preset()
    other = params | {"train": params["train"] | {"cael": 4}}
    with pytest.raises(PipelineError, match="differ in a setting other than the training seed"):
        build_record([seed_run(params, 1, 71.0), seed_run(other, 2, 72.0)], ["joint"], ["avg"], [], {})
    with pytest.raises(PipelineError, match="bootstrap indices differ"):
        build_record([seed_run(params, 1, 71.0), seed_run(params, 2, 72.0, "other")], ["joint"], ["avg"], [], {})


def row_of(run: Run, avg: float) -> Row:
    return Row("TNCSE", {}, ours={"avg": avg}, run=run.name, origin=run)


def test_the_record_is_the_arm_only_for_its_own_settings_with_this_runs_own_number_at_its_seed():
    """The record's seeds, paired, with this run's number at seed 42 in place of the record's: a run on another
    CPU (its number within a tenth of its half-width, here 0.1 × ~0.1) moves the arm as it moves its score. A
    number farther off is a stale record: one line naming both numbers and the command that remakes it."""
    params = tiny_preset()
    record = SeedRecord("tiny", "minilm", settings_digest(params), [42, 1, 2], {"joint": {"avg": [72.0, 71.0, 73.0]}})
    workspace = seed_run(params, 42, 72.0)
    arm = arm_of(row_of(workspace, 72.0), "joint", "avg", record)
    assert arm.from_record and list(arm.values) == [72.0, 71.0, 73.0] and "3 seeds" in arm.source
    nearby = arm_of(row_of(workspace, 72.009), "joint", "avg", record)
    assert nearby.from_record and list(nearby.values) == [72.009, 71.0, 73.0] and nearby.seeds == [42, 1, 2]
    with pytest.raises(PipelineError, match=r"joint avg at seed 42 is 72 there and 72.5 in this run .*"
                                            r"remake it: python scripts/seed_noise.py"):
        arm_of(row_of(workspace, 72.5), "joint", "avg", record)
    other = params | {"train": params["train"] | {"cael": 4}}
    elsewhere = arm_of(row_of(seed_run(other, 42, 72.0), 72.0), "joint", "avg", record)
    assert not elsewhere.from_record and list(elsewhere.resamples) == [71.9, 72.1]


def test_a_one_run_comparison_borrows_the_records_noise_else_the_prior():
    params = tiny_preset()
    values = {"joint": {"avg": [72.0, 71.0, 73.0]}, "ensemble": {"avg": [70.0, 69.5, 70.5]}}
    record = SeedRecord("tiny", "minilm", "other settings", [42, 1, 2], values)
    noise, of_difference = borrowed_noise(record, params, ["joint", "ensemble"], "avg", True)
    assert of_difference and noise.sd == pytest.approx(np.std([2.0, 1.5, 2.5], ddof=1)) and noise.df == 2
    noise, of_difference = borrowed_noise(record, params, ["joint", "ensemble"], "avg", False)
    assert not of_difference and noise.df == 2  # one record of 3 seeds: 2 df, however many arms pool it
    alone, _ = borrowed_noise(record, params, ["joint"], "avg", False)
    twice, of_difference = borrowed_noise(record, params, ["joint", "joint"], "avg", True)
    assert not of_difference and (twice.sd, twice.df) == (alone.sd, alone.df) == (pytest.approx(1.0), 2)
    noise, _ = borrowed_noise(None, params, ["joint"], "avg", False)
    assert noise.sd == 0.79 and noise.df is None and "none measured at tiny scale" in noise.source
    workspace = seed_run(params, 42, 72.0)
    one, two = arm_of(row_of(workspace, 72.0), "joint", "avg", None), arm_of(row_of(workspace, 70.0), "joint", "avg", None)
    assert paired(one, two)  # one and the same run
    assert not paired(one, arm_of(row_of(seed_run(params, 7, 70.0), 70.0), "joint", "avg", None))


def test_two_one_run_arms_borrowing_one_record_decide_equal_models_at_most_five_percent():
    """Calibration by simulation: two runs of one model at two settings of a sweep (both `joint`, one run
    each, no difference), their seed noise borrowed from the record's 5 seeds of `joint`. Counting the
    record's 4 df once per arm (8) decides about 8 % of these; one estimate's 4 df keep it within 5 %."""
    from pipeline.verdicts.estimates import compare_arms
    from pipeline.verdicts.rules import order_verdict
    from pipeline.verdicts.verdict_names import CONTRADICTED, HOLDS

    params, rng, draws = tiny_preset(), np.random.default_rng(31), 4000
    decided = 0
    for _ in range(draws):
        record = SeedRecord("tiny", "minilm", "other settings", [42, 1, 2, 3, 4], {"joint": {"avg": list(70 + 0.5 * rng.standard_normal(5))}})
        noise, _ = borrowed_noise(record, params, ["joint", "joint"], "avg", False)
        one_run = 70 + 0.5 * rng.standard_normal(2)
        decided += order_verdict(compare_arms(one_run[:1], one_run[1:], 0.0, noise=noise)) in (HOLDS, CONTRADICTED)
    assert decided / draws <= 0.065
