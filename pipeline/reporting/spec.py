"""The table specs of `tables.yaml`: which runs are a table's rows, which metrics its columns, and
the paper's own numbers.

A row names the model whose metrics it shows (`reports/metrics/details/<model>.json`) and, when the row is
a separate DVC experiment, the parameter overrides that define that experiment. Loading validates
the file: an unknown key, a paper number for a column the table does not have or a malformed
override stops the report with one line naming the key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.params_file import describe_validation_error, read_yaml_file
from pipeline.errors import PipelineError
from pipeline.evaluated_models import MODEL_NAMES
from pipeline.reporting.columns import analysis_column_problem, mteb_column_problem, sts_column_problem
from pipeline.reporting.backbones import paper_backbones

TABLES_FILE = Path("tables.yaml")
ANALYSIS_PREFIX = "analysis:"  # a column read from reports/analysis/<model>.json instead of the metrics
MTEB_PREFIX = "mteb:"  # a column read from reports/mteb/<model>.json (the MTEB suites)
# Hydra config groups of conf/: the table's backbone and the run's scale select them, never a row.
CONTEXT_KEYS = ("scale", "backbone")
_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*(?:\.[\w-]+)*)=(?P<value>.+)$")
SEED_KEY = "seed"  # rows that override it are a seed sweep: their spread is the table's aggregate row
_TABLE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a NaN margin or infinite ε decides nothing


def _check_overrides(overrides: list[str]) -> list[str]:
    for override in overrides:
        match = _OVERRIDE.match(override)
        if not match:
            raise ValueError(f"override {override!r} is not of the form key=value")
        if match["key"] in CONTEXT_KEYS:
            raise ValueError(f"override {override!r}: {match['key']} is set by the table's backbone and the scale")
    return overrides


# Settings that count encoder layers: a sweep of one is stated as a fraction of the backbone's layers
LAYER_COUNT_SETTINGS = ("train.cael", "jtcse.cael", "train.drop_layernorm")


class ExperimentSpec(Spec):
    """A DVC experiment, found in `dvc exp show` by its params and queued with `-S` overrides."""

    overrides: list[str] = Field(min_length=1)
    paper_overrides: list[str] = Field(
        [], description="added at paper scale only: the papers' settings that the tiny preset must not take"
    )
    of_layers: int | None = Field(
        None, ge=1, description="the overrides' layer counts (LAYER_COUNT_SETTINGS) are of a backbone with this many "
        "layers (the papers' BERT-base: 12): they map to the run's backbone by the same fraction"
    )

    def on_layers(self, layers: int) -> tuple[list[str], str | None]:
        """The overrides on a backbone of `layers` layers: each layer count scaled by layers / of_layers (6 of
        12 → 3 of 6), and why none is possible where a count has no whole counterpart (1 of 12 on 6 layers)."""
        if self.of_layers is None or self.of_layers == layers:
            return list(self.overrides), None
        mapped = []
        for override in self.overrides:
            key, _, value = override.partition("=")
            if key in LAYER_COUNT_SETTINGS and value.lstrip("-").isdigit():
                scaled = int(value) * layers / self.of_layers
                if scaled != int(scaled):
                    return [], (f"{key}={value} of {self.of_layers} layers has no counterpart on this backbone "
                                f"({layers} layers: {scaled:g})")
                override = f"{key}={int(scaled)}"
            mapped.append(override)
        return mapped, None

    @field_validator("overrides", "paper_overrides")
    @classmethod
    def _check(cls, overrides: list[str]) -> list[str]:
        return _check_overrides(overrides)


class RowSpec(Spec):
    label: str = Field(min_length=1)
    model: Literal[MODEL_NAMES]  # type: ignore[valid-type]
    experiment: ExperimentSpec | None = None
    paper: dict[str, float] = {}
    printed: dict[str, float] = Field(
        {}, description="cells the paper prints otherwise, where `paper` corrects them (the notes say why)"
    )


class PaperRowSpec(Spec):
    """A row the papers print that the project does not run (another backbone size): kept so that the
    papers' own numbers can be checked against themselves."""

    label: str = Field(min_length=1)
    source: str = Field(min_length=1, description="seed file and table")
    paper: dict[str, float] = Field(min_length=1, description="column header -> the printed number")


class RowReference(Spec):
    row: str = Field(min_length=1, description="'<table id>: <row label>' or 'paper_rows: <label>'")
    column: str = Field(min_length=1)


class StatedNumberSpec(Spec):
    """A number the text states (a gain), and the two table cells whose difference it should be."""

    source: str = Field(min_length=1, description="seed file and section")
    quote: str = Field(min_length=1)
    stated: float
    better: RowReference
    worse: RowReference
    used: str = Field(min_length=1, description="the value the project uses, and why")


class AggregateSpec(Spec):
    """A summary row over the table's rows: mean ± sample std of each column (the seed figure)."""

    label: str = Field(min_length=1)
    paper: dict[str, float] = {}


class FigureSpec(Spec):
    """A figure drawn from a table's rows (TNCSE Figure 5's form): one x tick per row, bars for one
    column (with another as error bars), a line for a third on its own axis."""

    bars: str = Field(min_length=1, description="column header drawn as bars")
    errors: str | None = Field(None, description="column header of the bars' error bars (a spread)")
    line: str = Field(min_length=1, description="column header drawn as a line on the right axis")
    ticks: list[str] = Field([], description="x tick per row; empty = the row labels")


class TableSpec(Spec):
    caption: str = Field(min_length=1)
    paper_source: str = Field(min_length=1, description="seed file and table of the paper numbers")
    scale_note: str = Field(min_length=1, description="the setting the paper numbers were produced at")
    backbone: str = Field(description="the backbone of the paper numbers: a preset of conf/backbone/ with a title")
    columns: dict[str, str] = Field(
        min_length=1, description="metric path -> column header; `analysis:`/`mteb:` paths read those reports"
    )
    overrides: list[str] = Field([], description="overrides every row's run must have (e.g. MTEB on)")
    rows: list[RowSpec] = Field(min_length=1)
    aggregate: AggregateSpec | None = None
    figure: FigureSpec | None = Field(None, description="also draw the rows as reports/figures/<id>.png")
    notes: list[str] = Field([], description="transcription notes printed under the table")

    @field_validator("overrides")
    @classmethod
    def _check(cls, overrides: list[str]) -> list[str]:
        return _check_overrides(overrides)

    @field_validator("columns")
    @classmethod
    def _known_columns(cls, columns: dict[str, str]) -> dict[str, str]:
        for column in columns:
            problem = column_problem(column)
            if problem:
                raise ValueError(f"column {column!r}: {problem}")
        return columns
    @field_validator("backbone")
    @classmethod
    def _check_backbone(cls, backbone: str) -> str:
        return check_paper_backbone(backbone)

    @model_validator(mode="after")
    def _check_rows(self) -> "TableSpec":
        headers = list(self.columns.values())
        if len(set(headers)) != len(headers):
            raise ValueError(f"column headers {headers} must be unique")
        labels = [row.label for row in self.rows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"row labels {labels} must be unique")
        for index, row in enumerate(self.rows + ([self.aggregate] if self.aggregate else [])):
            printed = row.printed if isinstance(row, RowSpec) else {}
            for field_name, cells in (("paper", row.paper), ("printed", printed)):
                unknown = sorted(set(cells) - set(headers))
                if unknown:
                    where = f"rows.{index}" if index < len(self.rows) else "aggregate"
                    raise ValueError(f"{where}.{field_name}: unknown column {unknown[0]!r}; columns: {', '.join(headers)}")
        seeded = [row.label for row in self.rows if row.experiment and any(
            split_override(override)[0] == SEED_KEY for override in row.experiment.overrides)]
        if seeded and self.aggregate is None:
            raise ValueError(f"rows are a seed sweep ({', '.join(seeded)}): add an aggregate row (n, mean ± std, min–max)")
        if self.figure:
            drawn = [self.figure.bars, self.figure.line] + ([self.figure.errors] if self.figure.errors else [])
            unknown = [header for header in drawn if header not in headers]
            if unknown:
                raise ValueError(f"figure: unknown column {unknown[0]!r}; columns: {', '.join(headers)}")
            if self.figure.ticks and len(self.figure.ticks) != len(self.rows):
                raise ValueError(f"figure.ticks: {len(self.figure.ticks)} ticks for {len(self.rows)} rows")
        return self


class TablesFile(Spec):
    experiment_commits: int = Field(
        10, ge=1, description="experiments derived from this many commits back from HEAD are searched (dvc exp show -n)"
    )
    tables: dict[str, TableSpec] = Field(min_length=1)
    paper_rows: list[PaperRowSpec] = Field([], description="rows the papers print that the project does not run")
    stated_numbers: list[StatedNumberSpec] = Field([], description="numbers the text states, checked against the tables")

    @field_validator("tables")
    @classmethod
    def _check_ids(cls, tables: dict[str, TableSpec]) -> dict[str, TableSpec]:
        for table_id in tables:
            if not _TABLE_ID.match(table_id):
                raise ValueError(f"table id {table_id!r} must be lowercase letters, digits and dashes")
        return tables


def column_problem(column: str) -> str | None:
    """What is wrong with a column's metric path, by the layout of the file its prefix names; None if it is one."""
    if column.startswith(ANALYSIS_PREFIX):
        return analysis_column_problem(column.removeprefix(ANALYSIS_PREFIX))
    if column.startswith(MTEB_PREFIX):
        return mteb_column_problem(column.removeprefix(MTEB_PREFIX))
    return sts_column_problem(column)
def check_paper_backbone(backbone: str) -> str:
    """A backbone of the papers' numbers: a preset of conf/backbone/ with a title."""
    known = paper_backbones()
    if backbone not in known:
        raise ValueError(f"backbone {backbone!r} is not a paper backbone of conf/backbone/; backbones: {', '.join(known)}")
    return backbone


def split_override(override: str) -> tuple[str, str]:
    match = _OVERRIDE.match(override)
    assert match, override  # validated when the spec was loaded
    return match["key"], match["value"]


def parse_tables(raw: object, source: Path | str = TABLES_FILE) -> TablesFile:
    try:
        return TablesFile.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid {source}: {describe_validation_error(error, str(source))}") from None


def load_tables(path: Path | str = TABLES_FILE) -> TablesFile:
    raw = read_yaml_file(path, "the report stage reads its table specs from it")
    return parse_tables(raw, path)
