"""The public-checkpoints table: every catalogue row the checkpoints stage ran, ours beside the papers'.

Each cell is `ours | paper | Δ` (Δ = ours − paper); a released TNCSE/JTCSE model gets a second
line, `ours | README | Δ`, against its authors' README. A row without a number of ours says why
(not scoreable: no public checkpoint or special inference; not reached: what the hub answered),
listed under the table. Written as Markdown and CSV (the CSV with separate numeric columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.public_checkpoints import Catalogue, our_column, scored_columns
from pipeline.params_file import read_yaml_file
from pipeline.io import write_text_atomic
from pipeline.errors import PipelineError
from pipeline.reporting.inputs import CorruptFile, check_details, corrupt_error
from pipeline.writeup.render import signed

STATUS_TEXT = {"scored": "scored", "not_reached": "not reached", "not_scoreable": "not scoreable"}


@dataclass(frozen=True)
class CheckpointTable:
    markdown: str
    numbers: pd.DataFrame
    rows: int
    scored: int


def read_results(path: Path) -> dict:
    """The checkpoints stage's results file (one line naming the fix when it is missing or malformed):
    each row's status, and a scored row's scores checked as a details file's (finite numbers)."""
    results = read_yaml_file(path, "run the checkpoints stage first (`dvc repro checkpoints`)")
    if not isinstance(results, dict) or not isinstance(results.get("rows"), dict):
        raise PipelineError(f"{path} is not a checkpoints results file (no `rows`); rerun `dvc repro checkpoints`")
    for key, entry in results["rows"].items():
        try:
            _check_row(entry)
        except CorruptFile as error:
            raise corrupt_error(path, f"rows.{key}: {error}", "rerun `dvc repro checkpoints`") from None
    return results


def _check_row(entry: object) -> None:
    if not isinstance(entry, dict) or entry.get("status") not in STATUS_TEXT:
        raise CorruptFile(f"no status of {', '.join(STATUS_TEXT)}")
    if entry["status"] == "scored":
        check_details(entry.get("scores"))
    elif not isinstance(entry.get("reason"), str):
        raise CorruptFile("a row that is not scored says why (reason)")


def _cell(ours: float | None, theirs: float | None) -> str:
    ours_text = "—" if ours is None else f"{ours:.2f}"
    theirs_text = "—" if theirs is None else f"{theirs:.2f}"
    delta = "—" if ours is None or theirs is None else signed(ours - theirs)
    return f"{ours_text} | {theirs_text} | {delta}"


def _records(catalogue: Catalogue, results: dict) -> tuple[list[dict], list[dict], list[str]]:
    """(Markdown lines as dicts, CSV records, notes) for the rows in `results`, in catalogue order."""
    lines, records, notes = [], [], []
    every = {**catalogue.rows, **catalogue.standin}
    columns = scored_columns(results)
    unknown = [key for key in results["rows"] if key not in every]
    if unknown:
        raise PipelineError(f"results name rows {', '.join(unknown)} that the catalogue lacks; rerun `dvc repro checkpoints`")
    for key, row in every.items():
        entry = results["rows"].get(key)
        if entry is None:
            continue
        status = entry["status"]
        scores = entry.get("scores", {})
        ours = {column: our_column(scores, column) for column in columns}
        label = f"{row.system} ({row.block})"
        if status != "scored":
            notes.append(f"- **{label}** ({key}), {STATUS_TEXT[status]}: {entry['reason']}")
        targets = [("paper", row.paper)] + ([("README", row.readme)] if row.readme else [])
        for name, numbers in targets:
            theirs = dict(numbers.scores) if numbers else {}
            lines.append({
                "System": label if name == "paper" else f"{label} vs README",
                **{column: _cell(ours[column], theirs.get(column)) for column in columns},
                "Status": STATUS_TEXT[status],
            })
        record = {"row": key, "system": row.system, "block": row.block, "kind": row.kind, "status": status}
        for column in columns:
            record[f"{column} ours"] = ours[column]
            for name, numbers in targets:
                theirs = dict(numbers.scores).get(column) if numbers else None
                record[f"{column} {name}"] = theirs
                record[f"{column} Δ {name}"] = None if ours[column] is None or theirs is None else round(ours[column] - theirs, 2)
        records.append(record)
    return lines, records, notes


def build_table(catalogue: Catalogue, results: dict) -> CheckpointTable:
    lines, records, notes = _records(catalogue, results)
    grid = pd.DataFrame(lines, columns=["System", *scored_columns(results), "Status"])
    pairs = "all pairs" if results.get("max_pairs") is None else f"a seeded sample of {results['max_pairs']} pairs of each task"
    source = (
        "STAND-IN (offline): checkpoints.standin_model served by a loopback hub under fake ids, not the papers' checkpoints"
        if results.get("source") == "standin" else "public checkpoints from the Hugging Face hub"
    )
    scored = sum(record["status"] == "scored" for record in records)
    text = [
        f"Public checkpoints, scored by this pipeline's STS evaluator ({source}; {pairs}; scale {results.get('scale')}).",
        "",
        "Cells: ours | paper | Δ, with Δ = ours − paper; a `vs README` line compares with the authors' README instead.",
        "",
        grid.map(lambda text: str(text).replace("|", r"\|")).to_markdown(index=False),
        "",
        f"{scored} of {len(records)} rows scored.",
    ]
    if notes:
        text += ["", "Rows without a number of ours:", "", *notes]
    return CheckpointTable("\n".join(text) + "\n", pd.DataFrame(records), len(records), scored)


def write_table(catalogue: Catalogue, results: dict, output: Path) -> CheckpointTable:
    """Write the table as Markdown at `output` and CSV beside it (atomically); return it."""
    table = build_table(catalogue, results)
    write_text_atomic(output, table.markdown)
    write_text_atomic(output.with_suffix(".csv"), table.numbers.to_csv(index=False))
    return table

