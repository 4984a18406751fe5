"""Readers for the corpus and the STS benchmarks' files, in the formats of the data mirror (which
files a task reads, and where: `pipeline.declarations.sts_tasks`).

Every reader validates as it reads: a malformed line raises `MalformedDataError` with
`file:line: what is wrong`, so a broken download is reported where it is broken instead of
surfacing as a wrong number later.

Sentences of the benchmark files are returned whitespace-normalised (`" ".join(s.split())`):
that is what SentEval feeds the model (it splits each sentence into tokens and SimCSE's batcher
joins them with single spaces), and it matters for byte-level BPE tokenizers, which would
otherwise see the trailing spaces a few SentEval-processed sentences carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError

SICK_HEADER_START = "pair_ID\tsentence_A\tsentence_B\trelatedness_score"


class MalformedDataError(PipelineError):
    """A data file that is missing or does not have the expected format."""


@dataclass(frozen=True)
class ScoredPair:
    sentence1: str
    sentence2: str
    score: float


def missing_data_error(path: Path) -> MalformedDataError:
    return MalformedDataError(f"{path} does not exist; the download stage produces it (`dvc repro download`)")


def _not_utf8(path: Path, line_number: int, error: UnicodeDecodeError) -> MalformedDataError:
    return MalformedDataError(f"{path}:{line_number}: not valid UTF-8 ({error.reason})")


def first_non_utf8_line(path: Path) -> MalformedDataError | None:
    """Where a file that text-mode reading refused is not UTF-8, as the readers name it (`file:line: not
    valid UTF-8`), read line by line (a large corpus need not fit in memory); None where it is UTF-8."""
    with Path(path).open("rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")  # a line end never falls inside a UTF-8 character
            except UnicodeDecodeError as error:
                return _not_utf8(path, line_number, error)
    return None


def _read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file without their line ends (LF or CRLF)."""
    path = Path(path)
    if not path.is_file():
        raise missing_data_error(path)
    content = path.read_bytes()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, content.count(b"\n", 0, error.start) + 1, error) from None
    # Split on LF only: str.splitlines would also break at characters such as U+2028 inside a sentence.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _columns(path: Path, line_number: int, line: str, allowed_counts: tuple[int, ...], layout: str) -> list[str]:
    columns = line.split("\t")
    if len(columns) not in allowed_counts:
        expected = " or ".join(str(count) for count in allowed_counts)
        raise MalformedDataError(
            f"{path}:{line_number}: expected {expected} tab-separated columns ({layout}), found {len(columns)}"
        )
    return columns


# The gold scales: SemEval STS and STS-B 0–5, SICK relatedness 1–5. A gold outside its scale is a
# damaged file (it would move the Spearman correlation silently), never data.
STS_GOLD_RANGE = (0.0, 5.0)
SICK_GOLD_RANGE = (1.0, 5.0)


def _score(path: Path, line_number: int, text: str, gold_range: tuple[float, float] = STS_GOLD_RANGE) -> float:
    try:
        score = float(text)
    except ValueError:
        score = math.nan
    if not math.isfinite(score):
        raise MalformedDataError(f"{path}:{line_number}: score {text!r} is not a number")
    low, high = gold_range
    if not low <= score <= high:
        raise MalformedDataError(
            f"{path}:{line_number}: gold score {text!r} is outside the benchmark's scale {low:g}-{high:g}; "
            "the file is damaged: restore it (rerun the download stage)"
        )
    return score


def _normalise(sentence: str) -> str:
    return " ".join(sentence.split())


def read_sts_subset(input_path: Path | str, gs_path: Path | str, sources: bool = False) -> list[ScoredPair]:
    """One SemEval STS subset: `STS.input.<subset>.txt` (sentence pairs) + `STS.gs.<subset>.txt` (gold).

    Pairs whose gold line is empty were not scored by the organisers and are skipped. Every input line has
    exactly 2 columns (the SentEval files, as the raw STS12–15 releases), or 4 with `sources` (the raw STS16
    release adds the sentences' sources): a tab inside a sentence makes another count and is refused, never
    read as other sentences.
    """
    input_path, gs_path = Path(input_path), Path(gs_path)
    input_lines, gold_lines = _read_lines(input_path), _read_lines(gs_path)
    if len(input_lines) != len(gold_lines):
        shorter = gs_path if len(gold_lines) < len(input_lines) else input_path
        raise MalformedDataError(
            f"{shorter}:{min(len(input_lines), len(gold_lines)) + 1}: line missing; "
            f"{input_path.name} has {len(input_lines)} lines but {gs_path.name} has {len(gold_lines)}"
        )
    count, layout = (4, "sentence1, sentence2, source1, source2") if sources else (2, "sentence1, sentence2")
    pairs = []
    for line_number, (input_line, gold_line) in enumerate(zip(input_lines, gold_lines), start=1):
        columns = _columns(input_path, line_number, input_line, (count,), layout)
        if not gold_line.strip():
            continue
        score = _score(gs_path, line_number, gold_line.strip())
        pairs.append(ScoredPair(_normalise(columns[0]), _normalise(columns[1]), score))
    return pairs


# The original STS-B release (the mirror's raw/STSBenchmark) adds the two sentences' sources to the rows of
# 2016, and only to those: 9 columns there, 7 elsewhere. The SentEval files have 7 on every row.
STSB_SOURCES_YEAR = "2016"
STSB_LAYOUT = "genre, file, year, id, score, sentence1, sentence2"


def _stsb_rows(path: Path, original: bool) -> list[tuple[int, list[str]]]:
    """(line number, columns) of each STS-B row; a row with another column count than its form has is refused."""
    rows = []
    for line_number, line in enumerate(_read_lines(path), start=1):
        columns = line.split("\t")
        with_sources = original and len(columns) > 2 and columns[2] == STSB_SOURCES_YEAR
        layout = STSB_LAYOUT + (", source1, source2" if with_sources else "")
        if not with_sources and original:
            layout += f" (sources only on {STSB_SOURCES_YEAR} rows)"
        rows.append((line_number, _columns(path, line_number, line, (9,) if with_sources else (7,), layout)))
    return rows


def read_stsb(path: Path | str, original: bool = False) -> list[ScoredPair]:
    """STS-B rows: genre, file, year, id, score, sentence1, sentence2 (+ source1, source2 on the 2016 rows
    of the `original` release)."""
    path = Path(path)
    return [ScoredPair(_normalise(columns[5]), _normalise(columns[6]), _score(path, line_number, columns[4]))
            for line_number, columns in _stsb_rows(path, original)]


def read_stsb_genres(path: Path | str, original: bool = False) -> list[tuple[str, str]]:
    """(genre, sentence1) of each STS-B row: main-captions, main-news or main-forums."""
    return [(columns[0], _normalise(columns[5])) for _, columns in _stsb_rows(Path(path), original)]


def read_sick(path: Path | str) -> list[ScoredPair]:
    """SICK: a header line, then pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment."""
    path = Path(path)
    lines = _read_lines(path)
    if not lines or not lines[0].startswith(SICK_HEADER_START):
        raise MalformedDataError(f"{path}:1: expected the header line starting {SICK_HEADER_START!r}")
    pairs = []
    for line_number, line in enumerate(lines[1:], start=2):
        columns = _columns(path, line_number, line, (5,), "pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment")
        pairs.append(ScoredPair(_normalise(columns[1]), _normalise(columns[2]), _score(path, line_number, columns[3], SICK_GOLD_RANGE)))
    return pairs


def read_corpus(path: Path | str) -> list[str]:
    """A training corpus: one sentence per line, kept as is apart from the line end."""
    path = Path(path)
    lines = _read_lines(path)
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            raise MalformedDataError(f"{path}:{line_number}: empty line; the corpus has one sentence per line")
    return lines
