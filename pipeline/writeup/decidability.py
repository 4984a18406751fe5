"""What it would take to decide a claim, and each claim's verdict as data (reports/claims.json).

For an order or trend claim the noise leaves open: the smallest |Δ| this run could decide (its
half-width), the seeds per arm that give 80 % power for the paper's own gap at this scale's noise,
and the same at paper scale with its GPU hours (the papers' prior seed sd; reports/bench-gpu.json's
cost of one seed of the whole pipeline). Where the pair noise alone exceeds what the gap allows, more
test pairs are needed, not seeds. For every value claim: the seeds "reproduced" takes when ours is
exactly the paper's, at this scale's noise and at paper scale's (judged on our seeds' mean; read as a
prediction of one more run, the paper's own seed noise bounds it, and when z·σ ≥ ε no number of seeds
decides it).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from scipy import stats

from pipeline.paths import REPORTS
from pipeline.writeup.render import paper_of
from pipeline.verdicts.claim import Comparison, Verdict
from pipeline.verdicts.decidable import bh_adjusted, decidable_gap, interval_p_value, seeds_needed, seeds_to_reproduce
from pipeline.verdicts.estimates import PAPER_SCALE_PRIOR, Estimate
from pipeline.verdicts.kinds.order import ComparisonClaim, OrderClaim
from pipeline.verdicts.kinds.value import ValueClaim, interval_kind
from pipeline.verdicts.verdict_names import CONTRADICTED, HOLDS, JUDGED, REPRODUCED, UNDECIDED

POWER = 0.80


def paper_gap(claim: ComparisonClaim) -> float | None:
    return claim.paper_gap()


def _order_would_take(estimate: Estimate, margin: float, gap: float | None, hours: float | None, band: float = 0.0) -> str:
    """What would decide an undecided comparison, consistent with its row: the smallest |Δ − margin| it
    could decide (its half-width, plus the band a banded claim must clear), and the seeds the paper's gap
    needs, unless the interval already excludes that gap (then seeds for it would only confirm that)."""
    paired = "within-run" in estimate.seed_source
    here = f"this run decides |Δ − margin| ≥ {decidable_gap(estimate, margin) + band:.2f}"
    if band:
        here += f" (its half-width {decidable_gap(estimate, margin):.2f} beyond the band {band:g})"
    if gap is None:
        return here + "; the paper's text gives no gap to size the seeds for"
    if gap <= margin + band:  # the claim holds above its margin (and band), which may be negative
        return here + f"; the paper's gap {gap:.2f} is not beyond the claim's margin {margin:g}{f' and band {band:g}' if band else ''}: it cannot hold even if reproduced exactly"
    low, high = estimate.interval
    if high < gap:
        return (here + f"; its interval [{low:.2f}, {high:.2f}] already excludes the paper's gap {gap:.2f}: the effect "
                f"here is smaller than the paper's, and more seeds would only narrow where it lies")
    shown = f"{gap:.2f}" + (f" ({gap - margin - band:.2f} beyond the margin and band)" if margin or band else "")
    gap = gap - margin - band  # what a run must resolve: the paper's gap's distance from margin and band
    needed = seeds_needed(gap, estimate.seed_sd, estimate.tau ** 2, paired=paired, power=POWER)
    if needed is None:
        return here + f"; for the paper's gap {shown} more test pairs are needed, not seeds (the pair noise τ {estimate.tau:.2f} alone is too large)"
    at_paper = seeds_needed(gap, PAPER_SCALE_PRIOR.sd, 0.0, power=POWER)
    cost = f", {at_paper * 2 * hours:.0f} GPU hours for the two arms" if (hours and at_paper) else ""
    paper = (f"; at paper scale (prior sd {PAPER_SCALE_PRIOR.sd}, its full test sets' pair noise aside) {at_paper} seeds per arm{cost}"
             if at_paper else "; at paper scale no number of seeds up to 10,000 would")
    return here + f"; the paper's gap {shown} needs {needed} seeds per arm at this scale's noise for {POWER:.0%} power{paper}"


def _value_would_take(result: Verdict) -> str:
    """How many seeds of ours "reproduced" takes, at this scale's seed noise and at paper scale's (the prior)."""
    epsilon = result.epsilon
    if result.against == "one run":
        return "; ".join(f"{where} ({detail}): {_one_run_seeds(epsilon, sd)}" for where, detail, sd in _noises(result))
    z = stats.norm.ppf(0.975)
    counts = []
    for where, detail, sd in _noises(result):
        needed = seeds_to_reproduce(epsilon, sd, power=POWER)
        one_run = f"; one run cannot: its ±{z * sd:.2f} alone is wider than ε" if z * sd >= epsilon else ""
        counts.append(f"{f'{needed} seeds' if needed else 'more than 10,000 seeds'} {where} ({detail}{one_run})")
    return (f'"reproduced" (our seeds\' mean within ±ε {epsilon:.2f} of the paper\'s number, {POWER:.0%} of the time were '
            f"ours exactly the paper's) needs " + " and ".join(counts))


def _noises(result: Verdict) -> list[tuple[str, str, float]]:
    """(where, its seed sd in words, the sd per run): this scale's where its noise is known, and paper scale's prior."""
    here = [("at this scale's noise", f"seed sd {result.seed_sd:.2f}", result.seed_sd)] if result.seed_sd else []
    return here + [("at paper scale", f"prior sd {PAPER_SCALE_PRIOR.sd}", PAPER_SCALE_PRIOR.sd)]


def _one_run_seeds(epsilon: float, sd: float) -> str:
    """The paper's number as one run: a prediction within ±ε needs z·σ√(1 + 1/n) < ε for some n."""
    z = stats.norm.ppf(0.975)
    if z * sd >= epsilon:
        return (f"no number of seeds: the paper's single run alone varies by ±{z * sd:.2f} (seed sd {sd:.2f}), more than "
                f"ε {epsilon:.2f}; a wider ε or the paper's own seed runs would")
    return f"a prediction interval within ±ε {epsilon:.2f} needs about {math.ceil(1 / ((epsilon / (z * sd)) ** 2 - 1))} seeds of ours"


def would_take(result: Verdict, gpu_hours: dict[str, float], backbone: str) -> str | None:
    """What would decide an undecided claim (None for a decided one or one not judged)."""
    claim = result.claim
    if isinstance(claim, ValueClaim) and result.verdict != REPRODUCED and result.epsilon:
        return _value_would_take(result)  # every value row says what "reproduced" takes, here and at paper scale
    if result.verdict not in UNDECIDED:
        return None
    if isinstance(claim, ComparisonClaim):
        estimates = [pair for pair in result.comparisons if pair.estimate is not None]
        if not estimates:
            return None
        widest = max(estimates, key=lambda pair: pair.estimate.half_width)
        return _order_would_take(widest.estimate, claim.judged_margin(), paper_gap(claim), gpu_hours.get(backbone), claim.band or 0.0)
    return None


def _comparison_record(pair: Comparison, flip: float) -> dict[str, Any]:
    estimate = pair.estimate
    record: dict[str, Any] = {"better": pair.better, "worse": pair.worse, "verdict": pair.verdict,
                              "difference": pair.difference, "interval": pair.interval, "arms": pair.arms}
    if estimate is not None:
        record |= {
            "interval_kind": "pair + seed, 95 %", "pair_interval": _printed(estimate.pair_interval, flip), "seeds": estimate.seeds,
            "seed_sd": estimate.seed_sd, "seed_df": estimate.seed_df, "seed_source": estimate.seed_source,
            "tau": estimate.tau, "decidable_gap": estimate.half_width,
        }
    elif pair.difference is not None:
        record["interval_kind"] = "none: one run each, the band alone"
    return record


def claim_record(result: Verdict, backbone: str, scale: str) -> dict[str, Any]:
    """One claim's verdict and every number behind it, for reports/claims.json."""
    claim = result.claim
    record: dict[str, Any] = {"kind": claim.kind, "origin": claim.origin, "backbone": backbone, "scale": scale,
                              "verdict": result.verdict, "at_edge": result.at_edge, "would_take": result.would_take}
    if isinstance(claim, ValueClaim):
        record |= {"ours": result.ours, "paper": result.paper, "epsilon": result.epsilon, "seeds": result.seeds,
                   "seed_source": result.noise_source, "interval": result.interval,
                   "interval_kind": f"{interval_kind(result)}: ours − paper, 95 %" if result.interval else None,
                   "difference": None if result.ours is None or result.paper is None else result.ours - result.paper}
    if isinstance(claim, ComparisonClaim):
        record |= {"paper": claim.paper, "lower_is_better": claim.lower_is_better, "paper_gap": paper_gap(claim),
                   "family_size": len(result.comparisons), "comparisons": [_comparison_record(pair, -1.0 if claim.lower_is_better else 1.0) for pair in result.comparisons]}
        if isinstance(claim, OrderClaim) or claim.judged_margin():
            record["margin"] = claim.judged_margin()
        if result.settling_design is not None:
            record["settling_design"] = result.settling_design
    if result.p_value is not None:
        record |= {"rho": result.ours, "p_value": result.p_value}
    if result.settled is not None:
        record["settled"] = result.settled
    return record


SETTLED_CLAIMS = REPORTS / "settle"  # <claim id>.json and .png of each settling (python -m stages settle)


def settled_text(record: dict) -> str:
    """A settling's outcome as the claim's row says it (reports/settle/<claim id>.json)."""
    looks, budget = record["looks"], record["budget"]
    last = looks[-1]
    spent = f"{record['hours_spent']:.3g} {budget['unit']}"
    where = f"{SETTLED_CLAIMS.as_posix()}/{record['claim']}.json"
    design = record.get("design") or {}
    if design.get("new_seeds_only"):  # the published verdict's seeds set aside: its error and this one's add up
        where += (f"; new seeds only, the published verdict's {len(design.get('set_aside', []))} set aside: the claim's "
                  f"error is at most {design.get('combined_error', 0.0975):.2%} in all")
    if record["outcome"] in (HOLDS, CONTRADICTED):
        return (f"settled: {record['outcome']} after {last['seeds_per_arm']} seeds per arm ({spent}), Δ {last['difference']:+.2f} "
                f"[{last['interval'][0]:.2f}, {last['interval'][1]:.2f}] at the sequential boundary ({where})")
    planned = record.get("plan", {}).get("looks", [budget.get("max_seeds_per_arm")])[-1]
    cap = f", the budget {budget['hours']:.3g} {budget['unit']}" if budget.get("hours") is not None else ""
    return (f"not decided within its plan of {planned} seeds per arm{cap}: {record['outcome']} after "
            f"{last['seeds_per_arm']} seeds per arm, {spent} spent ({where})")


SETTLE_RECORD_KEYS = {"claim": str, "looks": list, "outcome": str, "budget": dict, "hours_spent": (int, float), "design": dict}


def settle_record_problem(path: Path) -> tuple[dict | None, str | None]:
    """(the settling's record, None), or (None, what is wrong with the file, in words)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"not readable JSON ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    if not isinstance(record, dict):
        return None, "not a settling's record (a JSON object)"
    wrong = [key for key, kind in SETTLE_RECORD_KEYS.items() if not isinstance(record.get(key), kind)]
    if wrong == ["design"]:
        return None, "made by the budget-sized rule, which spent the claim's error twice (no design in it)"
    if wrong or not record["looks"] or not isinstance(record["looks"][-1], dict):
        return None, f"not a settling's record (missing or wrong: {', '.join(wrong) or 'looks'})"
    return record, None


def settled_records(folder: Path = SETTLED_CLAIMS) -> dict[str, dict]:
    """Every settling's record by claim id (none where no claim was settled). A file that is not one is left out,
    in one line naming it and how to remake it: the report goes on without it."""
    records = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record, problem = settle_record_problem(path)
        if problem:
            logging.getLogger(__name__).warning(f"{path.as_posix()}: {problem}; left out of the report: settle the claim "
                                                f"again (`python -m stages settle {path.stem}`) or remove the file")
            continue
        records[path.stem] = record
    return records


def annotate(verdicts: list[Verdict], tables, gpu_hours: dict[str, float], settled: dict[str, dict] | None = None) -> None:
    """Set `would_take` on every undecided claim (the backbone's GPU hours per seed from `gpu_hours`). A claim
    a settling decided takes the settling's verdict (`settled`, by claim id), in every place it is read: its
    comparison shows the deciding look; an undecided settling leads what would decide it."""
    for result in verdicts:
        record = (settled or {}).get(result.claim.id)
        if record is not None and record["outcome"] in (HOLDS, CONTRADICTED) and result.verdict in UNDECIDED:
            take_settled(result, record)
        result.would_take = would_take(result, gpu_hours, result.claim.claim_backbone(tables))
        design = result.settling_design
        if design is not None and result.would_take is not None and record is None:
            result.would_take = (f"`python -m stages settle {result.claim.id}` continues its design ({design['expected_seeds']:.1f} seeds per "
                                 f"arm expected at {design['effect_source']}). {result.would_take}")
        if record is not None and result.would_take is not None:
            result.would_take = f"{settled_text(record)}. {result.would_take}"
    adjust_for_multiplicity(verdicts)


def claim_p_value(result: Verdict) -> float | None:
    """A judged claim's two-sided p-value: an order's, by its own interval against its margin (the band's edge on
    the side of Δ̂); a correlation's or spread's one-sided p, doubled. None for the other kinds and a settled claim
    (its sequential boundary is its own test)."""
    claim = result.claim
    if result.verdict not in JUDGED or result.settled is not None:
        return None
    if isinstance(claim, OrderClaim) and len(result.comparisons) == 1 and result.comparisons[0].estimate is not None:
        estimate, margin, band = result.comparisons[0].estimate, claim.judged_margin(), claim.band or 0.0
        return interval_p_value(estimate, margin + math.copysign(band, estimate.difference - margin))
    if result.p_value is not None and math.isfinite(result.p_value):
        return min(1.0, 2 * min(result.p_value, 1 - result.p_value))
    return None


def adjust_for_multiplicity(verdicts: list[Verdict], q: float = 0.05) -> None:
    """Each judged claim's Benjamini–Hochberg-adjusted p-value over every claim judged with one: a verdict that
    survives (≤ q) keeps a 5 % false-discovery rate across the report, not only its own 5 %."""
    judged = [(result, p) for result in verdicts if (p := claim_p_value(result)) is not None]
    for (result, _), adjusted in zip(judged, bh_adjusted([p for _, p in judged])):
        result.p_adjusted = adjusted


def take_settled(result: Verdict, record: dict) -> None:
    """The settling's verdict for the claim: its outcome, and its last look's Δ and interval on the pair."""
    last = record["looks"][-1]
    result.verdict = record["outcome"]
    result.note = settled_text(record)
    result.settled = {"seeds_per_arm": last["seeds_per_arm"], "difference": last["difference"],
                      "interval": tuple(last["interval"]), "record": f"{SETTLED_CLAIMS.as_posix()}/{record['claim']}.json"}
    for pair in result.comparisons:
        pair.verdict, pair.note = record["outcome"], None
        pair.difference, pair.interval = last["difference"], tuple(last["interval"])


def gpu_hours_per_seed(path: Path) -> dict[str, float]:
    """One seed of the whole pipeline at paper scale, in GPU hours per backbone (reports/bench-gpu.json's
    measured cost); none where the GPU check has not been run."""
    if not path.is_file():
        return {}
    per_run = (json.loads(path.read_text(encoding="utf-8")).get("cost") or {}).get("per_run") or {}
    return {backbone: float(stages["total"]) for backbone, stages in per_run.items() if isinstance(stages, dict) and "total" in stages}


def finite(value: Any) -> Any:
    """A JSON tree with NaN and ±inf as null (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def claim_details(verdicts: list[Verdict], tables, scale: str) -> dict[str, dict]:
    """claims.json's `details`: each claim's `claim_record`, JSON-safe."""
    return {result.claim.id: finite(claim_record(result, result.claim.claim_backbone(tables), scale)) for result in verdicts}


def forest_rows(verdicts: list[Verdict]) -> dict[str, list[dict[str, Any]]]:
    """The forest plot's rows by paper: every value claim with an interval and every
    comparison with an interval (judged or undecided), with its band."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for result in verdicts:
        claim = result.claim
        rows = []
        if isinstance(claim, ValueClaim) and result.interval is not None and result.ours is not None:
            rows.append({"label": claim.id, "difference": result.ours - result.paper, "interval": result.interval,
                         "pair_interval": None, "band": (-result.epsilon, result.epsilon), "verdict": result.verdict})
        if isinstance(claim, ComparisonClaim):
            margin = claim.judged_margin()
            for pair in result.comparisons:
                if pair.interval is None or pair.estimate is None:
                    continue
                band = (claim.band or 0.0)
                flip = -1.0 if claim.lower_is_better else 1.0  # the band around the margin, in the printed direction
                rows.append({"label": f"{claim.id}: {pair.better} − {pair.worse}", "difference": pair.difference,
                             "interval": pair.interval, "pair_interval": _printed(pair.estimate.pair_interval, flip),
                             "band": tuple(sorted((flip * (margin - band), flip * (margin + band)))), "verdict": pair.verdict})
        if rows:
            groups.setdefault(paper_of(result), []).extend(rows)
    return groups


def _printed(interval: tuple[float, float] | None, flip: float) -> tuple[float, float] | None:
    """An improvement interval in the printed (better − worse as labelled) direction."""
    if interval is None:
        return None
    return interval if flip > 0 else (-interval[1], -interval[0])
