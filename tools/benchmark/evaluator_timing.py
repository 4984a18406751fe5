"""Evaluation throughput: sentences/s of the STS evaluator against its previous fixed batches and a
naive loop, on the same model and sentences, with the padded tokens each batching feeds the model."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from tools.benchmark.timing_inputs import BenchInputs
from tools.benchmark.timing import free_memory, public, synchronizer, time_interleaved
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)


class _TokenCounter:
    """An embedder that only counts the padded and real tokens a batching feeds the model. Its token
    lengths are the evaluator's own (`HFEmbedder.token_lengths`), so `embed_sentences` batches it alike."""

    def __init__(self, embedder):
        self.token_lengths = embedder.token_lengths
        self.padded = self.real = self.batches = 0

    def __call__(self, sentences: list[str]) -> np.ndarray:
        lengths = self.token_lengths(sentences)
        self.padded += max(lengths) * len(lengths)
        self.real += sum(lengths)
        self.batches += 1
        return np.zeros((len(sentences), 1), dtype=np.float32)


def fixed_batches(embedder, batch_size: int):
    """The evaluator's previous path: `batch_size` sentences per call, sorted by the evaluator's own token
    lengths (`HFEmbedder.token_lengths`), each batch tokenized apart and copied back on its own."""
    from pipeline.evaluation.sts import FixedBatches

    return FixedBatches(embedder, batch_size, embedder.token_lengths)


def naive_embed(embedder, sentences: Sequence[str], batch_size: int) -> np.ndarray:
    """The naive loop: every sentence, duplicates included, in the given order, `batch_size` at a time."""
    from pipeline.evaluation.sts import as_array

    with torch.inference_mode():
        return np.concatenate([as_array(embedder(list(sentences[start : start + batch_size])))
                               for start in range(0, len(sentences), batch_size)])


@contextmanager
def _quiet_evaluator():
    """The evaluator logs one line per pass, which would drown the benchmark's own."""
    sts_logger = logging.getLogger("pipeline.evaluation.sts")
    level = sts_logger.level
    sts_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        sts_logger.setLevel(level)


def check_senteval(inputs: BenchInputs) -> Path:
    """The SentEval-layout folder of the STS tasks; a one-line error when it is missing."""
    senteval = inputs.senteval
    if senteval is None or not Path(senteval).is_dir():
        raise PipelineError(f"SentEval data folder {senteval} does not exist; run `dvc repro download` or pass --senteval DIR")
    return Path(senteval)


def load_bench_tasks(inputs: BenchInputs):
    """The configured STS tasks, a sample of `eval_max_pairs` pairs of each (drawn with the run's seed)."""
    from pipeline.evaluation.sts import load_tasks

    return load_tasks(check_senteval(inputs), inputs.params.eval.tasks, inputs.scale.eval_max_pairs, seed=inputs.params.seed)


def _time_variants(embedder, stock, sentences: list[str], batch_size: int, inputs: BenchInputs) -> tuple[dict, dict]:
    """(timings, the last embeddings of the evaluator, its fixed batches and the naive loop) of the four variants."""
    from pipeline.evaluation.sts import embed_sentences

    outputs: dict = {}  # each variant's last result, to compare the embeddings without another pass

    def kept(name: str, function: Callable[[], object]) -> Callable[[], None]:
        return lambda: outputs.__setitem__(name, function())

    fixed = fixed_batches(embedder, batch_size)
    variants = {
        "evaluator": kept("evaluator", lambda: embed_sentences(embedder, sentences, batch_size, description="bench evaluator")),
        "evaluator_fixed_batches": kept("evaluator_fixed_batches", lambda: embed_sentences(
            fixed, sentences, batch_size, description="bench fixed batches")),
        "evaluator_stock_forward": lambda: embed_sentences(stock, sentences, batch_size, description="bench stock"),
        "naive": kept("naive", lambda: naive_embed(stock, sentences, batch_size)),
    }
    device = inputs.context.device
    timings = time_interleaved(variants, inputs.scale.eval_repeats, warmup=0, synchronize=synchronizer(device), device=device)
    return timings, outputs


def _count_tokens(embedder, sentences: list[str], batch_size: int) -> dict:
    """The tokens each variant's batching feeds the model (tokenizer-only passes)."""
    from pipeline.evaluation.embedder import token_budget_batches
    from pipeline.evaluation.sts import embed_sentences

    budgeted, fixed, naive = _TokenCounter(embedder), _TokenCounter(embedder), _TokenCounter(embedder)
    lengths = embedder.token_lengths(sorted(set(sentences)))
    for batch in token_budget_batches(lengths, embedder.token_budget):
        budgeted.padded += len(batch) * lengths[batch[0]]  # longest first
        budgeted.real += sum(lengths[position] for position in batch)
        budgeted.batches += 1
    embed_sentences(fixed_batches(fixed, batch_size), sentences, batch_size, description="count tokens")
    naive_embed(naive, sentences, batch_size)
    return {"evaluator": budgeted, "evaluator_fixed_batches": fixed, "evaluator_stock_forward": budgeted, "naive": naive}


def _evaluation_result(timings: dict, counts: dict, sentences: list[str], tasks, differences: dict[str, float],
                       inputs: BenchInputs) -> dict:
    records = {name: {
        "sentences_per_s": round(len(sentences) / timing["median"], 1),
        "seconds": public(timing),
        "batches": counts[name].batches,
        "padded_tokens": counts[name].padded,
        "peak_memory_mb": round(timing["peak_memory_mb"], 1),
    } for name, timing in timings.items()}
    records["evaluator"]["unique_sentences"] = len(set(sentences))

    def ratio(slow: str, fast: str) -> float:
        return round(timings[slow]["median"] / timings[fast]["median"], 3)

    settings = inputs.params.eval
    return {
        "sentences": len(sentences),
        "tasks": [task.name for task in tasks],
        "batch_size": settings.batch_size,
        "token_budget": settings.token_budget,
        "max_length": settings.max_length,
        "pooler": settings.pooler,
        **records,
        "speedup": ratio("naive", "evaluator"),
        "speedup_from_batching": ratio("naive", "evaluator_stock_forward"),
        "speedup_from_cls_only_last_layer": ratio("evaluator_stock_forward", "evaluator"),
        "speedup_vs_fixed_batches": ratio("evaluator_fixed_batches", "evaluator"),
        "real_tokens_unique": counts["evaluator"].real,
        "max_abs_embedding_diff": differences["naive"],
        "max_abs_embedding_diff_vs_fixed_batches": differences["evaluator_fixed_batches"],
        "max_pairs": inputs.scale.eval_max_pairs,
    }


def bench_evaluation(inputs: BenchInputs) -> dict:
    """Sentences/s of the STS evaluator and of the naive loop on the same model and sentences.

    The sentences are every sentence of every pair of the tasks (duplicates included, the order of
    the files); each variant produces an embedding for each:
    - `evaluator`: `embed_sentences` as the pipeline runs it (unique sentences tokenized once, sorted
      by token count, in batches of at most `eval.token_budget` padded tokens, on the device until all
      are done; the last layer computed for [CLS] only when the pooler reads [CLS]);
    - `evaluator_fixed_batches`: the evaluator's previous path, the same sorted sentences in batches of
      `eval.batch_size`, each tokenized and copied back on its own;
    - `evaluator_stock_forward`: the evaluator's batches through the stock Hugging Face forward, which
      splits the gain between batching and the [CLS]-only last layer;
    - `naive`: the stock forward over `batch_size` sentences at a time in file order.
    sentences_per_s counts the input sentences for all, so `speedup` is the ratio of the times.
    Warm-up: one batch through each model. The evaluator's embeddings are compared with the naive
    ones and with its fixed batches'.
    """
    from pipeline.evaluation.embedder import HFEmbedder

    tasks = load_bench_tasks(inputs)
    sentences = [sentence for task in tasks for sentence in task.sentences]
    if not sentences:
        raise PipelineError("the STS tasks have no sentences to embed")
    settings, device = inputs.params.eval, inputs.context.device.type
    sizes = (settings.pooler, settings.max_length, settings.batch_size, device)
    embedder = HFEmbedder(inputs.backbone, *sizes, token_budget=settings.token_budget)
    stock = HFEmbedder(inputs.backbone, *sizes, cls_only_last_layer=False, token_budget=settings.token_budget)
    inputs.advance("bench evaluation")
    for model in (embedder, stock):
        model(sentences[: settings.batch_size])  # warm-up
    with _quiet_evaluator():
        timings, outputs = _time_variants(embedder, stock, sentences, settings.batch_size, inputs)
        counts = _count_tokens(embedder, sentences, settings.batch_size)
    ours = outputs["evaluator"].lookup(sentences)
    differences = {"naive": float(np.abs(ours - outputs["naive"]).max()),
                   "evaluator_fixed_batches": float(np.abs(ours - outputs["evaluator_fixed_batches"].lookup(sentences)).max())}
    result = _evaluation_result(timings, counts, sentences, tasks, differences, inputs)
    result["token_budget"] = embedder.token_budget  # `auto` resolved for the device
    log.info("bench evaluation: evaluator %.0f sentences/s, fixed batches %.0f, naive %.0f (%.2fx the fixed batches, "
             "%.2fx the naive loop; batching %.2fx, [CLS]-only last layer %.2fx)",
             result["evaluator"]["sentences_per_s"], result["evaluator_fixed_batches"]["sentences_per_s"],
             result["naive"]["sentences_per_s"], result["speedup_vs_fixed_batches"], result["speedup"],
             result["speedup_from_batching"], result["speedup_from_cls_only_last_layer"])
    inputs.advance(done=1)
    del embedder, stock
    free_memory(inputs.context.device)
    return result
