"""What would decide an undecided claim, claims.json's numbers per claim, and the forest plot
(pipeline/writeup/decidability.py)."""

import json

import numpy as np
import pytest

from pipeline.verdicts.claim import Comparison, Verdict
from pipeline.verdicts.claims_file import parse_claims
from pipeline.verdicts.decidable import seeds_to_reproduce
from pipeline.verdicts.verdict_names import CONSISTENT, INCONCLUSIVE, OTHER_BACKBONE, OTHER_SCALE, REPRODUCED
from pipeline.writeup.decidability import (
    claim_details, claim_record, forest_rows, gpu_hours_per_seed, paper_gap, would_take,
)
from pipeline.reporting.figures import claims_forest_figure
from pipeline.verdicts.estimates import PAPER_SCALE_PRIOR, SeedNoise, compare_arms

from conftest import REPO_ROOT, committed_text
from test_claims import TABLES, claims_file, evaluate, order_claim, value_claim


def one(raw: dict, params: dict):
    (claim,) = parse_claims(claims_file(raw), TABLES, params).claims
    return claim


def test_the_papers_gap_is_read_from_its_text(tiny_params_dict):
    assert paper_gap(one(order_claim(paper="TNCSE 79.58 > SimCSE 76.25 (Table 1)"), tiny_params_dict)) == pytest.approx(3.33)
    trend = {"id": "m", "claim": "M = 3 best", "source": order_claim()["source"], "kind": "trend", "backbone": "bert",
             "metric": "avg", "paper": "3× 77.63 > 0× 76.25, 0.5× 76.96, 2× 77.11", "shape": "first-best",
             "subjects": [{"label": "a", "model": "joint"}, {"label": "b", "model": "ensemble"}]}
    assert paper_gap(one(trend, tiny_params_dict)) == pytest.approx(0.52)  # the first against the best other
    assert paper_gap(one(order_claim(paper="Fig. 10"), tiny_params_dict)) is None


def undecided(claim, estimate) -> Verdict:
    pair = Comparison("TNCSE", "untrained twin", INCONCLUSIVE, difference=estimate.difference, interval=estimate.interval,
                      estimate=estimate)
    return Verdict(claim, INCONCLUSIVE, comparisons=[pair])


def test_an_undecided_order_says_what_would_decide_it(tiny_params_dict):
    claim = one(order_claim(paper="TNCSE 79.58 > SimCSE 79.28 (Table 1)"), tiny_params_dict)
    noise = SeedNoise(0.5, None, "stated")
    estimate = compare_arms(np.array([72.3]), np.array([72.0]), 0.0, noise=noise)
    text = would_take(undecided(claim, estimate), {"bert": 2.81}, "bert")
    assert f"decides |Δ − margin| ≥ {estimate.half_width:.2f}" in text and "the paper's gap 0.30 needs" in text
    assert "GPU hours for the two arms" in text and "at paper scale (prior sd 0.79" in text
    noisy_pairs = compare_arms(np.array([72.3]), np.array([72.0]), 0.25, noise=noise)
    assert "more test pairs are needed, not seeds" in would_take(undecided(claim, noisy_pairs), {}, "bert")
    # a negative margin ("not worse by more than 0.5"): the paper's 0.30 lies 0.80 above it, and that is what seeds must resolve
    keeps = one(order_claim(paper="79.58 > 79.28", margin=-0.5, margin_reason="keeps within 0.5"), tiny_params_dict)
    text = would_take(undecided(keeps, estimate), {}, "bert")
    assert "cannot hold" not in text and "the paper's gap 0.30 (0.80 beyond the margin and band) needs" in text
    beyond = one(order_claim(paper="79.58 > 79.28", margin=0.5, margin_reason="clearly better"), tiny_params_dict)
    assert "not beyond the claim's margin 0.5: it cannot hold even if reproduced exactly" in would_take(
        undecided(beyond, estimate), {}, "bert")


def test_what_would_decide_it_agrees_with_the_row(tiny_params_dict):
    """An interval that already excludes the paper's gap names no seed count for it (the committed
    tncse-beats-simcse-bert: −0.02 [−0.66, 0.61] against the paper's 3.33); a banded claim's threshold
    counts its band."""
    claim = one(order_claim(paper="TNCSE 79.58 > SimCSE 76.25 (Table 1)"), tiny_params_dict)
    estimate = compare_arms(np.array([72.0, 72.4, 71.6, 72.1, 71.9]), np.array([72.0, 72.5, 71.7, 72.2, 71.8]), 0.0)
    text = would_take(undecided(claim, estimate), {"bert": 2.81}, "bert")
    assert "already excludes the paper's gap 3.33" in text and "seeds per arm" not in text
    banded = one(order_claim(paper="0.71 > 0.60", metric="analysis:alignment", band=0.02, band_reason="stated"), tiny_params_dict)
    wide = compare_arms(np.array([72.0, 72.4, 71.6]), np.array([71.9, 72.6, 71.7]), 0.0)
    text = would_take(undecided(banded, wide), {}, "bert")
    assert f"decides |Δ − margin| ≥ {wide.half_width + 0.02:.2f}" in text and "beyond the band 0.02" in text


def test_every_value_claim_says_how_many_seeds_reproduced_takes(tiny_params_dict):
    """Judged on our seeds' mean: 29 seeds at paper scale (a single run cannot), fewer at a quieter scale; read
    as a prediction of one more run, no number of seeds at paper scale."""
    claim = one(value_claim(), tiny_params_dict)
    result = Verdict(claim, CONSISTENT, ours=79.3, paper=79.58, epsilon=0.5, interval=(-2.5, 2.0), seeds=1,
                     seed_sd=0.1)
    text = would_take(result, {}, "bert")
    assert "needs 3 seeds at this scale's noise (seed sd 0.10)" in text
    assert "29 seeds at paper scale (prior sd 0.79; one run cannot: its ±1.55 alone is wider than ε)" in text
    assert seeds_to_reproduce(0.5, 0.1) == 3
    result.verdict = OTHER_SCALE  # every value row says it, not only an undecided one
    assert would_take(result, {}, "bert") == text
    result.verdict = REPRODUCED
    assert would_take(result, {}, "bert") is None
    result.verdict, result.against, result.seed_sd = CONSISTENT, "one run", PAPER_SCALE_PRIOR.sd
    assert "no number of seeds" in would_take(result, {}, "bert")  # 1.96 × 0.79 > ε
    result.seed_sd = 0.1
    assert "within ±ε 0.50 needs about 1 seeds of ours" in would_take(result, {}, "bert")


def test_a_value_claim_of_another_backbone_still_says_what_reproduced_takes(tiny_params_dict):
    (result,) = evaluate(claims_file(value_claim(table="tncse-sts-roberta")), tiny_params_dict, {})
    assert result.verdict == OTHER_BACKBONE and result.epsilon == 0.5 and result.paper is not None
    assert "29 seeds at paper scale" in would_take(result, {}, "roberta")


def test_claims_json_holds_every_number_behind_a_verdict(tiny_params_dict):
    claim = one(order_claim(), tiny_params_dict)
    estimate = compare_arms(np.array([73.0, 73.5, 72.5]), np.array([71.0, 71.2, 70.8]), 0.04, paired=True)
    record = json.loads(json.dumps(claim_record(undecided(claim, estimate), "bert", "tiny")))
    (pair,) = record["comparisons"]
    for key in ("seeds", "seed_sd", "seed_df", "seed_source", "tau", "interval", "pair_interval", "decidable_gap", "interval_kind"):
        assert key in pair, key
    assert record["kind"] == "order" and record["family_size"] == 1 and record["paper_gap"] is not None
    assert pair["seeds"] == [3, 3] and "paired" in pair["seed_source"]


def test_the_forest_plot_draws_every_judged_comparison(tiny_params_dict):
    claim = one(order_claim(), tiny_params_dict)
    estimate = compare_arms(np.array([73.0, 73.5, 72.5]), np.array([71.0, 71.2, 70.8]), 0.04, paired=True)
    groups = forest_rows([undecided(claim, estimate)])
    assert list(groups) == ["TNCSE"] and groups["TNCSE"][0]["interval"] == estimate.interval
    png = claims_forest_figure(groups)
    assert png.startswith(b"\x89PNG") and png == claims_forest_figure(groups)


def test_the_committed_report_answers_what_would_decide_every_undecided_claim():
    """reports/claims.json: every undecided order, trend and value claim says what would decide it."""
    details = json.loads(committed_text("reports/claims.json"))["details"]
    undecided_claims = [entry for entry in details.values() if entry["verdict"] in (INCONCLUSIVE, CONSISTENT)
                        and entry["kind"] in ("order", "trend", "value") and entry.get("comparisons", [{}])[0].get("seeds")]
    assert undecided_claims and all(entry["would_take"] for entry in undecided_claims)
    for claim_id, entry in details.items():  # no seed count for a gap the row's own interval already excludes
        intervals = [pair["interval"] for pair in entry.get("comparisons", []) if pair.get("interval")]
        if entry.get("paper_gap") and intervals and entry["would_take"] and not entry.get("lower_is_better"):
            if max(high for _, high in intervals) < entry["paper_gap"]:
                assert "seeds per arm" not in entry["would_take"], claim_id


def test_gpu_hours_per_seed_come_from_the_gpu_check():
    hours = gpu_hours_per_seed(REPO_ROOT / "reports" / "bench-gpu.json")
    assert set(hours) == {"bert", "roberta"} and all(0 < value < 10 for value in hours.values())
