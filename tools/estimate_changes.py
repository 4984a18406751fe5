"""The claims' estimates of a reproduction against the committed ones (`tools.reproduction`; the rule:
docs/reproducing.md, "Did it reproduce?").

A claim is decided by its estimate, so a reproduction is judged on the estimates, not on the verdict words:
for every judged comparison (an order, each pair of a trend) and every compared value claim, Δ̂ and both
ends of its interval — and τ, the pair noise, where there is one — in units of that claim's own committed
half-width h. Each may move at most `fraction` h (a tenth: what another CPU's last bits move); a verdict word
that flips while its estimates stay inside is named and accepted (the interval ended at a boundary), and an
estimate that moves more fails, whatever the words say. A claim with no interval (not run, another scale, a
correlation's ρ) must keep its verdict word, and its statistics stay within the relative tolerance of
`tools.result_numbers`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline import paths
from pipeline.verdicts.rules import RELATIVE_TOLERANCE
from tools.result_numbers import Largest, finite, numbers_within

CLAIMS = paths.REPORTS / "claims.json"
# The statistics of a claim without an interval (a correlation's ρ and p, a spread's ratio and p).
STATISTICS = ("rho", "p_value")


@dataclass(frozen=True)
class ClaimEstimate:
    """One judged estimate of claims.json: its parts (difference, low, high, tau) and its half-width h."""

    claim: str
    label: str
    parts: dict[str, float]
    half_width: float


def _number(value) -> float | None:
    return float(value) if finite(value) else None


def _estimate(claim: str, label: str, entry: dict) -> ClaimEstimate | None:
    interval, difference = entry.get("interval"), _number(entry.get("difference"))
    if not (isinstance(interval, list) and len(interval) == 2) or difference is None:
        return None
    low, high = (_number(end) for end in interval)
    if low is None or high is None or high <= low:
        return None
    parts = {"Δ̂": difference, "low": low, "high": high}
    if _number(entry.get("tau")) is not None:
        parts["τ"] = float(entry["tau"])
    return ClaimEstimate(claim, label, parts, (high - low) / 2)


def claim_estimates(claims: dict) -> dict[str, ClaimEstimate]:
    """"claim (better − worse)" → its estimate, for every comparison and value claim with an interval."""
    found: dict[str, ClaimEstimate] = {}
    details = claims.get("details")
    for claim, entry in (details.items() if isinstance(details, dict) else ()):
        if not isinstance(entry, dict):
            continue
        pieces = [(f"{claim} ({c.get('better')} − {c.get('worse')})", c) for c in entry.get("comparisons") or []
                  if isinstance(c, dict)]
        for label, piece in pieces or [(claim, entry)]:
            estimate = _estimate(claim, label, piece)
            if estimate is not None:
                found[label] = estimate
    return found


def claim_verdicts(claims: dict) -> dict[str, str]:
    """claim id → verdict (claims.json's `by_claim`)."""
    by_claim = claims.get("by_claim")
    return {str(key): str(value) for key, value in by_claim.items()} if isinstance(by_claim, dict) else {}


def claim_statistics(claims: dict) -> dict[str, dict]:
    """claim id → the statistics of a claim judged without an interval (ρ, p)."""
    details = claims.get("details")
    return {claim: {key: entry[key] for key in STATISTICS if key in entry}
            for claim, entry in (details.items() if isinstance(details, dict) else ())
            if isinstance(entry, dict) and any(key in entry for key in STATISTICS)}


def compare_estimates(committed: dict, current: dict, fraction: float, check) -> Largest:
    """Every estimate within `fraction` of its committed half-width (0: equal); every verdict word unchanged
    unless its estimates stayed inside, then named. Returns the largest movement, in half-widths."""
    then, now = claim_estimates(committed), claim_estimates(current)
    largest, moved_claims = Largest(), set()
    for label, before in then.items():
        after = now.get(label)
        if after is None:
            check.problems.append(f"{CLAIMS.as_posix()}: {label}: no estimate in this run (committed "
                                  f"Δ̂ {before.parts['Δ̂']:+.4f}, h {before.half_width:.4f})")
            moved_claims.add(before.claim)
            continue
        for part, value in before.parts.items():
            ratio = abs(after.parts.get(part, math.inf) - value) / before.half_width
            where = f"{label}: {part} {after.parts.get(part, math.nan):+.4f} vs committed {value:+.4f}, h {before.half_width:.4f}"
            largest.offer(ratio, where)
            if ratio > fraction:
                moved_claims.add(before.claim)
                check.problems.append(f"{CLAIMS.as_posix()}: {where}: moved {ratio:.3f} h (allowed {fraction} h)")
    for label in sorted(now.keys() - then.keys()):
        check.problems.append(f"{CLAIMS.as_posix()}: {label}: an estimate the committed run does not have")
        moved_claims.add(now[label].claim)
    _compare_words(committed, current, {estimate.claim for estimate in then.values()}, moved_claims, check)
    _compare_statistics(committed, current, fraction, check)
    rule = f"beyond {fraction} h" if fraction > 0 else "not equal (identity required)"
    check.lines.append(f"claims' estimates compared: {len(then)} (Δ̂, both interval ends, τ) in {len({e.claim for e in then.values()})} "
                       f"claims, {len(moved_claims)} claims {rule}; largest {largest.text('h')}")
    return largest


def _compare_words(committed: dict, current: dict, estimated: set[str], moved: set[str], check) -> None:
    then, now = claim_verdicts(committed), claim_verdicts(current)
    flipped = []
    for claim, word in then.items():
        if now.get(claim) == word:
            continue
        line = f"{claim}: {now.get(claim, 'missing')} vs committed {word}"
        if claim in estimated and claim not in moved and claim in now:
            flipped.append(line)
        elif claim not in moved:  # a moved estimate is named already
            check.problems.append(f"{CLAIMS.as_posix()}: verdict changed with no estimate to judge it by: {line}")
    check.lines.append(f"claims' verdicts compared: {len(then)}, {sum(now.get(c) != w for c, w in then.items())} changed"
                       + (f" ({len(flipped)} with every estimate inside its tolerance, accepted: {'; '.join(flipped)})"
                          if flipped else ""))


def _compare_statistics(committed: dict, current: dict, fraction: float, check) -> None:
    then, now = claim_statistics(committed), claim_statistics(current)
    tolerance = RELATIVE_TOLERANCE if fraction > 0 else 0.0
    for claim, values in then.items():
        for problem in numbers_within(values, now.get(claim, {}), tolerance):
            check.problems.append(f"{CLAIMS.as_posix()}: {claim}: {problem}")
