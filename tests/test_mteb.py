"""The mteb path: our Embedder inside mteb, offline on the mirror's raw STS-B, agrees with our evaluator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.data.readers import read_stsb
from pipeline.evaluation.mteb_tasks import LocalSTSBenchmark, english_sts_tasks, run_mteb
from pipeline.evaluation.sts import StsTask, evaluate_embedder

from conftest import MIRROR

RAW_STSB = MIRROR / "raw" / "STSBenchmark"
PAIRS = 300


PROJECTION = np.random.default_rng(0).standard_normal((512, 64)).astype(np.float32)


def _bag_of_words(batch: list[str]) -> np.ndarray:
    """A deterministic embedder independent of batching: hashed word counts, randomly projected.

    The projection makes cosines continuous: raw counts give exactly tied cosines, which mteb's
    float32 and our float64 cosines would break differently.
    """
    counts = np.zeros((len(batch), 512), dtype=np.float32)
    for row, sentence in enumerate(batch):
        for word in sentence.lower().split():
            counts[row, sum(word.encode()) * 31 % 512] += 1
    return counts @ PROJECTION


def test_local_stsb_through_mteb_matches_our_evaluator():
    mteb_score = run_mteb(_bag_of_words, [LocalSTSBenchmark(RAW_STSB, max_pairs=PAIRS)], batch_size=32)
    same_pairs = StsTask("STSBenchmark", {"test": read_stsb(RAW_STSB / "sts-test.csv", original=True)[:PAIRS]})
    ours = evaluate_embedder(_bag_of_words, [same_pairs])["STSBenchmark"]["test"]
    assert mteb_score["LocalSTSBenchmark"] == pytest.approx(ours, abs=1e-6)


def test_english_subsets_of_the_jtcse_tasks():
    tasks = english_sts_tasks(["STS17", "STS22.v2", "STSBenchmarkMultilingualSTS"])
    assert {task.metadata.name: task.hf_subsets for task in tasks} == {
        "STS17": ["en-en"],
        "STS22.v2": ["en"],
        "STSBenchmarkMultilingualSTS": ["en"],
    }


# ----------------------------------------------------------------------------- the papers' suites (issue 17)

import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402

import yaml  # noqa: E402

from pipeline.errors import PipelineError  # noqa: E402
from pipeline.evaluation import mteb_suites  # noqa: E402
from pipeline.evaluation.mteb_local import LOCAL_TASKS  # noqa: E402
from pipeline.evaluation.mteb_tasks import task_runner  # noqa: E402

LOCAL_SUITES = ["local-sts", "local-classification", "local-retrieval", "local-reranking", "local-bitext"]
# suite: (tasks mapped to mteb names, tasks the paper lists); unlisted suites have none in the seeds
EXPECTED = {
    "jtcse-classification": (43, 45), "jtcse-reranking": (14, 14), "jtcse-bitext": (15, 15), "jtcse-sts22": (18, 18),
    "jtcse-sts-en": (3, 3), "tncse-sts17": (11, 11), "tncse-sts22": (18, 18),
    "jtcse-retrieval": (0, 45), "tncse-classification": (0, 30), "tncse-reranking": (0, 9), "tncse-retrieval": (0, 30),
}


def test_every_suite_file_parses_and_names_tasks_of_the_installed_mteb():
    names = mteb_suites.suite_names()
    assert set(EXPECTED) | set(LOCAL_SUITES) == set(names)
    for name in names:
        suite = mteb_suites.load_suite(name)
        if name in EXPECTED:
            assert (len(suite.tasks), suite.listed) == EXPECTED[name], name
            assert bool(suite.unlisted) == (not suite.tasks), name
        if suite.unlisted:
            continue
        assert len(suite.tasks) + len(suite.unmapped) == suite.listed, name
        mteb_suites.check_task_names(suite)  # the registry offline: metadata, no download
        for entry in suite.tasks:
            if entry.subsets and not suite.local:
                import mteb

                assert set(entry.subsets) <= set(mteb.get_task(entry.mteb).hf_subsets), (name, entry.paper)


def test_a_task_name_mteb_no_longer_has_fails_with_the_closest_match():
    suite = mteb_suites.load_suite("jtcse-bitext")
    suite.tasks[0].mteb = "BUCCC"
    with pytest.raises(PipelineError, match=r"task 'BUCCC' \(BUCC\) is not an mteb task.*Did you mean: 'BUCC"):
        mteb_suites.check_task_names(suite)


def test_unknown_and_unlisted_suites_are_refused():
    with pytest.raises(PipelineError, match=r"unknown suite 'jtcse-classifcation'.*suites: .*jtcse-classification"):
        mteb_suites.load_suites(["jtcse-classifcation"])
    with pytest.raises(PipelineError, match=r"'tncse-retrieval' has no task list \(.*Appendix IV"):
        mteb_suites.load_suites(["tncse-retrieval"])


def test_a_suite_file_with_an_unknown_key_is_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"paper": "x", "source": "y", "type": "STS", "listed": 1,
                                                      "tasks": [{"paper": "a", "mteb": "STS17", "subset": ["en-en"]}]}))
    with pytest.raises(PipelineError, match=r"unknown setting 'tasks.0.subset'"):
        mteb_suites.load_suite("bad", tmp_path)


@pytest.fixture(scope="module")
def tiny_embedder(tmp_path_factory):
    from pipeline.evaluation.embedder import HFEmbedder
    from tiny_models import save_tiny_bert

    folder = save_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert", seed=3)
    return HFEmbedder(folder, "cls_before_pooler", 32, 32, "cpu")


def test_local_suites_on_a_tiny_random_model_give_finite_scores_and_resume_from_the_cache(tiny_embedder, tmp_path):
    suites = mteb_suites.load_suites(LOCAL_SUITES)
    results = mteb_suites.evaluate_suites(suites, task_runner(tiny_embedder, 32), RAW_STSB, 60, tmp_path)
    assert set(results) == set(LOCAL_SUITES)
    for name, result in results.items():
        assert result["scored"] == 1 and not result["missing"], name
        (task,) = result["tasks"].values()
        assert math.isfinite(result["avg"]) and -100 <= result["avg"] <= 100 and result["avg"] == task["main"], name
    retrieval = results["local-retrieval"]
    assert len(retrieval["metrics"]) == 15 and all(0 <= value <= 100 for value in retrieval["metrics"].values())
    assert retrieval["metrics_mean"] == pytest.approx(sum(retrieval["metrics"].values()) / 15)
    assert retrieval["avg"] == pytest.approx(retrieval["metrics"]["ndcg_at_10"])
    assert 0 <= results["local-classification"]["avg"] <= 100
    assert len(list(tmp_path.glob("*.json"))) == len(LOCAL_SUITES)

    def must_not_run(task):
        raise AssertionError(f"{task.metadata.name} was evaluated again instead of read from the cache")

    assert mteb_suites.evaluate_suites(suites, must_not_run, RAW_STSB, 60, tmp_path) == json.loads(json.dumps(results))


@pytest.mark.parametrize("content", ['{"main": 41.', "{}"])
def test_a_corrupt_cached_task_result_is_named_discarded_and_recomputed(tiny_embedder, tmp_path, caplog, content):
    suites = [suite for suite in mteb_suites.load_suites(LOCAL_SUITES) if suite.name == "local-classification"]
    first = mteb_suites.evaluate_suites(suites, task_runner(tiny_embedder, 32), RAW_STSB, 60, tmp_path)
    (stored,) = tmp_path.glob("*.json")
    stored.write_text(content)  # truncated, or a JSON that holds no scores
    with caplog.at_level(logging.WARNING):
        again = mteb_suites.evaluate_suites(suites, task_runner(tiny_embedder, 32), RAW_STSB, 60, tmp_path)
    assert again == json.loads(json.dumps(first)) and again["local-classification"]["scored"] == 1
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and stored.name in warnings[0] and "corrupt" in warnings[0]
    (scores,) = first["local-classification"]["tasks"].values()
    assert json.loads(stored.read_text()) == json.loads(json.dumps(scores))


def test_local_tasks_are_built_from_the_mirror_as_described():
    stsb = read_stsb(RAW_STSB / "sts-test.csv", original=True)
    retrieval = LOCAL_TASKS["LocalSTSBRetrieval"](RAW_STSB, None)
    retrieval.load_data()
    split = retrieval.dataset["default"]["test"]
    paraphrases = {(pair.sentence1, pair.sentence2) for pair in stsb if pair.score >= 4}
    assert len(split["queries"]) == len(paraphrases) and all(len(docs) == 1 for docs in split["relevant_docs"].values())
    reranking = LOCAL_TASKS["LocalSTSBReranking"](RAW_STSB, 50)
    reranking.load_data()
    ranked = reranking.dataset["default"]["test"]
    assert len(ranked["queries"]) == 50
    for query, candidates in ranked["top_ranked"].items():
        (relevant,) = ranked["relevant_docs"][query]
        assert len(candidates) == 10 and relevant in candidates
    genres = LOCAL_TASKS["LocalSTSBGenreClassification"](RAW_STSB, 90)
    genres.load_data()
    assert len(genres.dataset["test"]) == 90 and set(genres.dataset["test"]["label"]) == {0, 1, 2}


def test_a_hub_task_that_cannot_be_loaded_is_missing_with_its_reason_and_the_others_go_on(tiny_embedder, monkeypatch):
    suites = mteb_suites.load_suites(["local-sts", "jtcse-sts-en"])

    def offline(entry, local, raw_dir, items):
        if local:
            return LOCAL_TASKS[entry.mteb](raw_dir, items)
        task = mteb.get_task(entry.mteb, eval_splits=["test"], hf_subsets=entry.subsets)

        def unreachable(**kwargs):
            raise ConnectionError(f"Couldn't reach '{task.metadata.dataset['path']}' on the Hub (OfflineModeIsEnabled)")

        task.load_data = unreachable
        return task

    import mteb

    monkeypatch.setattr(mteb_suites, "make_task", offline)
    results = mteb_suites.evaluate_suites(suites, task_runner(tiny_embedder, 32), RAW_STSB, 60, None)
    assert results["local-sts"]["scored"] == 1
    missing = results["jtcse-sts-en"]["missing"]
    assert set(missing) == {"STS17", "STS22.v2", "STSBenchmarkMultilingualSTS"} and "avg" not in results["jtcse-sts-en"]
    assert "MTEB task STS17 could not be loaded (ConnectionError" in missing["STS17"]
    with pytest.raises(PipelineError, match=r"no MTEB task of eval.mteb.suite could be loaded \(MTEB task STS17"):
        mteb_suites.evaluate_suites(suites[1:], task_runner(tiny_embedder, 32), RAW_STSB, 60, None)


def test_the_suite_setting_takes_a_name_or_a_list_and_local_items_is_checked(tiny_params_dict):
    from pipeline.params_file import parse_params

    tiny_params_dict["eval"]["mteb"]["suite"] = "jtcse-sts22"
    assert parse_params(tiny_params_dict).eval.mteb.suite == ["jtcse-sts22"]
    tiny_params_dict["eval"]["mteb"]["local_items"] = 5
    with pytest.raises(PipelineError, match=r"eval.mteb.local_items=5: Input should be greater than or equal to 10"):
        parse_params(tiny_params_dict)
    tiny_params_dict["eval"]["mteb"] = {"enabled": True, "local": True}
    with pytest.raises(PipelineError, match=r"unknown setting 'eval.mteb.local'"):
        parse_params(tiny_params_dict)


# ----------------------------------------------------------------------------- the embedding store (issue 31)

from pipeline.evaluation.store import EmbeddingStore  # noqa: E402
from pipeline.evaluation.sts import Embedder  # noqa: E402
from pipeline.evaluated_models import WeightedTowers  # noqa: E402


class CountingEmbedder(Embedder):
    """An `Embedder` that counts its passes and sentences."""

    def __init__(self, embedder: Embedder):
        self.embedder, self.passes, self.sentences = embedder, 0, 0

    def encode(self, sentences, progress=None):
        self.passes += 1
        self.sentences += len(sentences)
        return self.embedder.encode(sentences, progress)


def _numbers(value, path=""):
    """Every number of a nested result, by its path."""
    if isinstance(value, dict):
        return {key: number for name, item in value.items() for key, number in _numbers(item, f"{path}/{name}").items()}
    return {path: value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


def test_an_ensembles_mteb_scores_come_from_its_towers_rows_without_running_an_encoder(tmp_path):
    from pipeline.evaluation.embedder import HFEmbedder
    from tiny_models import save_tiny_bert

    folders = [str(save_tiny_bert(tmp_path / name, seed=seed)) for name, seed in (("I", 3), ("II", 4))]
    ensemble = WeightedTowers.twin(*folders)
    suites = mteb_suites.load_suites(LOCAL_SUITES)
    embedders = {folder: HFEmbedder(folder, "cls_before_pooler", 32, 32, "cpu") for folder in folders}

    # before the store: the ensemble ran both towers' encoders on every task's sentences
    def towers_encoded_again(sentences):
        return ensemble.combine([embedders[folder](sentences) for folder in ensemble.folders])

    before = mteb_suites.evaluate_suites(suites, task_runner(towers_encoded_again, 32), RAW_STSB, 60, None)

    root = tmp_path / "embeddings"
    counting = {folder: CountingEmbedder(embedder) for folder, embedder in embedders.items()}
    for folder in folders:  # evaluate@pretrain-I and evaluate@pretrain-II: each tower's own MTEB run fills the store
        store = EmbeddingStore(root, "cls_before_pooler|32", counting.__getitem__, 32)
        mteb_suites.evaluate_suites(suites, task_runner(lambda s, f=folder: store.model_rows([(f, 1.0)], s), 32), RAW_STSB, 60, None)
    passes = {folder: embedder.passes for folder, embedder in counting.items()}
    assert all(passes.values())

    store = EmbeddingStore(root, "cls_before_pooler|32", counting.__getitem__, 32)  # evaluate@ensemble
    after = mteb_suites.evaluate_suites(suites, task_runner(lambda s: store.model_rows(ensemble, s), 32), RAW_STSB, 60, None)
    assert {folder: embedder.passes for folder, embedder in counting.items()} == passes  # no encoder ran
    assert store.counts.passes == 0 and store.counts.reused > 0
    expected, got = _numbers(before), _numbers(after)
    assert expected.keys() == got.keys() and len(expected) > 20
    # the stored rows were encoded in other batches than the fresh pass (each sentence is read from the pass that
    # first encoded it, another task's), so they may differ in the last bits: a continuous score agrees to 1e-6,
    # while the near-chance logistic regressions of a classification on tiny random towers may flip a few of
    # their 90 items (measured: 1.5 on average over mteb's experiments)
    flipped = [path for path, value in expected.items() if got[path] != pytest.approx(value, abs=1e-6)]
    assert all("classification" in path and abs(got[path] - expected[path]) <= 3 * 100 / 90 for path in flipped), \
        [(path, got[path], expected[path]) for path in flipped]
