"""What every claim kind shares: the schema of a claim and of the models it names (`ClaimSpec`,
`SubjectSpec`, `SourceSpec`), what a claim is judged against (`Judging`), what judging gives (`Verdict`,
one `Comparison` per pair of an order or trend), and the wording its rows share.

A kind subclasses `ClaimSpec` in a module of `pipeline/verdicts/kinds/`: it validates itself, judges itself
(`judge_here`), renders itself (`ours_text`, `paper_text`) and registers itself there (`@register_claim_kind`,
under the name its `kind: Literal["<name>"]` field declares). A claim is the papers' (`origin: paper`, quoted
verbatim from its seed under ../shared/seeds/, tests/test_claim_quotes.py) or the project's own question
(`origin: project`, with `why` it is asked). A claim about a backbone is judged on a run of that backbone only
(pipeline.reporting.backbones): otherwise its verdict is "other backbone: not compared".
"""

from __future__ import annotations

import inspect
import math
import re
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from pydantic import Field, field_validator, model_validator

from pipeline.evaluated_models import MODEL_NAMES
from pipeline.reporting.backbones import other_backbone
from pipeline.reporting.runs import SCORE_COLUMNS, has_param
from pipeline.reporting.seed_record import SeedRecord
from pipeline.reporting.spec import (
    ANALYSIS_PREFIX, MTEB_PREFIX, ExperimentSpec, RowSpec, Spec, TablesFile, TableSpec, check_paper_backbone, split_override,
)
from pipeline.reporting.tables import Row, RunSource, find_row
from pipeline.verdicts.estimates import Estimate
from pipeline.verdicts.verdict_names import DECIDED, OTHER_BACKBONE, UNDECIDED

ORIGINS = ("paper", "project")
_CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


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
    claim: ClaimSpec
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
    against: str | None = None  # a value claim's interval: of our seeds' "mean", or a prediction of "one run"
    p_value: float | None = None  # a correlation's one-sided permutation p
    would_take: str | None = None  # for an undecided claim: what would decide it
    at_edge: bool = False  # its interval ends within EDGE_FRACTION of a half-width of a boundary: another CPU may flip it
    settled: dict | None = None  # where a settling decided it: its last look (seeds_per_arm, difference, interval, record)
    settling_design: dict | None = None  # an order claim's own settling design, its first look the published verdict
    p_adjusted: float | None = None  # its p-value Benjamini–Hochberg-adjusted over the claims judged with one (None: none)


@dataclass
class Judging:
    """What a claim is judged against: the claims file's default band, the table specs, the runs, and the
    settings every row keeps at the workspace's value (`tables.experiment_axes` plus the claims')."""

    default_epsilon: float
    default_epsilon_reason: str
    tables: TablesFile
    source: RunSource
    axes: list[str]
    record: SeedRecord | None = None  # the committed seed record (reports/seed_noise.json)
    value_against: str = "mean"  # what a value claim's interval is of (`rules.value_verdict`): the claims file's

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


def metric_check(metric: str) -> str:
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
    """A model of pipeline/evaluated_models.py, in the workspace or in the DVC experiment of its overrides; or a
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
        return column if column is None else metric_check(column)

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
        """Whether the verdict lies within the cross-machine tolerance of a boundary (`rules.at_the_edge`):
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

    def evidence_text(self, result: Verdict) -> str:
        """A decided verdict's numbers in a few words, for the first screen of REPRODUCTION.md: ours − paper where
        the kind has both, else "—". A kind with numbers of its own says them (its override)."""
        if result.ours is not None and result.paper is not None:
            interval = f" [{result.interval[0]:+.2f}, {result.interval[1]:+.2f}]" if result.interval else ""
            return f"ours − paper {result.ours - result.paper:+.2f}{interval}"
        return "—"

    def verdict_text(self, result: Verdict) -> str:
        notes = result.note.split("; ") if result.note else []
        notes += [part for pair in result.comparisons if pair.note for part in pair.note.split("; ")]
        edge = ", at the edge (within a tenth of its half-width of the boundary: another CPU may flip it)" if result.at_edge else ""
        shown = f"**{result.verdict}**{edge}" + (": " + "; ".join(dict.fromkeys(notes)) if notes else "")
        return shown + (f". What would decide it: {result.would_take}" if result.would_take else "")


# --- the kinds: each registers itself where it is defined ------------------------------------------------

# kind name → its class, filled as the modules of pipeline/verdicts/kinds/ load (`claims_file` loads them all)
CLAIM_KINDS: dict[str, type[ClaimSpec]] = {}


def declared_kind(kind_class: type) -> str:
    """The name a claim kind declares in its `kind: Literal["<name>"]` field; TypeError when it is no such kind."""
    is_claim = isinstance(kind_class, type) and issubclass(kind_class, ClaimSpec)
    field_info = kind_class.model_fields.get("kind") if is_claim else None
    names = get_args(field_info.annotation) if field_info and get_origin(field_info.annotation) is Literal else ()
    if not (len(names) == 1 and isinstance(names[0], str)):
        raise TypeError(f"{kind_class!r}: a claim kind is a ClaimSpec subclass with a field kind: Literal[\"<name>\"]")
    return names[0]


def register_claim_kind(kind_class: type[ClaimSpec]) -> type[ClaimSpec]:
    """Class decorator: `claims.yaml`'s `kind: <name>` now builds `kind_class`. A name declared twice is an error:
    the file could not say which class it means."""
    name = declared_kind(kind_class)
    if inspect.isabstract(kind_class):
        raise TypeError(f"claim kind {name!r} ({kind_class.__qualname__}) leaves abstract methods unimplemented")
    known = CLAIM_KINDS.get(name)
    # the same class run again (its module re-imported) replaces itself; another class under the name is a clash
    if known is not None and _where(known) != _where(kind_class):
        raise TypeError(f"claim kind {name!r} is declared twice: {_where(known)} and {_where(kind_class)}")
    CLAIM_KINDS[name] = kind_class
    return kind_class


def _where(kind_class: type) -> str:
    return f"{kind_class.__module__}.{kind_class.__qualname__}"


# --- the wording the kinds' rows share ---------------------------------------------------------------


def decimals_for(interval: tuple[float, float] | None) -> int:
    """Enough decimals that an interval's ends print apart and its width shows (two at least, six at most):
    a ratio's [0.0003, 0.0014], never [0.00, 0.00]."""
    width = abs(interval[1] - interval[0]) if interval is not None else 0.0
    if not (math.isfinite(width) and width > 0):
        return 2
    return max(2, min(6, 1 - math.floor(math.log10(width))))


def interval_text(interval: tuple[float, float] | None) -> str:
    if interval is None:
        return ""
    places = decimals_for(interval)
    return f" [{number_text(interval[0], places)}, {number_text(interval[1], places)}]"


def number_text(value: float, places: int = 2) -> str:
    return f"{round(value, places) + 0.0:.{places}f}"  # + 0.0 turns -0.0 into 0.0


def noise_text(seeds: tuple[int, int] | int, source: str) -> str:
    shown = f"{seeds[0]} vs {seeds[1]} seeds" if isinstance(seeds, tuple) else f"{seeds} seed{'s' * (seeds != 1)}"
    return f"{shown}; seed noise {source}"


def signed_text(number: float, places: int = 2) -> str:
    return f"{round(number, places) + 0.0:+.{places}f}"  # + 0.0 turns -0.0 into 0.0


def absence(row: Row) -> tuple[str, list[str]]:
    """Why a row has no number (not applicable, missing), and the command that would run it."""
    if row.not_applicable:
        return f"{row.label}: not applicable here: {row.not_applicable}", []
    why = row.missing or row.missing_cells or "no number"
    return f"{row.label}: {why}", [row.command] if row.command else []

