"""The readers on the real mirror files (pair counts SentEval evaluates on) and on broken files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.data.readers import (
    MalformedDataError,
    ScoredPair,
    read_corpus,
    read_sick,
    read_sts_subset,
    read_stsb,
)
from pipeline.data.sts_tasks import load_sts_benchmark
from pipeline.errors import PipelineError

DATA = Path(__file__).parents[1] / ".." / "shared" / "data"
SENTEVAL = DATA / "senteval"


@pytest.mark.parametrize(
    ("task", "pairs"),
    [
        ("STS12", 3108),
        ("STS13", 1500),
        ("STS14", 3750),
        ("STS15", 3000),
        ("STS16", 1186),
        ("STSBenchmark", 1379),
        ("SICKRelatedness", 4927),
    ],
)
def test_scored_pairs_per_task_match_senteval(task, pairs):
    subsets = load_sts_benchmark(SENTEVAL, task)
    assert sum(len(subset) for subset in subsets.values()) == pairs


def test_sts13_has_no_smt_subset_and_keeps_senteval_order():
    assert list(load_sts_benchmark(SENTEVAL, "STS13")) == ["FNWN", "headlines", "OnWN"]


def test_sentences_are_whitespace_normalised_and_scores_parsed():
    pairs = [pair for subset in load_sts_benchmark(SENTEVAL, "STS14").values() for pair in subset]
    assert all(pair.sentence1 == " ".join(pair.sentence1.split()) for pair in pairs)
    assert load_sts_benchmark(SENTEVAL, "STSBenchmark")["test"][0] == ScoredPair(
        "a girl is styling her hair .", "a girl is brushing her hair .", 2.5
    )


def test_sick_splits_with_crlf_test_file():
    test = load_sts_benchmark(SENTEVAL, "SICKRelatedness")["test"]
    assert not any("\r" in pair.sentence2 for pair in test)
    assert len(load_sts_benchmark(SENTEVAL, "SICKRelatedness", "train")["train"]) == 4500
    assert len(load_sts_benchmark(SENTEVAL, "SICKRelatedness", "dev")["dev"]) == 500


def test_raw_stsb_rows_with_7_and_9_columns():
    raw = DATA / "raw" / "STSBenchmark"
    assert [len(read_stsb(raw / f"sts-{split}.csv")) for split in ("train", "dev", "test")] == [5749, 1500, 1379]
    assert len(load_sts_benchmark(SENTEVAL, "STSBenchmark", "dev")["dev"]) == 1500


def test_raw_sts16_inputs_with_source_columns():
    raw = DATA / "raw" / "STS16"
    assert len(read_sts_subset(raw / "STS2016.input.headlines.txt", raw / "STS2016.gs.headlines.txt")) == 249


def test_corpus_sample():
    assert len(read_corpus(DATA / "wiki1m" / "wiki1m_for_simcse.head.txt")) == 11913


def test_unknown_task_and_split():
    with pytest.raises(PipelineError, match="unknown STS task 'STS99'"):
        load_sts_benchmark(SENTEVAL, "STS99")
    with pytest.raises(PipelineError, match="only a test split"):
        load_sts_benchmark(SENTEVAL, "STS12", "dev")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", newline="")
    return path


def test_empty_gold_lines_are_skipped(tmp_path):
    pairs = read_sts_subset(
        _write(tmp_path / "in.txt", "a b\tc\nd\te  f \ng\th\n"), _write(tmp_path / "gs.txt", "1.5\n\n4\n")
    )
    assert pairs == [ScoredPair("a b", "c", 1.5), ScoredPair("g", "h", 4.0)]


@pytest.mark.parametrize(
    ("input_text", "gold_text", "where", "what"),
    [
        ("a\tb\nc d\n", "1\n2\n", "in.txt:2", "expected 2 or 4 tab-separated columns"),
        ("a\tb\nc\td\n", "1\nhigh\n", "gs.txt:2", "score 'high' is not a number"),
        ("a\tb\nc\td\n", "1\nnan\n", "gs.txt:2", "score 'nan' is not a number"),
        ("a\tb\nc\td\n", "1\n", "gs.txt:2", "in.txt has 2 lines but gs.txt has 1"),
        ("a\tb\n", "1\n2\n", "in.txt:2", "line missing"),
    ],
)
def test_malformed_sts_subset(tmp_path, input_text, gold_text, where, what):
    with pytest.raises(MalformedDataError) as error:
        read_sts_subset(_write(tmp_path / "in.txt", input_text), _write(tmp_path / "gs.txt", gold_text))
    assert where in str(error.value) and what in str(error.value)


def test_malformed_stsb_row(tmp_path):
    path = _write(tmp_path / "sts-test.csv", "g\tf\ty\t1\t2.0\ta\tb\ng\tf\ty\t2\t3.0\ta\n")
    with pytest.raises(MalformedDataError, match=r"sts-test.csv:2: expected 7 or 9 tab-separated columns .* found 6"):
        read_stsb(path)


def test_malformed_sick(tmp_path):
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\r\n"
    with pytest.raises(MalformedDataError, match=r"SICK.txt:3: score '' is not a number"):
        read_sick(_write(tmp_path / "SICK.txt", header + "1\ta\tb\t4.5\tNEUTRAL\r\n2\ta\tb\t\tNEUTRAL\r\n"))
    with pytest.raises(MalformedDataError, match=r"headless.txt:1: expected the header line"):
        read_sick(_write(tmp_path / "headless.txt", "1\ta\tb\t4.5\tNEUTRAL\n"))


def test_gold_scores_outside_the_benchmarks_scale_are_refused_naming_file_and_line(tmp_path):
    """A damaged gold (STS12's 7.5, STS-B's 9, SICK's 0.5) would change the Spearman score silently."""
    with pytest.raises(MalformedDataError, match=r"gs.txt:2: gold score '7.5' is outside the benchmark's scale 0-5"):
        read_sts_subset(_write(tmp_path / "in.txt", "a\tb\nc\td\n"), _write(tmp_path / "gs.txt", "0\n7.5\n"))
    with pytest.raises(MalformedDataError, match=r"gs-neg.txt:1: gold score '-0.2'"):
        read_sts_subset(_write(tmp_path / "in.txt", "a\tb\n"), _write(tmp_path / "gs-neg.txt", "-0.2\n"))
    with pytest.raises(MalformedDataError, match=r"sts-dev.csv:2: gold score '9' is outside the benchmark's scale 0-5") as error:
        read_stsb(_write(tmp_path / "sts-dev.csv", "g\tf\ty\t1\t5.000\ta\tb\ng\tf\ty\t2\t9\ta\tb\n"))
    assert "\n" not in str(error.value)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    with pytest.raises(MalformedDataError, match=r"SICK.txt:3: gold score '0.5' is outside the benchmark's scale 1-5"):
        read_sick(_write(tmp_path / "SICK.txt", header + "1\ta\tb\t1\tNEUTRAL\n2\ta\tb\t0.5\tNEUTRAL\n"))
    # the ends of each scale are scores
    assert [pair.score for pair in read_stsb(_write(tmp_path / "ok.csv", "g\tf\ty\t1\t0\ta\tb\ng\tf\ty\t2\t5\ta\tb\n"))] == [0, 5]


def test_malformed_corpus_and_encoding(tmp_path):
    with pytest.raises(MalformedDataError, match=r"corpus.txt:2: empty line"):
        read_corpus(_write(tmp_path / "corpus.txt", "one\r\n\r\nthree\r\n"))
    (tmp_path / "latin1.txt").write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(MalformedDataError, match=r"latin1.txt:2: not valid UTF-8"):
        read_corpus(tmp_path / "latin1.txt")


def test_missing_file_names_the_download_stage(tmp_path):
    with pytest.raises(MalformedDataError) as error:
        load_sts_benchmark(tmp_path, "STSBenchmark")
    message = str(error.value)
    assert "sts-test.csv does not exist" in message and "dvc repro download" in message and "\n" not in message
    with pytest.raises(MalformedDataError, match=r"STS12-en-test does not exist"):
        load_sts_benchmark(tmp_path, "STS12")
