"""The papers' own numbers checked against themselves (pipeline/reporting/inconsistencies.py): rows
whose printed average is not the mean of their printed cells, and numbers the text states that its
tables do not give; REPRODUCTION.md lists them."""

from __future__ import annotations

import pytest
import yaml

from pipeline.errors import PipelineError
from pipeline.reporting.inconsistencies import READ_IN_THE_SEEDS, check_references, inconsistencies, stated_numbers, table_rows
from pipeline.reporting.quotes import quote_found
from pipeline.writeup.render import own_numbers_section
from pipeline.reporting.spec import load_tables, parse_tables

from conftest import PAPERS, REPO_ROOT

TABLES = load_tables(REPO_ROOT / "tables.yaml")
CATALOGUE = REPO_ROOT / "conf" / "checkpoints.yaml"


def test_the_committed_transcriptions_list_the_known_inconsistencies():
    found = {(issue.row, issue.difference) for issue in inconsistencies(TABLES, CATALOGUE)}
    expected = {  # the rows of issue 40's table (row, printed − mean of the printed cells)
        ("TNCSE D", "+1.43"), ("TNCSE D", "-0.18"), ("JTCSE", "+0.09"), ("JTCSE D", "+0.05"), ("PromptBERT", "+0.02"),
        ("SBERT-base (supervised)", "+0.03"), ("GS-InfoNCE BERT-large", "-0.17"), ("GS-InfoNCE RoBERTa-large", "+0.03"),
    }
    assert expected <= found
    # GS-InfoNCE's introduction (0.72, 0.28) follows the large rows' cells, its Main Results (0.55, 0.31) their
    # printed averages: each is cited on its row's line, never a line of its own
    assert not stated_numbers(TABLES)
    large = {issue.row: issue.used for issue in found_rows() if issue.row.startswith("GS-InfoNCE")}
    for row, (intro, main) in {"GS-InfoNCE BERT-large": ("0.72", "0.55"), "GS-InfoNCE RoBERTa-large": ("0.28", "0.31")}.items():
        assert f"Introduction's {intro} is the mean of the cells" in next(
            issue.used for issue in inconsistencies(TABLES, CATALOGUE) if issue.row == row)
        assert f"Main Results's {main} is the printed average" in next(
            issue.used for issue in inconsistencies(TABLES, CATALOGUE) if issue.row == row)
    assert large  # listed once each, as rows
    rows = [issue.row for issue in inconsistencies(TABLES, CATALOGUE)]
    assert len(rows) == len(set((issue.where, issue.row) for issue in inconsistencies(TABLES, CATALOGUE)))
    corrected = next(issue for issue in found_rows() if issue.difference == "+1.43")
    assert corrected.used.startswith("STS15 84.92 (printed 74.92)")


def test_a_stated_number_off_both_the_printed_average_and_the_cells_is_its_own_line():
    raw = yaml.safe_load((REPO_ROOT / "tables.yaml").read_text())
    raw["stated_numbers"][0]["stated"] = 0.40
    lines = stated_numbers(parse_tables(raw))
    assert [(issue.printed, issue.computed) for issue in lines] == [("0.40 (the text)", "0.55 (the table)")]


@pytest.mark.parametrize("reading", READ_IN_THE_SEEDS, ids=lambda reading: reading.row)
def test_every_reading_rests_on_seed_lines_found_verbatim(reading):
    assert reading.quotes and bool(reading.other_file) == bool(reading.other_quotes)
    for file, quotes in ((reading.file, reading.quotes), (reading.other_file, reading.other_quotes)):
        seed = (PAPERS.parent / file).read_text(encoding="utf-8") if file else ""
        for quote in quotes:
            assert quote_found(seed, quote), f"{reading.row}: {quote!r} not in {file}"


def test_the_readings_are_listed_once_after_the_computed_ones():
    found = inconsistencies(TABLES, CATALOGUE)
    assert found[-len(READ_IN_THE_SEEDS):] == [reading.inconsistency() for reading in READ_IN_THE_SEEDS]
    rows = {reading.row for reading in READ_IN_THE_SEEDS}
    assert {"RankCSE-BERT (one tower), 7 STS Avg.", "RankCSE-BERT, STSBM", "TNCSE − SimCSE, MTEB classification",
            "TNCSE − SimCSE, MTEB reranking"} <= rows
    # issue 65: footnote 7's "barely equal", GS-InfoNCE's "comprehensive" against its own decreases, and GS-InfoNCE
    # against SimCSE on the batch size are listed; RankCSE against "SOTA" (both papers set RankCSE aside) and
    # JTCSE+UC D against "has improved" (said of the model JTCSE) are not inconsistencies
    wheres = " ".join(reading.where for reading in READ_IN_THE_SEEDS)
    assert {"footnote 7 against Table VIII and Table I (left)", "Main Results against Table 2",
            "Introduction, against SimCSE Appendix A"} <= {reading.where for reading in READ_IN_THE_SEEDS}
    assert "SOTA" not in " ".join(quote for reading in READ_IN_THE_SEEDS for quote in reading.quotes)
    assert not any(row.startswith(("RankCSE-BERT against", "JTCSE+UC D against")) for row in rows) and "contributions" not in wheres


def found_rows():
    return table_rows(TABLES)


def spec(**row) -> dict:
    columns = {"STS12.all": "STS12", "STS13.all": "STS13", "STS14.all": "STS14", "STS15.all": "STS15",
               "STS16.all": "STS16", "STSBenchmark.test": "STS-B", "SICKRelatedness.test": "SICK-R", "avg": "Avg."}
    return {"tables": {"t": {"caption": "c", "paper_source": "s", "scale_note": "n", "backbone": "bert",
                             "columns": columns, "rows": [{"label": "r", "model": "joint"} | row]}}}


@pytest.mark.parametrize(
    "average, listed",
    [(70.00, False), (70.01, False), (70.02, True), (69.97, True)],  # cells' mean 70.00; rounding allows 0.01
)
def test_a_row_is_listed_when_its_average_is_off_beyond_rounding(average, listed):
    cells = {"STS12": 70, "STS13": 70, "STS14": 70, "STS15": 70, "STS16": 70, "STS-B": 70, "SICK-R": 70, "Avg.": average}
    tables = parse_tables(spec(paper=cells))
    assert bool(table_rows(tables)) is listed


def test_a_corrected_cell_is_checked_as_printed():
    cells = {"STS12": 70, "STS13": 70, "STS14": 70, "STS15": 70, "STS16": 70, "STS-B": 70, "SICK-R": 70, "Avg.": 70}
    (issue,) = table_rows(parse_tables(spec(paper=cells, printed={"STS15": 63.0})))
    assert (issue.difference, issue.computed) == ("+1.00", "69.00 (mean of the 7 printed cells)")
    assert issue.used.startswith("STS15 70.00 (printed 63.00)")


def test_a_stated_number_naming_an_unknown_row_is_one_line():
    raw = yaml.safe_load((REPO_ROOT / "tables.yaml").read_text())
    raw["stated_numbers"][0]["better"]["row"] = "paper_rows: GS-InfoNCE BERT-huge"
    problem = check_references(parse_tables(raw))
    assert problem == "stated_numbers.0: no paper number at 'paper_rows: GS-InfoNCE BERT-huge', column 'Avg.'"
    with pytest.raises(PipelineError, match="printed"):
        parse_tables(spec(printed={"STS99": 1.0}))


def test_reproduction_renders_the_section():
    lines = own_numbers_section(inconsistencies(TABLES, CATALOGUE))
    assert lines[0] == "## The papers' own numbers"
    assert sum(line.startswith("| ") for line in lines) >= 2 + 8 + len(READ_IN_THE_SEEDS)  # header, rule, 8 rows, readings
