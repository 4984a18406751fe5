"""The unmeasured claim: a stated result on a quantity the pipeline measures for no model, listed as
"not run" with why, so that it is not dropped.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipeline.verdicts.claim import ClaimSpec, Judging, Verdict, register_claim_kind
from pipeline.verdicts.verdict_names import NOT_RUN


@register_claim_kind
class UnmeasuredClaim(ClaimSpec):
    """A stated result on a quantity the pipeline measures for no model (GS-InfoNCE's batch-size probe of
    negative similarities): always "not run", with `reason` (what is missing) and `would_need` (what
    measuring it would take), so that the claim is listed, not dropped."""

    kind: Literal["unmeasured"]
    paper: str = Field(min_length=1, description="the paper's numbers or finding, as text")
    reason: str = Field(min_length=1, description="why no run of the pipeline measures it")
    would_need: str = Field(min_length=1, description="what measuring it would take")

    def judge_here(self, judging: Judging) -> Verdict:
        return Verdict(self, NOT_RUN, note=f"{self.reason}; it would need {self.would_need}")

    def ours_text(self, result: Verdict) -> str:
        return "—"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return self.paper
