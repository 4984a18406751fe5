"""MTEB through the same embeddings as the STS evaluator.

- `EmbedderEncoder`: a function of sentences → rows as an mteb encoder (mteb ≥ 2: `encode` receives
  a DataLoader of batches with a "text" column; the function gets all of one call's texts at once,
  so the pipeline hands over `EmbeddingStore.model_rows`: every sentence encoded once per tower,
  shared by every model, task and stage); similarity is cosine, as in the SentEval protocol.
- `english_sts_tasks`: JTCSE's "3 Avg." tasks (STS17, STS22.v2, STSBenchmarkMultilingualSTS)
  restricted to their English subsets; these download from the Hugging Face hub.
- `LocalSTSBenchmark`: STS-B test from the mirror's raw (cased, untokenized) files, the same
  pairs as mteb's STSBenchmark, so the mteb path runs offline.

mteb's STS main score is `cosine_spearman` on gold scores rescaled to [0, 1]; Spearman is
rank-based, so the rescaling does not change it. `run_mteb` reports it × 100 like the STS tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import mteb
import numpy as np
import torch
from datasets import Dataset, DatasetDict
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models import ModelMeta
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ScoringFunction
from mteb.types import BatchedInput, PromptType
from torch.utils.data import DataLoader

from pipeline.data.readers import read_stsb
from pipeline.errors import PipelineError
from pipeline.evaluation.sts import as_array

# sentences → their embeddings, row for row (a `BatchEmbedder`, or the store's `model_rows`)
SentenceRows = Callable[[list[str]], "np.ndarray | torch.Tensor"]


class EmbedderEncoder(AbsEncoder):
    """Sentences → rows as an mteb encoder with cosine similarity."""

    def __init__(self, embed: SentenceRows, name: str = "local/embedder"):
        self.embed = embed
        self.mteb_model_meta = ModelMeta.create_empty(
            overwrites={"name": name, "similarity_fn_name": ScoringFunction.COSINE}
        )

    def encode(
        self,
        inputs: DataLoader[BatchedInput],
        *,
        task_metadata: TaskMetadata,
        hf_split: str,
        hf_subset: str,
        prompt_type: PromptType | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        # Same sentences, same model input: no prompts or instructions (the papers' encoders use none).
        with torch.inference_mode():
            return as_array(self.embed([text for batch in inputs for text in batch["text"]]))


def english_sts_tasks(names: Sequence[str]) -> list[mteb.AbsTask]:
    """The named mteb STS tasks with only their English (en-en / en) subsets, test split."""
    return list(mteb.get_tasks(tasks=list(names), languages=["eng"], exclusive_language_filter=True, eval_splits=["test"]))


def mirror_stsb_metadata(name: str, kind: str, main_score: str, description: str, dataset: str | None = None) -> TaskMetadata:
    """The metadata of an mteb task made from the mirror's STS-B files (this module's and `mteb_local`'s):
    STS-B's reference, date, domains and language, offline (`local/<dataset>` at revision "mirror")."""
    return TaskMetadata(
        name=name,
        description=description,
        reference="https://ixa2.si.ehu.eus/stswiki/index.php/STSbenchmark",
        dataset={"path": f"local/{dataset or name}", "revision": "mirror"},
        type=kind,
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score=main_score,
        date=("2017-01-01", "2017-12-31"),
        domains=["Blog", "News", "Written"],
        task_subtypes=[],
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation="",
    )


class LocalSTSBenchmark(AbsTaskSTS):
    """STS-B test read from a folder holding `sts-test.csv` (the mirror's `raw/STSBenchmark`)."""

    metadata = mirror_stsb_metadata(
        "LocalSTSBenchmark", "STS", "cosine_spearman",
        "STS Benchmark test split read from the local data mirror (raw, as in mteb's STSBenchmark).", "STSBenchmark",
    )
    min_score = 0
    max_score = 5

    def __init__(self, raw_dir: Path | str, max_pairs: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.raw_dir = Path(raw_dir)
        self.max_pairs = max_pairs

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        pairs = read_stsb(self.raw_dir / "sts-test.csv", original=True)[: self.max_pairs]
        columns = {
            "sentence1": [pair.sentence1 for pair in pairs],
            "sentence2": [pair.sentence2 for pair in pairs],
            "score": [pair.score for pair in pairs],
        }
        self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
        self.data_loaded = True


OFFLINE_HINT = "; run where the Hugging Face hub is reachable, or select the offline local-* suites in eval.mteb.suite"


def load_task_data(task: mteb.AbsTask) -> None:
    """Load a task's data now, so a hub that cannot be reached (offline, no network) is one line."""
    if getattr(task, "data_loaded", False):
        return
    try:
        task.load_data()
    except OSError as error:  # ConnectionError, the hub's offline and HTTP errors, missing files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PipelineError(
            f"MTEB task {task.metadata.name} could not be loaded ({type(error).__name__}: {reason}){OFFLINE_HINT}"
        ) from None


def task_runner(embed: SentenceRows, batch_size: int = 64):
    """A function that evaluates one loaded mteb task with `embed` and returns its TaskResult."""
    encoder = EmbedderEncoder(embed)

    def run(task: mteb.AbsTask):
        result = mteb.evaluate(encoder, [task], cache=None, encode_kwargs={"batch_size": batch_size}, show_progress_bar=False)
        return result.task_results[0]

    return run


def run_mteb(embed: SentenceRows, tasks: Sequence[mteb.AbsTask], batch_size: int = 64) -> dict[str, float]:
    """Each task's mteb main score on its test split, × 100; nothing is cached on disk."""
    for task in tasks:
        load_task_data(task)
    result = mteb.evaluate(
        EmbedderEncoder(embed),
        list(tasks),
        cache=None,
        encode_kwargs={"batch_size": batch_size},
        show_progress_bar=False,
    )
    return {task_result.task_name: task_result.get_score(splits=["test"]) * 100 for task_result in result.task_results}
