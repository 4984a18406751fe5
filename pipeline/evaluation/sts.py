"""STS evaluation under the SentEval protocol as SimCSE, TNCSE and JTCSE report it.

- STS12–16: Spearman × 100 of cosine similarity over all subsets' pairs concatenated ("all", the
  reported score); each subset's Spearman and their mean are recorded too.
- STS-B and SICK-R: Spearman × 100 of cosine similarity on the test split (no regressor).
- `avg` ("7 Avg."): the mean of the papers' seven tasks' reported scores each rounded to two decimals,
  exactly as SimCSE's evaluation script averages the numbers it prints. A task declared beyond the
  seven is scored in a column of its own and left out of the average, so adding one never moves the
  number compared with the papers; with only some of the seven in `eval.tasks`, it is their mean.
- `eval.max_pairs` (tiny scale) scores a seeded uniform sample of each task's pairs across all its
  subsets (`sample_pairs`), not its first pairs (those would be STS12's MSRpar alone).
- `eval.bootstrap`: each reported score's 95 % interval (pipeline.evaluation.bootstrap).

The evaluator is built around an `Embedder` (a batch of sentences → embeddings), so it does not
care how a model is built. Every unique sentence of all tasks is encoded once per tower, in
length-sorted batches (little padding; an `HFEmbedder` fills them up to a token budget);
ensembles are weighted sums of their towers' tables.

Agreement with SentEval: SentEval encodes each side of each pair in its own padded batch, so the
same sentence gets embeddings that differ by float rounding, and it scores cosines in float32.
That noise only matters where cosines (nearly) tie: pairs of identical sentences (79 in STS12,
a few in STS13–16). Re-scoring MiniLM the SentEval way moved STS12 by 0.003 and STS-B by 1e-5,
which is the level at which SentEval's own result changes with hardware or batch size.
"""

from __future__ import annotations

import logging
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from pipeline.data.readers import ScoredPair
from pipeline.data.sts_pairs import load_sts_benchmark
from pipeline.declarations.sts_tasks import AVERAGE, POOLED, STS_TASK_REGISTRY, averaged, pools_subsets, short_name, sts_task
from pipeline.evaluated_models import WeightedTowers

log = logging.getLogger(__name__)

# One batch of sentences → their embeddings (training's dev scoring, a test's stand-in).
BatchEmbedder = Callable[[list[str]], torch.Tensor | np.ndarray]


class Embedder(ABC):
    """Sentences → embeddings, row i for sentence i: the embedder batches them itself."""

    @abstractmethod
    def encode(self, sentences: Sequence[str], progress: Callable[[int], object] | None = None) -> torch.Tensor | np.ndarray:
        """Every sentence's embedding in order; `progress(n)` after each batch of n sentences."""


@dataclass
class FixedBatches(Embedder):
    """A `BatchEmbedder` called on `batch_size` sentences at a time, longest first (a batch that does
    not fit in memory fails at once), ties by text: lengths by `token_lengths` when given, else characters."""

    embed_batch: BatchEmbedder
    batch_size: int = 64
    token_lengths: Callable[[list[str]], list[int]] | None = None

    def encode(self, sentences: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        sentences = list(sentences)
        lengths = self.token_lengths(sentences) if self.token_lengths is not None else [len(s) for s in sentences]
        order = sorted(range(len(sentences)), key=lambda position: (-lengths[position], sentences[position]))
        chunks = []
        for start in range(0, len(order), self.batch_size):
            batch = [sentences[position] for position in order[start : start + self.batch_size]]
            chunks.append(as_array(self.embed_batch(batch)))
            if progress is not None:
                progress(len(batch))
        if not chunks:
            return np.zeros((0, 0), np.float32)
        vectors = np.empty((len(sentences), chunks[0].shape[1]), np.float32)
        vectors[order] = np.concatenate(chunks)
        return vectors


def as_embedder(embedder: Embedder | BatchEmbedder, batch_size: int = 64) -> Embedder:
    """An `Embedder` as it is; a `BatchEmbedder` in `FixedBatches` of `batch_size`."""
    return embedder if isinstance(embedder, Embedder) else FixedBatches(embedder, batch_size)


@dataclass(frozen=True)
class StsTask:
    """One benchmark's pairs as read: {subset: pairs}; STS-B and SICK-R have one subset named after the
    split (what each task holds is declared in `pipeline.declarations.sts_tasks`)."""

    name: str
    subsets: dict[str, list[ScoredPair]]

    @property
    def sentences(self) -> list[str]:
        return [sentence for pairs in self.subsets.values() for pair in pairs for sentence in (pair.sentence1, pair.sentence2)]


def task_rng(seed: int, *labels: str) -> np.random.Generator:
    """A generator for one use of one task (e.g. "sample", "STS12"): a function of the seed and the
    labels alone, so a task draws the same whatever other tasks a run evaluates."""
    return np.random.default_rng([seed, zlib.crc32("/".join(labels).encode())])


def sample_pairs(subsets: dict[str, list[ScoredPair]], max_pairs: int, rng: np.random.Generator) -> dict[str, list[ScoredPair]]:
    """`max_pairs` pairs drawn uniformly without replacement from all subsets' pairs concatenated,
    each kept pair in its original order within its subset; subsets left empty are dropped.
    A task with at most `max_pairs` pairs is kept whole."""
    sizes = [len(pairs) for pairs in subsets.values()]
    if sum(sizes) <= max_pairs:
        return dict(subsets)
    chosen = np.sort(rng.choice(sum(sizes), size=max_pairs, replace=False))
    kept, start = {}, 0
    for (name, pairs), size in zip(subsets.items(), sizes):
        positions = chosen[(chosen >= start) & (chosen < start + size)] - start
        if positions.size:
            kept[name] = [pairs[position] for position in positions]
        start += size
    return kept


def load_tasks(
    senteval_root: Path | str, names: Sequence[str], max_pairs: int | None = None, split: str | None = None,
    seed: int | None = None,
) -> list[StsTask]:
    """The named tasks from a SentEval-layout folder; with `max_pairs`, a sample of that many pairs of
    each task (`sample_pairs`) drawn with `seed` (the run's seed: required then).

    Each task's pairs are those its reported score is over (`scored_split`: the test split of the papers'
    seven); `split` (e.g. STS-B dev for model selection) reads that split of every task instead.
    """
    if max_pairs is not None and seed is None:
        raise ValueError("a max_pairs sample needs the run's seed")
    tasks = []
    for name in names:
        task_split = split or sts_task(name).scored_split
        subsets = load_sts_benchmark(senteval_root, name, task_split)
        if max_pairs is not None:
            subsets = sample_pairs(subsets, max_pairs, task_rng(seed, "sample", name, task_split))
        tasks.append(StsTask(name, subsets))
    return tasks


def task_sentences(tasks: Sequence[StsTask]) -> list[str]:
    """Every sentence the tasks need, once each."""
    return list(dict.fromkeys(sentence for task in tasks for sentence in task.sentences))


@dataclass(frozen=True)
class EmbeddingTable:
    """Each sentence's embedding: row `index[sentence]` of `vectors`."""

    index: dict[str, int]
    vectors: np.ndarray

    def lookup(self, sentences: Sequence[str]) -> np.ndarray:
        return self.vectors[[self.index[sentence] for sentence in sentences]]


def as_array(embeddings: torch.Tensor | np.ndarray) -> np.ndarray:
    """An embedder's output as a float32 numpy array."""
    if isinstance(embeddings, torch.Tensor):
        embeddings = embeddings.float().cpu().numpy()
    return np.asarray(embeddings, dtype=np.float32)


def embed_sentences(
    embedder: Embedder | BatchEmbedder, sentences: Sequence[str], batch_size: int = 64, description: str = "embed"
) -> EmbeddingTable:
    """Encode each unique sentence once, without gradients: an `Embedder` batches them itself (an
    `HFEmbedder` by token budget), a `BatchEmbedder` gets `FixedBatches` of `batch_size`."""
    distinct = sorted(set(sentences))
    started = time.perf_counter()
    with torch.inference_mode(), tqdm(total=len(distinct), desc=description, unit="sent") as progress:
        vectors = as_array(as_embedder(embedder, batch_size).encode(distinct, progress.update))
    seconds = time.perf_counter() - started
    log.info(
        "%s: embedded %d unique sentences in %.1f s (%.0f sentences/s)",
        description, len(distinct), seconds, len(distinct) / max(seconds, 1e-9),
    )
    return EmbeddingTable({sentence: row for row, sentence in enumerate(distinct)}, vectors)


def combine_tables(tables: Mapping[str, EmbeddingTable], towers: WeightedTowers | Sequence[tuple[str, float]]) -> EmbeddingTable:
    """The model's table Σ_i w_i · h_i (`WeightedTowers.combine`) over its first tower's sentences;
    `tables` holds each tower's table by folder."""
    towers = WeightedTowers.of(towers)
    members = [tables[tower] for tower in towers.folders]
    if len(members) == 1 and towers.weights[0] == 1:
        return members[0]
    order = list(members[0].index)
    vectors = towers.combine([table.lookup(order) for table in members])
    return EmbeddingTable(members[0].index, vectors.astype(np.float32))


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine (in float64 for a platform-independent ranking); a zero vector scores 0, as in SentEval."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.nan_to_num(cosine)


def _spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    return float(spearmanr(predicted, gold).statistic * 100)


def reported_score(task_result: Mapping[str, object]) -> float:
    """The number a paper's table shows: "all" for STS12–16, the split's score for STS-B/SICK-R."""
    if POOLED in task_result:
        return float(task_result[POOLED])
    (score,) = task_result.values()
    return float(score)


def headline_scores(results: Mapping[str, object]) -> dict[str, float]:
    """What `dvc metrics show` prints for a model (reports/metrics/<model>.json): each scored task's
    reported score (`reported_score`) under the task's name (a declared task beyond the papers' seven
    too), then "avg" (over the seven). Everything else of `results` (subsets, "mean", MTEB, settings)
    lives in the details file beside it."""
    tasks = [name for name in results if name in STS_TASK_REGISTRY]
    return {name: reported_score(results[name]) for name in tasks} | {AVERAGE: float(results[AVERAGE])}


def task_similarities(table: EmbeddingTable, task: StsTask) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """({subset: cosine of each pair}, {subset: gold score of each pair}), in the task's subset order."""
    similarities, golds = {}, {}
    for subset, pairs in task.subsets.items():
        similarities[subset] = _cosine(table.lookup([p.sentence1 for p in pairs]), table.lookup([p.sentence2 for p in pairs]))
        golds[subset] = np.array([pair.score for pair in pairs])
    return similarities, golds


def score_tasks(table: EmbeddingTable, tasks: Sequence[StsTask]) -> dict:
    """Spearman × 100 per task (see the module doc for the layout) plus `avg` over the papers' tasks among them."""
    results: dict = {}
    for task in tasks:
        similarities, golds = task_similarities(table, task)
        per_subset = {subset: _spearman(similarities[subset], golds[subset]) for subset in task.subsets}
        if pools_subsets(task.name):
            results[task.name] = {
                POOLED: _spearman(np.concatenate(list(similarities.values())), np.concatenate(list(golds.values()))),
                "mean": float(np.mean(list(per_subset.values()))),
                "subsets": per_subset,
            }
        else:
            results[task.name] = per_subset
    papers = averaged(results)
    if papers:  # none only where a caller scores other tasks alone (eval.tasks always holds one of the seven)
        # SimCSE averages the scores it prints (two decimals); doing the same reproduces its "Avg." digit for digit.
        results[AVERAGE] = float(np.mean([round(reported_score(results[name]), 2) for name in papers]))
    return results


def evaluate_embedder(embedder: Embedder | BatchEmbedder, tasks: Sequence[StsTask], batch_size: int = 64,
                      description: str = "embed") -> dict:
    """Scores of one encoder (e.g. the STS-B dev score during training)."""
    return score_tasks(embed_sentences(embedder, task_sentences(tasks), batch_size, description), tasks)


def format_table(results: Mapping[str, object]) -> str:
    """A two-line table of the reported scores, in the order of `results`, e.g. `STS12 | … | Avg.`."""
    names = [name for name in results if name != AVERAGE] + ([AVERAGE] if AVERAGE in results else [])
    headers = [short_name(name) for name in names]
    values = [f"{results[AVERAGE] if name == AVERAGE else reported_score(results[name]):.2f}" for name in names]
    widths = [max(len(header), len(value)) for header, value in zip(headers, values)]
    return "\n".join(
        " | ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in (headers, values)
    )
