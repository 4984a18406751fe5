"""The spread claim: one model varies less across training seeds than another on a score, judged on the
seed record's values of both (the same seeds, so paired) by a paired permutation test (`rules.spread_verdict`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from pipeline.verdicts.claim import ClaimSpec, Judging, SubjectSpec, Verdict, metric_check, register_claim_kind
from pipeline.verdicts.rules import p_at_the_edge, spread_verdict
from pipeline.verdicts.verdict_names import NOT_RUN


@register_claim_kind
class SpreadClaim(ClaimSpec):
    """One model varies less across training seeds than another on a score: the seed record's values of
    both (the same seeds, so paired) by a paired permutation test (`rules.spread_verdict`)."""

    kind: Literal["spread"]
    metric: str = Field(description="a score column")
    paper: str = Field(min_length=1)
    steadier: SubjectSpec
    other: SubjectSpec

    @field_validator("metric")
    @classmethod
    def _check_metric(cls, metric: str) -> str:
        return metric_check(metric)

    def subjects(self) -> list[SubjectSpec]:
        return [self.steadier, self.other]

    def judge_here(self, judging: Judging) -> Verdict:
        record = judging.record
        arms = [record.arm(subject.model, self.metric) if record is not None and subject.model else None
                for subject in (self.steadier, self.other)]
        if record is None or not record.matches(judging.params) or any(arm is None for arm in arms):
            return Verdict(self, NOT_RUN, note="the seed record (reports/seed_noise.json) at this run's settings holds "
                           "no seeds of both models", commands=["python scripts/seed_noise.py --seeds 42 1 2 3 4 --run"])
        verdict, ratio, p_value = spread_verdict(arms[0], arms[1])
        return Verdict(self, verdict, ours=ratio, run=f"{len(record.seeds)} seeds of the record", p_value=p_value)

    def at_edge(self, result: Verdict) -> bool:
        return p_at_the_edge(result.p_value)

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        p_value = "—" if result.p_value is None or math.isnan(result.p_value) else f"{result.p_value:.3f}"
        return (f"sd {self.steadier.label} / {self.other.label} = {result.ours:.2f} over {result.run}, "
                f"paired permutation one-sided p = {p_value}")

    def evidence_text(self, result: Verdict) -> str:
        if result.ours is None or result.p_value is None:
            return "—"
        return f"sd {self.steadier.label} / {self.other.label} {result.ours:.2f}, p {result.p_value:.3f}"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return self.paper
