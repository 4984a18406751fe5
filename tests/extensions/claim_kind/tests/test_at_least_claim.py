"""The at-least claim (pipeline/verdicts/kinds/at_least.py) built from small dicts and judged on synthetic rows, as
tests/test_claims.py checks the value claim: one run of ours against TNCSE's 79.58, the interval counting the
paper-scale prior's seed noise (sd 0.79: ±1.55)."""

from __future__ import annotations

import pytest

from pipeline.errors import PipelineError
from pipeline.verdicts.claims_file import parse_claims
from pipeline.verdicts.verdict_names import CONTRADICTED, HOLDS, INCONCLUSIVE, OTHER_SCALE

from test_claims import SOURCE, TABLES, claims_file, details, evaluate

HALF = 1.959964 * 0.79


def at_least_claim(**changes) -> dict:
    claim = {"id": "tncse-bert-at-least", "claim": "TNCSE reaches at least 79.58", "source": SOURCE, "kind": "at_least",
             "table": "tncse-sts-bert", "row": "TNCSE", "column": "Avg."}
    return claim | changes


@pytest.fixture
def paper_params(tiny_params_dict) -> dict:
    return tiny_params_dict | {"scale": "paper", "backbone": tiny_params_dict["backbone"] | {"name": "bert"}}


@pytest.mark.parametrize("ours, verdict", [(81.5, HOLDS), (79.9, INCONCLUSIVE), (77.5, CONTRADICTED)])
def test_it_holds_when_the_interval_clears_the_paper_number(ours, verdict, paper_params):
    files = {"reports/metrics/details/joint.json": details(ours)}
    (result,) = evaluate(claims_file(at_least_claim()), paper_params, files)
    assert (result.verdict, result.ours, result.paper) == (verdict, ours, 79.58)
    assert result.interval == pytest.approx((ours - 79.58 - HALF, ours - 79.58 + HALF), abs=1e-3)
    assert result.claim.paper_text(result, "stated default") == "at least 79.58"
    assert result.claim.evidence_text(result).startswith(f"ours − paper {ours - 79.58:+.2f} [")


def test_it_compares_at_the_paper_scale_only(tiny_params_dict):
    files = {"reports/metrics/details/joint.json": details(81.5)}
    (result,) = evaluate(claims_file(at_least_claim()), tiny_params_dict, files)
    assert result.verdict == OTHER_SCALE and result.interval is None


def test_a_cell_tables_yaml_lacks_is_one_line(tiny_params_dict):
    with pytest.raises(PipelineError, match=r"claims.0 \(tncse-bert-at-least\): row 'TNCSE-XL' is not in table tncse-sts-bert"):
        parse_claims(claims_file(at_least_claim(row="TNCSE-XL")), TABLES, tiny_params_dict)
