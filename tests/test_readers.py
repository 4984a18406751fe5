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
from pipeline.data.sts_pairs import load_sts_benchmark
from pipeline.errors import PipelineError

from conftest import MIRROR

DATA = MIRROR
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
    assert [len(read_stsb(raw / f"sts-{split}.csv", original=True)) for split in ("train", "dev", "test")] == [5749, 1500, 1379]
    assert len(load_sts_benchmark(SENTEVAL, "STSBenchmark", "dev")["dev"]) == 1500


def test_raw_sts16_inputs_with_source_columns():
    raw = DATA / "raw" / "STS16"
    assert len(read_sts_subset(raw / "STS2016.input.headlines.txt", raw / "STS2016.gs.headlines.txt", sources=True)) == 249


# Gold-scored pairs of every STS input file of the mirror, SentEval's and the original releases' alike
PAIRS_PER_SUBSET = {
    "MSRpar": 750, "MSRvid": 750, "SMTeuroparl": 459, "surprise.OnWN": 750, "surprise.SMTnews": 399,
    "FNWN": 189, "STS13/OnWN": 561, "STS13/headlines": 750, "STS14/OnWN": 750, "deft-forum": 450, "deft-news": 300,
    "STS14/headlines": 750, "STS14/images": 750, "tweet-news": 750, "answers-forums": 375, "answers-students": 750,
    "belief": 375, "STS15/headlines": 750, "STS15/images": 750, "answer-answer": 254, "STS16/headlines": 249,
    "plagiarism": 230, "postediting": 244, "question-question": 209,
}  # fmt: skip


def test_every_real_mirror_file_is_read_with_the_same_pair_counts():
    """The column rules accept exactly what the real files have: 2 columns on every SentEval STS12-16 and raw
    STS12-15 input line, 4 on the raw STS16 ones (sources); 7 on every SentEval STS-B row, 9 on the raw
    release's 2016 rows (sources) and 7 on its others; 5 on every SICK row."""
    counts = {}
    for folder in [*sorted((SENTEVAL / "STS").glob("STS1*-en-test")), *sorted((DATA / "raw").glob("STS1*"))]:
        year = folder.name[:5]
        for input_path in sorted(folder.glob("STS*.input.*.txt")):
            subset = input_path.name.split(".input.")[1].removesuffix(".txt")
            key = subset if subset in PAIRS_PER_SUBSET else f"{year}/{subset}"
            gold = input_path.with_name(input_path.name.replace(".input.", ".gs."))
            counts[input_path] = (len(read_sts_subset(input_path, gold, sources=year == "STS16" and folder.parent.name == "raw")),
                                  PAIRS_PER_SUBSET[key])
    for original, folder in ((False, SENTEVAL / "STS" / "STSBenchmark"), (True, DATA / "raw" / "STSBenchmark")):
        for split, pairs in (("train", 5749), ("dev", 1500), ("test", 1379)):
            counts[folder / f"sts-{split}.csv"] = (len(read_stsb(folder / f"sts-{split}.csv", original)), pairs)
    for name, pairs in (("SICK_train.txt", 4500), ("SICK_trial.txt", 500), ("SICK_test_annotated.txt", 4927)):
        counts[SENTEVAL / "SICK" / name] = (len(read_sick(SENTEVAL / "SICK" / name)), pairs)
    assert len(counts) == 2 * 24 + 2 * 3 + 3
    assert {path: read for path, (read, expected) in counts.items() if read != expected} == {}


@pytest.mark.parametrize(("text", "sources", "found"), [
    ("a b\tc\nd\tx\te\ty\n", False, 4),  # a tab inside both sentences: not a pair with sources
    ("a\tb\ts\tt\nd\te\n", True, 2),  # a raw STS16 line without its sources
    ("a\tb\ts\tt\nd\tx\te\ty\ts\tt\n", True, 6),
])  # fmt: skip
def test_an_sts_line_with_another_column_count_is_refused_naming_file_and_line(tmp_path, text, sources, found):
    gold = _write(tmp_path / "gs.txt", "1\n2\n")
    with pytest.raises(MalformedDataError, match=rf"in.txt:2: expected {4 if sources else 2} tab-separated columns .* found {found}"):
        read_sts_subset(_write(tmp_path / "in.txt", text), gold, sources=sources)


@pytest.mark.parametrize(("row", "original", "expected"), [
    ("main-news\theadlines\t2016\t2\t3.0\ta\tb\tsource\tsource", False, 7),  # SentEval rows carry no sources
    ("main-news\theadlines\t2015\t2\t3.0\ta\tx\tb\ty", True, 7),  # tabs in the sentences of a row without sources
    ("main-news\theadlines\t2016\t2\t3.0\ta\tb", True, 9),  # a 2016 row of the original release lost its sources
    ("main-news\theadlines\t2016\t2\t3.0\ta\tx\tb\ty\ts\tt", True, 9),
])  # fmt: skip
def test_an_stsb_row_with_another_column_count_is_refused_naming_file_and_line(tmp_path, row, original, expected):
    path = _write(tmp_path / "sts-test.csv", "main-captions\tMSRvid\t2012test\t1\t2.0\ta\tb\n" + row + "\n")
    with pytest.raises(MalformedDataError, match=rf"sts-test.csv:2: expected {expected} tab-separated columns") as error:
        read_stsb(path, original=original)
    assert "\n" not in str(error.value)


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
        ("a\tb\nc d\n", "1\n2\n", "in.txt:2", "expected 2 tab-separated columns"),
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
    with pytest.raises(MalformedDataError, match=r"sts-test.csv:2: expected 7 tab-separated columns .* found 6"):
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
