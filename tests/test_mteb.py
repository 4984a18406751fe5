"""The mteb path: our Embedder inside mteb, offline on the mirror's raw STS-B, agrees with our evaluator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.data.readers import read_stsb
from pipeline.evaluation.mteb_tasks import LocalSTSBenchmark, english_sts_tasks, run_mteb
from pipeline.evaluation.sts import StsTask, evaluate_embedder

RAW_STSB = Path(__file__).parents[1] / ".." / "shared" / "data" / "raw" / "STSBenchmark"
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
    same_pairs = StsTask("STSBenchmark", {"test": read_stsb(RAW_STSB / "sts-test.csv")[:PAIRS]})
    ours = evaluate_embedder(_bag_of_words, [same_pairs])["STSBenchmark"]["test"]
    assert mteb_score["LocalSTSBenchmark"] == pytest.approx(ours, abs=1e-6)


def test_english_subsets_of_the_jtcse_tasks():
    tasks = english_sts_tasks(["STS17", "STS22.v2", "STSBenchmarkMultilingualSTS"])
    assert {task.metadata.name: task.hf_subsets for task in tasks} == {
        "STS17": ["en-en"],
        "STS22.v2": ["en"],
        "STSBenchmarkMultilingualSTS": ["en"],
    }
