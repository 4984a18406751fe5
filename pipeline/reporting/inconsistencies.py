"""The papers' own numbers that disagree with themselves, computed from the transcriptions: every row
(tables.yaml, its `paper_rows`, conf/checkpoints.yaml's paper and README numbers) whose printed
average is not the mean of its printed cells beyond rounding, and every number the text states that
its table does not give (tables.yaml `stated_numbers`). REPRODUCTION.md lists them (DESIGN.md §10)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.checkpoints import load_catalogue
from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.spec import RowReference, TablesFile

# Beyond rounding: each cell is rounded to two decimals (their mean moves by up to 0.005) and so is the
# printed average (another 0.005)
ROUNDING = 0.01 + 1e-9


@dataclass(frozen=True)
class Inconsistency:
    where: str
    row: str
    printed: str
    computed: str
    difference: str
    used: str


def _average_columns(columns: Mapping[str, str]) -> tuple[list[str], str] | None:
    """(the seven task headers, the average's header) of a table with all of them."""
    tasks = [header for path, header in columns.items() if path in SCORE_COLUMNS and path != "avg"]
    average = columns.get("avg")
    return (tasks, average) if average and len(tasks) == len(SCORE_COLUMNS) - 1 else None


def _mean_gap(cells: Mapping[str, float], tasks: list[str], average: str) -> float | None:
    if average not in cells or any(task not in cells for task in tasks):
        return None
    return cells[average] - sum(cells[task] for task in tasks) / len(tasks)


def _row_inconsistency(where: str, label: str, printed: Mapping[str, float], used: Mapping[str, float],
                       tasks: list[str], average: str, why: str) -> Inconsistency | None:
    gap = _mean_gap(printed, tasks, average)
    if gap is None or abs(gap) <= ROUNDING:
        return None
    corrected = {key: value for key, value in used.items() if printed.get(key) != value}
    if corrected:
        uses = ", ".join(f"{key} {value:.2f} (printed {printed[key]:.2f})" for key, value in corrected.items() if key in printed)
        uses = f"{uses}: {why}" if why else uses
    else:
        uses = "the printed numbers as they are: which cell is misprinted is not known" + (f" ({why})" if why else "")
    mean = printed[average] - gap
    return Inconsistency(where, label, f"{printed[average]:.2f}", f"{mean:.2f} (mean of the {len(tasks)} printed cells)",
                         f"{gap:+.2f}", uses)


def table_rows(tables: TablesFile) -> list[Inconsistency]:
    found, seen = [], set()
    for table_id, spec in tables.tables.items():
        layout = _average_columns(spec.columns)
        if layout is None:
            continue
        tasks, average = layout
        for row in spec.rows:
            printed = {**row.paper, **row.printed}
            key = (row.label, tuple(sorted(printed.items())))
            if key in seen:  # the same transcription in several tables is listed once
                continue
            seen.add(key)
            why = f"the notes of reports/tables/{table_id}.md say why" if row.printed else ""
            issue = _row_inconsistency(f"tables.yaml {table_id} ({spec.paper_source})", row.label, printed, row.paper,
                                       tasks, average, why)
            if issue:
                found.append(issue)
    for row in tables.paper_rows:
        tasks = [header for header in row.paper if header not in ("Avg.",)]
        if "Avg." in row.paper and len(tasks) == len(SCORE_COLUMNS) - 1:
            issue = _row_inconsistency(f"tables.yaml paper_rows ({row.source})", row.label, row.paper, row.paper, tasks, "Avg.", "")
            if issue:
                found.append(issue)
    return found


def checkpoint_rows(catalogue: Path) -> list[Inconsistency]:
    found = []
    rows = load_catalogue(catalogue).rows
    for key, row in rows.items():
        for numbers, kind in ((row.paper, "paper"), (row.readme, "README")):
            if numbers is None:
                continue
            tasks = [header for header in numbers.scores if header != "Avg."]
            if len(tasks) != len(SCORE_COLUMNS) - 1:
                continue
            issue = _row_inconsistency(f"{catalogue} {key} ({kind}: {numbers.source})", row.system, numbers.scores,
                                       numbers.scores, tasks, "Avg.", _short(row.note or ""))
            if issue:
                found.append(issue)
    return found


def _cell(tables: TablesFile, reference: RowReference) -> float:
    table, _, label = reference.row.partition(": ")
    rows = tables.paper_rows if table == "paper_rows" else tables.tables[table].rows
    row = next(row for row in rows if row.label == label)
    return row.paper[reference.column]


def _label(reference: RowReference) -> str:
    return reference.row.partition(": ")[2]


def stated_numbers(tables: TablesFile) -> list[Inconsistency]:
    found = []
    for stated in tables.stated_numbers:
        computed = _cell(tables, stated.better) - _cell(tables, stated.worse)
        if abs(round(computed, 2) - stated.stated) > ROUNDING:
            found.append(Inconsistency(
                f"{stated.source}: “{stated.quote}”",
                f"{_label(stated.better)} − {_label(stated.worse)}, {stated.better.column}",
                f"{stated.stated:.2f} (the text)", f"{computed:.2f} (the table)", f"{stated.stated - computed:+.2f}", stated.used,
            ))
    return found


def check_references(tables: TablesFile) -> str | None:
    """A stated number's row that tables.yaml does not have, named; None when all resolve."""
    for index, stated in enumerate(tables.stated_numbers):
        for side in (stated.better, stated.worse):
            try:
                _cell(tables, side)
            except (KeyError, StopIteration):
                return f"stated_numbers.{index}: no paper number at {side.row!r}, column {side.column!r}"
    return None


def inconsistencies(tables: TablesFile, catalogue: Path) -> list[Inconsistency]:
    """Every inconsistent row once: a catalogue row that repeats a tables.yaml row's numbers is left out."""
    rows = table_rows(tables)
    listed = {(found.row, found.printed, found.difference) for found in rows}
    others = [found for found in checkpoint_rows(catalogue) if (found.row, found.printed, found.difference) not in listed]
    return rows + others + stated_numbers(tables)


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
