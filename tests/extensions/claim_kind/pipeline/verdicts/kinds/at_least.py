"""The at-least claim: a cell of tables.yaml whose paper number is a floor ours should clear, not a value to meet
within ε. It holds when our interval of ours − paper (95 %) lies wholly above 0, is contradicted when it lies wholly
below, and is inconclusive when it holds 0 (or nothing varied). The row, the arm and the interval are the value
claim's (`ValueClaim`, the claims file's `value_against` included): this kind only reads them as a floor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pipeline.reporting.spec import TablesFile
from pipeline.verdicts.claim import ClaimSpec, Judging, Verdict, register_claim_kind
from pipeline.verdicts.kinds.value import ValueClaim
from pipeline.verdicts.rules import TOLERANCE, at_the_edge
from pipeline.verdicts.verdict_names import CONTRADICTED, HIGHER, HOLDS, INCONCLUSIVE, NOT_REPRODUCED

# the value rule with a band of (almost) nothing: "higher" is an interval wholly above the paper's number,
# "not reproduced" one wholly below; any other verdict it judges holds the number, or saw nothing vary
AS_A_FLOOR = {HIGHER: HOLDS, NOT_REPRODUCED: CONTRADICTED}


@register_claim_kind
class AtLeastClaim(ClaimSpec):
    """Ours at least the paper's number in a cell of tables.yaml: our interval of ours − paper clears 0."""

    kind: Literal["at_least"]
    table: str
    row: str
    column: str = Field(description="the column header, as in the table")

    def as_value_claim(self) -> ValueClaim:
        """The same cell as a value claim whose band is a rounding error: its lookup and interval are this claim's."""
        cell = self.model_dump(exclude={"kind"})
        return ValueClaim.model_validate(cell | {"kind": "value", "epsilon": TOLERANCE, "epsilon_reason": "a floor, no band"})

    def claim_backbone(self, tables: TablesFile) -> str:
        return self.as_value_claim().claim_backbone(tables)

    def cross_check(self, tables: TablesFile, params: dict[str, Any]) -> str | None:
        return self.as_value_claim().cross_check(tables, params)

    def judge_here(self, judging: Judging) -> Verdict:
        result = self.as_value_claim().judge_here(judging)
        result.claim, result.epsilon, result.epsilon_reason = self, None, None
        if result.interval is not None:  # judged by the value rule: read as a floor
            result.verdict = AS_A_FLOOR.get(result.verdict, INCONCLUSIVE)
        return result

    def at_edge(self, result: Verdict) -> bool:
        return result.interval is not None and at_the_edge(result.interval, (0.0,))

    def ours_text(self, result: Verdict) -> str:
        return self.as_value_claim().ours_text(result)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return "—" if result.paper is None else f"at least {result.paper:.2f}"
