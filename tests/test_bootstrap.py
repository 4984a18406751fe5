"""Bootstrap intervals of the STS scores (pipeline.evaluation.bootstrap; docs/method.md, "Evaluation")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import spearmanr

from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.evaluation.bootstrap import (
    bootstrap_scores,
    draw_resamples,
    resampled_ranks,
    scores_with_intervals,
)
from pipeline.evaluation.intervals import paired_interval, percentile_interval
from pipeline.evaluation.store import EmbeddingStore, model_tables
from pipeline.evaluation.sts import EmbeddingTable, load_tasks, task_sentences, task_similarities

from conftest import MIRROR, REPO_ROOT, tiny_preset
from tiny_models import save_tiny_bert

SENTEVAL = MIRROR / "senteval"


@pytest.fixture(scope="module")
def tasks():
    """STS12 (five subsets) and STS-B (one), 150 pairs each: real golds, with their ties."""
    return load_tasks(SENTEVAL, ["STS12", "STSBenchmark"], max_pairs=150, seed=0)


def random_table(tasks, seed: int, width: int = 8) -> EmbeddingTable:
    sentences = task_sentences(tasks)
    vectors = np.random.default_rng(seed).standard_normal((len(sentences), width)).astype(np.float32)
    return EmbeddingTable({sentence: row for row, sentence in enumerate(sentences)}, vectors)


def test_the_interval_of_a_spearman_equals_a_slow_spearmanr_loop_on_the_same_indices(tasks):
    table = random_table(tasks, seed=1)
    resamples = draw_resamples(tasks, 200, seed=3)
    fast = bootstrap_scores(table, tasks, resamples)
    for task in tasks:
        similarities, golds = task_similarities(table, task)
        predicted, gold = np.concatenate(list(similarities.values())), np.concatenate(list(golds.values()))
        slow = np.array([spearmanr(predicted[row], gold[row]).statistic * 100 for row in resamples.positions[task.name]])
        np.testing.assert_allclose(fast.scores[task.name], slow, rtol=0, atol=1e-9)
        low, high = percentile_interval(slow)
        interval = fast.intervals()[task.name]
        assert (interval["low"], interval["high"]) == pytest.approx((low, high), abs=1e-9)
        assert interval["se"] == pytest.approx(np.std(slow, ddof=1), abs=1e-9)
    np.testing.assert_allclose(fast.scores["avg"], np.mean([fast.scores[task.name] for task in tasks], axis=0))


def test_counted_ranks_are_scipys_average_ranks():
    from scipy.stats import rankdata

    rng = np.random.default_rng(0)
    values = np.round(rng.standard_normal(50), 1)  # many ties
    positions = rng.integers(0, 50, size=(30, 50))
    codes = np.unique(values, return_inverse=True)[1]
    np.testing.assert_array_equal(resampled_ranks(codes, positions), rankdata(values[positions], axis=1))


def test_a_model_compared_with_itself_has_the_paired_interval_zero_and_another_does_not(tasks):
    resamples = draw_resamples(tasks, 200, seed=3)
    ours = bootstrap_scores(random_table(tasks, seed=1), tasks, resamples)
    theirs = bootstrap_scores(random_table(tasks, seed=2), tasks, resamples)
    assert paired_interval(ours.scores["avg"], ours.scores["avg"]) == (0.0, 0.0)
    assert paired_interval(ours.scores["avg"], theirs.scores["avg"]) != (0.0, 0.0)


def test_the_indices_are_the_same_for_two_models_and_change_with_the_seed(tasks):
    models = {"one": [("a", 1.0)], "two": [("b", 1.0)]}
    tables = {"a": random_table(tasks, seed=1), "b": random_table(tasks, seed=2)}

    def embedder(tower):
        table = tables[tower]
        return lambda sentences: table.lookup(sentences)

    resamples = draw_resamples(tasks, 100, seed=3)
    results = {name: scores_with_intervals(table, tasks, resamples)[0]
               for name, table in model_tables(models, tasks, EmbeddingStore(None, "", embedder)).items()}
    assert results["one"]["bootstrap"] == results["two"]["bootstrap"]  # resamples, seed and the indices' digest
    assert results["one"]["intervals"] != results["two"]["intervals"]
    again, other_seed = draw_resamples(tasks, 100, seed=3), draw_resamples(tasks, 100, seed=4)
    assert results["one"]["bootstrap"]["indices"] == again.digest != other_seed.digest
    for name, positions in again.positions.items():
        np.testing.assert_array_equal(positions, draw_resamples(tasks, 100, seed=3).positions[name])


def test_resampling_is_stratified_every_subset_keeps_its_size(tasks):
    (sts12, _) = tasks
    positions = draw_resamples(tasks, 50, seed=3).positions["STS12"]
    start = 0
    for pairs in sts12.subsets.values():
        block = positions[:, start : start + len(pairs)]  # the subset's draws ...
        assert block.min() >= start and block.max() < start + len(pairs)  # ... all within the subset
        # ... and every resample holds exactly the subset's size of its pairs
        assert ((positions >= start) & (positions < start + len(pairs))).sum(axis=1).tolist() == [len(pairs)] * 50
        start += len(pairs)
    assert len(sts12.subsets) > 1 and positions.shape == (50, start)


def test_a_negative_too_small_or_too_large_bootstrap_is_refused_with_one_line(tiny_params_dict):
    for value in (-1, 5, True, 10_001, 1_000_000_000):  # 10⁹ was a 294 GiB allocation error (issue 43, D14)
        tiny_params_dict["eval"]["bootstrap"] = value
        with pytest.raises(PipelineError, match=r"eval.bootstrap=.*: allowed: 0 \(no intervals\) or .* from 40 to 10000") as error:
            parse_params(tiny_params_dict)
        assert "\n" not in str(error.value)
    for value in (0, 40, 10_000):
        tiny_params_dict["eval"]["bootstrap"] = value
        assert parse_params(tiny_params_dict).eval.bootstrap == value


# ----------------------------------------------------------------------------- the evaluate stage writes it


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    save_tiny_bert(root / "data" / "backbone", seed=5)
    (root / "data" / "raw").mkdir(parents=True, exist_ok=True)
    (root / "data" / "raw" / "senteval").symlink_to(SENTEVAL)
    raw = tiny_preset()
    raw["device"] = "cpu"
    raw["eval"].update(max_pairs=100, batch_size=64, max_length=32, bootstrap=100)
    raw["eval"]["mteb"]["enabled"] = False
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    return root


def evaluate(project: Path, training_seed: int | None = None, **eval_settings) -> subprocess.CompletedProcess:
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["eval"].update(eval_settings)
    if training_seed is not None:
        raw["seed"] = training_seed
    (project / "run.yaml").write_text(yaml.safe_dump(raw))
    return subprocess.run(
        [sys.executable, "-m", "stages", "evaluate", "--name", "backbone", "--params", "run.yaml"], cwd=project,
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )


def read_outputs(project: Path) -> tuple[dict, dict, dict]:
    metrics = project / "reports" / "metrics"
    return tuple(json.loads((folder / "backbone.json").read_text())
                 for folder in (metrics, metrics / "details", metrics / "bootstrap"))


def test_evaluate_writes_intervals_and_per_resample_scores_and_none_with_bootstrap_0(project):
    done = evaluate(project)
    assert done.returncode == 0, done.stderr[-3000:]
    headline, details, per_resample = read_outputs(project)
    assert "intervals" not in headline and len(headline) == 8  # the headline stays seven scores and avg
    tasks = [name for name in headline if name != "avg"]
    assert set(details["intervals"]) == {*tasks, "avg"}
    assert details["bootstrap"] == {key: per_resample[key] for key in ("resamples", "seed", "indices")}
    assert per_resample["resamples"] == 100 and per_resample["seed"] == 42
    for name, interval in details["intervals"].items():
        scores = per_resample["scores"][name]
        assert len(scores) == 100 and all(round(score, 4) == score for score in scores)
        assert interval["low"] <= interval["high"] and interval["se"] > 0
        assert percentile_interval(scores) == pytest.approx((interval["low"], interval["high"]), abs=1e-3)

    done = evaluate(project, bootstrap=0)
    assert done.returncode == 0, done.stderr[-3000:]
    unchanged, details, per_resample = read_outputs(project)
    assert unchanged == headline
    assert "intervals" not in details and "bootstrap" not in details
    assert per_resample == {"resamples": 0, "seed": 42, "indices": None, "scores": {}}


def test_evaluate_refuses_a_negative_bootstrap_with_one_line_before_any_work(project):
    done = evaluate(project, bootstrap=-1)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "eval.bootstrap=-1" in line


def test_runs_that_differ_only_in_the_training_seed_share_the_test_pairs_and_resamples(project):
    """`eval.seed`, not the training seed, draws the tiny scale's test-pair sample and the bootstrap
    indices: two seed runs pair resample by resample, and their spread is training noise alone."""
    records = []
    for training_seed in (42, 7):
        done = evaluate(project, training_seed=training_seed)
        assert done.returncode == 0, done.stderr[-3000:]
        headline, details, per_resample = read_outputs(project)
        records.append((headline, per_resample["indices"], per_resample["seed"]))
    assert records[0] == records[1]  # the same model on the same pairs and resamples: the same numbers
    done = evaluate(project, seed=7)  # eval.seed moves them
    assert done.returncode == 0, done.stderr[-3000:]
    _, _, per_resample = read_outputs(project)
    assert per_resample["seed"] == 7 and per_resample["indices"] != records[0][1]

