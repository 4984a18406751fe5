"""The STS evaluator (SentEval protocol) and the standalone `evaluate` command."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from scipy.stats import spearmanr
from typer.testing import CliRunner

from pipeline.data.readers import ScoredPair, read_sts_subset
from pipeline.data.sts_pairs import load_sts_benchmark
from pipeline.evaluation.embedder import AUTO_TOKEN_BUDGET, HFEmbedder, pad_batch, token_budget_batches
from pipeline.evaluation.store import evaluate_models
from pipeline.evaluation.sts import (
    StsTask,
    combine_tables,
    embed_sentences,
    evaluate_embedder,
    format_table,
    load_tasks,
    sample_pairs,
    score_tasks,
    task_rng,
    task_sentences,
)
from pipeline.evaluated_models import WeightedTowers
from stages import evaluate as evaluate_stage

from tiny_models import save_tiny_bert

from conftest import MIRROR  # noqa: E402

SENTEVAL = MIRROR / "senteval"


def _at_cosine(similarity: float) -> np.ndarray:
    return np.array([similarity, math.sqrt(1 - similarity**2)])


def _lookup_embedder(vectors: dict[str, np.ndarray]):
    return lambda batch: np.stack([vectors[sentence] for sentence in batch])


def test_all_is_spearman_over_concatenated_subsets_and_is_reported():
    # Within each subset the cosines rank the pairs perfectly, across subsets they do not.
    cosines = {"a": [0.1, 0.2, 0.3], "b": [0.0, 0.05, 0.08]}
    golds = {"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}
    vectors = {"reference": np.array([1.0, 0.0])}
    subsets = {}
    for subset, values in cosines.items():
        subsets[subset] = [ScoredPair("reference", f"{subset}{i}", gold) for i, gold in enumerate(golds[subset])]
        vectors.update({f"{subset}{i}": _at_cosine(value) for i, value in enumerate(values)})
    results = evaluate_embedder(_lookup_embedder(vectors), [StsTask("STS12", subsets)])

    expected_all = spearmanr(cosines["a"] + cosines["b"], golds["a"] + golds["b"]).statistic * 100
    assert results["STS12"]["subsets"] == pytest.approx({"a": 100.0, "b": 100.0})
    assert results["STS12"]["mean"] == pytest.approx(100.0)
    assert results["STS12"]["all"] == pytest.approx(expected_all)
    assert results["avg"] == round(expected_all, 2)
    assert format_table(results).splitlines()[1].split() == [f"{expected_all:.2f}", "|", f"{expected_all:.2f}"]


def test_pairs_with_empty_gold_lines_are_not_scored(tmp_path):
    task_dir = tmp_path / "STS" / "STS12-en-test"
    task_dir.mkdir(parents=True)
    (task_dir / "STS.input.toy.txt").write_text("r\ts1\nr\ts2\nr\ts3\nr\ts4\n")
    # Were the unscored third pair scored 0, the ranking would no longer be perfect.
    (task_dir / "STS.gs.toy.txt").write_text("1\n2\n\n4\n")
    vectors = {"r": np.array([1.0, 0.0])} | {f"s{i}": _at_cosine(i / 10) for i in range(1, 5)}
    task = StsTask("STS12", {"toy": read_sts_subset(task_dir / "STS.input.toy.txt", task_dir / "STS.gs.toy.txt")})
    assert len(task.subsets["toy"]) == 3
    assert evaluate_embedder(_lookup_embedder(vectors), [task])["STS12"]["all"] == pytest.approx(100.0)


def test_max_pairs_is_a_seeded_sample_across_the_subsets_not_the_first_pairs():
    (whole,) = load_tasks(SENTEVAL, ["STS12"])
    (sample,) = load_tasks(SENTEVAL, ["STS12"], max_pairs=300, seed=7)
    assert sum(map(len, sample.subsets.values())) == 300
    assert len(sample.subsets) > 1  # the first 300 pairs are MSRpar's alone
    assert sample.subsets != {"MSRpar": whole.subsets["MSRpar"][:300]}
    drawn = sample_pairs(whole.subsets, 300, task_rng(7, "sample", "STS12", "test"))  # what load_tasks drew
    assert drawn == sample.subsets
    for name, pairs in drawn.items():  # distinct pairs, each in its subset's order (by identity: STS12 repeats pairs)
        where = {id(pair): position for position, pair in enumerate(whole.subsets[name])}
        positions = [where[id(pair)] for pair in pairs]
        assert positions == sorted(set(positions))
    assert load_tasks(SENTEVAL, ["STS12"], max_pairs=300, seed=7)[0] == sample
    assert load_tasks(SENTEVAL, ["STS12"], max_pairs=300, seed=8)[0] != sample


def test_a_task_draws_the_same_sample_whatever_else_is_evaluated_and_small_tasks_stay_whole():
    alone = load_tasks(SENTEVAL, ["STS13"], max_pairs=200, seed=1)[0]
    assert load_tasks(SENTEVAL, ["STSBenchmark", "STS13"], max_pairs=200, seed=1)[1] == alone
    (whole,) = load_tasks(SENTEVAL, ["STS16"])
    assert load_tasks(SENTEVAL, ["STS16"], max_pairs=5000, seed=1)[0] == whole


def test_a_max_pairs_sample_needs_a_seed():
    with pytest.raises(ValueError, match="seed"):
        load_tasks(SENTEVAL, ["STS12"], max_pairs=300)


@pytest.fixture(scope="module")
def tiny_berts(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny-bert")
    return save_tiny_bert(root / "I", seed=1), save_tiny_bert(root / "II", seed=2)


@pytest.fixture(scope="module")
def stsb_sample() -> list[StsTask]:
    """STS-B's first 24 test pairs (a sentence repeats in them: the deduplication has work)."""
    return [StsTask("STSBenchmark", {"test": load_sts_benchmark(SENTEVAL, "STSBenchmark", "test")["test"][:24]})]


class CountingEmbedder:
    """Wraps an embedder and counts the sentences it was asked to encode."""

    def __init__(self, embedder):
        self.embedder, self.encoded = embedder, 0

    def __call__(self, batch):
        self.encoded += len(batch)
        return self.embedder(batch)


def _bag_of_characters(batch: list[str]) -> np.ndarray:
    """A deterministic embedder whose output does not depend on the batch it is in."""
    return np.stack([np.bincount(np.frombuffer(s.encode(), np.uint8), minlength=256) for s in batch]).astype(np.float32)


def test_dedup_and_length_sorting_match_naive_per_pair_encoding(stsb_sample):
    pairs = stsb_sample[0].subsets["test"]
    naive_cosines = [
        torch.cosine_similarity(*(torch.from_numpy(_bag_of_characters([s])) for s in (p.sentence1, p.sentence2))).item()
        for p in pairs
    ]
    naive = spearmanr(naive_cosines, [pair.score for pair in pairs]).statistic * 100

    counting = CountingEmbedder(_bag_of_characters)
    results = evaluate_embedder(counting, stsb_sample, batch_size=16)
    assert results["STSBenchmark"]["test"] == pytest.approx(naive, abs=1e-9)
    assert counting.encoded == len(set(task_sentences(stsb_sample))) < 2 * len(pairs)


def test_padded_batches_embed_like_single_sentences(tiny_berts, stsb_sample):
    sentences = task_sentences(stsb_sample)[:6]
    for pooler in ("cls", "avg_first_last"):  # one [CLS]-based and one masked-mean pooler
        embedder = HFEmbedder(tiny_berts[0], pooler=pooler)
        single = torch.cat([embedder([sentence]) for sentence in sentences])
        torch.testing.assert_close(embedder(sentences), single, atol=1e-5, rtol=1e-4)


def test_token_budget_batches_cover_every_sentence_once_within_the_budget():
    lengths = [5, 40, 12, 12, 3, 40, 7, 100, 1, 9, 9, 9]
    batches = token_budget_batches(lengths, token_budget=48)
    flat = [position for batch in batches for position in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[position] for position in flat] == sorted(lengths, reverse=True)  # longest first
    assert flat[:2] == [7, 1]  # ties keep position order
    for batch in batches:
        padded = len(batch) * max(lengths[position] for position in batch)
        assert padded <= 48 or len(batch) == 1  # one over-long sentence still gets its batch
    assert [len(batch) for batch in batches] == [1, 1, 1, 4, 5]  # 100 | 40 | 40 | 12 12 9 9 | 9 7 5 3 1
    assert token_budget_batches([], 16) == []


def test_pad_batch_pads_like_the_tokenizer(tiny_berts):
    embedder = HFEmbedder(tiny_berts[0], device="cpu")
    assert embedder.token_budget == AUTO_TOKEN_BUDGET["cpu"]  # token_budget="auto" resolves by device
    tokenizer = embedder.tokenizer
    texts = ["a", "a girl is styling her hair .", "two dogs"]
    expected = tokenizer(texts, padding=True, return_tensors="pt")
    input_ids, mask = pad_batch(tokenizer(texts)["input_ids"], tokenizer.pad_token_id)
    assert torch.equal(input_ids, expected["input_ids"]) and torch.equal(mask, expected["attention_mask"])
    left_ids, left_mask = pad_batch([[7], [1, 2, 3]], pad_id=0, left=True)
    assert left_ids.tolist() == [[0, 0, 7], [1, 2, 3]] and left_mask.tolist() == [[0, 0, 1], [1, 1, 1]]


def _ragged_sentences(stsb_sample) -> list[str]:
    """STS-B sentences plus very short and very long ones, so batches hold 1 to many sentences."""
    long = " ".join(task_sentences(stsb_sample)[:6])
    return task_sentences(stsb_sample) + ["a", "no", long, long[: len(long) // 2], "a dog ."]


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg_first_last"])
def test_token_budget_batching_gives_the_fixed_batches_embeddings(tiny_berts, stsb_sample, pooler):
    sentences = _ragged_sentences(stsb_sample)
    budgeted = HFEmbedder(tiny_berts[0], pooler=pooler, max_length=96, token_budget=160)
    fixed = CountingEmbedder(HFEmbedder(tiny_berts[0], pooler=pooler, max_length=96))  # no `encode`: fixed batches
    lengths = budgeted.token_lengths(sorted(set(sentences)))
    sizes = {len(batch) for batch in token_budget_batches(lengths, 160)}
    assert max(lengths) == 96 and min(sizes) == 1 and max(sizes) >= 8  # ragged, truncated, batches of many sizes
    new = embed_sentences(budgeted, sentences, batch_size=16)
    old = embed_sentences(fixed, sentences, batch_size=16)
    assert fixed.encoded == len(set(sentences))
    np.testing.assert_allclose(new.lookup(sentences), old.lookup(sentences), atol=1e-5, rtol=0)
    # the rows come back in the sentences' order
    single = torch.cat([budgeted([sentence]) for sentence in sentences[:5]]).numpy()
    np.testing.assert_allclose(budgeted.encode(sentences[:5]).cpu().numpy(), single, atol=1e-5, rtol=0)


def test_budgeted_scores_equal_senteval_per_pair_encoding():
    """SentEval's way: each side of the pairs in its own padded batches of 64, in file order. A real
    model (MiniLM), as a random one's cosines all lie within 1e-5 of 1 and rank by rounding noise."""
    from tools.benchmark.timing_inputs import MINILM_PACKAGE
    from pipeline.data.sources import package_model_dir

    # the first 120 pairs (STS12: MSRpar's), where no pair's cosines (nearly) tie: see the sts module doc
    tasks = [StsTask(name, {subset: pairs[:120]}) for name, subset in (("STSBenchmark", "test"), ("STS12", "MSRpar"))
             for pairs in [load_sts_benchmark(SENTEVAL, name)[subset]]]
    embedder = HFEmbedder(package_model_dir(MINILM_PACKAGE), token_budget=1024)
    ours = evaluate_embedder(embedder, tasks)
    for task in tasks:
        pairs = [pair for subset in task.subsets.values() for pair in subset]
        sides = [np.concatenate([embedder([getattr(pair, side) for pair in pairs[start : start + 64]]).numpy()
                                 for start in range(0, len(pairs), 64)]) for side in ("sentence1", "sentence2")]
        cosines = (sides[0] * sides[1]).sum(1) / (np.linalg.norm(sides[0], axis=1) * np.linalg.norm(sides[1], axis=1))
        senteval = spearmanr(cosines, [pair.score for pair in pairs]).statistic * 100
        score = ours[task.name]["test"] if task.name == "STSBenchmark" else ours[task.name]["all"]
        assert 10 < score == pytest.approx(senteval, abs=1e-4)


def test_twin_table_is_the_sum_of_its_towers_and_each_tower_is_encoded_once(tiny_berts, stsb_sample):
    towers = {str(path): CountingEmbedder(HFEmbedder(path)) for path in tiny_berts}
    first, second = towers
    results = evaluate_models(
        {"I": [(first, 1.0)], "twin": WeightedTowers.twin(first, second), "uc": WeightedTowers.uc(first, second, first, 0.7)},
        stsb_sample,
        make_embedder=towers.__getitem__,
        batch_size=16,
    )
    unique = len(task_sentences(stsb_sample))
    assert [tower.encoded for tower in towers.values()] == [unique, unique]

    sentences = task_sentences(stsb_sample)
    table_i, table_ii = (embed_sentences(tower.embedder, sentences, batch_size=16) for tower in towers.values())
    assert results["I"] == score_tasks(table_i, stsb_sample)
    tables = {first: table_i, second: table_ii}
    summed = combine_tables(tables, WeightedTowers.twin(first, second))
    np.testing.assert_array_equal(summed.lookup(sentences), table_i.lookup(sentences) + table_ii.lookup(sentences))
    assert results["twin"] == score_tasks(summed, stsb_sample)

    # The UC weights reproduce the papers' formula (1 − w)(h_I + h_II) + w · h_UC.
    h_i, h_ii = (torch.from_numpy(table.lookup(sentences)) for table in (table_i, table_ii))
    uc_table = combine_tables(tables, WeightedTowers.uc(first, second, first, 0.7))
    np.testing.assert_allclose(uc_table.lookup(sentences), (0.3 * (h_i + h_ii) + 0.7 * h_i).numpy(), rtol=1e-5)
    assert results["uc"] == score_tasks(uc_table, stsb_sample)


def test_tower_tables_persist_in_the_cache_and_are_reused(tiny_berts, stsb_sample, tmp_path):
    towers = {str(path): CountingEmbedder(HFEmbedder(path)) for path in tiny_berts}
    first, second = towers
    cache = tmp_path / "embeddings"
    alone = evaluate_models({"I": [(first, 1.0)]}, stsb_sample, towers.__getitem__, 16, cache, "cls_before_pooler")
    assert len(list(cache.glob("*/*.npz"))) == 1
    encoded_once = towers[first].encoded
    both = evaluate_models({"twin": WeightedTowers.twin(first, second)}, stsb_sample, towers.__getitem__, 16, cache, "cls_before_pooler")
    assert towers[first].encoded == encoded_once  # tower I came from the cache
    assert towers[second].encoded == encoded_once
    uncached = evaluate_models({"I": [(first, 1.0)], "twin": WeightedTowers.twin(first, second)}, stsb_sample, towers.__getitem__, 16)
    assert uncached == {**alone, **both}
    other_settings = evaluate_models({"I": [(first, 1.0)]}, stsb_sample, towers.__getitem__, 16, cache, "avg")
    assert other_settings == alone and len(list(cache.glob("*/*.npz"))) == 3


@pytest.mark.parametrize("damage", ["truncated", "wrong_rows"])
def test_a_corrupt_embedding_table_is_named_discarded_and_recomputed(tiny_berts, stsb_sample, tmp_path, caplog, damage):
    towers = {str(path): CountingEmbedder(HFEmbedder(path)) for path in tiny_berts[:1]}
    (tower,) = towers
    cache = tmp_path / "embeddings"
    first = evaluate_models({"I": [(tower, 1.0)]}, stsb_sample, towers.__getitem__, 16, cache, "cls_before_pooler")
    (stored,) = cache.glob("*/*.npz")
    if damage == "truncated":  # a killed copy, a full disk: np.load raises BadZipFile
        stored.write_bytes(stored.read_bytes()[:100])
    else:  # a well-formed file whose vectors do not match its sentences
        np.savez(stored.open("wb"), sentences=np.array(["a", "b"]), vectors=np.zeros((3, 4), dtype=np.float32))
    encoded = towers[tower].encoded
    with caplog.at_level(logging.WARNING):
        again = evaluate_models({"I": [(tower, 1.0)]}, stsb_sample, towers.__getitem__, 16, cache, "cls_before_pooler")
    assert again == first and towers[tower].encoded > encoded  # recomputed, not trusted
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and stored.name in warnings[0] and "corrupt" in warnings[0]
    assert stored.is_file()  # written again, whole
    assert evaluate_models({"I": [(tower, 1.0)]}, stsb_sample, towers.__getitem__, 16, cache, "cls_before_pooler") == first


def _cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command()(evaluate_stage.command)
    return app


def _run(*args: str):
    return CliRunner().invoke(_cli(), list(args))


def test_command_on_tiny_random_berts_gives_finite_scores(tiny_berts, tmp_path):
    output = tmp_path / "metrics" / "twin.json"
    model_args = [arg for path in tiny_berts for arg in ("--model", str(path))]
    result = _run(*model_args, "--senteval", str(SENTEVAL), "--max-pairs", "100", "--device", "cpu", "--output", str(output))
    assert result.exit_code == 0, result.output
    results = json.loads(output.read_text())
    assert list(results) == ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"]
    assert set(results["STSBenchmark"]) == {"test"} and set(results["STS12"]) == {"all", "mean", "subsets"}
    assert math.isfinite(results["avg"]) and "Avg." in result.stdout
    assert not list(output.parent.glob(".*"))  # no temporary file left beside the output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no/such/folder"], "model folder no/such/folder does not exist"),
        (["--model", "MODEL", "--tasks", "STS99"], "unknown STS task 'STS99'"),
        (["--model", "MODEL", "--pooler", "max"], "--pooler=max is not a known pooler"),
        (["--model", "MODEL", "--senteval", "nowhere"], "SentEval data folder nowhere does not exist; run `dvc repro download`"),
        (["--model", "MODEL", "--token-budget", "64"], "--token-budget=64 is less than --max-length=128: a batch must hold one sentence"),
        (["--model", "MODEL", "--token-budget", "many"], "--token-budget='many' is not auto"),
    ],
)
def test_command_errors_are_one_line_with_exit_code_2(tiny_berts, tmp_path, args, message):
    args = [str(tiny_berts[0]) if arg == "MODEL" else arg for arg in args]
    if "--senteval" not in args:
        args += ["--senteval", str(SENTEVAL)]
    result = _run(*args, "--output", str(tmp_path / "out.json"))
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()
