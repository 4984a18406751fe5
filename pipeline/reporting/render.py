"""Write filled tables as Markdown, CSV and LaTeX, and the index of all of them.

Every cell is `ours | paper | Δ` with Δ = ours − paper, both to two decimals; ours carries ± the
half-width of its 95% bootstrap interval where the run has one, and a seed row (the aggregate) ± its
sample std and [min–max]. A row that is not
there yet reads `missing` and is listed under the table with the command that produces it. The
first line of every table (and of its LaTeX caption) states the scale its numbers come from.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.tables import Row, Table

ROW_HEADER = "Model"
RUN_HEADER = "Run"
CELL_LEGEND = (
    "Cells: ours | paper | Δ, with Δ = ours − paper; ours ± half-width of its 95% bootstrap interval where there is one "
    "(an aggregate row: ± sample std over its n runs, [min–max]); Run: the run our numbers come from."
)
_LATEX = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"\textbar{}",
    "Δ": r"$\Delta$", "η": r"$\eta$", "±": r"$\pm$", "×": r"$\times$", "→": r"$\to$", "−": "-", "—": "--",
    "–": "--", "…": r"\ldots{}",
}


def signed(number: float) -> str:
    return f"{round(number, 2) + 0.0:+.2f}"  # + 0.0 turns -0.0 into 0.0


def cell(row: Row, header: str) -> str:
    paper = row.paper.get(header)
    paper_text = "—" if paper is None else f"{paper:.2f}"
    if row.not_applicable:
        return f"n/a | {paper_text} | —"
    ours = row.ours.get(header)
    if ours is None:
        return f"missing | {paper_text} | —"
    delta = "—" if paper is None else signed(ours - paper)
    return f"{ours:.2f}{uncertainty(row, header)} | {paper_text} | {delta}"


def uncertainty(row: Row, header: str) -> str:
    """What follows our number: ± std [min–max] of an aggregate row, or ± the bootstrap half-width."""
    if header in row.spread:
        low, high = row.extent[header]
        return f" ± {row.spread[header]:.2f} [{low:.2f}–{high:.2f}]"
    if header in row.intervals:
        low, high = row.intervals[header]
        return f" ± {(high - low) / 2:.2f}"
    return ""


def _status(row: Row) -> str:
    if row.not_applicable:
        return "n/a"
    if row.missing:
        return "missing"
    return "partial" if row.missing_cells else "ok"


def _all_rows(table: Table) -> list[Row]:
    return table.rows + ([table.aggregate] if table.aggregate else [])


def grid(table: Table) -> pd.DataFrame:
    """The table as text cells, one row per spec row (missing ones included)."""
    records = [
        {
            ROW_HEADER: row.label,
            **{header: cell(row, header) for header in table.headers},
            RUN_HEADER: row.run or _status(row),
        }
        for row in _all_rows(table)
    ]
    return pd.DataFrame(records, columns=[ROW_HEADER, *table.headers, RUN_HEADER])


def numbers(table: Table) -> pd.DataFrame:
    """The table for machines: ours, paper and Δ as separate numeric columns per metric; a score column
    also its bootstrap interval (low, high), a table with an aggregate row n, std, min and max."""
    scores = {header for column, header in table.spec.columns.items() if column in SCORE_COLUMNS}
    records = []
    for row in _all_rows(table):
        record: dict[str, object] = {"row": row.label, "status": _status(row), "scale": table.scale, "run": row.run}
        if table.aggregate:
            record["n"] = row.count
        for header in table.headers:
            ours, paper = row.ours.get(header), row.paper.get(header)
            record[f"{header} ours"] = ours
            if header in scores:
                low, high = row.intervals.get(header, (None, None))
                record[f"{header} low"], record[f"{header} high"] = low, high
            if table.aggregate:
                low, high = row.extent.get(header, (None, None))
                record[f"{header} std"] = row.spread.get(header)
                record[f"{header} min"], record[f"{header} max"] = low, high
            record[f"{header} paper"] = paper
            record[f"{header} Δ"] = None if ours is None or paper is None else round(ours - paper, 2)
        records.append(record)
    return pd.DataFrame(records)


def _follow_ups(table: Table) -> list[str]:
    """What is missing or cannot run here, and how to produce it, as Markdown list items."""
    lines = []
    if table.missing_rows:
        lines += ["", f"**Missing rows ({len(table.missing_rows)})** — the command after each produces it:"]
        lines += [f"- {row.label}: {row.missing}: `{row.command}`" for row in table.missing_rows]
        if table.experiments_problem:
            lines += [f"- experiments could not be listed: {table.experiments_problem}"]
        if table.queue_commands:
            lines += [
                f"- all experiments of this table: `python -m stages report --queue {table.id} --run`, then "
                "`dvc queue start`; render again when they finish (docs/tables.md)"
            ]
    partial = [row for row in table.rows if row.missing_cells]
    if partial:
        lines += ["", "**Missing cells:**"]
        lines += [f"- {row.label}: {row.missing_cells}" + (f": `{row.command}`" if row.command else "")
                  for row in partial]
    not_applicable = [row for row in table.rows if row.not_applicable]
    if not_applicable:
        lines += ["", "**Not applicable to this backbone:**"]
        lines += [f"- {row.label}: {row.not_applicable}" for row in not_applicable]
    if table.aggregate and table.aggregate.missing:
        lines += ["", f"**{table.aggregate.label}:** {table.aggregate.missing}"]
    if table.spec.notes:
        lines += ["", "**Notes on the paper numbers:**"] + [f"- {note}" for note in table.spec.notes]
    return lines


def markdown(table: Table) -> str:
    spec = table.spec
    body = grid(table).map(lambda text: str(text).replace("|", r"\|"))
    lines = [
        f"**{table.scale_line}**",
        "",
        f"### {table.id}: {spec.caption}",
        "",
        f"Paper numbers: {spec.paper_source}; {spec.scale_note}. {CELL_LEGEND}",
        "",
        body.to_markdown(index=False),
    ]
    return "\n".join(lines + _follow_ups(table)) + "\n"


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(character, character) for character in text)


def latex(table: Table) -> str:
    spec = table.spec
    caption = f"{table.scale_line} {spec.caption} Paper numbers: {spec.paper_source}. {CELL_LEGEND}"
    body = grid(table).map(lambda text: latex_escape(str(text)))
    body.columns = [latex_escape(header) for header in body.columns]
    comments = [f"% {line}" for line in _follow_ups(table) if line]
    tabular = body.to_latex(index=False, escape=False, caption=latex_escape(caption), label=f"tab:{table.id}")
    return "\n".join(comments + [tabular])


def index(tables: list[Table], figures: dict[str, str] | None = None) -> str:
    """README.md of the tables folder: one line per table; `figures` (link → caption) after them."""
    scale_lines = list(dict.fromkeys(table.scale_line.split(":")[0] for table in tables))
    lines = [
        "# Reproduced tables",
        "",
        f"**{' / '.join(scale_lines)}** — each table's first line says what its numbers are. "
        "How to regenerate them: docs/tables.md.",
        "",
    ]
    records = []
    for table in tables:
        present = sum(row.present for row in table.rows)
        applicable = sum(not row.not_applicable for row in table.rows)
        missing = len(table.missing_rows)
        status = f"{missing} row{'s' * (missing > 1)} missing" if missing else "cells missing"
        records.append({
            "table": f"[{table.id}]({table.id}.md)",
            "caption": table.spec.caption,
            "paper source": table.spec.paper_source,
            "rows": f"{present}/{applicable}",
            "status": "complete" if table.complete else status,
            "files": f"[md]({table.id}.md) [csv]({table.id}.csv) [tex]({table.id}.tex)",
        })
    body = pd.DataFrame(records).map(lambda text: str(text).replace("|", r"\|"))
    lines.append(body.to_markdown(index=False))
    if figures:
        lines += ["", "## Figures", ""] + [f"- [{Path(link).name}]({link}): {caption}" for link, caption in figures.items()]
    return "\n".join(lines) + "\n"
