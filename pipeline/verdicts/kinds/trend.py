"""The trend claim: a sweep's shape (decreasing, increasing, first-best, or flat within a width), judged as
the family of order comparisons it implies (`rules.trend_verdict`: contradictions Bonferroni-corrected).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.verdicts.claim import Judging, SubjectSpec, Verdict, register_claim_kind
from pipeline.verdicts.kinds.order import ComparisonClaim
from pipeline.verdicts.rules import STEP_ALPHA, steps_against, trend_verdict
from pipeline.verdicts.verdict_names import CANNOT_HOLD, CANNOT_RUN, CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_RUN, OTHER_SCALE


@register_claim_kind
class TrendClaim(ComparisonClaim):
    """A sweep's shape: `decreasing` (each subject beats the next), `increasing` (each next beats the one
    before), `first-best` (the first beats each other) or `flat` (not sensitive to the swept setting: no
    two points differ by `width` or more)."""

    kind: Literal["trend"]
    shape: Literal["decreasing", "increasing", "first-best", "flat"]
    width: float | None = Field(None, gt=0, description="flat: the difference between two points that counts as sensitive")
    width_reason: str | None = None
    sweep: list[SubjectSpec] = Field(min_length=2, alias="subjects")

    @model_validator(mode="after")
    def _flat_width(self) -> "TrendClaim":
        if (self.shape == "flat") != (self.width is not None):
            raise ValueError(f"{self.id}: a width goes with shape flat, and only with it")
        if self.width is not None and not self.width_reason:
            raise ValueError(f"{self.id}: a flat sweep's width needs its width_reason")
        return self

    @field_validator("sweep")
    @classmethod
    def _unique(cls, subjects: list[SubjectSpec]) -> list[SubjectSpec]:
        labels = [subject.label for subject in subjects]
        if len(set(labels)) != len(labels):
            raise ValueError(f"subject labels {labels} must be unique")
        if any(subject.model is None for subject in subjects):
            raise ValueError("a sweep's subjects are models we run")
        return subjects

    def subjects(self) -> list[SubjectSpec]:
        return self.sweep

    def paper_gap(self) -> float | None:
        """A flat sweep claims no gap: None (its seeds cannot be sized from the paper's numbers)."""
        return None if self.shape == "flat" else super().paper_gap()

    def gap_of(self, numbers: list[float]) -> float:
        """The gap the shape is judged on: the first against the best other; the endpoints' for a monotone sweep."""
        if self.shape == "first-best":
            return abs(numbers[0] - max(numbers[1:]))
        return abs(numbers[0] - numbers[-1])

    def judged_margin(self) -> float:
        """flat: each ordered pair keeps within the width (a − b > −width both ways); else 0."""
        return -self.width if self.width is not None else 0.0

    def family(self, kept: list[SubjectSpec]) -> list[tuple[SubjectSpec, SubjectSpec]]:
        """The pairs the shape implies: first-best, the first against each other; decreasing, each
        neighbour pair then the endpoints (a sweep of small steps can fall overall yet no step be sure:
        the endpoints decide it, a step only contradicts it); increasing, the same the other way round;
        flat, every ordered pair (|a − b| < width is a − b > −width and b − a > −width)."""
        if self.shape == "flat":
            return [(one, other) for one in kept for other in kept if one is not other]
        if self.shape in ("decreasing", "increasing"):
            ordered = kept if self.shape == "decreasing" else kept[::-1]
            steps = list(zip(ordered, ordered[1:]))
            return steps + ([(ordered[0], ordered[-1])] if len(ordered) > 2 else [])
        return [(kept[0], other) for other in kept[1:]] if kept and kept[0] is self.sweep[0] else []

    def judge_here(self, judging: Judging) -> Verdict:
        rows = judging.rows(self.sweep, self.columns(), self.claim_backbone(judging.tables), self.claim)
        kept = [subject for subject in self.sweep if not rows[subject.label].not_applicable]
        skipped = [subject.label for subject in self.sweep if rows[subject.label].not_applicable]
        margin = self.judged_margin()
        family = self.family(kept)
        comparisons = [self.compare(judging, rows, better, worse, margin) for better, worse in family]
        notes = [f"{label}: not applicable here" for label in skipped]
        if comparisons and all(pair.estimate is not None for pair in comparisons):
            # the family's rule: "contradicted" Bonferroni-corrected over its pairs (pipeline.verdicts.rules)
            estimates = [pair.estimate for pair in comparisons]
            verdict, per_pair = trend_verdict(estimates, self.shape, margin=margin)
            for pair, pair_verdict in zip(comparisons, per_pair):
                pair.verdict = pair_verdict
            notes += [f"{family[index][0].label} → {family[index][1].label} goes against the shape beyond chance "
                      f"(one-sided, {STEP_ALPHA:.0%} per step): the sweep cannot hold" for index in steps_against(estimates, self.shape, margin)]
        else:
            verdict = _family_verdict({pair.verdict for pair in comparisons}) if comparisons else NOT_RUN
        if not comparisons:
            notes.append("fewer than two points of the sweep can run here")
        commands = list(dict.fromkeys(command for pair in comparisons for command in pair.commands))
        return Verdict(self, verdict, comparisons=comparisons, note="; ".join(notes) or None, commands=commands)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        shown = super().paper_text(result, default_reason)
        return f"{shown} (width {self.width:g}: {self.width_reason})" if self.width is not None else shown


def _family_verdict(verdicts: set[str]) -> str:
    """A family whose pairs could not all be estimated: contradicted or not run if one is, holds if all do."""
    if len(verdicts) == 1 and next(iter(verdicts)) in (CANNOT_HOLD, CANNOT_RUN):
        return next(iter(verdicts))
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    if NOT_RUN in verdicts or OTHER_SCALE in verdicts:
        return NOT_RUN if NOT_RUN in verdicts else OTHER_SCALE
    return HOLDS if verdicts == {HOLDS} else INCONCLUSIVE
