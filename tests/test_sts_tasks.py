"""The STS tasks as data (pipeline/declarations/sts_tasks.py): the lists derived from the declarations are the
ones the pipeline wrote out before, and a task declared once is read and scored by the project's evaluator."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

import hashlib

from conftest import MIRROR
from pipeline import public_checkpoints as checkpoints
from pipeline.config import EvalSettings
from pipeline.declarations import sts_tasks
from pipeline.data.readers import read_stsb
from pipeline.data.sts_pairs import load_sts_benchmark
from pipeline.data.pinned import MANIFEST, read_sha256sums
from pipeline.declarations.sts_tasks import (
    POOLED,
    STS_TASK_REGISTRY,
    Download,
    SplitFiles,
    StsTaskDeclaration,
    register_sts_task,
    senteval_year,
)
from pipeline.errors import PipelineError
from pipeline.evaluation.bootstrap import draw_resamples, scores_with_intervals
from pipeline.evaluation.sts import embed_sentences, evaluate_embedder, format_table, headline_scores, load_tasks
from pipeline.reporting import columns, runs
from hub_standin import loopback_server
from test_download import download_params

# What the modules spelled out before the declarations (order included).
SEVEN = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
YEAR_SUBSETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
SCORE_COLUMNS = {
    "STS12.all": "STS12", "STS13.all": "STS13", "STS14.all": "STS14", "STS15.all": "STS15", "STS16.all": "STS16",
    "STSBenchmark.test": "STSBenchmark", "SICKRelatedness.test": "SICKRelatedness", "avg": "avg",
}
CHECKPOINT_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg.")
METRIC_OF_COLUMN = {
    "STS12": ("STS12", "all"), "STS13": ("STS13", "all"), "STS14": ("STS14", "all"), "STS15": ("STS15", "all"),
    "STS16": ("STS16", "all"), "STS-B": ("STSBenchmark", "test"), "SICK-R": ("SICKRelatedness", "test"), "Avg.": ("avg",),
}


def _papers_part(items, names=(*SEVEN, "avg")):
    """The entries of a derived list that belong to the papers' seven and the average (the lists also hold every
    task a module of pipeline/sts_datasets/ declares, in a column of its own)."""
    return [item for item in items if (item[1] if isinstance(item, tuple) else item).split(".")[0] in names]


def test_the_derived_lists_are_the_ones_spelled_out_before():
    assert sts_tasks.PAPERS_TASK_NAMES == SEVEN
    assert EvalSettings().tasks == list(SEVEN)
    assert tuple(STS_TASK_REGISTRY)[:7] == SEVEN
    assert {task.name: task.subsets for task in sts_tasks.PAPERS_TASKS if task.pools_subsets} == YEAR_SUBSETS
    assert _papers_part(list(runs.SCORE_COLUMNS.items())) == list(SCORE_COLUMNS.items())
    papers_columns = [(column, metric[0]) for column, metric in checkpoints.METRIC_OF_COLUMN.items()]
    assert [column for column, _ in _papers_part(papers_columns)] == list(CHECKPOINT_COLUMNS)
    assert [(column, checkpoints.METRIC_OF_COLUMN[column]) for column in CHECKPOINT_COLUMNS] == list(METRIC_OF_COLUMN.items())
    assert [sts_tasks.short_name(name) for name in (*SEVEN, "avg", "undeclared")] == [
        "STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg.", "undeclared"]
    year_columns = [column for task, subsets in YEAR_SUBSETS.items()
                    for column in (f"{task}.all", f"{task}.mean", *(f"{task}.subsets.{subset}" for subset in subsets))]
    assert _papers_part(columns.sts_columns()) == [*year_columns, "STSBenchmark.test", "SICKRelatedness.test", "avg"]


@pytest.mark.parametrize("task", sts_tasks.declared_tasks(), ids=lambda task: task.name)
def test_every_declared_task_meets_the_contract(task):
    """What any task must be, read from the registry (a task added in pipeline/sts_datasets/ is checked here too):
    its files come from somewhere the download stage fetches (senteval.tar's pinned files, or its own downloads),
    and it flows into every list the reports, metrics and checkpoints table read."""
    pinned = read_sha256sums(MANIFEST)
    for name in task.files.file_names:
        assert f"senteval/{task.files.folder}/{name}" in pinned or name in task.downloads, (task.name, name)
    assert task.score_column in runs.SCORE_COLUMNS and task.score_column in columns.sts_columns()
    assert checkpoints.METRIC_OF_COLUMN[task.short_name] == (task.name, task.reported)
    assert sts_tasks.short_name(task.name) == task.short_name and task.reported in (POOLED, *task.splits)


def test_the_files_each_task_reads(tmp_path):
    assert sts_tasks.sts_task("STS12").files.folder == "STS/STS12-en-test"
    assert sts_tasks.STS_BENCHMARK.splits == sts_tasks.SICK_RELATEDNESS.splits == ("train", "dev", "test")
    assert sts_tasks.STS_BENCHMARK.files.path(tmp_path, "dev") == tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv"
    assert sts_tasks.SICK_RELATEDNESS.files.path(tmp_path, "dev") == tmp_path / "SICK" / "SICK_trial.txt"
    with pytest.raises(PipelineError, match=r"^SICKRelatedness has no split 'trial'; allowed: train, dev, test$"):
        load_sts_benchmark(tmp_path, "SICKRelatedness", "trial")
    with pytest.raises(PipelineError, match=r"^STS15 has only a test split, not 'dev'$"):
        load_sts_benchmark(tmp_path, "STS15", "dev")


# ---- a task declared by a test ----------------------------------------------------------------------------

# Each pair is ("reference", "s<i>"); s<i>'s embedding is at cosine COSINES[i] to the reference's.
COSINES = [0.1, 0.3, 0.2, 0.6, 0.5, 0.9, 0.8, 0.4]
GOLDS = [0.5, 1.0, 1.5, 2.0, 3.0, 3.5, 4.5, 5.0]


def _embedder(batch: list[str]) -> np.ndarray:
    def vector(sentence: str) -> list[float]:
        if sentence == "reference":
            return [1.0, 0.0]
        cosine = COSINES[int(sentence.removeprefix("s"))]
        return [cosine, math.sqrt(1 - cosine**2)]

    return np.array([vector(sentence) for sentence in batch])


@contextmanager
def registered(task: StsTaskDeclaration) -> Iterator[StsTaskDeclaration]:
    """The task declared for the duration, the registry as it was afterwards."""
    before = dict(STS_TASK_REGISTRY)
    try:
        yield register_sts_task(task)
    finally:
        STS_TASK_REGISTRY.clear()
        STS_TASK_REGISTRY.update(before)


@pytest.fixture
def csv_task(tmp_path) -> Iterator[StsTaskDeclaration]:
    """A tiny task in STS-B's csv format under tmp_path (the SentEval root), eight test pairs."""
    folder = tmp_path / "toy"
    folder.mkdir()
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{gold}\treference\ts{i}\n" for i, gold in enumerate(GOLDS)]
    (folder / "toy-test.csv").write_text("".join(rows), encoding="utf-8")
    with registered(StsTaskDeclaration("ToySTS", "Toy", SplitFiles("toy", {"test": "toy-test.csv"}, "stsb"), "test")) as task:
        yield task


def _any_sentence_embedder(batch: list[str]) -> np.ndarray:
    """A fixed pseudo-random vector per sentence (its digest): any task's sentences, the toy's as `_embedder`."""
    toy = [sentence for sentence in batch if sentence == "reference" or sentence.removeprefix("s").isdigit()]
    vectors = {sentence: vector for sentence, vector in zip(toy, _embedder(toy))} if toy else {}
    def vector(sentence: str) -> np.ndarray:
        if sentence in vectors:
            return np.array([*vectors[sentence], 0.0, 0.0])
        return np.frombuffer(hashlib.sha256(sentence.encode()).digest()[:16], dtype=np.uint32).astype(float) / 2**32 - 0.5
    return np.stack([vector(sentence) for sentence in batch])


def test_a_declared_task_is_read_and_scored_by_the_evaluator(tmp_path, csv_task):
    assert load_sts_benchmark(tmp_path, "ToySTS") == {"test": read_stsb(tmp_path / "toy" / "toy-test.csv")}
    papers = load_tasks(MIRROR / "senteval", sts_tasks.PAPERS_TASK_NAMES, max_pairs=100, seed=0)
    tasks = load_tasks(tmp_path, ["ToySTS"])
    alone = evaluate_embedder(_any_sentence_embedder, papers)
    results = evaluate_embedder(_any_sentence_embedder, [*papers, *tasks])

    expected = spearmanr(COSINES, GOLDS).statistic * 100
    assert math.isfinite(results["ToySTS"]["test"]) and results["ToySTS"]["test"] == pytest.approx(expected)
    assert results["avg"] == alone["avg"]  # the 7-STS average is the papers' seven, whatever else is scored
    assert format_table(results).splitlines()[0].split()[-3:] == ["Toy", "|", "Avg."]  # a column of its own
    headline = headline_scores(results)  # `dvc metrics show`: the task's score beside the seven, which it leaves alone
    assert headline["ToySTS"] == results["ToySTS"]["test"] and list(headline)[-2:] == ["ToySTS", "avg"]
    assert {name: score for name, score in headline.items() if name != "ToySTS"} == headline_scores(alone)
    assert EvalSettings(tasks=["STS12", "ToySTS"]).tasks == ["STS12", "ToySTS"]
    with pytest.raises(ValueError, match="none of the papers' tasks"):
        EvalSettings(tasks=["ToySTS"])
    with pytest.raises(PipelineError, match=r"^ToySTS has only a test split, not 'dev'$"):
        load_sts_benchmark(tmp_path, "ToySTS", "dev")

    scored, _ = scores_with_intervals(embed_sentences(_embedder, tasks[0].sentences), tasks, draw_resamples(tasks, 50, seed=0))
    interval = scored["intervals"]["ToySTS"]  # resampled within its one subset, as STS-B's test pairs
    assert math.isfinite(interval["low"]) and interval["low"] <= interval["high"]


def test_a_declared_year_pools_its_subsets(tmp_path):
    folder = tmp_path / "STS" / "STSToy-en-test"
    folder.mkdir(parents=True)
    for subset, positions in (("first", range(0, 4)), ("second", range(4, 8))):
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"reference\ts{i}\n" for i in positions))
        (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{GOLDS[i]}\n" for i in positions))
    with registered(senteval_year("STSToy", ("first", "second"))):
        stsb = load_tasks(MIRROR / "senteval", ["STSBenchmark"], max_pairs=100, seed=0)
        results = evaluate_embedder(_any_sentence_embedder, [*stsb, *load_tasks(tmp_path, ["STSToy"])])
        header = format_table(results).splitlines()[0].split()

    assert set(results["STSToy"]) == {"all", "mean", "subsets"} and list(results["STSToy"]["subsets"]) == ["first", "second"]
    assert results["STSToy"]["all"] == pytest.approx(spearmanr(COSINES, GOLDS).statistic * 100)
    assert header == ["STS-B", "|", "STSToy", "|", "Avg."]
    assert results["avg"] == round(results["STSBenchmark"]["test"], 2)


def test_the_registry_is_restored_and_refuses_a_second_or_impossible_declaration(tmp_path):
    toy = StsTaskDeclaration("ToySTS", "Toy", SplitFiles("toy", {"test": "toy-test.csv"}, "stsb"), "test")
    with registered(toy):
        assert sts_tasks.sts_task("ToySTS") is toy
        with pytest.raises(ValueError, match="'ToySTS' is already declared"):
            register_sts_task(toy)
    assert "ToySTS" not in STS_TASK_REGISTRY and tuple(STS_TASK_REGISTRY)[:7] == SEVEN
    with pytest.raises(PipelineError, match=r"^unknown STS task 'ToySTS'; allowed: STS12, STS13, .*SICKRelatedness(, \w+)*$"):
        load_sts_benchmark(tmp_path, "ToySTS")
    with pytest.raises(ValueError, match="reports 'all'; it has: test"):
        register_sts_task(StsTaskDeclaration("ToySTS", "Toy", toy.files, "all"))
    assert "ToySTS" not in STS_TASK_REGISTRY


# ---- a declared task's data step: the download stage fetches its files ----------------------------------------

class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[Path, str]]:
    """A folder served over loopback HTTP, as a task's files would be at their URL: (folder, base URL)."""
    folder = tmp_path / "served"
    folder.mkdir()
    with loopback_server(functools.partial(_Quiet, directory=str(folder))) as url:
        yield folder, url


def _served_task(served, pinned: str | None = None) -> StsTaskDeclaration:
    folder, url = served
    rows = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{gold}\treference\ts{i}\n" for i, gold in enumerate(GOLDS)]
    (folder / "toy-test.csv").write_text("".join(rows), encoding="utf-8")
    digest = pinned or hashlib.sha256((folder / "toy-test.csv").read_bytes()).hexdigest()
    return StsTaskDeclaration("ToySTS", "Toy", SplitFiles("STS/Toy", {"test": "toy-test.csv"}, "stsb"), "test",
                              {"toy-test.csv": Download(f"{url}/toy-test.csv", digest)})


def test_the_download_stage_fetches_a_declared_tasks_files_and_the_evaluator_reads_them(tmp_path, served, tiny_params_dict, mirror):
    tiny_params_dict["data"]["wiki"]["limit"] = 100
    with registered(_served_task(served)):
        summary = download_params(tiny_params_dict, tmp_path / "data")
        senteval = tmp_path / "data" / "raw" / "senteval"
        (task,) = load_tasks(senteval, ["ToySTS"])
    assert (senteval / "STS" / "Toy" / "toy-test.csv").read_bytes() == (served[0] / "toy-test.csv").read_bytes()
    assert summary.senteval_files == 1 + sum(1 for path in (MIRROR / "senteval").rglob("*") if path.is_file())
    assert len(task.subsets["test"]) == len(GOLDS)


def test_a_declared_file_that_differs_from_its_pin_is_one_line_and_nothing_is_written(tmp_path, served, tiny_params_dict, mirror):
    tiny_params_dict["data"]["wiki"]["limit"] = 100
    with registered(_served_task(served, pinned="0" * 64)), pytest.raises(PipelineError) as refused:
        download_params(tiny_params_dict, tmp_path / "data")
    assert str(refused.value).startswith(f"{served[1]}/toy-test.csv (STS task ToySTS's toy-test.csv) has sha256 ")
    assert "pins " + "0" * 64 in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "data" / "raw" / "senteval").exists()
    with pytest.raises(ValueError, match=r"downloads \['other.csv'\]; its files are \['toy-test.csv'\]"):
        register_sts_task(StsTaskDeclaration("Other", "O", SplitFiles("o", {"test": "toy-test.csv"}, "stsb"), "test",
                                             {"other.csv": Download("http://example.org/o", "0" * 64)}))
