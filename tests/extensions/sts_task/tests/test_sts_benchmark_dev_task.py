"""STS-B dev as a task (pipeline/sts_datasets/sts_benchmark_dev.py): read from the download's SentEval folder,
scored in a column of its own in the metrics, the report's columns and the checkpoints table."""

import numpy as np

from conftest import MIRROR, tiny_preset
from pipeline.declarations.sts_tasks import PAPERS_TASK_NAMES
from pipeline.evaluation.sts import evaluate_embedder, headline_scores, load_tasks
from pipeline.params_file import parse_params
from pipeline.public_checkpoints import scored_columns
from pipeline.reporting import runs


def _embedder(batch):
    return np.array([[len(sentence), sentence.count(" ") + 1.0, 1.0] for sentence in batch])


def test_the_task_is_scored_beside_the_papers_seven_in_its_own_column():
    assert parse_params(tiny_preset()).eval.tasks[-1] == "STSBenchmarkDev"  # conf/config.yaml scores it
    papers = load_tasks(MIRROR / "senteval", PAPERS_TASK_NAMES, max_pairs=50, seed=0)
    (dev,) = load_tasks(MIRROR / "senteval", ["STSBenchmarkDev"], max_pairs=50, seed=0)
    results = evaluate_embedder(_embedder, [*papers, dev])
    alone = evaluate_embedder(_embedder, papers)
    assert results["avg"] == alone["avg"] and "STSBenchmarkDev" in headline_scores(results)
    assert runs.SCORE_COLUMNS["STSBenchmarkDev.dev"] == "STSBenchmarkDev"
    rows = {"rows": {"a": {"scores": results}}}
    assert scored_columns(rows)[-2:] == ("STS-B dev", "Avg.")
