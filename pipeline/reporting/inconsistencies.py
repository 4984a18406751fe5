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
    seed lines it rests on, verbatim up to layout (tests/test_inconsistencies.py finds each in `file`); where
    two papers disagree, `other_quotes` are the other paper's lines, found in `other_file`."""

    file: str
    where: str
    quotes: tuple[str, ...]
    row: str
    printed: str
    computed: str
    difference: str
    used: str
    other_file: str | None = None
    other_quotes: tuple[str, ...] = ()

    def inconsistency(self) -> Inconsistency:
        where = f"{self.file} {self.where}: {_quoted(self.quotes)}"
        if self.other_file:
            where += f"; {self.other_file}: {_quoted(self.other_quotes)}"
        return Inconsistency(where, self.row, self.printed, self.computed, self.difference, self.used)


def _quoted(quotes: tuple[str, ...]) -> str:
    return " / ".join(f"“{quote}”" for quote in quotes)


_JTCSE, _TNCSE_PDF, _TNCSE_HTML, _SIMCSE, _GS = (
    "seeds/001_09bc9e7e9169769b.txt", "seeds/000_7f5ce723e1f20bd6.txt", "seeds/002_a0b8e8b23bc25d76.txt",
    "seeds/003_1e8d65b821bc6ae1.txt", "seeds/004_8124b6b8fddf19af.txt")
# Not listed: RankCSE above TNCSE's and JTCSE's "SOTA" (both papers set RankCSE aside explicitly, comparing it through
# the UC ensembles), and JTCSE+UC D below TNCSE+UC D (JTCSE's "has improved" is said of the model JTCSE).
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
    SeedReading(
        _JTCSE, "footnote 7 against Table VIII and Table I (left)",
        ("when additional unsupervised SICKR datasets are added, the reproduced results are barely equal to the reported results",
         "+SICKR 75.9 76.7 78.0 77.4 77.5 79.6 79.7",
         "SimCSE [5]★ 68.40 82.41 74.38 80.91 78.56 76.85 72.23 76.25",
         "DiffCSE [10]⋆ 72.28 84.43 76.47 83.90 80.54 80.59 71.23 78.49",
         "ESimCSE [8]* 73.40 83.27 77.25 82.66 78.81 80.17 72.30 78.27",
         "InfoCSE [13]★ 70.53 84.59 76.40 85.10 81.95 82.00 71.37 78.85"),
        "SimCSE, ESimCSE, DiffCSE, InfoCSE-BERT reproduced with SICKR against their reported 7 STS Avg.",
        "barely equal (footnote 7)", "75.9 vs 76.25, 76.7 vs 78.27, 78.0 vs 78.49, 77.4 vs 78.85 (Table VIII +SICKR, Table I)",
        "-0.35, -1.57, -0.49, -1.45",
        "the reported numbers for the baselines (the project trains SimCSE alone, on Wiki1M: simcse-bert-avg); Table VIII's "
        "SimCSE rows as printed (sick-helps-simcse, simcse-reproduction-short-jtcse)"),
    SeedReading(
        _GS, "Main Results against Table 2",
        ("In general, the improvement brought by … to unsup-SimCSE is comprehensive",
         "SimCSE-BERTlarge♣ 70.88 84.16 76.43 84.50 79.76 79.26 73.88 78.41",
         "+ GS-InfoNCE 73.75 85.09 77.35 84.44 79.88 79.94 73.48 78.96",
         "SimCSE-RoBERTalarge♣ 72.86 83.99 75.62 84.77 81.80 81.98 71.26 78.90",
         "+ GS-InfoNCE 71.76 84.91 76.79 84.35 81.74 82.97 71.71 79.21"),
        "GS-InfoNCE − SimCSE per task, BERT-large and RoBERTa-large", "comprehensive (the text)",
        "five decreases (Table 2): BERT-large SICK15 -0.06, SICK-R -0.40; RoBERTa-large STS12 -1.10, SICK15 -0.42, STS16 -0.06",
        "5 of 28 cells",
        "the table; the large backbones are not run, and the per-task claims are BERT-base's, whose seven cells all rise "
        "(gs-infonce-beats-simcse-sts12 and the others)"),
    SeedReading(
        _GS, "Introduction, against SimCSE Appendix A",
        ("according to the original unsup-SimCSE paper (Gao et al., 2021), a larger batch size does not always lead to "
         "improvements. The performance even decreases when the batch size exceeds a threshold",),
        "unsupervised SimCSE, the effect of the batch size (64 to 512)", "decreases beyond a threshold (GS-InfoNCE, citing SimCSE)",
        "not sensitive, the learning rate tuned per batch size; its grid kept 512 for RoBERTa (SimCSE Appendix A, Table A.1)",
        "direction",
        "SimCSE's own statement (simcse-not-sensitive-to-batch, unmeasured; the project's simcse-batch-at-one-lr asks it at "
        "one learning rate); each model at its own paper's batch (conf/config.yaml baselines)",
        _SIMCSE, ("SimCSE is not sensitive to batch sizes as long as tuning the learning rates accordingly",)),
    SeedReading(
        _TNCSE_PDF, "Table 1 (RoBERTa-base), against JTCSE Table I (left)",
        ("DiffCSE(Chuang et al. 2022)⋆ 70.05 83.43 75.49 82.81 82.12 82.38 71.19 78.21",),
        "DiffCSE-RoBERTa-base, STS12 (both from DiffCSE's paper)", "70.05 (TNCSE Table 1)", "70.10 (JTCSE Table I)", "-0.05",
        "nothing (the project runs no DiffCSE); 70.05 is the cell the row's average agrees with (mean 78.21; with 70.10, 78.22)",
        _JTCSE, ("DiffCSE [10]* 70.10 83.43 75.49 82.81 82.12 82.38 71.19 78.21",)),
    SeedReading(
        _JTCSE, "Table X and §V.E, against TNCSE Table 4",
        ("$L_{NCE} + L_{ICTM}$ 79.10",
         "without the introduction of the cross-attention can not effectively alleviate the phenomenon of attention sinking"),
        "the twin trained with L_NCE + L_ICTM (TNCSE's L_ICTN), no cross-attention term, 7 STS Avg.", "79.10 (JTCSE Table X)",
        "79.53 (TNCSE Table 4)", "-0.43",
        "each paper's number for its own ablation (jtcse-nce-ictm-improves; tncse-norm-gains-with-nce): in the project's "
        "reading the normal streams never read a cross stream (docs/method.md, train.cross_mode), so the two runs share one "
        "objective",
        _TNCSE_PDF, ("LNCE + LICTN 79.53",)),
    SeedReading(
        _JTCSE, "Table IV caption against §IV.B",
        ("we randomly selected 45 text classification tasks, 45 text retrieval tasks, 15 bi-textmining tasks",
         "which are all the clustering tasks for the currently available dataset"),
        "MTEB, the 15 tasks of Table IV", "randomly selected bitext-mining tasks (§IV.B)",
        "all the clustering tasks available (Table IV's caption)", "task type and selection",
        "bitext mining, the tasks Table IV prints (conf/mteb/jtcse-bitext.yaml)"),
    SeedReading(
        _JTCSE, "§V.B against Table VII",
        ("we report the evaluation results of the different ensemble models on the seven STS test sets in Table VII, in "
         "addition, we report the evaluation results of JTCSE's direct ensemble learning of two subencoders before training",
         "STS Acc (7 Avg.) 77.97 78.51 77.89 77.05 78.22 79.04 79.58 79.70"),
        "the untrained twin (JTCSE's two sub-encoders before training), 7 STS Avg.", "reported with Table VII (the text)",
        "no column of Table VII; Table X's None (Twin Encoder Untrained) 78.27", "missing column",
        "Table X's 78.27 (jtcse-beats-untrained)"),
    SeedReading(
        _JTCSE, "Table X against Table VII",
        ("NONE DENOTES A DIRECT ENSEMBLE OF TWO SIMCSE-TRAINED ENCODERS", "None(Twin Encoder Untrained) 78.27",
         "STS Acc (7 Avg.) 77.97"),
        "two SimCSE-trained encoders on the RTT and SICK data, ensembled untrained, 7 STS Avg.", "78.27 (Table X, None)",
        "77.97 (Table VII, Sim~ ensemble)", "+0.30",
        "78.27 for the untrained twin (jtcse-beats-untrained); TNCSE's Table 3 caption puts the same gap down to its towers' "
        "tuned learning rate, which JTCSE does not say"),
    SeedReading(
        _JTCSE, "Conclusion against the abstract and §IV.B",
        ("outperforms other models on hundreds of zero-shot evaluation tasks for natural language processing",
         "which shows that JTCSE outperforms other baselines overall on more than 130 tasks"),
        "JTCSE's zero-shot evaluation, the number of tasks", "hundreds (the conclusion)",
        "more than 130 (the abstract): 45 + 45 + 15 + 14 + 18 = 137 (§IV.B, Tables II–VI)", "137, not 200 or more",
        "the suites as the tables print them (conf/mteb/jtcse-*.yaml)"),
)


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
