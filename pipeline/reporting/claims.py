"""The papers' claims and the project's own questions as data (`claims.yaml`), and their verdicts
against our runs (docs/method.md, "Claims and verdicts").

Each claim kind is one class that validates itself, judges itself (`judge`) and renders itself
(`ours_text`, `paper_text`); `Claim` is their union, and a new kind is one more class in it.

- value: a table cell of tables.yaml (our number against the paper's, within ε);
- order: one model beats another on a column (the interval of the difference against a band);
- trend: a sweep's shape (decreasing, first-best, or flat within a width), checked as the order claims it implies;
- exact: a deterministic count (GMACs) equal to the paper's at its printed precision;
- range: a value within [low, high];
- correlation: the sign and strength of a correlation of two columns across models;
- unmeasured: a stated result on a quantity the pipeline measures for no model: "not run", with why.

A claim is the papers' (`origin: paper`, quoted verbatim from its seed under ../shared/seeds/,
tests/test_claim_quotes.py) or the project's own question (`origin: project`, with `why` it is
asked). A claim about a backbone is judged on a run of that backbone only (pipeline.reporting.backbones):
otherwise its verdict is "other backbone: not compared". The runs a claim reads are found exactly as
the tables' rows are (`tables.find_row`), so a claim whose runs do not exist is "not run" with the
command that runs them. The verdict rules are in docs/method.md ("Claims and verdicts"); the two
small functions `difference_interval` and `interval_verdict` are where they are computed.
"""

from __future__ import annotations

import math
import re
from abc import abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from pipeline.config import describe_validation_error, read_yaml_file
from pipeline.errors import PipelineError
from pipeline.models import MODEL_NAMES
from pipeline.reporting.arms import Arm, arm_of, borrowed_noise, pair_variance, paired
from pipeline.reporting.backbones import other_backbone
from pipeline.reporting.noise import (
    CONSISTENT, CONTRADICTED, HIGHER, HOLDS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Estimate, compare_arms,
    CORRELATION_ALPHA, EDGE_FRACTION, at_the_edge, correlation_verdict, decidable_gap, order_verdict, seeds_needed,
    spread_verdict, trend_verdict, value_verdict,
)
from pipeline.reporting.seed_record import SeedRecord
from pipeline.reporting.runs import SCORE_COLUMNS, has_param
from pipeline.reporting.spec import (
    ANALYSIS_PREFIX, MTEB_PREFIX, ExperimentSpec, RowSpec, Spec, TablesFile, TableSpec, check_paper_backbone, split_override,
)
from pipeline.reporting.tables import Row, RunSource, build_table, experiment_axes, find_row
from pipeline.settings_rules import SCALES

CLAIMS_FILE = Path("claims.yaml")
NOT_RUN, OTHER_SCALE = "not run", "other scale: not compared"
OTHER_BACKBONE = "other backbone: not compared"
# where the truth is "cannot", whatever is run: not "other scale", which more compute would change
CANNOT_HOLD = "cannot hold: the paper's gap is below the band"
CANNOT_RUN = "cannot run: the papers lack the task list"
VERDICTS = (REPRODUCED, HIGHER, NOT_REPRODUCED, CONSISTENT, HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN, OTHER_SCALE,
            OTHER_BACKBONE, CANNOT_HOLD, CANNOT_RUN)
# A number of a claim's paper text, not a multiplier of a sweep ("0.5× 76.96": 76.96 only).
_PAPER_NUMBER = re.compile(r"(?<![\d.])(-?\d+\.\d+)(?![\d.]*\s*×)")
UNDECIDED = (INCONCLUSIVE, CONSISTENT)  # judged, but the noise leaves it open: "what it would take" is said
DECIDED = (REPRODUCED, HIGHER, NOT_REPRODUCED, HOLDS, CONTRADICTED)  # judged and settled by this run
ORIGINS = ("paper", "project")
_CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOLERANCE = 1e-9  # |Δ| = ε exactly counts as inside the band, whatever the float rounding


def verdict_key(verdict: str) -> str:
    """The verdict as a metrics key (`reproduced, higher` → `reproduced_higher`)."""
    return re.sub(r"[^a-z]+", "_", verdict.split(":")[0]).strip("_")


# --- the verdict rules: the interval of a difference, and the verdict from an interval and a band -----


def interval_verdict(interval: tuple[float, float], margin: float = 0.0, band: float = 0.0) -> str:
    """The interval of better − worse against the margin, widened by `band` either way: wholly above
    holds, wholly below contradicted, else inconclusive."""
    low, high = interval
    if low > margin + band:
        return HOLDS
    if high < margin - band:
        return CONTRADICTED
    return INCONCLUSIVE


def estimate_arms(better: Arm, worse: Arm, tau2: float, judging: "Judging", models: list[str], column: str) -> Estimate:
    """better − worse with both sources of noise (`pipeline.reporting.noise.compare_arms`): the arms'
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


# --- judging: what every kind reads ---------------------------------------------------------------


@dataclass
class Comparison:
    """One `better` vs `worse` pair of an order or trend claim."""

    better: str
    worse: str
    verdict: str
    difference: float | None = None  # ours, better − worse (as labelled, whichever way the metric improves)
    interval: tuple[float, float] | None = None  # its 95 % interval, pair + seed noise (None: one run each, no noise known)
    estimate: Estimate | None = None  # the improvement (better − worse, or worse − better when lower is better)
    arms: tuple[str, str] | None = None  # where each arm's numbers come from
    note: str | None = None  # why it is not run or inconclusive
    commands: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    ours: float | None = None
    interval: tuple[float, float] | None = None
    paper: float | None = None
    epsilon: float | None = None
    epsilon_reason: str | None = None
    run: str | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    note: str | None = None
    commands: list[str] = field(default_factory=list)
    seeds: int | None = None  # a value claim's seeds of ours
    noise_source: str | None = None  # a value claim's seed noise: measured on its seeds, or borrowed
    seed_sd: float | None = None  # a value claim's seed sd per run (measured or borrowed)
    p_value: float | None = None  # a correlation's one-sided permutation p
    would_take: str | None = None  # for an undecided claim: what would decide it
    at_edge: bool = False  # its interval ends within EDGE_FRACTION of a half-width of a boundary: another CPU may flip it


@dataclass
class Judging:
    """What a claim is judged against: the claims file's defaults, the table specs, the runs, and the
    settings every row keeps at the workspace's value (`tables.experiment_axes` plus the claims')."""

    claims: ClaimsFile
    tables: TablesFile
    source: RunSource
    axes: list[str]
    record: SeedRecord | None = None  # the committed seed record (reports/seed_noise.json)

    @property
    def params(self) -> dict[str, Any]:
        return self.source.workspace.params

    @property
    def scale(self) -> str:
        return self.params["scale"]

    def rows(self, subjects: list[SubjectSpec], columns: list[str], backbone: str, caption: str) -> dict[str, Row]:
        """The subjects as rows of a table of `columns`, found as the tables' rows are; by label."""
        if not any(subject.model for subject in subjects):
            return {}
        spec = TableSpec(
            caption=caption, paper_source="claims.yaml", scale_note="the claim's", backbone=backbone,
            columns={column: column for column in columns}, rows=[subject.as_row() for subject in subjects if subject.model],
        )
        return {subject.label: find_row(subject.as_row(), spec, self.axes, self.source)
                for subject in subjects if subject.model}


# --- the schema -----------------------------------------------------------------------------------


def _metric_check(metric: str) -> str:
    if metric in SCORE_COLUMNS or metric.startswith((ANALYSIS_PREFIX, MTEB_PREFIX)):
        return metric
    raise ValueError(f"metric {metric!r} must be a score column ({', '.join(SCORE_COLUMNS)}) or an analysis:/mteb: path")


class SourceSpec(Spec):
    file: str = Field(pattern=r"^seeds/\S+\.txt$", description="the seed file under ../shared/seeds/")
    where: str = Field(min_length=1, description="table or section")
    quote: str = Field(min_length=1, description="the sentence or cell the claim rests on, verbatim; ' … ' elides")
    reconstructed: str | None = Field(
        None, description="why the quote is rebuilt, not copied (an overprinted line): its tokens occur in order on one seed line"
    )


class SubjectSpec(Spec):
    """A model of pipeline/models.py, in the workspace or in the DVC experiment of its overrides; or a
    system we do not run: by the paper's own number (`paper_number`, with `number_source`), or
    `unavailable` with the reason the project has no run of it."""

    label: str = Field(min_length=1)
    model: Literal[MODEL_NAMES] | None = None  # type: ignore[valid-type]
    experiment: ExperimentSpec | None = None
    paper_number: float | None = Field(None, description="a system the project does not train: the paper's number")
    number_source: str | None = None
    unavailable: str | None = Field(None, description="a system the project has no run of: why")
    column: str | None = Field(None, description="this subject's own column, where it is not the claim's metric")

    @model_validator(mode="after")
    def _one_kind(self) -> "SubjectSpec":
        given = [self.model is not None, self.paper_number is not None, self.unavailable is not None]
        if sum(given) != 1:
            raise ValueError(f"subject {self.label!r}: give one of model, paper_number or unavailable")
        if self.paper_number is not None and not self.number_source:
            raise ValueError(f"subject {self.label!r}: paper_number goes with number_source")
        if self.model is None and self.experiment:
            raise ValueError(f"subject {self.label!r}: an experiment is a model's")
        return self

    @field_validator("column")
    @classmethod
    def _check_column(cls, column: str | None) -> str | None:
        return column if column is None else _metric_check(column)

    def as_row(self) -> RowSpec:
        assert self.model is not None
        return RowSpec(label=self.label, model=self.model, experiment=self.experiment)

    def overrides(self) -> list[str]:
        return self.experiment.overrides + self.experiment.paper_overrides if self.experiment else []


class ClaimSpec(Spec):
    id: str = Field(min_length=1)
    claim: str = Field(min_length=1, description="the claim in words")
    origin: Literal[ORIGINS] = Field("paper", description="paper: the papers' claim, quoted; project: the project's question")  # type: ignore[valid-type]
    why: str | None = Field(None, description="a project question: why the project asks it")
    source: SourceSpec | None = None
    backbone: str | None = Field(
        None, description="the papers' backbone the claim is about (conf/backbone/); a value claim takes its table's"
    )
    of_pretraining: bool = Field(
        False, description="the claim is about what the backbone's pre-training gives (an attention sink, the pre-trained "
                           "embeddings' geometry): a stand-in backbone cannot show it"
    )

    @field_validator("id")
    @classmethod
    def _check_id(cls, claim_id: str) -> str:
        if not _CLAIM_ID.match(claim_id):
            raise ValueError(f"claim id {claim_id!r} must be lowercase letters, digits and dashes")
        return claim_id

    @field_validator("backbone")
    @classmethod
    def _check_backbone(cls, backbone: str | None) -> str | None:
        return backbone if backbone is None else check_paper_backbone(backbone)

    @model_validator(mode="after")
    def _check_origin(self) -> "ClaimSpec":
        if self.origin == "paper" and self.source is None:
            raise ValueError(f"{self.id}: a paper's claim needs its source (file, where, quote)")
        if self.origin == "project" and not self.why:
            raise ValueError(f"{self.id}: a project question needs `why` it is asked")
        return self

    # -- what each kind provides --

    def claim_backbone(self, tables: TablesFile) -> str:
        assert self.backbone is not None  # checked at load (`cross_check`)
        return self.backbone

    def subjects(self) -> list[SubjectSpec]:
        """The models the claim reads (their overrides are checked and are experiment axes)."""
        return []

    def cross_check(self, tables: TablesFile, params: dict[str, Any]) -> str | None:
        """What the schema cannot see: names in tables.yaml and params.yaml."""
        if self.backbone is None:
            return "give the backbone the claim is about (a preset of conf/backbone/ with a title)"
        for subject in self.subjects():
            for override in subject.overrides():
                key = split_override(override)[0]
                if not has_param(params, key):
                    return f"{subject.label}: unknown setting '{key}' (not in params.yaml)"
        return None

    def judge(self, judging: Judging) -> Verdict:
        """The verdict: on another backbone not compared, else the kind's own judgement."""
        elsewhere = other_backbone(self.claim_backbone(judging.tables), judging.params, self.of_pretraining)
        if elsewhere:
            return Verdict(self, OTHER_BACKBONE, note=elsewhere)
        result = self.judge_here(judging)
        result.at_edge = result.verdict in (*DECIDED, *UNDECIDED) and self.at_edge(result)
        return result

    def at_edge(self, result: Verdict) -> bool:
        """Whether the verdict lies within the cross-machine tolerance of a boundary (`noise.at_the_edge`):
        none for a kind without an interval."""
        return False

    @abstractmethod
    def judge_here(self, judging: Judging) -> Verdict:
        """The verdict on this run's backbone."""

    @abstractmethod
    def ours_text(self, result: Verdict) -> str:
        """Our side, for REPRODUCTION.md."""

    @abstractmethod
    def paper_text(self, result: Verdict, default_reason: str) -> str:
        """The paper's side, for REPRODUCTION.md."""

    def verdict_text(self, result: Verdict) -> str:
        notes = result.note.split("; ") if result.note else []
        notes += [part for pair in result.comparisons if pair.note for part in pair.note.split("; ")]
        edge = ", at the edge (within a tenth of its half-width of the boundary: another CPU may flip it)" if result.at_edge else ""
        shown = f"**{result.verdict}**{edge}" + (": " + "; ".join(dict.fromkeys(notes)) if notes else "")
        return shown + (f". What would decide it: {result.would_take}" if result.would_take else "")


def _interval_text(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f" [{_number(interval[0])}, {_number(interval[1])}]"


def _number(value: float) -> str:
    return f"{round(value, 2) + 0.0:.2f}"  # + 0.0 turns -0.0 into 0.0


def _noise_text(seeds: tuple[int, int] | int, source: str) -> str:
    shown = f"{seeds[0]} vs {seeds[1]} seeds" if isinstance(seeds, tuple) else f"{seeds} seed{'s' * (seeds != 1)}"
    return f"{shown}; seed noise {source}"


def _signed(number: float) -> str:
    return f"{round(number, 2) + 0.0:+.2f}"  # + 0.0 turns -0.0 into 0.0


def _absence(row: Row) -> tuple[str, list[str]]:
    if row.not_applicable:
        return f"{row.label}: not applicable here: {row.not_applicable}", []
    why = row.missing or row.missing_cells or "no number"
    return f"{row.label}: {why}", [row.command] if row.command else []


def _column_path(spec: TableSpec, header: str) -> str:
    return next(path for path, named in spec.columns.items() if named == header)


class ValueClaim(ClaimSpec):
    """A cell of tables.yaml: its row is the subject, its paper number the claim."""

    kind: Literal["value"]
    scale: Literal[SCALES] = Field("paper", description="the scale the paper's number is at")  # type: ignore[valid-type]
    table: str
    row: str
    column: str = Field(description="the column header, as in the table")
    seeds: str | None = Field(None, description="a table of seed runs of the same model: they are the arm (their spread)")
    epsilon: float | None = Field(None, gt=0, description="the band |Δ| ≤ ε; default: the file's")
    epsilon_reason: str | None = None

    @model_validator(mode="after")
    def _reasoned(self) -> "ValueClaim":
        if (self.epsilon is None) != (self.epsilon_reason is None):
            raise ValueError("epsilon and epsilon_reason go together")
        return self

    def claim_backbone(self, tables: TablesFile) -> str:
        return tables.tables[self.table].backbone

    def cross_check(self, tables: TablesFile, params: dict[str, Any]) -> str | None:
        if self.table not in tables.tables:
            return f"table {self.table!r} is not in tables.yaml"
        spec = tables.tables[self.table]
        row = next((row for row in spec.rows if row.label == self.row), None)
        if row is None:
            return f"row {self.row!r} is not in table {self.table}; rows: {', '.join(r.label for r in spec.rows)}"
        if self.column not in row.paper:
            return f"row {self.row!r} of {self.table} has no paper number for column {self.column!r}"
        if self.seeds is not None:
            seeds = tables.tables.get(self.seeds)
            if seeds is None or seeds.aggregate is None:
                return f"seeds: {self.seeds!r} is not a table of tables.yaml with an aggregate row"
            if _column_path(spec, self.column) not in seeds.columns:
                return f"seeds: table {self.seeds} has no column {_column_path(spec, self.column)!r}"
        return None

    def judge_here(self, judging: Judging) -> Verdict:
        spec = judging.tables.tables[self.table]
        row_spec = next(row for row in spec.rows if row.label == self.row)
        row = find_row(row_spec, spec, judging.axes, judging.source)
        claims = judging.claims
        result = Verdict(self, NOT_RUN, paper=row_spec.paper[self.column], epsilon=claims.default_epsilon,
                         epsilon_reason=claims.default_epsilon_reason)
        if self.epsilon is not None:
            result.epsilon, result.epsilon_reason = self.epsilon, self.epsilon_reason
        arm = None
        if row.present and row.ours.get(self.column) is not None:
            arm = arm_of(row, row_spec.model, _column_path(spec, self.column), judging.record, header=self.column)
            result.ours, result.run = row.ours[self.column], row.run
        if self.seeds and arm is not None:
            arm = _seed_table_arm(judging, self.seeds, _column_path(spec, self.column), arm)
        if judging.scale != self.scale:
            result.verdict, result.note = OTHER_SCALE, f"the paper's number is at {self.scale} scale, this run at {judging.scale}"
        elif arm is None:
            result.note, result.commands = _absence(row)
        else:
            noise = None if len(arm.values) >= 2 else borrowed_noise(judging.record, judging.params, [row_spec.model],
                                                                     _column_path(spec, self.column), False)[0]
            result.ours, result.seeds, result.run = float(arm.values.mean()), len(arm.values), arm.source
            result.noise_source = arm.source if noise is None else noise.source
            result.seed_sd = float(np.std(arm.values, ddof=1)) if noise is None else noise.sd
            # the paper scored the same test pairs: their noise cancels in ours − paper, only the seeds' counts
            result.verdict, result.interval = value_verdict(arm.values, result.paper, result.epsilon, 0.0, noise)
        return result

    def at_edge(self, result: Verdict) -> bool:
        return result.interval is not None and at_the_edge(result.interval, (-result.epsilon, 0.0, result.epsilon))

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        if result.seeds is None:
            return f"{result.ours:.2f} ({result.run})"
        return f"{result.ours:.2f} ({_noise_text(result.seeds, result.noise_source)})"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        if result.paper is None:
            return "—"
        reason = "the default" if result.epsilon_reason == default_reason else result.epsilon_reason
        return f"{result.paper:.2f} (ε {result.epsilon:.2f}: {reason})"

    def verdict_text(self, result: Verdict) -> str:
        shown = super().verdict_text(result)
        if result.ours is not None and result.paper is not None and result.verdict in (REPRODUCED, HIGHER, NOT_REPRODUCED, *UNDECIDED):
            delta = f"Δ {_signed(result.ours - result.paper)}{_interval_text(result.interval)}, a prediction interval"
            shown = shown.replace(f"**{result.verdict}**", f"**{result.verdict}** ({delta})", 1)
        return shown


def _seed_table_arm(judging: Judging, seeds_table: str, column: str, fallback: Arm) -> Arm:
    """A tables.yaml table of seed runs of the same model (paper scale): its runs are the arm."""
    table = build_table(judging.tables, seeds_table, judging.source)
    header = table.spec.columns[column]
    values = [row.ours[header] for row in table.rows if row.present and row.ours.get(header) is not None]
    if len(values) < 2:
        return fallback
    return Arm(np.asarray(values, dtype=float), [], f"{len(values)} seed runs ({seeds_table})", fallback.resamples, False)


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
        return _metric_check(metric)

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
        """The gap an order claim's paper numbers state: better − worse."""
        return abs(numbers[0] - numbers[1])

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
            return CANNOT_HOLD, f"the paper's gap {gap:.2f} is below the band {self.band:g}: not even an exact reproduction holds{also}"
        return (CANNOT_RUN, unlisted) if unlisted else None

    def compare(self, judging: Judging, rows: dict[str, Row], better: SubjectSpec, worse: SubjectSpec, margin: float) -> Comparison:
        """better vs worse: the interval of the difference, then the verdict against the margin and band."""
        pair = Comparison(better.label, worse.label, NOT_RUN)
        cannot = self.cannot()
        if cannot is not None:
            pair.verdict, pair.note = cannot
            return pair
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
        absent = [_absence(row) for row, metric in zip(found, metrics)
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

    def _judge_unresampled(self, pair: Comparison, arms: list[Arm], margin: float) -> Comparison:
        """A metric without resamples (alignment, E_CLS, an MTEB mean): across seeds when both arms have
        two or more, against the margin widened by the band; one run each, the point difference against
        the band alone, and no interval is printed for it. Seeds across which nothing varied (an untrained
        model, a quantity the training does not move at this precision) are read as one run: the band says
        what difference counts, as it does for one run each."""
        band = self.band or 0.0
        if len(arms[0].values) >= 2 and len(arms[1].values) >= 2:
            estimate = compare_arms(arms[0].values, arms[1].values, 0.0, paired=paired(arms[0], arms[1]))
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
            shown = "—" if pair.difference is None else f"{_signed(pair.difference)}{_interval_text(pair.interval)}"
            if pair.estimate is not None and pair.estimate.degenerate:  # "measured" would say noise was found
                seeds = " vs ".join(str(count) for count in pair.estimate.seeds)
                shown += f" ({seeds} seeds, the same value at every seed: nothing varied)"
            elif pair.estimate is not None:
                shown += f" ({_noise_text(pair.estimate.seeds, pair.estimate.seed_source)}; {self._sample_noise_text(pair)})"
            elif pair.arms is not None:
                shown += " (one run each)"
            parts.append(f"{pair.better} − {pair.worse}: {shown} {pair.verdict}")
        return "; ".join(parts) or "—"

    def at_edge(self, result: Verdict) -> bool:
        band, margin = self.band or 0.0, self.judged_margin()
        return any(at_the_edge(pair.estimate.interval, (margin - band, margin + band)) for pair in result.comparisons
                   if pair.estimate is not None and not pair.estimate.degenerate)

    def _sample_noise_text(self, pair: Comparison) -> str:
        """The test-sample noise the interval counts: τ of the paired bootstrap, none against a paper's
        number (the same test pairs), or unmeasured for a metric without resamples."""
        if not self.resampled():
            return "sentence-sample noise not measured: seeds only"
        if pair.estimate.tau == 0 and any(subject.paper_number is not None for subject in self.subjects()):
            return "the paper's test pairs: no pair noise"
        return f"pair noise τ {_number(pair.estimate.tau)}"

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

    def judge_here(self, judging: Judging) -> Verdict:
        rows = judging.rows(self.subjects(), self.columns(), self.claim_backbone(judging.tables), self.claim)
        pair = self.compare(judging, rows, self.better, self.worse, self.margin)
        return Verdict(self, pair.verdict, comparisons=[pair], note=pair.note, commands=pair.commands)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        shown = super().paper_text(result, default_reason)
        return f"{shown} (margin {self.margin:+.2f}: {self.margin_reason})" if self.margin else shown


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
        comparisons = [self.compare(judging, rows, better, worse, margin) for better, worse in self.family(kept)]
        if comparisons and all(pair.estimate is not None for pair in comparisons):
            # the family's rule: "contradicted" Bonferroni-corrected over its pairs (pipeline.reporting.noise)
            verdict, per_pair = trend_verdict([pair.estimate for pair in comparisons], self.shape, margin=margin)
            for pair, pair_verdict in zip(comparisons, per_pair):
                pair.verdict = pair_verdict
        else:
            verdict = _family_verdict({pair.verdict for pair in comparisons}) if comparisons else NOT_RUN
        notes = [f"{label}: not applicable here" for label in skipped]
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
        return _metric_check(column)

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
            note, commands = _absence(row)
            return Verdict(self, NOT_RUN, note=note, commands=commands), None, row
        return None, row.ours[self.column], row

    def ours_text(self, result: Verdict) -> str:
        return "—" if result.ours is None else f"{result.ours:.4g} ({result.run})"


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
        inside = self.low - _TOLERANCE <= ours <= self.high + _TOLERANCE
        return Verdict(self, HOLDS if inside else CONTRADICTED, ours=ours, run=row.run)

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return f"within [{self.low:g}, {self.high:g}]"


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
        return _metric_check(column)

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
            absent = [_absence(row) for row in rows.values() if not row.present]
            return Verdict(self, NOT_RUN, note=f"{len(points)} of {len(rows)} models measured; three are needed",
                           commands=list(dict.fromkeys(command for _, commands in absent for command in commands)))
        # the claimed direction with a one-sided permutation p (pipeline.reporting.noise): a ρ over a few
        # models is weak evidence alone; holds needs both p < 0.025 and |ρ| ≥ strength
        verdict, rho, p_value = correlation_verdict(
            np.asarray([x for x, _ in points]), np.asarray([y for _, y in points]),
            claimed_sign=1 if self.sign == "positive" else -1, threshold=self.strength if self.sign == "positive" else -self.strength,
        )
        run = f"{len(points)} models" + (f", each the mean of {seeds} seeds" if seeds > 1 else ", one run each")
        return Verdict(self, verdict, ours=rho, run=run, p_value=p_value)

    def at_edge(self, result: Verdict) -> bool:
        return _p_at_edge(result.p_value)

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        return f"ρ = {result.ours:+.2f} over {result.run}, one-sided permutation p = {result.p_value:.3f}"

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return f"{self.paper} ({self.sign}, |ρ| ≥ {self.strength:g}: {self.strength_reason})"


def _p_at_edge(p_value: float | None) -> bool:
    """A permutation or t p-value within a tenth of the 2.5 % it is read against: another CPU may flip it."""
    return p_value is not None and abs(p_value - CORRELATION_ALPHA) <= EDGE_FRACTION * CORRELATION_ALPHA


class SpreadClaim(ClaimSpec):
    """One model varies less across training seeds than another on a score: the seed record's values of
    both (the same seeds, so paired) by the Pitman–Morgan test (`noise.spread_verdict`)."""

    kind: Literal["spread"]
    metric: str = Field(description="a score column")
    paper: str = Field(min_length=1)
    steadier: SubjectSpec
    other: SubjectSpec

    @field_validator("metric")
    @classmethod
    def _check_metric(cls, metric: str) -> str:
        return _metric_check(metric)

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
        return _p_at_edge(result.p_value)

    def ours_text(self, result: Verdict) -> str:
        if result.ours is None:
            return "—"
        p_value = "—" if result.p_value is None or math.isnan(result.p_value) else f"{result.p_value:.3f}"
        return (f"sd {self.steadier.label} / {self.other.label} = {result.ours:.2f} over {result.run}, "
                f"Pitman–Morgan one-sided p = {p_value}")

    def paper_text(self, result: Verdict, default_reason: str) -> str:
        return self.paper


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


Claim = Annotated[
    ValueClaim | OrderClaim | TrendClaim | ExactClaim | RangeClaim | CorrelationClaim | SpreadClaim | UnmeasuredClaim,
    Field(discriminator="kind"),
]


class ClaimsFile(Spec):
    default_epsilon: float = Field(gt=0)
    default_epsilon_reason: str = Field(min_length=1)
    claims: list[Claim] = Field(min_length=1)

    @field_validator("claims")
    @classmethod
    def _unique(cls, claims: list[Claim]) -> list[Claim]:
        ids = [claim.id for claim in claims]
        repeated = sorted({claim_id for claim_id in ids if ids.count(claim_id) > 1})
        if repeated:
            raise ValueError(f"claim ids must be unique: {', '.join(repeated)}")
        return claims


def parse_claims(raw: object, tables: TablesFile, params: dict[str, Any], source: Path | str = CLAIMS_FILE) -> ClaimsFile:
    """Validate the claims file and what it names in tables.yaml and params.yaml; one line on error."""
    try:
        claims = ClaimsFile.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid {source}: {describe_validation_error(error, str(source))}{_claim_named(error, raw)}") from None
    for index, claim in enumerate(claims.claims):
        problem = claim.cross_check(tables, params)
        if problem:
            raise PipelineError(f"invalid {source}: claims.{index} ({claim.id}): {problem}")
    return claims


def _claim_named(error: ValidationError, raw: object) -> str:
    """" (claim <id>)" when the first problem lies inside a claim that has an id, for the message."""
    location = error.errors()[0]["loc"]
    if len(location) > 1 and location[0] == "claims" and isinstance(location[1], int) and isinstance(raw, dict):
        claim = raw["claims"][location[1]]
        if isinstance(claim, dict) and isinstance(claim.get("id"), str):
            return f" (claim {claim['id']})"
    return ""


def load_claims(tables: TablesFile, params: dict[str, Any], path: Path | str = CLAIMS_FILE) -> ClaimsFile:
    raw = read_yaml_file(path, "the report stage reads the papers' claims from it")
    return parse_claims(raw, tables, params, path)


def evaluate_claims(claims: ClaimsFile, tables: TablesFile, source: RunSource, record: SeedRecord | None = None) -> list[Verdict]:
    claim_axes = [split_override(override)[0] for claim in claims.claims for subject in claim.subjects()
                  for override in subject.overrides()]
    axes = list(dict.fromkeys(experiment_axes(tables) + claim_axes))
    judging = Judging(claims, tables, source, axes, record)
    return [claim.judge(judging) for claim in claims.claims]


def verdict_counts(verdicts: list[Verdict]) -> dict[str, Any]:
    """reports/claims.json: the number of claims and of each verdict (every verdict listed, 0 included),
    and how many are the papers' claims and how many the project's own questions."""
    counts = {verdict_key(verdict): 0 for verdict in VERDICTS}
    for result in verdicts:
        counts[verdict_key(result.verdict)] += 1
    origins = {origin: sum(result.claim.origin == origin for result in verdicts) for origin in ORIGINS}
    return {"claims": len(verdicts), "verdicts": counts, "origins": origins}
