"""The embedding store (pipeline.evaluation.store): each sentence encoded once per tower, resume state
that survives a kill and two writers at once, bounded and prunable."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pipeline.evaluation import store as store_module
from pipeline.evaluation.store import EmbeddingStore, prune, store_size, tower_key
from pipeline.io import is_temporary

SENTENCES = [f"sentence number {index} " + "word " * (index % 7) for index in range(200)]


def vector_of(sentence: str) -> np.ndarray:
    """A sentence's embedding that does not depend on its batch: any mix-up between rows shows."""
    rng = np.random.default_rng(sum(sentence.encode()) * 1_000_003 + len(sentence))
    return rng.standard_normal(8).astype(np.float32)


class Counting:
    """A batch embedder that counts the sentences it is asked to encode."""

    def __init__(self):
        self.sentences = 0

    def __call__(self, batch):
        self.sentences += len(batch)
        return np.stack([vector_of(sentence) for sentence in batch])


def _store(root: Path | None, embedder=None) -> EmbeddingStore:
    embedder = embedder or Counting()
    return EmbeddingStore(root, "cls|32", lambda tower: embedder, batch_size=16)


def test_each_sentence_is_encoded_once_per_tower_and_read_back_by_later_stores(tmp_path):
    embedder = Counting()
    first = _store(tmp_path, embedder)
    rows = first.tower_rows("test/tower", SENTENCES[:50] + SENTENCES[:10])  # duplicates allowed
    np.testing.assert_array_equal(rows, np.stack([vector_of(s) for s in SENTENCES[:50] + SENTENCES[:10]]))
    assert embedder.sentences == 50
    later = _store(tmp_path, embedder)  # another stage: only the 30 new sentences are encoded
    np.testing.assert_array_equal(later.tower_rows("test/tower", SENTENCES[20:80]), np.stack([vector_of(s) for s in SENTENCES[20:80]]))
    assert embedder.sentences == 80 and later.counts.passes == 1 and later.counts.encoded == 30
    assert len(list(tmp_path.glob("*/*.npz"))) == 2
    other_settings = EmbeddingStore(tmp_path, "avg|32", lambda tower: embedder, 16)
    other_settings.tower_rows("test/tower", SENTENCES[:5])
    assert embedder.sentences == 85  # the settings are part of the key


def test_a_combination_is_the_weighted_sum_of_its_towers_rows(tmp_path):
    embedders = {"a": Counting(), "b": Counting()}
    store = EmbeddingStore(tmp_path, "cls|32", embedders.__getitem__, 16)
    summed = store.model_rows([("a", 0.3), ("b", 0.7)], SENTENCES[:20])
    np.testing.assert_allclose(summed, 0.3 * store.tower_rows("a", SENTENCES[:20]) + 0.7 * store.tower_rows("b", SENTENCES[:20]), rtol=1e-6)
    assert [embedder.sentences for embedder in embedders.values()] == [20, 20]


def test_the_tower_key_is_the_content_of_the_weights_and_tokenizer_not_the_folder(tmp_path):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"weights")
        (tmp_path / name / "vocab.txt").write_text("a\nb\n")
    assert tower_key(str(tmp_path / "one"), "cls|32") == tower_key(str(tmp_path / "two"), "cls|32")
    (tmp_path / "two" / "vocab.txt").write_text("b\na\n")  # another tokenizer: other embeddings
    assert tower_key(str(tmp_path / "one"), "cls|32") != tower_key(str(tmp_path / "two"), "cls|32")
    assert tower_key(str(tmp_path / "one"), "cls|32") != tower_key(str(tmp_path / "one"), "avg|32")


def test_a_corrupt_shard_is_named_discarded_and_its_sentences_encoded_again(tmp_path, caplog):
    embedder = Counting()
    _store(tmp_path, embedder).tower_rows("t", SENTENCES[:30])
    (shard,) = tmp_path.glob("*/*.npz")
    shard.write_bytes(shard.read_bytes()[:200])
    with caplog.at_level(logging.WARNING):
        rows = _store(tmp_path, embedder).tower_rows("t", SENTENCES[:30])
    np.testing.assert_array_equal(rows, np.stack([vector_of(s) for s in SENTENCES[:30]]))
    assert embedder.sentences == 60
    assert any(shard.name in record.getMessage() and "corrupt" in record.getMessage() for record in caplog.records)


KILLED_WRITER = """
import os, signal, sys
import numpy as np
sys.path[:0] = [{root!r}, {tests!r}]
from pipeline.evaluation import store as store_module
from test_store import Counting, _store, SENTENCES

original = np.savez
def killed_midway(handle, **arrays):  # half the shard on disk, then SIGKILL: a kill mid-write
    original(handle, **arrays)
    handle.flush()
    handle.truncate(handle.tell() // 2)
    os.kill(os.getpid(), signal.SIGKILL)
store_module.np.savez = killed_midway
_store({store!r}).tower_rows("t", SENTENCES[50:120])
"""


def test_a_writer_killed_mid_write_leaves_the_store_consistent(tmp_path):
    root = tmp_path / "embeddings"
    embedder = Counting()
    _store(root, embedder).tower_rows("t", SENTENCES[:50])
    script = KILLED_WRITER.format(root=str(Path(__file__).parents[1]), tests=str(Path(__file__).parent), store=str(root))
    process = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert process.returncode == -signal.SIGKILL, process.stderr
    shards = [path for path in root.glob("*/*.npz") if not is_temporary(path)]
    assert len(shards) == 1  # the killed shard never reached the store (its hidden temporary is no shard)
    rows = _store(root, embedder).tower_rows("t", SENTENCES[:120])
    assert not [path for path in root.glob("*/*") if is_temporary(path)]  # the next write swept the dead writer's temporary
    np.testing.assert_array_equal(rows, np.stack([vector_of(s) for s in SENTENCES[:120]]))
    assert embedder.sentences == 120  # the first 50 read back, the killed writer's 70 encoded again


def _write_many(root: str, seed: int, rounds: int) -> int:
    """One process's lookups of random overlapping sets; returns how many rows were wrong."""
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(rounds):
        store = _store(Path(root))  # a fresh stage each round: sees the other process's shards
        chosen = [SENTENCES[index] for index in rng.choice(len(SENTENCES), size=40, replace=False)]
        rows = store.tower_rows("t", chosen)
        wrong += int(sum(not np.array_equal(row, vector_of(sentence)) for row, sentence in zip(rows, chosen)))
    return wrong


def test_two_processes_writing_the_store_at_once_corrupt_nothing(tmp_path, caplog):
    root = tmp_path / "embeddings"
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        wrong = pool.starmap(_write_many, [(str(root), 1, 25), (str(root), 2, 25)])
    assert wrong == [0, 0]
    with caplog.at_level(logging.WARNING):
        reader = _store(root)
        rows = reader.tower_rows("t", SENTENCES)
    np.testing.assert_array_equal(rows, np.stack([vector_of(s) for s in SENTENCES]))
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]  # no corrupt shard
    assert not list(root.glob("*/.*")) and not list(root.glob(".*"))  # no temporary left behind


def test_prune_removes_least_recently_used_shards_down_to_the_bound(tmp_path):
    root = tmp_path / "embeddings"
    embedder = Counting()
    store = _store(root, embedder)
    for start in range(0, 200, 50):
        store.tower_rows("t", SENTENCES[start : start + 50])
    shards = sorted(root.glob("*/*.npz"), key=lambda path: path.stat().st_mtime_ns)
    os.utime(shards[0], ns=(1, 1))  # the oldest: unused the longest
    size = store_size(root)
    deleted = prune(root, size - 1)
    assert deleted == [shards[0]]
    rows = _store(root, embedder).tower_rows("t", SENTENCES)
    np.testing.assert_array_equal(rows, np.stack([vector_of(s) for s in SENTENCES]))
    assert prune(root, 0) and not list(root.glob("*/*.npz"))


def test_the_store_prunes_itself_to_its_bound_but_keeps_what_it_uses(tmp_path):
    root = tmp_path / "embeddings"
    store = EmbeddingStore(root, "cls|32", lambda tower: Counting(), 16, max_bytes=1)
    store.tower_rows("t", SENTENCES[:50])
    other = EmbeddingStore(root, "cls|32", lambda tower: Counting(), 16, max_bytes=1)
    other.tower_rows("u", SENTENCES[:50])  # over the bound: the other tower's shard goes, its own stays
    assert len(list(root.glob("*/*.npz"))) == 1


def test_without_a_root_the_store_lives_in_the_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    embedder = Counting()
    store = _store(None, embedder)
    store.tower_rows("t", SENTENCES[:10]), store.tower_rows("t", SENTENCES[:10])
    assert embedder.sentences == 10 and not list(tmp_path.rglob("*.npz"))


def test_an_edit_of_the_code_that_makes_the_vectors_misses_the_store(tmp_path):
    """The store's key holds the vector code's digest: after an edit of the encoder (issue 56's fault probe read
    token 1 for cls_before_pooler and got the old score from the store, exit 0), the key changes and the vectors
    are encoded again; the vector code is every project file embedder.py runs (pipeline.code_deps)."""
    import shutil

    from pipeline.code_deps import REPO_ROOT, project_files
    from pipeline.evaluation.store import VECTOR_MODULE, embedder_settings, vector_code_digest

    assert {"pipeline/modeling/encoder.py", "pipeline/modeling/architecture.py",
            "pipeline/modeling/families/bert.py"} <= set(project_files(VECTOR_MODULE))
    for relative in project_files(VECTOR_MODULE):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / relative, tmp_path / relative)
    assert vector_code_digest(tmp_path) == vector_code_digest()
    encoder = tmp_path / "pipeline" / "modeling" / "encoder.py"
    encoder.write_text(encoder.read_text().replace("[:, 0]", "[:, 1]"))
    assert vector_code_digest(tmp_path) != vector_code_digest()
    assert vector_code_digest() in embedder_settings("cls_before_pooler", 32)


def test_a_sentence_is_read_from_the_first_written_shard_whatever_is_added_later(tmp_path):
    """Two passes may both encode a sentence (two processes at once), each with its batch's last bits: the
    first-written shard's vector is the one read, before and after the later shard appears and whatever the
    shards' names, so a forced rerun reads what the first run read (issue 56: STS12 moved in its 3rd decimal)."""
    first = _store(tmp_path)
    sentence = SENTENCES[0]
    before = first.tower_rows("test/tower", [sentence, SENTENCES[1]])[:1].copy()
    folder = next(tmp_path.glob("*/"))
    (first_shard,) = folder.glob("*.npz")
    # a later pass that encoded the same sentence in another batch: other last bits, a name sorting first
    partner = next(s for s in SENTENCES[2:] if store_module.shard_name([sentence, s]) < first_shard.name)
    later = np.stack([vector_of(sentence) + 1e-3, vector_of(partner)])
    store_module._write_shard(folder / store_module.shard_name([sentence, partner]), [sentence, partner], later)
    for reader in (first, _store(tmp_path)):  # the process that wrote the first shard, and a fresh one (a rerun)
        np.testing.assert_array_equal(reader.tower_rows("test/tower", [sentence]), before)
    # the set that later pass encoded whole is read from it, as it was encoded
    np.testing.assert_array_equal(_store(tmp_path).tower_rows("test/tower", [sentence, partner]), later)


EVALUATE_WITH_THE_STORE = """
import json, sys
from pathlib import Path
from pipeline.evaluated_models import WeightedTowers
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.store import EmbeddingStore, embedder_settings, model_tables
from pipeline.evaluation.sts import load_tasks, score_tasks
tower, root, senteval = sys.argv[1:4]
tasks = load_tasks(senteval, ["STSBenchmark"], max_pairs=100, seed=0)
store = EmbeddingStore(Path(root), embedder_settings("cls_before_pooler", 32),
                       lambda folder: HFEmbedder(folder, "cls_before_pooler", 32, 32, "cpu"), 32)
table = model_tables({"m": WeightedTowers.single(tower)}, tasks, store)["m"]
print(json.dumps({"avg": score_tasks(table, tasks)["avg"], "passes": store.counts.passes}))
"""


def _evaluate_with_the_store(tower: Path, checkout: Path, tmp_path: Path) -> dict:
    """The evaluate stage's scoring through the embedding store under `tmp_path`, run by `checkout`'s code."""
    from conftest import MIRROR

    done = subprocess.run([sys.executable, "-c", EVALUATE_WITH_THE_STORE, str(tower), str(tmp_path / "embeddings"),
                           str(MIRROR / "senteval")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _checkout_with(tmp_path: Path, relative: str, edit) -> Path:
    """A copy of the library with `edit(source)` written over the file `relative`."""
    import shutil

    from conftest import REPO_ROOT

    edited = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "pipeline", edited / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    (edited / relative).write_text(edit((edited / relative).read_text()))
    return edited


def test_editing_the_pooling_code_changes_the_next_evaluated_score(tmp_path):
    """Issue 56's fault probe, end to end: the same evaluation twice reads the store (no encoder pass, the same
    score); then, in a checkout whose pooling code is edited (cls_before_pooler's [CLS] vector shifted by
    1), the next evaluation misses the store, encodes again and scores what the edited code computes."""
    from conftest import REPO_ROOT
    from tiny_models import save_tiny_bert

    tower = save_tiny_bert(tmp_path / "tower", seed=7)
    first, again = _evaluate_with_the_store(tower, REPO_ROOT, tmp_path), _evaluate_with_the_store(tower, REPO_ROOT, tmp_path)
    assert first["passes"] == 1 and again == {"avg": first["avg"], "passes": 0}
    shortcut = "final_norm(model, states[:, 0])"  # the last layer run for [CLS] only: cls_before_pooler's path in evaluation

    def shifted(source: str) -> str:
        assert source.count(shortcut) == 1
        return source.replace(shortcut, "final_norm(model, states[:, 0] + 1.0)")

    after_the_edit = _evaluate_with_the_store(tower, _checkout_with(tmp_path, "pipeline/modeling/encoder.py", shifted), tmp_path)
    assert after_the_edit["passes"] == 1 and after_the_edit["avg"] != first["avg"]


def test_changing_the_familys_sentence_vector_hook_changes_the_next_evaluated_score(tmp_path):
    """Issue 64: BERT's sentence vector read from token 1 instead of [CLS] (the hook `sentence_vector` of its
    family, replaced at the end of families/bert.py): the evaluate stage's path scores the new vectors (it does
    not keep computing [CLS] alone) and the store, keyed by that file, does not serve the old score."""
    from conftest import REPO_ROOT
    from tiny_models import save_tiny_bert

    tower = save_tiny_bert(tmp_path / "tower", seed=7)
    before = _evaluate_with_the_store(tower, REPO_ROOT, tmp_path)
    hook = "\nBertFamily.sentence_vector = lambda self, hidden, attention_mask: hidden[:, 1]\n"
    edited = _checkout_with(tmp_path, "pipeline/modeling/families/bert.py", lambda source: source + hook)
    after = _evaluate_with_the_store(tower, edited, tmp_path)
    assert after["passes"] == 1 and after["avg"] != before["avg"]
