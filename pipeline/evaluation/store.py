"""The embedding store: every sentence encoded once per tower, for the whole pipeline.

The STS evaluator, every MTEB task, `analyze` and `checkpoints` read a tower's embeddings from here
and run the tower's encoder only on the sentences the store does not hold yet. A combination
(twin, ensemble, UC) is Σ wᵢ·towerᵢ over stored tower rows (`EmbeddingStore.model_rows`) and never
runs an encoder of its own.

Key: (the tower's content — its weights, config and tokenizer files, hashed; or a hub id —, what else
shapes the vectors: the pooler, the max length, and a digest of the code that computes them and of the
torch / transformers / tokenizers versions (`vector_code_digest`), the sentence). An edit of the encoder so
misses the store instead of reading the old vectors under the new code. Layout under the root
(data/cache/embeddings/):

    <tower key>/tower.json         what the key stands for (source folder, settings), for people
    <tower key>/<shard>.npz        sentences (UTF-8 bytes + offsets) and float32 vectors, row for row

A shard is the set of sentences one encoder pass added, named by the hash of those sentences and
written atomically (`pipeline.io.atomic_path`): a killed writer leaves no shard or a whole one, and
two processes that add shards at once write different files (or, for the same sentences, the same
file twice, either whole). A corrupt shard is named, discarded and its sentences encoded again; a
shard that vanishes under a reader (pruned by another process) is encoded again too.

Last bits: a batch's shape decides how the BLAS kernels round, so a sentence's vector carries the
last bits of the pass that first encoded it: each shard records when it was written, and a sentence is
read from the first-written shard holding it, so shards added later (another stage, a concurrent
process) never change it and a forced rerun is byte-identical. A set of sentences that one pass encoded whole is read
from that pass's shard (the STS tasks of every model, an MTEB task of an ensemble after its towers'),
so those repeat bit for bit; a fresh clone's `dvc repro` runs the stages in one order and repeats too.

Bounded: after each write the store prunes itself to `DEFAULT_MAX_BYTES`, least recently used
shards first (reading a shard marks it used), never a shard this process uses;
`python -m stages prune-embeddings --max-gb N` prunes to N GiB by hand (0 empties the store).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.code_deps import REPO_ROOT, project_files
from pipeline.data.sources import CONFIG_FILE, TOKENIZER_FILES
from pipeline.evaluation.sts import (
    BatchEmbedder, Embedder, EmbeddingTable, StsTask, combine_tables, embed_sentences, score_tasks, task_sentences,
)
from pipeline.io import atomic_path, is_temporary, write_json_atomic
from pipeline.cache_entries import CorruptEntry, read_cache_entry, sha256_of
from pipeline.evaluated_models import WeightedTowers

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 2**30
# The files of a saved model that decide its embeddings besides the weights and settings (a tokenizer
# borrowed from another repo is linked into the folder, so it is hashed too).
IDENTITY_FILES = (CONFIG_FILE, *TOKENIZER_FILES)

_file_digests: dict[tuple[str, int, int], str] = {}


def _file_digest(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) for the process: weights are large."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _file_digests:
        _file_digests[key] = sha256_of(path)
    return _file_digests[key]


def tower_key(tower: str, settings: str) -> str:
    """The store's key of a tower under embedder `settings`: the content of its folder's weights
    (*.safetensors) and identity files, or the hub id when `tower` is no folder."""
    digest = hashlib.sha256(f"embedder {settings}\n".encode())
    folder = Path(tower)
    files = sorted(folder.glob("*.safetensors")) + [folder / name for name in IDENTITY_FILES] if folder.is_dir() else []
    present = [path for path in files if path.is_file()]
    for path in present:
        digest.update(f"{path.name} {_file_digest(path)}\n".encode())
    if not any(path.suffix == ".safetensors" for path in present):
        digest.update(f"id {tower}\n".encode())
    return digest.hexdigest()[:32]


def shard_name(sentences: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(sentences)).encode()).hexdigest()[:24] + ".npz"


def _write_shard(path: Path, sentences: Sequence[str], vectors: np.ndarray, written: int | None = None) -> None:
    """A shard file: its sentences, their vectors and when it was written (ns; what decides which shard
    a sentence is read from, `_Tower`)."""
    encoded = [sentence.encode() for sentence in sentences]
    text = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    ends = np.cumsum([len(item) for item in encoded], dtype=np.int64)
    stamp = np.int64(time.time_ns() if written is None else written)
    with atomic_path(path) as temporary:
        with temporary.open("wb") as handle:  # np.savez on a path would append ".npz"
            np.savez(handle, text=text, ends=ends, vectors=np.asarray(vectors, dtype=np.float32), written=stamp)


def _read_sentences(path: Path) -> tuple[list[str], int]:
    """A shard's sentences and when it was written (0 for a shard written before shards said so)."""
    with np.load(path, allow_pickle=False) as stored:
        text, ends = stored["text"].tobytes(), stored["ends"]
        written = int(stored["written"]) if "written" in stored.files else 0
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    if len(ends) and (ends[-1] != len(text) or (np.diff(ends) < 0).any()):
        raise CorruptEntry(f"sentence offsets end at {ends[-1]} for {len(text)} bytes of text")
    return [text[start:end].decode() for start, end in zip(starts.tolist(), ends.tolist())], written


def _read_vectors(path: Path, rows: int) -> np.ndarray:
    with np.load(path, allow_pickle=False) as stored:
        vectors = stored["vectors"]
    if vectors.ndim != 2 or len(vectors) != rows or vectors.dtype != np.float32 or not np.isfinite(vectors).all():
        raise CorruptEntry(f"vectors of shape {vectors.shape} ({vectors.dtype}) for {rows} sentences, or non-finite")
    return vectors


@dataclass
class StoreCounts:
    """What a store did in this process: encoder passes run, sentences encoded, sentences read back."""

    passes: int = 0
    encoded: int = 0
    reused: int = 0

    def line(self) -> str:
        return f"embedding store: {self.passes} encoder passes ({self.encoded} sentences encoded, {self.reused} read from the store)"


@dataclass
class _Tower:
    """One tower's shards: {shard name: its sentences}, the sentence → shard index, vectors in memory.

    A sentence is read from the first-written shard that holds it (two processes may both encode it):
    shards added later, by any stage in any order, never change the vector a sentence is read as, so a
    forced rerun reads the bits the first run read."""

    folder: Path | None
    sentences: dict[str, list[str]] = field(default_factory=dict)
    written: dict[str, tuple[int, str]] = field(default_factory=dict)  # shard → (when written, its name): the order
    index: dict[str, str] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # shards this process wrote or read

    def add(self, name: str, sentences: list[str], written: int) -> None:
        self.sentences[name], self.written[name] = sentences, (written, name)
        for sentence in sentences:
            owner = self.index.get(sentence)
            if owner is None or self.written[name] < self.written[owner]:
                self.index[sentence] = name

    def forget(self, name: str) -> None:
        self.sentences.pop(name, None)
        self.vectors.pop(name, None)
        self.written.pop(name, None)
        self.index = {}
        for other, sentences in sorted(self.sentences.items(), key=lambda item: self.written[item[0]]):
            for sentence in sentences:
                self.index.setdefault(sentence, other)


class EmbeddingStore:
    """Tower embeddings by (tower, `settings`, sentence), persisted under `root` (None: this process only).

    `make_embedder(tower)` builds a tower's `Embedder`; it is called only when a tower has sentences
    the store lacks, once per tower and process.
    """

    def __init__(self, root: Path | None, settings: str, make_embedder: Callable[[str], Embedder | BatchEmbedder],
                 batch_size: int = 64, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root) if root is not None else None
        self.settings, self.make_embedder, self.batch_size, self.max_bytes = settings, make_embedder, batch_size, max_bytes
        self.counts = StoreCounts()
        self._towers: dict[str, _Tower] = {}
        self._embedders: dict[str, Embedder | BatchEmbedder] = {}

    def key(self, tower: str) -> str:
        return tower_key(tower, self.settings)

    def _tower(self, tower: str) -> _Tower:
        if tower not in self._towers:
            key = self.key(tower)
            self._towers[tower] = _Tower(self.root / key if self.root is not None else None)
        state = self._towers[tower]
        if state.folder is not None and state.folder.is_dir():  # shards another process added meanwhile
            for path in sorted(state.folder.glob("*.npz")):
                if path.name not in state.sentences and not is_temporary(path):
                    entry = read_cache_entry(path, _read_sentences, "embedding store shard")
                    if entry is not None:
                        state.add(path.name, *entry)
        return state

    def _encode(self, tower: str, state: _Tower, missing: list[str]) -> None:
        if tower not in self._embedders:
            self._embedders[tower] = self.make_embedder(tower)
        table = embed_sentences(self._embedders[tower], missing, self.batch_size,
                                description="/".join(Path(tower).parts[-2:]))
        ordered = list(table.index)
        vectors = table.vectors.astype(np.float32)
        name, written = shard_name(ordered), time.time_ns()
        self.counts.passes += 1
        self.counts.encoded += len(ordered)
        if state.folder is not None:
            _write_shard(state.folder / name, ordered, vectors, written)
            self._describe(tower, state.folder)
        state.add(name, ordered, written)
        state.vectors[name] = vectors
        if self.root is not None:
            prune(self.root, self.max_bytes, keep=self._used_paths())

    def _describe(self, tower: str, folder: Path) -> None:
        about = folder / "tower.json"
        if not about.is_file():
            write_json_atomic(about, {"tower": str(tower), "settings": self.settings})

    def _used_paths(self) -> set[Path]:
        return {state.folder / name for state in self._towers.values() if state.folder is not None for name in state.sentences}

    def _shard_vectors(self, state: _Tower, name: str) -> np.ndarray | None:
        if name in state.vectors:
            return state.vectors[name]
        path = state.folder / name
        vectors = read_cache_entry(path, lambda file: _read_vectors(file, len(state.sentences[name])), "embedding store shard")
        if vectors is None:  # corrupt (discarded) or pruned by another process
            state.forget(name)
            return None
        os.utime(path)  # used: the last to be pruned
        state.vectors[name] = vectors
        return vectors

    def tower_rows(self, tower: str, sentences: Sequence[str]) -> np.ndarray:
        """The tower's float32 embedding of each of `sentences`, row i for sentence i (duplicates allowed)."""
        state = self._tower(tower)
        for _ in range(3):  # a shard lost under us (pruned, corrupt) sends its sentences back to the encoder
            distinct = list(dict.fromkeys(sentences))
            missing = [sentence for sentence in distinct if sentence not in state.index]
            self.counts.reused += len(distinct) - len(missing)
            if missing:
                self._encode(tower, state, missing)
            # A set that one pass encoded whole is read from that pass alone: the same batches, so the
            # same last bits as when it was encoded (a model's MTEB task after its towers' own).
            whole = shard_name(distinct)
            owner = {sentence: whole for sentence in distinct} if whole in state.sentences else state.index
            shards: dict[str, np.ndarray] = {}
            for name in dict.fromkeys(owner[sentence] for sentence in distinct):
                vectors = self._shard_vectors(state, name)
                if vectors is None:
                    break
                shards[name] = vectors
            else:
                if not distinct:
                    return np.zeros((0, 0), np.float32)
                positions = {name: {s: row for row, s in enumerate(state.sentences[name])} for name in shards}
                rows = {sentence: shards[owner[sentence]][positions[owner[sentence]][sentence]] for sentence in distinct}
                return np.stack([rows[sentence] for sentence in sentences])
        raise RuntimeError(f"the embedding store under {self.root} keeps losing shards of {tower}; is it pruned to 0 by another process?")

    def tower_table(self, tower: str, sentences: Sequence[str]) -> EmbeddingTable:
        """The tower's `EmbeddingTable` of `sentences` (each distinct sentence once)."""
        distinct = list(dict.fromkeys(sentences))
        return EmbeddingTable({sentence: row for row, sentence in enumerate(distinct)}, self.tower_rows(tower, distinct))

    def model_rows(self, towers, sentences: Sequence[str]) -> np.ndarray:
        """Σ wᵢ·towerᵢ of each sentence (`WeightedTowers.combine`), from the towers' stored rows."""
        towers = WeightedTowers.of(towers)
        members = [self.tower_rows(tower, sentences) for tower in towers.folders]
        if len(members) == 1 and towers.weights[0] == 1:
            return members[0]
        return np.asarray(towers.combine(members), dtype=np.float32)


def model_tables(models: Mapping[str, WeightedTowers], tasks: Sequence[StsTask], store: EmbeddingStore) -> dict[str, EmbeddingTable]:
    """Each named model's embedding table of the tasks' sentences: every distinct tower's rows come
    from `store` (encoded there once) and a model's table is their weighted sum."""
    sentences = task_sentences(tasks)
    towers = dict.fromkeys(tower for members in models.values() for tower, _ in members)
    tables = {tower: store.tower_table(tower, sentences) for tower in towers}
    return {name: combine_tables(tables, members) for name, members in models.items()}


def evaluate_models(
    models: Mapping[str, WeightedTowers],
    tasks: Sequence[StsTask],
    make_embedder: Callable[[str], Embedder | BatchEmbedder],
    batch_size: int = 64,
    cache_dir: Path | None = None,
    embedder_settings: str = "",
) -> dict[str, dict]:
    """Scores of each named model: `score_tasks` on its `model_tables` table, the towers' embeddings
    in an `EmbeddingStore` under `cache_dir` (None: this call only) keyed with `embedder_settings`
    (intervals: pipeline.evaluation.bootstrap.scores_with_intervals on the same tables)."""
    store = EmbeddingStore(cache_dir, embedder_settings, make_embedder, batch_size)
    return {name: score_tasks(table, tasks) for name, table in model_tables(models, tasks, store).items()}


# The code that turns a tower's weights into vectors: HFEmbedder's module and every project file it runs
# (`pipeline.code_deps`). An edit of it must miss the store, not read the old vectors under the new code.
# The libraries' versions likewise.
VECTOR_MODULE = "pipeline/evaluation/embedder.py"
VECTOR_LIBRARIES = ("torch", "transformers", "tokenizers")


def vector_code_digest(root: Path = REPO_ROOT) -> str:
    """A digest of the bytes of the files `VECTOR_MODULE` runs and of `VECTOR_LIBRARIES`' versions."""
    from importlib import metadata

    digest = hashlib.sha256()
    for relative in project_files(VECTOR_MODULE, root):
        digest.update(f"{relative}\n".encode() + (root / relative).read_bytes())
    for package in VECTOR_LIBRARIES:
        digest.update(f"{package} {metadata.version(package)}\n".encode())
    return digest.hexdigest()[:16]


def embedder_settings(pooler: str, max_length: int) -> str:
    """What besides a tower's weights shapes its embeddings: the settings part of the store's key (the pooler,
    the length, and the code and libraries that compute the vectors)."""
    return f"{pooler}|{max_length}|code {_running_code_digest()}"


@functools.cache
def _running_code_digest() -> str:
    """`vector_code_digest` of this checkout, read once per process: the code a process runs does not change under it."""
    return vector_code_digest()


def pipeline_store(params, pooler: str | None = None) -> EmbeddingStore:
    """The pipeline's store (data/cache/embeddings/) with eval's embedder (`HFEmbedder`, loaded only
    when a tower lacks sentences); `pooler` other than eval.pooler for a checkpoint's own."""
    from pipeline import paths

    settings = params.eval
    pooler = pooler or settings.pooler

    def make_embedder(tower: str) -> Embedder:
        from pipeline.evaluation.embedder import HFEmbedder  # transformers only when a tower lacks sentences

        return HFEmbedder(tower, pooler, settings.max_length, settings.batch_size, params.device,
                          token_budget=settings.token_budget)

    return EmbeddingStore(paths.EMBEDDINGS_CACHE, embedder_settings(pooler, settings.max_length), make_embedder,
                          settings.batch_size)


def _stored_files(root: Path, pattern: str) -> list[tuple[Path, os.stat_result]]:
    """The files under `root` matching `pattern`, with their stat, oldest modification first. Not the
    temporaries of writers in flight (dot names, `pipeline.io.atomic_path`), nor a file another process
    renamed or pruned between listing and stat."""
    found = []
    for path in Path(root).glob(pattern):
        if is_temporary(path):
            continue
        try:
            status = path.stat()
        except FileNotFoundError:
            continue
        if path.is_file():
            found.append((path, status))
    return sorted(found, key=lambda item: item[1].st_mtime_ns)


def store_size(root: Path) -> int:
    return sum(status.st_size for _, status in _stored_files(root, "**/*"))


def prune(root: Path, max_bytes: int, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete least recently used shards (by modification time, which a read refreshes) until the
    store under `root` holds at most `max_bytes`; never those in `keep`, nor another writer's temporary.
    Files of older cache layouts directly under `root` go first. Tower folders stay (a writer may be
    about to fill one). Returns the deleted paths."""
    root, kept = Path(root), {Path(path).resolve() for path in keep}
    if not root.is_dir():
        return []
    stray = _stored_files(root, "*")
    shards = _stored_files(root, "*/*.npz")
    total = store_size(root)
    deleted = []
    for path, status in stray + shards:
        if total <= max_bytes:
            break
        if path.resolve() in kept:
            continue
        path.unlink(missing_ok=True)
        total -= status.st_size
        deleted.append(path)
    if deleted:
        log.info("embedding store %s: pruned %d files, %.1f MiB left", root, len(deleted), total / 2**20)
    return deleted

