"""Write filled tables as Markdown, CSV and LaTeX, and the index of all of them.

Every cell is `ours | paper | Δ` with Δ = ours − paper, both to two decimals; ours carries ± the
half-width of its 95% bootstrap interval where the run has one, and a seed row (the aggregate) ± its
sample std and [min–max]. A row that is not
there yet reads `missing` and is listed under the table with the command that produces it. The
first line of every table (and of its LaTeX caption) states the scale its numbers come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.io import dotted_leaves
from pipeline.reporting.inconsistencies import Inconsistency
from pipeline.reporting.backbones import judged_backbone, title
from pipeline.reporting.runs import SCORE_COLUMNS
from pipeline.reporting.tables import Row, Table
from pipeline.verdicts.claim import Verdict
from pipeline.verdicts.claims_file import verdict_counts
from pipeline.verdicts.decidable import expected_by_chance
from pipeline.verdicts.verdict_names import CONSISTENT, CONTRADICTED, DECIDED, FINDINGS, HOLDS, INCONCLUSIVE, SMALLER, VERDICTS, verdict_key

FDR = 0.05  # the false-discovery rate the Benjamini–Hochberg line reports at
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


# --- reports/REPRODUCTION.md --------------------------------------------------------------------

VERDICT_LEGEND = (
    "An STS interval counts both sources of noise: the sampling of test pairs (the paired bootstrap, τ) and the "
    "training seed (an arm's own seeds, the committed seed record reports/seed_noise.json, or a stated prior); each "
    "row says how many seeds each arm has and where its seed noise comes from. Against a paper's number the test pairs "
    "are the paper's own, so their noise cancels and only seed noise counts; an analysis metric's sentence-sample "
    "noise is not measured, and its row says so. Value claims: a 95% interval of our seeds' mean − the paper's "
    "number (the claims file's value_against: one run reads it as a prediction of one more run, the paper's being one); "
    "reproduced when it lies within ±ε, higher / not "
    "reproduced when it lies beyond +ε / −ε, consistent within seed noise when it holds 0 but is wider than ±ε, else "
    "inconclusive. Order claims: holds / contradicted when the 95% interval of the difference lies above / below 0 (or "
    "the claim's margin); a metric without resamples, one run each: the point difference beyond its band, no interval. "
    "Trends: the pairs the shape implies (first-best: the first against each, all must hold; decreasing / increasing: "
    "the endpoints must hold and no neighbouring step may go against the shape beyond chance; flat: every ordered pair, each within the "
    "claim's width), contradicted Bonferroni-corrected over them. Exact claims: reproduced when our count, rounded as the "
    "paper prints it, equals the paper's. Range claims: holds inside [low, high]. Correlation claims: Spearman's ρ with "
    "a one-sided permutation p, on the seed record's means where the models have seeds; holds needs p < 0.025 and the "
    "claimed strength, contradicted p < 0.025 the other way. Other scale / other backbone: this run "
    "cannot show it. An undecided claim says what would decide it. The rules and their simulated error rates: "
    "docs/method.md, \"Claims and verdicts\"."
)


NOT_RECORDED = "(not recorded)"


def environment_section(environments: dict[str, dict]) -> list[str]:
    """The environment records as `key: value` lines: the facts every record shares once, then, for
    each group of files whose records agree, only the facts that differ between records."""
    lines = ["## Environment", ""]
    if not environments:
        return lines + [
            "environment not recorded (no \"environment\" in reports/training/details/*.json or "
            "reports/metrics/details/*.json)", "",
        ]
    facts = {path: dotted_leaves(record) for path, record in environments.items()}
    keys = list(dict.fromkeys(key for record in facts.values() for key in record))
    common = [key for key in keys if len({repr(record.get(key, NOT_RECORDED)) for record in facts.values()}) == 1]
    differing = [key for key in keys if key not in common]
    first = next(iter(facts.values()))
    shared = f"Common to all {len(facts)} records" if len(facts) > 1 else f"Recorded by `{next(iter(facts))}`"
    lines += [f"{shared}:", ""] + [f"- {key}: {first[key]}" for key in common] + [""]
    if not differing:
        return lines
    lines += [f"Where they differ ({', '.join(differing)}):", ""]
    grouped: dict[str, list[str]] = {}
    for path, record in facts.items():
        grouped.setdefault(repr([record.get(key, NOT_RECORDED) for key in differing]), []).append(path)
    for paths in grouped.values():
        record = facts[paths[0]]
        lines += [f"Recorded by {', '.join(f'`{path}`' for path in paths)}:", ""]
        lines += [f"- {key}: {record.get(key, NOT_RECORDED)}" for key in differing] + [""]
    return lines


def _markdown_row(cells: list[str]) -> str:
    """One line of a Markdown table, unpadded (the claims' cells are long)."""
    return "| " + " | ".join(str(text).replace("|", r"\|").replace("\n", " ") for text in cells) + " |"


def _claims_table(verdicts: list[Verdict], default_reason: str, why: bool = False) -> list[str]:
    header = ["id", "claim"] + (["why the project asks"] if why else []) + ["source", "ours (95% interval)", "paper", "verdict"]
    rows = []
    for result in verdicts:
        claim, source = result.claim, result.claim.source
        quoted = "—" if source is None else f"{source.file}, {source.where}: “{source.quote}”" + (
            f" (reconstructed: {source.reconstructed})" if source.reconstructed else "")
        rows.append([claim.id, claim.claim] + ([claim.why] if why else []) + [
            quoted, claim.ours_text(result), claim.paper_text(result, default_reason), claim.verdict_text(result)])
    return [_markdown_row(header), _markdown_row([":--"] * len(header))] + [_markdown_row(row) for row in rows]


def own_numbers_section(inconsistencies: list[Inconsistency]) -> list[str]:
    """The papers' own numbers that disagree with themselves: computed from tables.yaml and
    conf/checkpoints.yaml (pipeline.reporting.inconsistencies), never typed here."""
    lines = [
        "## The papers' own numbers", "",
        "Transcribed rows whose printed average is not the mean of their cells beyond rounding, and numbers the text "
        "states differently from a table; each with the value the project uses and why.", "",
    ]
    if not inconsistencies:
        return lines + ["None found.", ""]
    header = ["where", "row", "printed", "computed", "difference", "the project uses"]
    lines += [_markdown_row(header), _markdown_row([":--"] * len(header))]
    for found in inconsistencies:
        lines.append(_markdown_row([found.where, found.row, found.printed, found.computed, found.difference, found.used]))
    return lines + [""]


def reproduction(
    verdicts: list[Verdict], params: dict, environments: dict[str, dict], default_epsilon: float, default_reason: str,
    inconsistencies: list[Inconsistency] | None = None, untrained_avg: float | None = None,
    gaussian: GaussianShare | None = None,
) -> str:
    """reports/REPRODUCTION.md, its first screen the answer: the papers' claims counted by verdict (the
    project's questions apart), the forest plot and what this scale can say; then the claims grouped
    by paper, the project's questions, the papers' own numbers, what is missing, and the environment."""
    papers = [result for result in verdicts if result.claim.origin == "paper"]
    questions = [result for result in verdicts if result.claim.origin == "project"]
    lines = ["# Did it reproduce?", ""] + decided_lines(verdicts, params) + [
             _counts_line("The papers' claims", papers), _counts_line("The project's own questions", questions), "",
             "![Every judged comparison: the difference with its pair-only interval (thin) and its pair + seed interval "
             "(thick), the margin or band shaded, the verdict as the colour](figures/claims.png)", ""]
    lines += _scale_lines(params, untrained_avg) + ([gaussian.line()] if gaussian is not None else []) + [""]
    lines += [multiplicity_line(verdicts), ""]
    lines += [VERDICT_LEGEND, f"Default ε of value claims (\"the default\" below): {default_epsilon:.2f} points, {default_reason}.", ""]
    for paper, group in _by_paper(papers).items():
        lines += [f"## {paper}'s claims", ""] + _claims_table(group, default_reason) + [""]
    if questions:
        lines += ["## The project's own questions", "",
                  "Not claims of the papers: questions the project asks of its runs, each with why it is asked.", ""]
        lines += _claims_table(questions, default_reason, why=True) + [""]
    counts = verdict_counts(verdicts)
    lines += ["## Verdicts", ""]
    lines += [f"- {verdict}: {counts['verdicts'][verdict_key(verdict)]}" for verdict in VERDICTS]
    lines += ["", f"{len(verdicts)} claims: {counts['origins']['paper']} of the papers, {counts['origins']['project']} "
              "of the project's own questions (reports/claims.json). A claim about another backbone is counted once, "
              "as \"other backbone\".", ""]
    lines += own_numbers_section(inconsistencies or [])
    commands = list(dict.fromkeys(command for result in verdicts for command in result.commands))
    if commands:
        lines += ["## To run what is missing", ""] + [f"- `{command}`" for command in commands]
        lines += ["", "Queued experiments start with `dvc queue start`; `dvc repro report` renders them when they finish.", ""]
    lines += environment_section(environments)
    return "\n".join(lines).rstrip("\n") + "\n"


@dataclass(frozen=True)
class GaussianShare:
    """How much of GS-InfoNCE's InfoNCE denominator its Gaussian negatives held over a training run (the
    logged `gaussian_share` of reports/training/baseline-gs-infonce.csv): the most of a step's gradient
    they could steer, and so whether the term can have a measurable effect at this scale."""

    count: int | None
    mean: float
    largest: float
    steps: int
    source: str
    dropouts: tuple[float, float]  # GS-InfoNCE's, SimCSE's

    NEGLIGIBLE = 0.01  # under 1% of every step's softmax mass

    def line(self) -> str:
        negatives = f"M = {self.count}" if self.count is not None else "M"
        gs, simcse = self.dropouts
        rest = (f"GS-InfoNCE − SimCSE here is their dropouts' ({gs:g} against {simcse:g})" if gs != simcse
                else "GS-InfoNCE and SimCSE here differ by this term alone")
        effect = (f"too little to move the weights measurably; {rest}" if self.largest < self.NEGLIGIBLE
                  else f"enough to steer the gradient; {rest}")
        return (f"- **GS-InfoNCE's Gaussian term**: its {negatives} negatives held {self.mean:.4%} of the InfoNCE "
                f"denominator on average over the {self.steps} training steps (at most {self.largest:.4%}; {self.source}), "
                f"the most of a step's gradient they steer: {effect}.")


# The seed papers by file (../shared/seeds/README.md): the claims are grouped by the paper they quote.
SEED_PAPERS = {"000": "TNCSE", "002": "TNCSE", "001": "JTCSE", "003": "SimCSE", "004": "GS-InfoNCE"}


def paper_of(result: Verdict) -> str:
    source = result.claim.source
    if result.claim.origin != "paper" or source is None:
        return "project"
    return SEED_PAPERS.get(source.file.split("/")[-1][:3], source.file)


def _by_paper(verdicts: list[Verdict]) -> dict[str, list[Verdict]]:
    groups: dict[str, list[Verdict]] = {}
    for result in verdicts:
        groups.setdefault(paper_of(result), []).append(result)
    return groups


def _fdr_text(result: Verdict) -> str:
    """A decided claim's Benjamini–Hochberg-adjusted p-value and whether it survives a 5 % false-discovery rate."""
    if result.p_adjusted is None or result.verdict not in DECIDED:
        return ""
    survives = "survives" if result.p_adjusted <= FDR else "does not survive"
    return f" (BH-adjusted p {result.p_adjusted:.2g}: {survives} a {FDR:.0%} false-discovery rate)"


def multiplicity_line(verdicts: list[Verdict]) -> str:
    """How many verdicts were judged, what chance alone would decide, and how many decided ones survive
    Benjamini–Hochberg over every claim judged with a p-value."""
    judged = [result for result in verdicts if result.verdict in (HOLDS, CONTRADICTED, INCONCLUSIVE, CONSISTENT, SMALLER)]
    tested = [result for result in verdicts if result.p_adjusted is not None]
    decided = [result for result in tested if result.verdict in DECIDED]
    surviving = sum(result.p_adjusted <= FDR for result in decided)
    return (f"Multiplicity: {len(judged)} verdicts were judged at 5% each; were no difference real, chance alone would "
            f"decide about {expected_by_chance(len(judged)):.1f} of them. Benjamini–Hochberg over the {len(tested)} judged "
            f"with a p-value: {surviving} of their {len(decided)} decided verdicts survive a {FDR:.0%} false-discovery rate "
            "(each decided line above says its adjusted p).")


def decided_lines(verdicts: list[Verdict], params: dict) -> list[str]:
    """The first screen's answer: every decided claim in one line (verdict, id, Δ and interval), then every
    claim whose interval excludes the paper's effect size, on which backbone, the papers' claims first."""
    decided = sorted((result for result in verdicts if result.verdict in (*DECIDED, *FINDINGS)),
                     key=lambda result: (result.verdict in FINDINGS, result.claim.origin != "paper"))
    if not decided:
        return ["**Decided here**: no claim.", ""]
    backbone = params["backbone"]
    on = backbone["source"] + ("" if params["scale"] == "paper" else f", standing in for {title(judged_backbone(params))}")
    lines = [f"**Decided here** (on {on}; the interval counts pair and seed noise, 95%):", ""]
    for result in decided:
        origin = "" if result.claim.origin == "paper" else " (the project's question)"
        edge = ", at the edge" if result.at_edge else ""
        lines.append(f"- **{result.verdict}**{edge}: `{result.claim.id}`{origin}: {result.claim.evidence_text(result)}{_fdr_text(result)}")
    return lines + [""]


def _counts_line(what: str, verdicts: list[Verdict]) -> str:
    counted = verdict_counts(verdicts)["verdicts"]
    shown = ", ".join(f"{count} {verdict}" for verdict in VERDICTS if (count := counted[verdict_key(verdict)]))
    return f"**{what}** ({len(verdicts)}): {shown or 'none'}."


def _scale_lines(params: dict, untrained_avg: float | None) -> list[str]:
    """What this scale can say, in three lines: the scale and backbone, the UC partner, the training steps."""
    scale, backbone = params["scale"], params["backbone"]
    before = f"; its 7-STS average before any training is {untrained_avg:.2f}" if untrained_avg is not None else ""
    if scale == "paper":
        first = f"- **Paper scale**: {backbone['source']}{before}; claims on the other backbone read its experiments."
    elif scale == "rehearsal":
        first = (f"- **REHEARSAL, NOT A RESULT**: the paper preset of {backbone['name']} offline (random weights, loopback "
                 "round trips, a few steps per stage); the verdicts only prove the path.")
    else:
        first = (f"- **{scale.upper()} SCALE, NOT A PAPER-SCALE RESULT**: the backbone is {backbone['source']} standing in for "
                 f"{title(judged_backbone(params))}{before} — at tiny scale a supervised sentence encoder already (all-MiniLM-L6-v2), "
                 "so the verdicts are about tuning a trained encoder; value claims are not compared, claims on another "
                 "backbone read \"other backbone\".")
    partner = backbone["uc_source"]
    second = f"- **UC partner**: {partner}" + (" — the backbone itself, not the papers' InfoCSE." if partner == backbone["source"] else ".")
    steps = {name: params[name].get("max_steps") for name in ("pretrain", "train")} | {
        f"distill {teacher}": settings.get("max_steps") for teacher, settings in params["distill"]["teachers"].items()} | {
        name: settings.get("max_steps") for name, settings in params.get("baselines", {}).items()}
    shown = ", ".join(f"{name} {count}" for name, count in steps.items() if count is not None)
    third = f"- **Training steps**: {shown} (a cap of optimiser steps per stage)." if shown else "- **Training steps**: the papers' full epochs."
    return [first, second, third]
