"""The papers' own numbers that disagree with themselves, computed from the transcriptions: every row
(tables.yaml, its `paper_rows`, conf/checkpoints.yaml's paper and README numbers) whose printed
average is not the mean of its printed cells beyond rounding, every number the text states that
its table does not give (tables.yaml `stated_numbers`), and the inconsistencies no arithmetic over the
transcribed rows finds (READ_IN_THE_SEEDS: one table against another, a text against its table, the two
papers against each other), each with the seed sentence or cells it rests on. Each inconsistency is
listed once: a stated number that is a misprinted average's row against the mean of its cells is cited on
that row's line. REPRODUCTION.md lists them (docs/method.md, "Claims and verdicts")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.public_checkpoints import load_catalogue
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
    return list(_keyed_table_rows(tables).values())


def _keyed_table_rows(tables: TablesFile) -> dict[str, Inconsistency]:
    """Each inconsistent row by the reference a stated number names it with ('<table>: <label>' or
    'paper_rows: <label>')."""
    found, seen = {}, set()
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
                found[f"{table_id}: {row.label}"] = issue
    for row in tables.paper_rows:
        tasks = [header for header in row.paper if header not in ("Avg.",)]
        if "Avg." in row.paper and len(tasks) == len(SCORE_COLUMNS) - 1:
            issue = _row_inconsistency(f"tables.yaml paper_rows ({row.source})", row.label, row.paper, row.paper, tasks, "Avg.", "")
            if issue:
                found[f"paper_rows: {row.label}"] = issue
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


def _cells_mean(tables: TablesFile, reference: RowReference) -> float | None:
    """The mean of the task cells of the row a reference names, where its column is that row's average."""
    table, _, label = reference.row.partition(": ")
    if table == "paper_rows":
        row = next(row for row in tables.paper_rows if row.label == label)
        tasks = [header for header in row.paper if header != "Avg."]
        average, cells = "Avg.", row.paper
        if len(tasks) != len(SCORE_COLUMNS) - 1:
            return None
    else:
        spec = tables.tables[table]
        layout = _average_columns(spec.columns)
        if layout is None:
            return None
        tasks, average = layout
        row = next(row for row in spec.rows if row.label == label)
        cells = {**row.paper, **row.printed}
    if reference.column != average or any(task not in cells for task in tasks):
        return None
    return sum(cells[task] for task in tasks) / len(tasks)


def _agrees(stated: float, computed: float) -> bool:
    return abs(round(computed, 2) - stated) <= ROUNDING


def _stated_line(stated, computed: float) -> Inconsistency:
    return Inconsistency(
        f"{stated.source}: “{stated.quote}”",
        f"{_label(stated.better)} − {_label(stated.worse)}, {stated.better.column}",
        f"{stated.stated:.2f} (the text)", f"{computed:.2f} (the table)", f"{stated.stated - computed:+.2f}", stated.used,
    )


def _stated_on_rows(tables: TablesFile) -> tuple[list[Inconsistency], dict[str, list[tuple[bool, str]]]]:
    """The stated numbers that disagree with their table, and, per inconsistent row, the sentences
    that cite it: one that matches the printed average follows it, one that matches the mean of the
    row's cells (and not the printed average) follows the cells; neither is then a line of its own."""
    rows = _keyed_table_rows(tables)
    lines, cited = [], {}
    for stated in tables.stated_numbers:
        printed = _cell(tables, stated.better) - _cell(tables, stated.worse)
        side = next((reference for reference in (stated.better, stated.worse) if reference.row in rows), None)
        mean = _cells_mean(tables, side) if side is not None else None
        if side is not None and mean is not None:
            other = stated.worse if side is stated.better else stated.better
            from_mean = mean - _cell(tables, other) if side is stated.better else _cell(tables, other) - mean
            if _agrees(stated.stated, printed) or _agrees(stated.stated, from_mean):
                on_printed = _agrees(stated.stated, printed)
                average = _cell(tables, side) if on_printed else mean
                cited.setdefault(side.row, []).append((not on_printed,
                    f"{stated.source}'s {stated.stated:.2f} is {'the printed average' if on_printed else 'the mean of the cells'} "
                    f"{average:.2f} − {_label(other)}'s {_cell(tables, other):.2f}"))
                continue
        if not _agrees(stated.stated, printed):
            lines.append(_stated_line(stated, printed))
    return lines, cited


def stated_numbers(tables: TablesFile) -> list[Inconsistency]:
    return _stated_on_rows(tables)[0]


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
    """Every inconsistency once: a catalogue row that repeats a tables.yaml row's numbers is left out, and a
    stated number that follows one side of an inconsistent row is cited on that row's line."""
    keyed = _keyed_table_rows(tables)
    stated, cited = _stated_on_rows(tables)
    rows = []
    for reference, found in keyed.items():
        if reference in cited:
            on_cells = any(follows_cells for follows_cells, _ in cited[reference])
            used = (f"the mean of the cells {found.computed.split()[0]}: a sentence of the text is computed from it, so the "
                    "printed average (and any number the text derives from it) is the odd one") if on_cells else found.used
            found = replace(found, used=f"{used}; " + "; ".join(text for _, text in cited[reference]))
        rows.append(found)
    listed = {(found.row, found.printed, found.difference) for found in rows}
    others = [found for found in checkpoint_rows(catalogue) if (found.row, found.printed, found.difference) not in listed]
    return rows + others + stated + [entry.inconsistency() for entry in READ_IN_THE_SEEDS]


@dataclass(frozen=True)
class SeedReading:
    """An inconsistency read in the seeds that no arithmetic over tables.yaml's rows finds: `quotes` are the
    seed lines it rests on, verbatim up to layout (tests/test_inconsistencies.py finds each in `file`)."""

    file: str
    where: str
    quotes: tuple[str, ...]
    row: str
    printed: str
    computed: str
    difference: str
    used: str

    def inconsistency(self) -> Inconsistency:
        quoted = " / ".join(f"“{quote}”" for quote in self.quotes)
        return Inconsistency(f"{self.file} {self.where}: {quoted}", self.row, self.printed, self.computed, self.difference,
                             self.used)


_JTCSE, _TNCSE_PDF, _TNCSE_HTML, _GS = ("seeds/001_09bc9e7e9169769b.txt", "seeds/000_7f5ce723e1f20bd6.txt",
                                       "seeds/002_a0b8e8b23bc25d76.txt", "seeds/004_8124b6b8fddf19af.txt")
READ_IN_THE_SEEDS: tuple[SeedReading, ...] = (
    SeedReading(
        _JTCSE, "Table VII", ("Inference Complexity (GMAC) 10.90 10.90 10.90 10.90 10.90 32.70 10.90 10.90 5.40",),
        "GMAC: the twin 10.90, EDFSE's six towers 32.70, one tower 5.40", "5.40 (one tower)",
        "5.45 (10.90 / 2 = 32.70 / 6)", "-0.05",
        "one decimal (10.9 and 5.4): the cells read as one-decimal numbers padded with a zero "
        "(gmac-twin, gmac-one-tower, tncse-third-of-edfse)"),
    SeedReading(
        _JTCSE, "Table VII against Table I (left)",
        ("STS Acc (7 Avg.) 77.97 78.51 77.89 77.05 78.22 79.04 79.58 79.70 76.25 78.27 78.49 78.85 76.04",
         "RankCSE [19]♣ 74.61 85.70 78.09 84.64 81.36 81.82 74.51 80.10"),
        "RankCSE-BERT (one tower), 7 STS Avg.", "76.04 (Table VII)", "80.10 (Table I)", "-4.06",
        "Table VII's 76.04 where its η is read (jtcse-d-eta); with Table I's 80.10 RankCSE's η would be "
        "80.10 / 5.40 = 14.83, above JTCSE D's 14.79; the other single towers of Table VII equal their Table I rows"),
    SeedReading(
        _JTCSE, "Table I (right)", ("RankCSE [19]♣ 74.61 85.70 78.09 84.64 81.36 81.82 74.51 80.10 85.88 62.46 62.46 70.26",),
        "RankCSE-BERT, STSBM", "62.46 (STSBM)", "62.46 (its STS22 cell)", "same cell",
        "nothing (the project runs no RankCSE): the STSBM cell repeats STS22's, and the 3 Avg. 70.26 is the mean "
        "with the repeat, (85.88 + 62.46 + 62.46) / 3; the row's STSBM is likely a copied cell"),
    SeedReading(
        _JTCSE, "Table XI", ("Avg 76.2 77.3 76.5 78.5 76.5 68.9 76.9 66.3 70.3 71.6",
                             "Pooler 75.3 67.2 78.2 78.5 78.1 50.7 78.0 22.7 70.3 71.6"),
        "JTCSE and JTCSE D, Avg and Pooler pooling", "Pooler 70.3 and 71.6", "Avg 70.3 and 71.6", "same pair",
        "the printed numbers as they are (pooling-cls-best-jtcse, pooling-cls-best-jtcse-d): two poolings giving the "
        "same two scores on two models suggests one row copied into the other"),
    SeedReading(
        _GS, "Analysis, Table 3", ("As M becomes larger, the performance of GS-InfoNCE on the test set slowly improves",
                                   "BERTbase 76.25 76.96 76.90 77.11"),
        "GS-InfoNCE BERT-base, 7-STS average over M = 0 … 3 × batch", "slowly improves (the text)",
        "76.25, 76.96, 76.90, 77.11, 77.63 (Table 3): a fall from 0.5× to 1×, the largest step 2× → 3×", "-0.06, +0.52",
        "Table 3's numbers; the claim is only the best M (gs-infonce-m-best-at-3)"),
    SeedReading(
        _TNCSE_HTML, "Figure 5 caption against its discussion",
        ("the model’s performance on the STS-B validation set for different LayerNorm settings",
         "report the performance on the STS-B test set"),
        "TNCSE, STS-B split of Figure 5", "validation (the caption)", "test (the text)", "split",
        "the test split, as the text and every table of the paper (layernorm-tncse)"),
    SeedReading(
        _TNCSE_PDF, "Table 2, against JTCSE Table II",
        ("Classification(30 Acc) 58.15 58.26 57.44 58.15 58.05 58.15 58.38",),
        "TNCSE − SimCSE, MTEB classification", "+0.23 (TNCSE Table 2, 30 tasks: 58.38 − 58.15)",
        "-0.15 (JTCSE Table II, 45 tasks: 55.22 − 55.37)", "opposite signs",
        "each paper's own suite (tncse-mteb-classification states TNCSE's; the papers disagree in direction)"),
    SeedReading(
        _TNCSE_PDF, "Table 2, against JTCSE Table III",
        ("Reranking(9 Map) 36.78 38.12 37.13 38.36 31.95 37.11 38.15",),
        "TNCSE − SimCSE, MTEB reranking", "+1.37 (TNCSE Table 2, 9 tasks: 38.15 − 36.78)",
        "-1.61 (JTCSE Table III, 14 tasks: 35.46 − 37.07)", "opposite signs",
        "each paper's own suite (tncse-mteb-reranking states TNCSE's; the papers disagree in direction)"),
    SeedReading(
        _TNCSE_PDF, "Table 1 against the contributions",
        ("RankCSE(Liu et al. 2023)♣ 74.61 85.70 78.09 84.64 81.36 81.82 74.51 80.10",
         "the results show that TNCSE has become a new SOTA method for STS tasks"),
        "RankCSE-BERT against TNCSE-BERT and TNCSE D, 7 STS Avg.", "new SOTA (the text)",
        "RankCSE 80.10 above TNCSE 79.58 and TNCSE D 79.77 (Table 1)", "-0.52, -0.33",
        "the table: the SOTA claims are judged against the baselines the project trains (tncse-beats-simcse-bert) "
        "and against RankCSE only through the UC ensembles, as the paper argues it (tncse-uc-beats-rankcse-uc-bert)"),
    SeedReading(
        _JTCSE, "Table I against the abstract",
        ("RankCSE [19]♣ 74.61 85.70 78.09 84.64 81.36 81.82 74.51 80.10", "reaching new SOTA results"),
        "RankCSE-BERT against JTCSE-BERT and JTCSE D, 7 STS Avg.", "new SOTA (the abstract)",
        "RankCSE 80.10 above JTCSE 79.70 and JTCSE D 79.89 (Table I)", "-0.40, -0.21",
        "the table, as for TNCSE (jtcse-beats-simcse-bert; jtcse-uc-beats-rankcse-uc-bert)"),
    SeedReading(
        _JTCSE, "Table I against the main updates over TNCSE",
        ("JTCSE+UC D 75.22 85.46 78.50 85.50 81.55 83.02 74.24 80.50", "TNCSE+UC D 75.95 85.31 78.50 85.69 81.86 83.03 73.89 80.60",
         "the model JTCSE retrained in this work has improved its performance on 7 STS tasks"),
        "JTCSE+UC D against TNCSE+UC D, BERT-base, 7 STS Avg.", "improved (the text)", "80.50 below 80.60 (Table I)", "-0.10",
        "the table (jtcse-uc-d-beats-tncse-uc-d-bert, a project question, reads cannot hold: its paper gap is -0.10)"),
    SeedReading(
        _JTCSE, "footnote 9 against Table V",
        ("STS22.v2 contains 19 subtasks",
         "STS22.V2, WHICH CONTAINS 18 SUB-TEST SETS"),
        "STS22.v2, its subtasks", "19 (footnote 9)", "18 (Table V's caption and columns)", "one subtask",
        "Table V's 18, the columns it prints (conf/mteb/jtcse-sts22.yaml)"),
    SeedReading(
        _GS, "§4 Experiments, settings, against its released run.sh",
        ("we empirically use the standard normal distribution, with µ = 0, σ2 = 1",),
        "GS-InfoNCE's Gaussian negatives, σ", "σ² = 1 (the text)", "random_std 0.5 (gsInfoNCE/run.sh, BERT-base)", "σ 1 vs 0.5",
        "the script's 0.5, as the project's rule sets the released scripts as the default (conf/config.yaml "
        "baselines.gs-infonce.gaussian.std; docs/method.md)"),
)


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
