"""The claims' verdicts of a reproduction against the committed ones (`tools.reproduction`): every verdict
unchanged, or a verdict at the edge flipping to or from "inconclusive" (equivalent, and named).
"""

from __future__ import annotations

from pipeline import paths
from pipeline.io import dotted_leaves
from pipeline.verdicts.verdict_names import INCONCLUSIVE as INCONCLUSIVE_VERDICT

CLAIMS = paths.REPORTS / "claims.json"


def claim_verdicts(claims: dict) -> dict[str, str]:
    """claim id → verdict from reports/claims.json (per-claim entries), else the counts by verdict."""
    if isinstance(claims.get("by_claim"), dict):
        return {str(key): str(value) for key, value in claims["by_claim"].items()}
    entries = claims.get("claims")
    if isinstance(entries, list):
        return {str(entry.get("id")): str(entry.get("verdict")) for entry in entries if isinstance(entry, dict)}
    if isinstance(entries, dict):
        return {str(key): str(value.get("verdict") if isinstance(value, dict) else value) for key, value in entries.items()}
    return {f"count of {key}": str(value) for key, value in dotted_leaves(claims.get("verdicts", {}), into_lists=True).items()}


def edge_claims(claims: dict) -> set[str]:
    """The ids of claims.json's verdicts at the edge (`details.<id>.at_edge`)."""
    details = claims.get("details")
    return {str(key) for key, entry in details.items() if isinstance(entry, dict) and entry.get("at_edge")} if isinstance(details, dict) else set()


def compare_verdicts(committed: dict, current: dict, check) -> None:
    """Every claim's verdict unchanged; a verdict at the edge (either run's) flipping to or from
    "inconclusive" is equivalent, and named; any other change is a problem."""
    then, now = claim_verdicts(committed), claim_verdicts(current)
    edge = edge_claims(committed) | edge_claims(current)
    changed, flipped = [], []
    for key, value in then.items():
        if now.get(key) == value:
            continue
        line = f"{key}: {now.get(key, 'missing')} vs committed {value}"
        at_edge = key in edge and INCONCLUSIVE_VERDICT in (value, now.get(key)) and now.get(key) is not None
        (flipped if at_edge else changed).append(line)
    check.lines.append(f"claims' verdicts compared: {len(then)}, {len(changed) + len(flipped)} changed"
                       + (f" ({len(flipped)} at the edge, equivalent: {'; '.join(flipped)})" if flipped else ""))
    check.problems += [f"{CLAIMS.as_posix()}: verdict changed: {line}" for line in changed]
