"""The claims on one number of one model: `ExactClaim`, a deterministic count (GMACs) equal to the
paper's at its printed precision, and `RangeClaim`, a value within [low, high]. Neither has noise to count:
the number is compared as it is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.reporting.tables import Row
from pipeline.settings_rules import SCALES
from pipeline.verdicts.claim import ClaimSpec, Judging, SubjectSpec, Verdict, absence, metric_check, register_claim_kind
from pipeline.verdicts.rules import TOLERANCE
from pipeline.verdicts.verdict_names import CONTRADICTED, HOLDS, NOT_REPRODUCED, NOT_RUN, OTHER_SCALE, REPRODUCED


class _OneValueClaim(ClaimSpec):
    """A claim on one number of one model: a column of its metrics, analysis or MTEB file."""

    subject: SubjectSpec
    column: str = Field(description="a score column, or an analysis:/mteb: path")
    scales: list[Literal[SCALES]] = Field(  # type: ignore[valid-type]
        ["paper"], min_length=1, description="the scales whose runs can show the claimed number"
    )

    @field_validator("column")
    @classmethod
    def _check_column(cls, column: str) -> str:
        return metric_check(column)

    @field_validator("subject")
    @classmethod
    def _a_model(cls, subject: SubjectSpec) -> SubjectSpec:
        if subject.model is None:
            raise ValueError("the subject is a model we run")
        return subject

    def subjects(self) -> list[SubjectSpec]:
        return [self.subject]

    def measured(self, judging: Judging) -> tuple[Verdict | None, float | None, Row | None]:
        """(a verdict when the number cannot be judged here, the number, its row)."""
        if judging.scale not in self.scales:
            note = f"the claimed number is at {' / '.join(self.scales)} scale; this run is {judging.scale}"
            return Verdict(self, OTHER_SCALE, note=note), None, None
        row = judging.rows([self.subject], [self.column], self.claim_backbone(judging.tables), self.claim)[self.subject.label]
        if not row.present or row.ours.get(self.column) is None:
            note, commands = absence(row)
            return Verdict(self, NOT_RUN, note=note, commands=commands), None, row
        return None, row.ours[self.column], row

    def ours_text(self, result: Verdict) -> str:
        return "—" if result.ours is None else f"{result.ours:.4g} ({result.run})"


@register_claim_kind
class ExactClaim(_OneValueClaim):
    """A deterministic count (GMACs): ours, rounded as the paper prints it, equals the paper's."""

    kind: Literal["exact"]
    value: float
    decimals: int = Field(2, ge=0, le=6, description="the paper's printed precision")
    scales: list[Literal[SCALES]] = Field(["paper", "rehearsal"], min_length=1)  # type: ignore[valid-type]

    def judge_here(self, judging: Judging) -> Verdict:
        early, ours, row = self.measured(judging)
        if early:
            early.paper = self.value
            return early
        equal = round(ours, self.decimals) == round(self.value, self.decimals)
        return Verdict(self, REPRODUCED if equal else NOT_REPRODUCED, ours=ours, paper=self.value, run=row.run)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return f"{self.value:.{self.decimals}f} (exactly, at {self.decimals} decimals)"


@register_claim_kind
class RangeClaim(_OneValueClaim):
    """A value within [low, high] (the last hidden state's norm within 14–16)."""

    kind: Literal["range"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> "RangeClaim":
        if not self.low <= self.high:
            raise ValueError(f"{self.id}: low {self.low} is above high {self.high}")
        return self

    def judge_here(self, judging: Judging) -> Verdict:
        early, ours, row = self.measured(judging)
        if early:
            return early
        inside = self.low - TOLERANCE <= ours <= self.high + TOLERANCE
        return Verdict(self, HOLDS if inside else CONTRADICTED, ours=ours, run=row.run)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return f"within [{self.low:g}, {self.high:g}]"

    def evidence_text(self, result: Verdict) -> str:
        return "—" if result.ours is None else f"{result.ours:.4g} against [{self.low:g}, {self.high:g}]"
