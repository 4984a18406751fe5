"""The correlation claim: across models, two columns correlate with a sign and at least a strength
(Spearman's ρ with a one-sided permutation p, `rules.correlation_verdict`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from pipeline.verdicts.arms import arm_of
from pipeline.settings_rules import SCALES
from pipeline.verdicts.claim import ClaimSpec, Judging, SubjectSpec, Verdict, absence, metric_check, register_claim_kind
from pipeline.verdicts.rules import correlation_verdict, p_at_the_edge
from pipeline.verdicts.verdict_names import NOT_RUN, OTHER_SCALE


@register_claim_kind
class CorrelationClaim(ClaimSpec):
    """Across `models`, `x` and `y` correlate with `sign` and at least `strength` (Spearman's ρ)."""

    kind: Literal["correlation"]
    models: list[SubjectSpec] = Field(min_length=3)
    x: str
    y: str
    sign: Literal["positive", "negative"]
    strength: float = Field(0.5, gt=0, le=1, description="|ρ| that counts as a correlation")
    strength_reason: str = Field(min_length=1)
    paper: str = Field(min_length=1)
    scales: list[Literal[SCALES]] = Field(list(SCALES), min_length=1)  # type: ignore[valid-type]

    @field_validator("x", "y")
    @classmethod
    def _check_column(cls, column: str) -> str:
        return metric_check(column)

    @field_validator("models")
    @classmethod
    def _models(cls, models: list[SubjectSpec]) -> list[SubjectSpec]:
        if any(subject.model is None or subject.column for subject in models):
            raise ValueError("the correlated subjects are models we run, on the claim's x and y")
        return models

    def subjects(self) -> list[SubjectSpec]:
        return self.models

    def judge_here(self, judging: Judging) -> Verdict:
        if judging.scale not in self.scales:
            return Verdict(self, OTHER_SCALE, note=f"compared at {' / '.join(self.scales)} scale; this run is {judging.scale}")
        rows = judging.rows(self.models, [self.x, self.y], self.claim_backbone(judging.tables), self.claim)
        measured = [(subject, rows[subject.label]) for subject in self.models]
        measured = [(subject, row) for subject, row in measured
                    if row.present and row.ours.get(self.x) is not None and row.ours.get(self.y) is not None]
        # each model's mean over the seed record's seeds where the record holds it (one run's ρ is noisier)
        arms = [[arm_of(row, subject.model, column, judging.record) for column in (self.x, self.y)] for subject, row in measured]
        points = [(x_arm.values.mean(), y_arm.values.mean()) for x_arm, y_arm in arms]
        seeds = min((min(len(x_arm.values), len(y_arm.values)) for x_arm, y_arm in arms), default=1)
        if len(points) < 3:
            absent = [absence(row) for row in rows.values() if not row.present]
            return Verdict(self, NOT_RUN, note=f"{len(points)} of {len(rows)} models measured; three are needed",
                           commands=list(dict.fromkeys(command for _, commands in absent for command in commands)))
        # the claimed direction with a one-sided permutation p (pipeline.verdicts.rules): a ρ over a few
        # models is weak evidence alone; holds needs both p < 0.025 and |ρ| ≥ strength
        verdict, rho, p_value = correlation_verdict(
            np.asarray([x for x, _ in points]), np.asarray([y for _, y in points]),
            claimed_sign=1 if self.sign == "positive" else -1, threshold=self.strength if self.sign == "positive" else -self.strength,
        )
        run = f"{len(points)} models" + (f", each the mean of {seeds} seeds" if seeds > 1 else ", one run each")
        return Verdict(self, verdict, ours=rho, run=run, p_value=p_value)

    def at_edge(self, result: Verdict) -> bool:
        return p_at_the_edge(result.p_value)

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        return f"ρ = {result.ours:+.2f} over {result.run}, one-sided permutation p = {result.p_value:.3f}"

    def evidence_text(self, result: Verdict) -> str:
        return f"ρ {result.ours:+.2f}, p {result.p_value:.3f}" if result.ours is not None and result.p_value is not None else "—"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return f"{self.paper} ({self.sign}, |ρ| ≥ {self.strength:g}: {self.strength_reason})"
