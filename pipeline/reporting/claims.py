"""The papers' claims as data (`claims.yaml`) and their verdicts against our runs (DESIGN.md §10).

A claim is a value (a table cell of tables.yaml: our number against the paper's, within ε), an
order (one model beats another on a metric: the paired bootstrap interval of the difference), or a
trend (a sweep's shape, checked as the order claims it implies). Each carries the sentence or cell it
rests on. The runs a claim reads are found exactly as the tables' rows are (`tables.find_row`), so a
claim whose runs do not exist is "not run" with the command that runs them. The verdict rules are in
docs/method.md ("Claims and verdicts").
"""

from __future__ import annotations

import math
import re
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator
from scipy import stats

from pipeline.config import describe_validation_error, read_yaml_file
from pipeline.errors import PipelineError
from pipeline.evaluation.intervals import CONFIDENCE, paired_interval
from pipeline.models import MODEL_NAMES
from pipeline.reporting.runs import SCORE_COLUMNS, has_param
from pipeline.reporting.spec import ExperimentSpec, RowSpec, Spec, TablesFile, TableSpec, split_override
from pipeline.reporting.tables import Row, RunSource, build_table, experiment_axes, find_row
from pipeline.settings_rules import SCALES

CLAIMS_FILE = Path("claims.yaml")
REPRODUCED, HIGHER, NOT_REPRODUCED = "reproduced", "reproduced, higher", "not reproduced"
HOLDS, CONTRADICTED = "holds", "contradicted"
INCONCLUSIVE, NOT_RUN, OTHER_SCALE = "inconclusive", "not run", "other scale: not compared"
VERDICTS = (REPRODUCED, HIGHER, NOT_REPRODUCED, HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_RUN, OTHER_SCALE)
_CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOLERANCE = 1e-9  # |Δ| = ε exactly counts as inside the band, whatever the float rounding


def verdict_key(verdict: str) -> str:
    """The verdict as a metrics key (`reproduced, higher` → `reproduced_higher`)."""
    return re.sub(r"[^a-z]+", "_", verdict.split(":")[0]).strip("_")


# --- the schema ---------------------------------------------------------------------------------


class SourceSpec(Spec):
    file: str = Field(pattern=r"^seeds/\S+\.txt$", description="the seed file under /work/shared/seeds/")
    where: str = Field(min_length=1, description="table or section")
    quote: str = Field(min_length=1, description="the sentence or cell the claim rests on, verbatim")


class SubjectSpec(Spec):
    """A model of pipeline/models.py, in the workspace or in the DVC experiment of its overrides."""

    label: str = Field(min_length=1)
    model: Literal[MODEL_NAMES]  # type: ignore[valid-type]
    experiment: ExperimentSpec | None = None

    def as_row(self) -> RowSpec:
        return RowSpec(label=self.label, model=self.model, experiment=self.experiment)


class ClaimSpec(Spec):
    id: str = Field(min_length=1)
    claim: str = Field(min_length=1, description="the claim in words")
    source: SourceSpec

    @field_validator("id")
    @classmethod
    def _check_id(cls, claim_id: str) -> str:
        if not _CLAIM_ID.match(claim_id):
            raise ValueError(f"claim id {claim_id!r} must be lowercase letters, digits and dashes")
        return claim_id


class ValueClaim(ClaimSpec):
    """A cell of tables.yaml: its row is the subject, its paper number the claim."""

    kind: Literal["value"]
    scale: Literal[SCALES] = Field("paper", description="the scale the paper's number is at")  # type: ignore[valid-type]
    table: str
    row: str
    column: str = Field(description="the column header, as in the table")
    seeds: str | None = Field(None, description="a table of seed runs of the same model: its mean and sd are used")
    epsilon: float | None = Field(None, gt=0, description="the band |Δ| ≤ ε; default: the file's")
    epsilon_reason: str | None = None

    @model_validator(mode="after")
    def _reasoned(self) -> "ValueClaim":
        if (self.epsilon is None) != (self.epsilon_reason is None):
            raise ValueError("epsilon and epsilon_reason go together")
        return self


class ComparisonClaim(ClaimSpec):
    backbone: Literal["bert", "roberta"] = Field("bert", description="the backbone at paper scale")
    metric: Literal[tuple(SCORE_COLUMNS)]  # type: ignore[valid-type]
    paper: str = Field(min_length=1, description="the paper's numbers behind the claim, as text")

    @abstractmethod
    def compared(self) -> list[SubjectSpec]:
        """The subjects the claim compares, in its order."""


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
        return self

    def compared(self) -> list[SubjectSpec]:
        return [self.better, self.worse]


class TrendClaim(ComparisonClaim):
    """A sweep's shape: `decreasing` (each subject beats the next) or `first-best` (the first beats each other)."""

    kind: Literal["trend"]
    shape: Literal["decreasing", "first-best"]
    subjects: list[SubjectSpec] = Field(min_length=2)

    @field_validator("subjects")
    @classmethod
    def _unique(cls, subjects: list[SubjectSpec]) -> list[SubjectSpec]:
        labels = [subject.label for subject in subjects]
        if len(set(labels)) != len(labels):
            raise ValueError(f"subject labels {labels} must be unique")
        return subjects

    def compared(self) -> list[SubjectSpec]:
        return self.subjects


Claim = Annotated[ValueClaim | OrderClaim | TrendClaim, Field(discriminator="kind")]


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
        problem = _cross_check(claim, tables, params)
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


def _cross_check(claim: Claim, tables: TablesFile, params: dict[str, Any]) -> str | None:
    if isinstance(claim, ValueClaim):
        if claim.table not in tables.tables:
            return f"table {claim.table!r} is not in tables.yaml"
        spec = tables.tables[claim.table]
        row = next((row for row in spec.rows if row.label == claim.row), None)
        if row is None:
            return f"row {claim.row!r} is not in table {claim.table}; rows: {', '.join(r.label for r in spec.rows)}"
        if claim.column not in row.paper:
            return f"row {claim.row!r} of {claim.table} has no paper number for column {claim.column!r}"
        if claim.seeds is not None:
            seeds = tables.tables.get(claim.seeds)
            if seeds is None or seeds.aggregate is None:
                return f"seeds: {claim.seeds!r} is not a table of tables.yaml with an aggregate row"
            if _column_path(spec, claim.column) not in seeds.columns:
                return f"seeds: table {claim.seeds} has no column {_column_path(spec, claim.column)!r}"
        return None
    for subject in claim.compared():
        for override in subject.experiment.overrides + subject.experiment.paper_overrides if subject.experiment else []:
            key = split_override(override)[0]
            if not has_param(params, key):
                return f"{subject.label}: unknown setting '{key}' (not in params.yaml)"
    return None


def _column_path(spec: TableSpec, header: str) -> str:
    return next(path for path, named in spec.columns.items() if named == header)


# --- the verdicts -------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One `better` vs `worse` pair of an order or trend claim."""

    better: str
    worse: str
    verdict: str
    difference: float | None = None  # ours, better − worse
    interval: tuple[float, float] | None = None  # paired bootstrap interval of the difference
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


def value_verdict(ours: float, paper: float, epsilon: float, interval: tuple[float, float] | None) -> str:
    """docs/method.md, "Claims and verdicts": inside the band reproduced; outside it, inconclusive when
    our interval reaches the band, else higher or not reproduced."""
    delta = ours - paper
    if abs(delta) <= epsilon + _TOLERANCE:
        return REPRODUCED
    low, high = interval if interval is not None else (ours, ours)
    if low <= paper + epsilon and high >= paper - epsilon:
        return INCONCLUSIVE
    return HIGHER if delta > 0 else NOT_REPRODUCED


def order_verdict(interval: tuple[float, float], margin: float = 0.0) -> str:
    """The paired interval of better − worse: above the margin holds, below contradicted, else inconclusive."""
    low, high = interval
    if low > margin:
        return HOLDS
    if high < margin:
        return CONTRADICTED
    return INCONCLUSIVE


def seed_interval(mean: float, std: float, count: int, level: float = CONFIDENCE) -> tuple[float, float]:
    """The t interval of a mean over `count` seed runs."""
    half = stats.t.ppf(0.5 + level / 2, count - 1) * std / math.sqrt(count)
    return mean - half, mean + half


def evaluate_claims(claims: ClaimsFile, tables: TablesFile, source: RunSource) -> list[Verdict]:
    axes = list(dict.fromkeys(experiment_axes(tables) + _claim_axes(claims)))
    return [_evaluate(claim, claims, tables, source, axes) for claim in claims.claims]


def _claim_axes(claims: ClaimsFile) -> list[str]:
    return [
        split_override(override)[0]
        for claim in claims.claims if not isinstance(claim, ValueClaim)
        for subject in claim.compared()
        if subject.experiment
        for override in subject.experiment.overrides + subject.experiment.paper_overrides
    ]


def _evaluate(claim: Claim, claims: ClaimsFile, tables: TablesFile, source: RunSource, axes: list[str]) -> Verdict:
    if isinstance(claim, ValueClaim):
        return _evaluate_value(claim, claims, tables, source, axes)
    subjects = claim.compared()
    # The claim as a one-column table of its subjects, so its rows are found as the tables' rows are.
    spec = TableSpec(
        caption=claim.claim, paper_source=claim.source.file, scale_note=claim.source.where, backbone=claim.backbone,
        columns={claim.metric: claim.metric}, rows=[subject.as_row() for subject in subjects],
    )
    rows = {subject.label: (subject, find_row(subject.as_row(), spec, axes, source)) for subject in subjects}
    if isinstance(claim, OrderClaim):
        pair = _compare(rows[claim.better.label], rows[claim.worse.label], claim.metric, claim.margin)
        return Verdict(claim, pair.verdict, comparisons=[pair], note=pair.note, commands=pair.commands)
    return _evaluate_trend(claim, rows)


def _evaluate_value(claim: ValueClaim, claims: ClaimsFile, tables: TablesFile, source: RunSource, axes: list[str]) -> Verdict:
    spec = tables.tables[claim.table]
    row_spec = next(row for row in spec.rows if row.label == claim.row)
    row = find_row(row_spec, spec, axes, source)
    result = Verdict(claim, NOT_RUN, paper=row_spec.paper[claim.column], epsilon=claims.default_epsilon,
                     epsilon_reason=claims.default_epsilon_reason)
    if claim.epsilon is not None:
        result.epsilon, result.epsilon_reason = claim.epsilon, claim.epsilon_reason
    if row.present and row.ours.get(claim.column) is not None:
        result.ours, result.interval, result.run = row.ours[claim.column], row.intervals.get(claim.column), row.run
    if claim.seeds:
        _use_seeds(result, build_table(tables, claim.seeds, source), _column_path(spec, claim.column))
    scale = source.workspace.params["scale"]
    if scale != claim.scale:
        result.verdict, result.note = OTHER_SCALE, f"the paper's number is at {claim.scale} scale, this run at {scale}"
    elif result.ours is None:
        result.note, result.commands = _absence(row)
    else:
        result.verdict = value_verdict(result.ours, result.paper, result.epsilon, result.interval)
    return result


def _use_seeds(result: Verdict, seeds, column: str) -> None:
    """With two seed runs or more, ours is their mean, its interval the t interval, ε their sample sd."""
    aggregate = seeds.aggregate
    header = seeds.spec.columns[column]
    if aggregate is None or aggregate.ours.get(header) is None or header not in aggregate.spread:
        return
    mean, std = aggregate.ours[header], aggregate.spread[header]
    result.ours, result.interval = mean, seed_interval(mean, std, aggregate.count)
    result.run = f"{seeds.id}: mean of {aggregate.count} seed runs"
    result.epsilon = std
    result.epsilon_reason = f"the sample sd of our {aggregate.count} seed runs ({seeds.id})"


def _absence(row: Row) -> tuple[str, list[str]]:
    if row.not_applicable:
        return f"{row.label}: not applicable here: {row.not_applicable}", []
    why = row.missing or row.missing_cells or "no number"
    return f"{row.label}: {why}", [row.command] if row.command else []


def _compare(better: tuple[SubjectSpec, Row], worse: tuple[SubjectSpec, Row], metric: str, margin: float) -> Comparison:
    (better_subject, better_row), (worse_subject, worse_row) = better, worse
    pair = Comparison(better_row.label, worse_row.label, NOT_RUN)
    absent = [_absence(row) for row in (better_row, worse_row) if not row.present or row.ours.get(metric) is None]
    if absent:
        pair.note = "; ".join(note for note, _ in absent)
        pair.commands = [command for _, commands in absent for command in commands]
        return pair
    pair.difference = better_row.ours[metric] - worse_row.ours[metric]
    resamples = [row.origin.resamples(subject.model) for subject, row in (better, worse)]
    pair.verdict = INCONCLUSIVE
    if any(found is None for found in resamples):
        lacking = [row.label for row, found in zip((better_row, worse_row), resamples) if found is None]
        pair.note = f"no bootstrap resamples for {', '.join(lacking)} (eval.bootstrap)"
        return pair
    if resamples[0].get("indices") != resamples[1].get("indices"):
        pair.note = "the two runs' bootstrap resamples differ (seed or pairs), so they do not pair"
        return pair
    task = SCORE_COLUMNS[metric]
    scores = [(found.get("scores") or {}).get(task) for found in resamples]
    if any(not isinstance(found, list) or not found for found in scores):
        pair.note = f"a bootstrap file has no resampled {task} scores"
        return pair
    pair.interval = paired_interval(np.asarray(scores[0], dtype=float), np.asarray(scores[1], dtype=float))
    pair.verdict = order_verdict(pair.interval, margin)
    return pair


def _evaluate_trend(claim: TrendClaim, rows: dict[str, tuple[SubjectSpec, Row]]) -> Verdict:
    skipped = [row for _, row in rows.values() if row.not_applicable]
    kept = [entry for entry in rows.values() if not entry[1].not_applicable]
    if claim.shape == "decreasing":
        pairs = list(zip(kept, kept[1:]))
    else:
        pairs = [(kept[0], other) for other in kept[1:]] if kept and kept[0] is next(iter(rows.values())) else []
    comparisons = [_compare(better, worse, claim.metric, 0.0) for better, worse in pairs]
    verdicts = {pair.verdict for pair in comparisons}
    if not comparisons:
        verdict = NOT_RUN
    elif CONTRADICTED in verdicts:
        verdict = CONTRADICTED
    elif NOT_RUN in verdicts:
        verdict = NOT_RUN
    elif verdicts == {HOLDS}:
        verdict = HOLDS
    else:
        verdict = INCONCLUSIVE
    notes = [f"{row.label}: not applicable here" for row in skipped]
    if not comparisons:
        notes.append("fewer than two points of the sweep can run here")
    commands = list(dict.fromkeys(command for pair in comparisons for command in pair.commands))
    return Verdict(claim, verdict, comparisons=comparisons, note="; ".join(notes) or None, commands=commands)


def verdict_counts(verdicts: list[Verdict]) -> dict[str, Any]:
    """reports/claims.json: the number of claims and of each verdict (every verdict listed, 0 included)."""
    counts = {verdict_key(verdict): 0 for verdict in VERDICTS}
    for result in verdicts:
        counts[verdict_key(result.verdict)] += 1
    return {"claims": len(verdicts), "verdicts": counts}
