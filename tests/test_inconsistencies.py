"""The papers' own numbers checked against themselves (pipeline/reporting/inconsistencies.py): rows
whose printed average is not the mean of their printed cells, and numbers the text states that its
tables do not give; REPRODUCTION.md lists them."""

from __future__ import annotations

import pytest
import yaml

from pipeline.errors import PipelineError
from pipeline.reporting.inconsistencies import check_references, inconsistencies, table_rows
from pipeline.reporting.render import own_numbers_section
from pipeline.reporting.spec import load_tables, parse_tables

from conftest import REPO_ROOT

TABLES = load_tables(REPO_ROOT / "tables.yaml")
CATALOGUE = REPO_ROOT / "conf" / "checkpoints.yaml"


def test_the_committed_transcriptions_list_the_known_inconsistencies():
    found = {(issue.row, issue.difference) for issue in inconsistencies(TABLES, CATALOGUE)}
    expected = {  # the rows of issue 40's table (row, printed − mean of the printed cells)
        ("TNCSE D", "+1.43"), ("TNCSE D", "-0.18"), ("JTCSE", "+0.09"), ("JTCSE D", "+0.05"), ("PromptBERT", "+0.02"),
        ("SBERT-base (supervised)", "+0.03"), ("GS-InfoNCE BERT-large", "-0.17"), ("GS-InfoNCE RoBERTa-large", "+0.03"),
    }
    assert expected <= found
    stated = [issue for issue in inconsistencies(TABLES, CATALOGUE) if "(the text)" in issue.printed]
    assert [(issue.printed, issue.computed) for issue in stated] == [
        ("0.72 (the text)", "0.55 (the table)"), ("0.28 (the text)", "0.31 (the table)")]
    corrected = next(issue for issue in found_rows() if issue.difference == "+1.43")
    assert corrected.used.startswith("STS15 84.92 (printed 74.92)")


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
    assert sum(line.startswith("| ") for line in lines) >= 2 + 8 + 2  # header, rule, 8 rows, 2 stated numbers
