"""The MTEB tables (issue 17): ten transcribed cells per table, read again from the seed texts by
hand, and the report filling `mteb:` columns from reports/mteb/<model>.json."""

from __future__ import annotations

import pytest

from pipeline.writeup.render import cell
from pipeline.reporting.runs import ExperimentSearch, Run
from pipeline.reporting.spec import load_tables
from pipeline.reporting.tables import RunSource, build_table

from conftest import REPO_ROOT

TABLES = load_tables(REPO_ROOT / "tables.yaml")

# table -> (row label, column header, number as printed in the seed)
SPOT_CHECKS = {
    "jtcse-mteb-classification": [  # seeds/001 Table II
        ("SimCSE (ours, Wiki1M alone)", "AllegroReviews", 24.15), ("TNCSE", "AllegroReviews", 23.59),
        ("JTCSE", "AllegroReviews", 23.51), ("JTCSE D", "Language", 92.42), ("TNCSE", "MassiveIntent", 16.96),
        ("JTCSE", "MassiveIntent", 37.38), ("JTCSE+UC D", "TweetEmotion", 27.55),
        ("SimCSE (ours, Wiki1M alone)", "Avg. Acc", 55.37), ("JTCSE", "Avg. Acc", 56.67), ("JTCSE D", "Avg. Acc", 56.11),
    ],
    "jtcse-mteb-reranking": [  # seeds/001 Table III
        ("SimCSE (ours, Wiki1M alone)", "Alloprof", 36.67), ("JTCSE", "Alloprof", 39.71), ("JTCSE+UC D", "MMarco", 4.20),
        ("JTCSE", "Syntec", 52.56), ("JTCSE D", "Syntec", 50.93), ("TNCSE", "T2", 55.32),
        ("SimCSE (ours, Wiki1M alone)", "WebLINXCandidates", 7.58), ("TNCSE", "Avg. MAP", 35.46),
        ("JTCSE", "Avg. MAP", 37.64), ("JTCSE+UC D", "Avg. MAP", 38.03),
    ],
    "jtcse-mteb-bitext": [  # seeds/001 Table IV
        ("TNCSE", "BUCC", 2.58), ("JTCSE", "BUCC", 2.38), ("JTCSE", "NorwegianCourts", 90.99),
        ("SimCSE (ours, Wiki1M alone)", "Tatoeba", 3.25), ("JTCSE D", "Tatoeba", 4.09), ("JTCSE+UC D", "Phinc", 42.40),
        ("JTCSE D", "TbilisiCityHall", 1.41), ("SimCSE (ours, Wiki1M alone)", "Avg. F1", 15.44),
        ("TNCSE", "Avg. F1", 17.76), ("JTCSE", "Avg. F1", 17.77),
    ],
    "jtcse-mteb-sts22": [  # seeds/001 Table V
        ("SimCSE (ours, Wiki1M alone)", "ar", 38.33), ("TNCSE", "de-pl", 36.71), ("JTCSE", "en", 62.79),
        ("JTCSE", "es", 63.54), ("JTCSE D", "fr-pl", 28.17), ("JTCSE+UC D", "zh-en", 20.49), ("TNCSE", "tr", 30.05),
        ("SimCSE (ours, Wiki1M alone)", "Avg.", 32.82), ("JTCSE", "Avg.", 39.21), ("JTCSE+UC D", "it", 62.68),
    ],
    "jtcse-mteb-retrieval": [  # seeds/001 Table VI
        ("SimCSE (ours, Wiki1M alone)", "MAP@1", 7.16), ("JTCSE", "MRR@10", 19.30), ("JTCSE D", "NDCG@10", 17.49),
        ("JTCSE+UC D", "PRECISION@5", 7.13), ("TNCSE", "RECALL@10", 20.24), ("SimCSE (ours, Wiki1M alone)", "45 Avg.", 11.83),
        ("JTCSE", "45 Avg.", 13.71), ("JTCSE D", "45 Avg.", 13.76), ("TNCSE", "MAP@5", 10.76), ("JTCSE", "RECALL@1", 8.73),
    ],
    "tncse-mteb": [  # seeds/000 Table 2
        ("SimCSE (ours, Wiki1M alone)", "STS17 (11)", 34.22), ("TNCSE", "STS17 (11)", 36.32), ("TNCSE D", "STS17 (11)", 35.41),
        ("TNCSE+UC D", "STS17 (11)", 37.73), ("TNCSE", "STS22 (18)", 39.34), ("SimCSE (ours, Wiki1M alone)", "Classification (30)", 58.15),
        ("TNCSE+UC D", "Classification (30)", 58.84), ("TNCSE D", "Reranking (9)", 38.93), ("TNCSE", "Retrieval (30) MAP@10", 22.10),
        ("SimCSE (ours, Wiki1M alone)", "Retrieval (30) MAP@10", 18.98),
    ],
    "tncse-single-tower": [("SimCSE (Tower I, SimCSE + RTT)", "STS-B test", 77.75)],  # seeds/000 Table 5 (its one transcribed cell)
}


@pytest.mark.parametrize("table_id", sorted(SPOT_CHECKS))
def test_transcribed_cells_match_the_seed_texts(table_id):
    rows = {row.label: row.paper for row in TABLES.tables[table_id].rows}
    for label, header, printed in SPOT_CHECKS[table_id]:
        assert rows[label][header] == printed, (table_id, label, header)


def test_the_jtcse_suite_averages_are_the_means_of_their_rows_where_every_cell_is_printed():
    for table_id, average in (("jtcse-mteb-reranking", "Avg. MAP"), ("jtcse-mteb-bitext", "Avg. F1"), ("jtcse-mteb-sts22", "Avg."),
                              ("jtcse-mteb-retrieval", "45 Avg.")):
        headers = [header for header in TABLES.tables[table_id].columns.values() if header != average]
        for row in TABLES.tables[table_id].rows:
            if all(header in row.paper for header in headers):
                mean = sum(row.paper[header] for header in headers) / len(headers)
                assert mean == pytest.approx(row.paper[average], abs=0.02), (table_id, row.label)


def test_mteb_columns_are_read_from_the_mteb_report(tiny_params_dict):
    mteb = {"suites": {"jtcse-sts22": {"avg": 40.0, "tasks": {"ar": {"main": 35.0}, "de-en": {"main": 33.0}}}}}
    workspace = Run("workspace", tiny_params_dict, {"reports/mteb/simcse.json": mteb})
    table = build_table(TABLES, "jtcse-mteb-sts22", RunSource(workspace, lambda: ExperimentSearch([], "none")))
    simcse = table.rows[0]
    assert simcse.run == "workspace"
    assert cell(simcse, "ar") == "35.00 | 38.33 | -3.33"
    assert cell(simcse, "Avg.") == "40.00 | 32.82 | +7.18"
    assert "de | 24.70" not in cell(simcse, "de") and cell(simcse, "de").startswith("missing")
    assert "reports/mteb/simcse.json" in simcse.missing_cells
