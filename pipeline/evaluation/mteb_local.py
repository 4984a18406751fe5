"""Offline stand-ins, built from the mirror's raw STS-B, for each MTEB task type the papers' suites use.

They are real mteb tasks (subclasses of mteb's abstract tasks, scored by mteb's own evaluators),
so the tiny preset runs the same evaluation, aggregation and table paths as the hub suites:

| task | mteb type | data (data/raw/original/STSBenchmark) | main score |
|---|---|---|---|
| `LocalSTSBenchmark` | STS | test pairs (pipeline.evaluation.mteb_tasks) | cosine Spearman |
| `LocalSTSBGenreClassification` | Classification | first sentences, label = genre (captions, news, forums); train split trains the classifier | accuracy |
| `LocalSTSBRetrieval` | Retrieval | query = sentence 1 of a pair scored ≥ 4, corpus = every sentence 2, relevant = its partner | nDCG@10 |
| `LocalSTSBReranking` | Reranking | the same queries, each with its partner among `RERANK_CANDIDATES` sentence-2 candidates | MAP@1000 |
| `LocalSTSBBitextMining` | BitextMining | the pairs scored ≥ 4 as "parallel" sentences | F1 |

`items` caps each task (queries, pairs or sentences per split), taken evenly across the file
(its rows are grouped by genre, so a head would hold one genre only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.classification import AbsTaskClassification
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.text.bitext_mining import AbsTaskBitextMining

from pipeline.data.readers import read_stsb, read_stsb_genres
from pipeline.evaluation.mteb_tasks import LocalSTSBenchmark, mirror_stsb_metadata

PARAPHRASE_SCORE = 4.0  # STS-B gold ≥ 4: "mostly equivalent" or better — the two sentences mean the same
RERANK_CANDIDATES = 10


def evenly(rows: list, items: int | None) -> list:
    """At most `items` rows spread evenly over the list, in file order."""
    if items is None or len(rows) <= items:
        return list(rows)
    return [rows[index] for index in np.linspace(0, len(rows) - 1, items).round().astype(int)]


class _MirrorTask:
    """Reads the mirror's raw STS-B folder; `items` caps the task's size."""

    def __init__(self, raw_dir: Path | str, items: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.raw_dir = Path(raw_dir)
        self.items = items

    def paraphrases(self) -> list[tuple[str, str]]:
        pairs = read_stsb(self.raw_dir / "sts-test.csv", original=True)
        chosen = [(pair.sentence1, pair.sentence2) for pair in pairs if pair.score >= PARAPHRASE_SCORE]
        return evenly(list(dict.fromkeys(chosen)), self.items)


class LocalSTSBGenreClassification(_MirrorTask, AbsTaskClassification):
    metadata = mirror_stsb_metadata(
        "LocalSTSBGenreClassification", "Classification", "accuracy",
        "The genre (captions, news, forums) of an STS-B sentence; trained on sts-train, tested on sts-test.",
    )
    n_experiments = 3

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        # the train file spells "main-forum", the test file "main-forums"
        splits = {
            split: [(genre.removesuffix("s"), text) for genre, text in evenly(read_stsb_genres(self.raw_dir / f"sts-{split}.csv", original=True), self.items)]
            for split in ("train", "test")
        }
        genres = sorted({genre for rows in splits.values() for genre, _ in rows})
        self.dataset = DatasetDict({
            split: Dataset.from_dict({"text": [text for _, text in rows], "label": [genres.index(genre) for genre, _ in rows]})
            for split, rows in splits.items()
        })
        self.data_loaded = True


class _LocalRetrievalBase(_MirrorTask, AbsTaskRetrieval):
    def _split(self, top_ranked: bool) -> dict[str, Any]:
        pairs = self.paraphrases()
        documents = list(dict.fromkeys(second for _, second in pairs))
        document_ids = {text: f"d{index}" for index, text in enumerate(documents)}
        queries = Dataset.from_dict({"id": [f"q{index}" for index in range(len(pairs))], "text": [first for first, _ in pairs]})
        corpus = Dataset.from_dict({"id": list(document_ids.values()), "text": documents, "title": [""] * len(documents)})
        relevant = {f"q{index}": {document_ids[second]: 1} for index, (_, second) in enumerate(pairs)}
        ranked = None
        if top_ranked:  # the partner and the documents after it in the file (same genre, other topics)
            count = min(RERANK_CANDIDATES, len(documents))
            ranked = {}
            for index, (_, second) in enumerate(pairs):
                start = documents.index(second)
                ranked[f"q{index}"] = [f"d{(start + step) % len(documents)}" for step in range(count)]
        return {"corpus": corpus, "queries": queries, "relevant_docs": relevant, "top_ranked": ranked}

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        self.dataset = {"default": {"test": self._split(self.metadata.type == "Reranking")}}
        self.data_loaded = True


class LocalSTSBRetrieval(_LocalRetrievalBase):
    metadata = mirror_stsb_metadata(
        "LocalSTSBRetrieval", "Retrieval", "ndcg_at_10",
        "Find the paraphrase (STS-B test pair scored >= 4) of a sentence among all second sentences.",
    )


class LocalSTSBReranking(_LocalRetrievalBase):
    metadata = mirror_stsb_metadata(
        "LocalSTSBReranking", "Reranking", "map_at_1000",
        "Rank a sentence's paraphrase first among 10 STS-B candidates.",
    )


class LocalSTSBBitextMining(_MirrorTask, AbsTaskBitextMining):
    metadata = mirror_stsb_metadata(
        "LocalSTSBBitextMining", "BitextMining", "f1",
        "Mine the STS-B test pairs scored >= 4 as parallel sentences.",
    )

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        pairs = self.paraphrases()
        columns = {"sentence1": [first for first, _ in pairs], "sentence2": [second for _, second in pairs]}
        self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
        self.data_loaded = True


def _local_stsb(raw_dir: Path | str, items: int | None) -> LocalSTSBenchmark:
    return LocalSTSBenchmark(raw_dir, items)


LOCAL_TASKS: dict[str, Callable[[Path | str, int | None], Any]] = {
    "LocalSTSBenchmark": _local_stsb,
    "LocalSTSBGenreClassification": LocalSTSBGenreClassification,
    "LocalSTSBRetrieval": LocalSTSBRetrieval,
    "LocalSTSBReranking": LocalSTSBReranking,
    "LocalSTSBBitextMining": LocalSTSBBitextMining,
}
