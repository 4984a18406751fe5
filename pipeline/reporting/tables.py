"""Fill each table spec from the runs: our number beside the paper's, or why a row is missing.

A row is looked up in the workspace first; rows that are experiments (they have overrides, or the
table's backbone is not the workspace's at paper scale) are then looked up among the finished DVC
experiments, newest first. `dvc exp show` runs once, and only when a row is not in the workspace.
A row that cannot run on this backbone (4 CAELs of a 6-layer model) is "not applicable".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeline.params_file import parse_params
from pipeline.errors import PipelineError
from pipeline.reporting.runs import (
    ExperimentSearch,
    Requirement,
    Run,
    file_of,
    fits,
    has_param,
    queue_command,
    requirement,
    setting_value,
)
from pipeline.reporting.backbones import PAPER_SHAPED, other_backbone, title
from pipeline.reporting.spec import ANALYSIS_PREFIX, RowSpec, TablesFile, TableSpec, split_override
# Backbone presets that already are trained sentence embedders, which the papers' BERT/RoBERTa are not
TRAINED_EMBEDDERS = {"minilm": "all-MiniLM-L6-v2"}


@dataclass
class Row:
    label: str
    paper: dict[str, float]
    ours: dict[str, float | None] = field(default_factory=dict)  # by column header; None = missing cell
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # 95% bootstrap (low, high) by header
    spread: dict[str, float] = field(default_factory=dict)  # sample std, aggregate rows only
    extent: dict[str, tuple[float, float]] = field(default_factory=dict)  # (min, max), aggregate rows only
    count: int | None = None  # runs an aggregate row summarises
    run: str | None = None
    origin: Run | None = field(default=None, repr=False)  # the run the numbers come from
    missing: str | None = None  # why the row is absent
    command: str | None = None  # what produces it
    queued: bool = False  # the command queues a DVC experiment
    not_applicable: str | None = None
    missing_cells: str | None = None

    @property
    def present(self) -> bool:
        return self.run is not None


@dataclass
class Table:
    id: str
    spec: TableSpec
    scale: str
    scale_line: str
    rows: list[Row]
    aggregate: Row | None = None
    experiments_problem: str | None = None  # why experiment rows could not be looked up

    @property
    def headers(self) -> list[str]:
        return list(self.spec.columns.values())

    @property
    def missing_rows(self) -> list[Row]:
        return [row for row in self.rows if row.missing]

    @property
    def complete(self) -> bool:
        return not self.missing_rows and not any(row.missing_cells for row in self.rows)

    @property
    def queue_commands(self) -> list[str]:
        return list(dict.fromkeys(row.command for row in self.missing_rows if row.queued))


class RunSource:
    """The workspace run and, listed on first need only, the finished DVC experiments."""

    def __init__(self, workspace: Run, search: Callable[[], ExperimentSearch]):
        self.workspace = workspace
        self._search = search
        self._experiments: ExperimentSearch | None = None

    @property
    def experiments(self) -> ExperimentSearch:
        if self._experiments is None:
            self._experiments = self._search()
        return self._experiments


def check_override_keys(tables: TablesFile, params: dict[str, Any]) -> None:
    """An override of a key params.yaml does not have could never match: refuse it up front."""
    for table_id, spec in tables.tables.items():
        located = [(f"tables.{table_id}.overrides", spec.overrides)] + [
            (f"tables.{table_id}.rows.{index}.experiment", row.experiment.overrides + row.experiment.paper_overrides)
            for index, row in enumerate(spec.rows)
            if row.experiment
        ]
        for where, overrides in located:
            for override in overrides:
                key = split_override(override)[0]
                if not has_param(params, key):
                    raise PipelineError(f"invalid tables.yaml: {where}: unknown setting '{key}' (not in params.yaml)")


def experiment_axes(tables: TablesFile) -> list[str]:
    """The settings that some row's experiment changes. Every other row keeps the workspace's value of
    each, so that "6 CAELs" never picks up an experiment that also changed the losses. (A table's own
    overrides, like turning MTEB on, only add metrics and are not axes.)"""
    keys = [
        split_override(override)[0]
        for spec in tables.tables.values()
        for row in spec.rows
        if row.experiment
        for override in row.experiment.overrides + row.experiment.paper_overrides
    ]
    return list(dict.fromkeys(keys))


def build_tables(tables: TablesFile, source: RunSource) -> list[Table]:
    return [build_table(tables, table_id, source) for table_id in tables.tables]


def build_table(tables: TablesFile, table_id: str, source: RunSource) -> Table:
    spec = tables.tables[table_id]
    params = source.workspace.params
    axes = experiment_axes(tables)
    rows = [find_row(row, spec, axes, source) for row in spec.rows]
    aggregate = _aggregate(spec, rows) if spec.aggregate else None
    problem = source.experiments.problem if any(row.queued for row in rows) else None
    return Table(table_id, spec, params["scale"], scale_line(spec, params), rows, aggregate, problem)


def scale_line(spec: TableSpec, params: dict[str, Any]) -> str:
    """The caption's first line: the scale our numbers were produced at."""
    backbone = params["backbone"]["name"]
    trained = (
        f" The {backbone} backbone is already a trained sentence embedder ({TRAINED_EMBEDDERS[backbone]}): "
        "its untrained rows (backbone, towers' ensemble) already score high, so compare each row with the backbone row, not only with the paper."
        if backbone in TRAINED_EMBEDDERS else ""
    )
    elsewhere = other_backbone(spec.backbone, params)
    if elsewhere:
        return f"{params['scale'].upper()} SCALE, NOT COMPARED: {elsewhere}; this table's rows need a {title(spec.backbone)} run."
    if params["scale"] == "tiny":
        return (
            f"TINY SCALE, NOT A PAPER-SCALE RESULT: {backbone} stands in for {title(spec.backbone)}, "
            f"{params['data']['wiki']['limit']} Wiki1M lines, {params['train']['max_steps']} twin training steps, "
            f"at most {params['eval']['max_pairs']} pairs per benchmark.{trained}"
        )
    if params["scale"] == "rehearsal":
        return (
            f"REHEARSAL, NOT A RESULT: the paper preset of {title(spec.backbone)} offline (conf/scale/rehearsal.yaml): "
            f"random weights, offline tokenizers, loopback round trips (tagged copies, not translations), "
            f"{params['train']['max_steps']} twin training steps, at most {params['eval']['max_pairs']} pairs per benchmark."
        )
    if params["scale"] == "small":
        return (
            f"SMALL SCALE, NOT A PAPER-SCALE RESULT: {backbone} stands in for {title(spec.backbone)}, "
            f"the mirror's Wiki1M sample with Apertium round trips, one epoch per stage, full benchmarks.{trained}"
        )
    return f"Paper scale: {title(spec.backbone)}, the papers' settings (params.yaml, scale: paper).{trained}"


def _row_overrides(spec: TableSpec, row: RowSpec, params: dict[str, Any]) -> tuple[list[str], str | None]:
    """The settings a row changes on this run's backbone (its layer counts mapped: `ExperimentSpec.on_layers`),
    or why it has no counterpart here."""
    overrides = list(spec.overrides)
    if not row.experiment:
        return overrides, None
    mapped, unmatched = row.experiment.on_layers(params["backbone"]["num_layers"])
    extra = row.experiment.paper_overrides if params["scale"] in PAPER_SHAPED else []
    return overrides + mapped + extra, unmatched


def find_row(row: RowSpec, spec: TableSpec, axes: list[str], source: RunSource) -> Row:
    """One row of a table spec filled from the runs (the workspace, else the experiments that fit), or
    why it is missing and the command that produces it. `axes`: `experiment_axes` (settings every row
    keeps at the workspace's value unless it overrides them)."""
    workspace = source.workspace
    scale = workspace.params["scale"]
    backbone = spec.backbone if scale in PAPER_SHAPED else workspace.params["backbone"]["name"]
    context = [requirement(f"scale={scale}", workspace.params), requirement(f"backbone={backbone}", workspace.params)]
    result = Row(row.label, dict(row.paper))
    result.not_applicable = other_backbone(spec.backbone, workspace.params)
    if result.not_applicable:  # a RoBERTa-base row is not a MiniLM run's
        return result
    overrides, result.not_applicable = _row_overrides(spec, row, workspace.params)
    if result.not_applicable:  # a layer count of the paper's backbone with no counterpart on this one
        return result
    changed = [requirement(override, workspace.params) for override in overrides]
    changed_keys = {wanted.key for wanted in changed}
    kept = [
        Requirement(axis, setting_value(workspace.params, axis), f"{axis} as in params.yaml")
        for axis in axes
        if axis not in changed_keys
    ]
    requirements = context + changed + kept
    in_workspace_context = fits(workspace.params, context)
    if changed and in_workspace_context:
        result.not_applicable = _invalid_here(workspace.params, changed)
        if result.not_applicable:
            return result
    for run in _candidates(source, requirements, is_experiment=bool(changed) or not in_workspace_context):
        ours = {header: run.value(row.model, column) for column, header in spec.columns.items()}
        if any(value is not None for value in ours.values()):
            result.ours, result.run, result.origin = ours, run.name, run
            result.intervals = {
                header: found for column, header in spec.columns.items()
                if (found := run.interval(row.model, column)) is not None
            }
            absent = [header for header, value in ours.items() if value is None]
            if absent:
                result.missing_cells = f"{', '.join(absent)} not in {_files_of(spec, row.model)}"
                if run is workspace:
                    result.command = _repro_command(spec, row.model)
            return result
    if fits(workspace.params, requirements):
        files = list(dict.fromkeys(file_of(row.model, column) for column in spec.columns))
        absent = [file for file in files if file not in workspace.files]
        if absent:
            result.missing = f"{' / '.join(absent)} not in the workspace"
        else:
            result.missing = f"no {', '.join(spec.columns.values())} in {_files_of(spec, row.model)}"
        result.command = _repro_command(spec, row.model)
    else:
        wanted = ", ".join(overrides) if overrides else f"backbone={context[1].value}"
        result.missing = f"no finished experiment with {wanted} (other settings as in params.yaml)"
        result.command, result.queued = queue_command(context + changed), True
    return result


def _candidates(source: RunSource, requirements: list[Requirement], is_experiment: bool) -> Iterator[Run]:
    """The runs that fit, workspace first; experiments are listed only when the workspace falls short."""
    if fits(source.workspace.params, requirements):
        yield source.workspace
    if is_experiment:
        yield from (run for run in source.experiments.runs if fits(run.params, requirements))


def _invalid_here(params: dict[str, Any], requirements: list[Requirement]) -> str | None:
    """The settings' own one-line error when these overrides cannot run here (e.g. cael 4 on 6 layers)."""
    changed = copy.deepcopy(params)
    for wanted in requirements:
        *parents, leaf = wanted.key.split(".")
        node = changed
        for part in parents:
            node = node[part]
        node[leaf] = wanted.value
    try:
        parse_params(changed, of_a_past_run=True)  # a run's params: an experiment may predate a retired key
    except PipelineError as error:
        return str(error).removeprefix("invalid params: ")
    return None


def _files_of(spec: TableSpec, model: str) -> str:
    return " / ".join(dict.fromkeys(file_of(model, column) for column in spec.columns))


def _repro_command(spec: TableSpec, model: str) -> str:
    stages = [f"evaluate@{model}"]
    if any(column.startswith(ANALYSIS_PREFIX) for column in spec.columns):
        stages.append("analyze")
    return "dvc repro " + " ".join(stages)


def _aggregate(spec: TableSpec, rows: list[Row]) -> Row:
    """n, mean ± sample std and min–max over the rows present (the seed spread); needs two of them."""
    assert spec.aggregate is not None
    result = Row(spec.aggregate.label, dict(spec.aggregate.paper))
    present = [row for row in rows if row.present]
    if len(present) < 2:
        result.missing = f"needs at least two of the rows above; {len(present)} present"
        return result
    frame = pd.DataFrame([row.ours for row in present], dtype=float)
    result.ours = {header: (None if pd.isna(mean) else float(mean)) for header, mean in frame.mean().items()}
    result.spread = {header: float(std) for header, std in frame.std(ddof=1).items() if not pd.isna(std)}
    result.extent = {
        header: (float(low), float(high)) for (header, low), high in zip(frame.min().items(), frame.max()) if not pd.isna(low)
    }
    result.count = len(present)
    result.run = f"n = {len(present)}"
    return result
