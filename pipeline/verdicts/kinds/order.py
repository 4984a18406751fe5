"""The comparison claims: models compared on one column. `ComparisonClaim` holds what an order and a trend
share (the interval of a difference of two arms, judged against a margin and, for a metric without
resamples, a band); `OrderClaim` is one pair: `better` beats `worse`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from pipeline.verdicts.arms import Arm, arm_of, borrowed_noise, pair_variance, paired
from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.spec import MTEB_PREFIX
from pipeline.reporting.tables import Row
from pipeline.settings_rules import SCALES
from pipeline.verdicts.claim import (
    ClaimSpec, Comparison, Judging, SubjectSpec, Verdict, absence, decimals_for, interval_text, metric_check, noise_text, number_text,
    register_claim_kind, signed_text,
)
from pipeline.verdicts.estimates import Estimate, compare_arms, scale_resolution
from pipeline.verdicts import sequential, sizing
from pipeline.verdicts.rules import at_the_edge, order_verdict, smaller_than_paper
from pipeline.verdicts.verdict_names import (
    CANNOT_HOLD, CANNOT_RUN, CONTRADICTED, HOLDS, INCONCLUSIVE, NOT_RUN, OTHER_SCALE, SMALLER,
)

# A number of a claim's paper text, not a multiplier of a sweep ("0.5× 76.96": 76.96 only).
_PAPER_NUMBER = re.compile(r"(?<![\d.])(-?\d+\.\d+)(?![\d.]*\s*×)")


# --- the interval of a difference, and the verdict from an interval and a band ------------------------


def interval_verdict(interval: tuple[float, float], margin: float = 0.0, band: float = 0.0) -> str:
    """The interval of better − worse against the margin, widened by `band` either way: wholly above
    holds, wholly below contradicted, else inconclusive."""
    low, high = interval
    if low > margin + band:
        return HOLDS
    if high < margin - band:
        return CONTRADICTED
    return INCONCLUSIVE


def estimate_arms(better: Arm, worse: Arm, tau2: float, judging: Judging, models: list[str], column: str) -> Estimate:
    """better − worse with both sources of noise (`pipeline.verdicts.estimates.compare_arms`): the arms'
    own spread where each has two seeds or more, else the seed noise a one-run arm borrows (arms.py)."""
    together = paired(better, worse)
    if len(better.values) >= 2 and len(worse.values) >= 2:
        return compare_arms(better.values, worse.values, tau2, paired=together)
    noise, of_difference = borrowed_noise(judging.record, judging.params, models, column, together)
    return compare_arms(better.values, worse.values, tau2, paired=together and of_difference, noise=noise)


def flipped(estimate: Estimate) -> Estimate:
    """The estimate of the opposite difference (worse − better): lower-is-better metrics improve downwards."""
    low, high = estimate.interval
    pair = estimate.pair_interval
    return replace(estimate, difference=-estimate.difference, interval=(-high, -low),
                   pair_interval=None if pair is None else (-pair[1], -pair[0]))


def pair_evidence(pair: Comparison) -> str:
    """better − worse, Δ and its interval at the precision the interval's width needs."""
    places = decimals_for(pair.interval)
    interval = (f" [{signed_text(pair.interval[0], places)}, {signed_text(pair.interval[1], places)}]" if pair.interval
                else " (one run each)")
    return f"{pair.better} − {pair.worse} {signed_text(pair.difference, places)}{interval}"


class ComparisonClaim(ClaimSpec):
    """Models compared on one column: an STS score (paired bootstrap intervals) or an `analysis:`/`mteb:`
    path (no resamples: the point difference, against a `band` that says what difference counts)."""

    metric: str = Field(description="a score column, or an analysis:/mteb: path")
    lower_is_better: bool = Field(False, description="the metric improves downwards (alignment, uniformity)")
    band: float | None = Field(None, ge=0, description="a metric without resamples: the difference that counts")
    band_reason: str | None = None
    paper: str = Field(min_length=1, description="the paper's numbers behind the claim, as text")
    scales: list[Literal[SCALES]] = Field(  # type: ignore[valid-type]
        list(SCALES), min_length=1, description="the scales whose runs can show it (the papers' MTEB suites: paper)"
    )

    @field_validator("metric")
    @classmethod
    def _check_metric(cls, metric: str) -> str:
        return metric_check(metric)

    def resampled(self) -> bool:
        """Compared by paired bootstrap resamples: an STS score, the same column for every subject."""
        return self.metric in SCORE_COLUMNS and not any(subject.column for subject in self.subjects())

    def columns(self) -> list[str]:
        return list(dict.fromkeys([self.metric] + [subject.column for subject in self.subjects() if subject.column]))

    @model_validator(mode="after")
    def _banded(self) -> "ComparisonClaim":
        resampled = self.resampled()
        if not resampled and (self.band is None or not self.band_reason):
            raise ValueError(f"{self.id}: {self.metric} has no paired resamples here: give band and band_reason")
        if resampled and self.band is not None:
            raise ValueError(f"{self.id}: an STS score is compared by its paired bootstrap interval, not a band")
        return self

    def paper_gap(self) -> float | None:
        """The paper's own gap behind the claim, read from its `paper` text: better − worse for an order,
        the smallest step the shape needs for a trend; None when the text holds fewer than two numbers."""
        numbers = [float(found) for found in _PAPER_NUMBER.findall(self.paper.split("(")[0])]
        if len(numbers) < 2:
            return None
        return self.gap_of(numbers)

    def gap_of(self, numbers: list[float]) -> float:
        """The gap an order claim's paper numbers state, better's number first: better − worse, signed (a paper
        whose own numbers put better below worse gives a negative gap); a lower-is-better metric's improvement
        is its size."""
        return abs(numbers[0] - numbers[1]) if self.lower_is_better else numbers[0] - numbers[1]

    def judged_margin(self) -> float:
        """What each pair's difference is judged against (0: simply beats)."""
        return 0.0

    def cannot(self) -> tuple[str, str] | None:
        """(verdict, why) where no run can decide the claim: the paper's own gap is below the band that says
        what difference counts (first: true whatever is run), or its suite's task list is not in the papers."""
        unlisted = None
        if self.metric.startswith(MTEB_PREFIX):
            from pipeline.evaluation.mteb_suites import load_suite

            suite = load_suite(self.metric.removeprefix(MTEB_PREFIX).split(".")[1])
            unlisted = f"suite {suite.name}: {suite.unlisted}" if suite.unlisted else None
        gap = self.paper_gap()
        if self.band is not None and gap is not None and gap < self.band:
            also = f"; and {unlisted}" if unlisted else ""
            return CANNOT_HOLD, f"the paper's gap {gap:.3g} is below the band {self.band:g}: not even an exact reproduction holds{also}"
        return (CANNOT_RUN, unlisted) if unlisted else None

    def compare(self, judging: Judging, rows: dict[str, Row], better: SubjectSpec, worse: SubjectSpec, margin: float) -> Comparison:
        """better vs worse: the interval of the difference, then the verdict against the margin and band. A
        claim whose paper gap is below its band is judged all the same, after the run is read: the run can
        contradict it (or show a difference beyond the band after all); else it reads "cannot hold"."""
        cannot = self.cannot()
        if cannot is not None and cannot[0] == CANNOT_RUN:
            return Comparison(better.label, worse.label, CANNOT_RUN, note=cannot[1])
        pair = self._judged(judging, rows, better, worse, margin)
        if cannot is None:
            return pair
        if pair.verdict in (HOLDS, CONTRADICTED):
            pair.note = "; ".join(filter(None, [pair.note, f"it could not have held: {cannot[1]}"]))
        else:
            pair.verdict, pair.note = cannot
        return pair

    def _judged(self, judging: Judging, rows: dict[str, Row], better: SubjectSpec, worse: SubjectSpec, margin: float) -> Comparison:
        pair = Comparison(better.label, worse.label, NOT_RUN)
        if judging.scale not in self.scales:
            pair.verdict = OTHER_SCALE
            pair.note = f"compared at {' / '.join(self.scales)} scale; this run is {judging.scale}"
            return pair
        missing = [subject for subject in (better, worse) if subject.unavailable]
        if missing:
            pair.note = "; ".join(f"{subject.label}: not run here: {subject.unavailable}" for subject in missing)
            return pair
        fixed = [subject for subject in (better, worse) if subject.paper_number is not None]
        if fixed and judging.scale != "paper":
            pair.verdict = OTHER_SCALE
            pair.note = f"{fixed[0].label} is the paper's number ({fixed[0].number_source}), at paper scale; this run is {judging.scale}"
            return pair
        found = [rows.get(subject.label) for subject in (better, worse)]
        metrics = [subject.column or self.metric for subject in (better, worse)]
        absent = [absence(row) for row, metric in zip(found, metrics)
                  if row is not None and (not row.present or row.ours.get(metric) is None)]
        if absent:
            pair.note = "; ".join(note for note, _ in absent)
            pair.commands = [command for _, commands in absent for command in commands]
            return pair
        arms = [_subject_arm(judging, subject, row, metric) for subject, row, metric in zip((better, worse), found, metrics)]
        pair.arms = (arms[0].source, arms[1].source)
        pair.difference = float(arms[0].values.mean() - arms[1].values.mean())
        pair.verdict = INCONCLUSIVE
        if not self.resampled():
            return self._judge_unresampled(pair, arms, margin)
        problem = _unpaired(found, arms, (better, worse), fixed)
        if problem:
            pair.note = problem
            return pair
        # against a paper's number the test pairs are the paper's own: their noise is in both numbers and cancels
        tau2 = pair_variance(arms[0], arms[1]) if not fixed else 0.0
        models = [subject.model for subject in (better, worse) if subject.model]
        estimate = estimate_arms(arms[0], arms[1], tau2, judging, models, self.metric)
        pair.interval = estimate.interval
        pair.estimate = flipped(estimate) if self.lower_is_better else estimate
        pair.verdict = order_verdict(pair.estimate, margin)
        return pair

    def evidence_text(self, result: Verdict) -> str:
        """Its comparisons' Δ and intervals (two at most); with the paper's gap where it is smaller than the
        paper's; with the deciding look where a settling decided it."""
        shown = [pair_evidence(pair) for pair in result.comparisons if pair.difference is not None]
        if not shown:
            return super().evidence_text(result)
        if result.verdict == SMALLER:
            return f"{shown[0]}, the paper's gap {self.paper_gap():+.2f}"
        if result.settled is not None:
            return f"{shown[0]} after {result.settled['seeds_per_arm']} seeds per arm, settled ({result.settled['record']})"
        return "; ".join(shown[:2]) + (f"; and {len(shown) - 2} more pairs" if len(shown) > 2 else "")

    def _judge_unresampled(self, pair: Comparison, arms: list[Arm], margin: float) -> Comparison:
        """A metric without resamples (alignment, E_CLS, an MTEB mean): across seeds when both arms have
        two or more, against the margin widened by the band; one run each, the point difference against
        the band alone, and no interval is printed for it. Seeds across which nothing varied (an untrained
        model, a quantity the training does not move at this precision) are read as one run: the band says
        what difference counts, as it does for one run each."""
        band = self.band or 0.0
        if len(arms[0].values) >= 2 and len(arms[1].values) >= 2:
            estimate = compare_arms(arms[0].values, arms[1].values, 0.0, paired=paired(arms[0], arms[1]),
                                    resolution=scale_resolution(arms[0].values, arms[1].values))
            pair.interval = estimate.interval
            pair.estimate = flipped(estimate) if self.lower_is_better else estimate
            if not pair.estimate.degenerate:
                pair.verdict = interval_verdict(pair.estimate.interval, margin, band)
                return pair
            point = pair.estimate.difference
            pair.verdict = interval_verdict((point, point), margin, band)
            pair.note = "nothing varied across the seeds: the point difference against the band"
            return pair
        improvement = -pair.difference if self.lower_is_better else pair.difference
        pair.verdict = interval_verdict((improvement, improvement), margin, band)
        pair.note = "one run each: the point difference against the band"
        return pair

    def ours_text(self, result: Verdict) -> str:
        parts = []
        for pair in result.comparisons:
            places = decimals_for(pair.interval)
            shown = "—" if pair.difference is None else f"{signed_text(pair.difference, places)}{interval_text(pair.interval)}"
            if result.settled is not None:  # the deciding look of a settling, not this run's seeds
                shown += f" ({result.settled['seeds_per_arm']} seeds per arm, settled: {result.settled['record']})"
            elif pair.estimate is not None and pair.estimate.degenerate:  # "measured" would say noise was found
                seeds = " vs ".join(str(count) for count in pair.estimate.seeds)
                shown += f" ({seeds} seeds, the same value at every seed: nothing varied)"
            elif pair.estimate is not None:
                shown += f" ({noise_text(pair.estimate.seeds, pair.estimate.seed_source)}; {self._samplenoise_text(pair)})"
            elif pair.arms is not None:
                shown += " (one run each)"
            parts.append(f"{pair.better} − {pair.worse}: {shown} {pair.verdict}")
        return "; ".join(parts) or "—"

    def at_edge(self, result: Verdict) -> bool:
        band, margin = self.band or 0.0, self.judged_margin()
        return any(at_the_edge(pair.estimate.interval, (margin - band, margin + band)) for pair in result.comparisons
                   if pair.estimate is not None and not pair.estimate.degenerate)

    def _samplenoise_text(self, pair: Comparison) -> str:
        """The test-sample noise the interval counts: τ of the paired bootstrap, none against a paper's
        number (the same test pairs), or unmeasured for a metric without resamples."""
        if not self.resampled():
            return "sentence-sample noise not measured: seeds only"
        if pair.estimate.tau == 0 and any(subject.paper_number is not None for subject in self.subjects()):
            return "the paper's test pairs: no pair noise"
        return f"pair noise τ {number_text(pair.estimate.tau)}"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        band = f" (band {self.band:g}: {self.band_reason})" if self.band is not None else ""
        direction = " (lower is better)" if self.lower_is_better else ""
        return f"{self.paper}{direction}{band}"


def _subject_arm(judging: Judging, subject: SubjectSpec, row: Row | None, metric: str) -> Arm:
    if row is None:  # a system we do not run: the paper's one number
        return Arm(np.asarray([subject.paper_number], dtype=float), [], f"the paper's number ({subject.number_source})", None, False)
    return arm_of(row, subject.model, metric, judging.record)


def _unpaired(found: list[Row | None], arms: list[Arm], subjects: tuple[SubjectSpec, SubjectSpec], fixed: list) -> str | None:
    """Why two resampled scores cannot be compared here: a run without resamples, or two runs whose
    resamples differ (another eval.seed or other pairs)."""
    lacking = [row.label for row, arm in zip(found, arms) if row is not None and arm.resamples is None]
    if lacking:
        return f"no bootstrap resamples for {', '.join(lacking)} (eval.bootstrap)"
    if not fixed:
        indices = [(row.origin.resamples(subject.model) or {}).get("indices") for subject, row in zip(subjects, found)]
        if indices[0] != indices[1]:
            return "the two runs' bootstrap resamples differ (eval.seed or pairs), so they do not pair"
    return None


@register_claim_kind
class OrderClaim(ComparisonClaim):
    """`better` beats `worse` on `metric` by more than `margin` (0: simply beats; −0.5: keeps within 0.5)."""

    kind: Literal["order"]
    better: SubjectSpec
    worse: SubjectSpec
    margin: float = 0.0
    margin_reason: str | None = None

    @model_validator(mode="after")
    def _reasoned(self) -> "OrderClaim":
        if self.margin != 0 and not self.margin_reason:
            raise ValueError("a margin other than 0 needs its margin_reason")
        if self.better.label == self.worse.label:
            raise ValueError(f"better and worse are both labelled {self.better.label!r}")
        if self.better.paper_number is not None and self.worse.paper_number is not None:
            raise ValueError(f"{self.id}: both sides are paper numbers; compare a model we run")
        return self

    def subjects(self) -> list[SubjectSpec]:
        return [self.better, self.worse]

    def judged_margin(self) -> float:
        return self.margin

    def cannot(self) -> tuple[str, str] | None:
        """As every comparison's, and first: an STS order whose paper numbers put better at or below worse (by its
        margin) contradicts itself, which not even an exact reproduction holds."""
        gap = self.paper_gap()
        if self.band is None and gap is not None and gap <= self.margin:
            return CANNOT_HOLD, (f"the paper's own numbers put {self.better.label} − {self.worse.label} at {gap:+.2f}, not above "
                                 f"the margin {self.margin:g}: they contradict the claim, which not even an exact reproduction holds")
        return super().cannot()

    def judge_here(self, judging: Judging) -> Verdict:
        rows = judging.rows(self.subjects(), self.columns(), self.claim_backbone(judging.tables), self.claim)
        pair = self.compare(judging, rows, self.better, self.worse, self.margin)
        design = self._at_look_of_record(pair)
        estimate, gap = pair.estimate, self.paper_gap()
        if (pair.verdict == INCONCLUSIVE and estimate is not None and not estimate.degenerate
                and smaller_than_paper(estimate.interval, gap, self.margin)):
            pair.verdict = SMALLER
            pair.note = (f"its interval lies wholly below the paper's gap {gap:+.2f}: the effect here is smaller "
                         "than the paper's, whatever its sign (more seeds would only narrow where it lies)")
        return Verdict(self, pair.verdict, comparisons=[pair], note=pair.note, commands=pair.commands, settling_design=design)

    def _at_look_of_record(self, pair: Comparison) -> dict | None:
        """A claim `settle` can continue (paired seeds of the record, an effect the design can detect) is judged at
        the first look of its own settling design, not at 95 %: the published verdict is that look, so settling
        it later spends the claim's one error budget, not a second one (docs/method.md). Returns the design."""
        estimate = pair.estimate
        effect = sizing.claim_effect(self.paper_gap(), self.margin, self.band or 0.0)
        if (estimate is None or effect is None or estimate.degenerate or "paired seeds (within-run" not in estimate.seed_source
                or estimate.seeds[0] < 2 or not self.resampled() or pair.verdict not in (HOLDS, CONTRADICTED, INCONCLUSIVE)):
            return None
        found = sizing.of_record(effect[0], estimate.seed_sd, estimate.tau ** 2, estimate.seeds[0])
        if found is None or len(found.plan.looks) < 2:
            return None  # nothing settling could add: the fixed 95 % look is the design's only one
        level, z = float(found.plan.nominal_levels[0]), found.plan.boundaries_z[0]
        # the look's own interval, as settling computes it (`sequential.look_interval`)
        half = float(sequential.paired_look_half_width(found.plan, 0, estimate.seed_se ** 2, estimate.tau ** 2))
        pair.estimate = replace(estimate, interval=(estimate.difference - half, estimate.difference + half), half_width=half, level=level)
        pair.interval = flipped(pair.estimate).interval if self.lower_is_better else pair.estimate.interval
        pair.verdict = order_verdict(pair.estimate, self.margin)
        looks = ", ".join(map(str, found.plan.looks))
        pair.note = "; ".join(filter(None, [pair.note, (
            f"judged at look 1 of its settling design (looks at {looks} seeds per arm for {effect[1]} at "
            f"{found.power:.0%} power; boundary z {z:.2f}, a {level:.2%} interval), so that "
            "settling it spends no second error")]))
        return sizing.design_record(found, effect[1])

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        shown = super().paper_text(result, default_reason)
        return f"{shown} (margin {self.margin:+.2f}: {self.margin_reason})" if self.margin else shown
