"""The report: write every filled table as .md, .csv and .tex, the training figures, the table
figures and the loss surface (all figures go to reports/figures/, beside the analyze stage's), the
claims' verdicts (REPRODUCTION.md, claims.json, the claims figure), the index last (every figure, from the
figure registries) and a summary line."""

from __future__ import annotations

from pathlib import Path

import hashlib

import numpy as np

from pipeline.io import atomic_path, write_json_atomic, write_text_atomic
from pipeline.paths import FIGURES, REPORTS, TABLES, TRAINING_REPORTS
from pipeline.writeup.decidability import forest_rows
from pipeline.reporting.figures import claims_forest_figure
from pipeline.reporting.experiments import EXPERIMENTS_FILE
from pipeline.reporting.inconsistencies import Inconsistency
from pipeline.reporting.inputs import read_training_curve
from pipeline.writeup.render import GaussianShare, index, latex, markdown, numbers, reproduction
from pipeline.reporting.spec import TablesFile
from pipeline.reporting.tables import Table
from pipeline.verdicts.claim import Verdict
from pipeline.verdicts.claims_file import ClaimsFile, verdict_counts
from pipeline.verdicts.verdict_names import CONSISTENT, CONTRADICTED, HIGHER, HOLDS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED

# what write_tables owns in the tables folder; a .png there is left from before figures moved to
# reports/figures/, and goes
TABLE_SUFFIXES = (".md", ".csv", ".tex", ".png")
INDEX_FILE = "README.md"  # the tables folder's index, `write_index`'s
REPRODUCTION_FILE = REPORTS / "REPRODUCTION.md"
CLAIMS_METRICS = REPORTS / "claims.json"  # every count and each claim's verdict: `dvc metrics show reports/claims.json`
# The headline (`dvc metrics show`): one column, so the table stays on one screen; its digest of every claim's
# verdict makes `dvc metrics diff` show a verdict that changed even where the counts stay equal.
VERDICTS_HEADLINE = REPORTS / "verdicts.json"
FOR, AGAINST, OPEN = (REPRODUCED, HIGHER, HOLDS), (NOT_REPRODUCED, CONTRADICTED), (INCONCLUSIVE, CONSISTENT)
SURFACE_FILE = "tensor_norm_surface.png"
SURFACE_CAPTION = "The tensor-norm loss l_TN over k = ‖h⁺‖/‖h‖ and t = cos γ (TNCSE Figure 2, JTCSE Fig. 3)"


def write_tables(tables: list[Table], folder: Path = TABLES, experiments: str | None = None) -> list[Path]:
    """Each table as .md, .csv and .tex; the table figures and the loss surface in the figures folder beside
    it (`write_figures`); `experiments` (the Markdown of `experiments.experiments_table`) as experiments.md;
    files of tables no longer in the spec go. The index (README.md) is `write_index`'s, once every figure is drawn."""
    written = []
    if experiments is not None:
        written.append(folder / EXPERIMENTS_FILE)
        write_text_atomic(written[-1], experiments)
    for table in tables:
        for suffix, text in (
            (".md", markdown(table)),
            (".csv", numbers(table).to_csv(index=False)),
            (".tex", latex(table)),
        ):
            path = folder / f"{table.id}{suffix}"
            write_text_atomic(path, text)
            written.append(path)
    written += write_figures(tables, folder.parent / FIGURES.name)
    for stale in folder.iterdir():
        if stale.suffix in TABLE_SUFFIXES and stale not in written and stale.name != INDEX_FILE:
            stale.unlink()
    return written


def figure_index(tables: list[Table]) -> dict[str, str]:
    """Every figure of reports/figures/, its link from the tables folder → its caption, from the registries (not
    from what the folder holds, so a report run twice writes one index): the report's and the analyze stage's
    (`figures.FIGURES`), then each table's and the loss surface (`write_figures`)."""
    from pipeline.reporting.figures import FIGURES as CAPTIONS

    drawn_here = {f"{table.id}.png": table_figure_caption(table) for table in tables if table.spec.figure is not None}
    captions = {**CAPTIONS, **drawn_here, SURFACE_FILE: SURFACE_CAPTION}
    return {Path("..", FIGURES.name, name).as_posix(): caption for name, caption in captions.items()}


def write_index(tables: list[Table], folder: Path = TABLES, with_experiments: bool = True) -> Path:
    """README.md of the tables folder: every table and every figure (`figure_index`), and the link to
    experiments.md where `write_tables` wrote it. The report writes it last, after every figure."""
    runs_line = (
        f"\nEvery run side by side (changed settings, each model's 7-STS average): [{EXPERIMENTS_FILE}]({EXPERIMENTS_FILE}).\n"
        if with_experiments else ""
    )
    write_text_atomic(folder / INDEX_FILE, index(tables, figure_index(tables)) + runs_line)
    return folder / INDEX_FILE


def write_training_figures(training: Path = TRAINING_REPORTS, folder: Path = FIGURES) -> list[Path]:
    """The training loss and STS-B dev curves of every training stage (reports/training/*.csv) as PNG."""
    from pipeline.reporting.figures import training_figures, write_figures

    return write_figures(training_figures(training), folder)


def gaussian_share(params: dict, training: Path = TRAINING_REPORTS) -> GaussianShare | None:
    """The Gaussian negatives' logged share of baseline@gs-infonce's denominator (None: no such run or column)."""
    history = training / "baseline-gs-infonce.csv"
    if not history.is_file():
        return None
    shares = read_training_curve(history).get("gaussian_share")  # checked on read, as the training figures read it
    if shares is None or shares.dropna().empty:
        return None
    baselines = params["baselines"]
    return GaussianShare(
        baselines["gs-infonce"]["gaussian"]["count"], float(shares.mean()), float(shares.max()), int(shares.count()),
        history.as_posix(), (baselines["gs-infonce"]["dropout"], baselines["simcse"]["dropout"]),
    )


def summary_line(tables: list[Table], folder: Path = TABLES) -> str:
    complete = sum(table.complete for table in tables)
    missing = sum(len(table.missing_rows) for table in tables)
    not_applicable = sum(bool(row.not_applicable) for table in tables for row in table.rows)
    return (
        f"{len(tables)} tables rendered at {tables[0].scale} scale: {complete} complete, "
        f"{len(tables) - complete} with missing rows or cells ({missing} rows missing, "
        f"{not_applicable} not applicable to this backbone) -> {folder}/"
    )


def figure_files(tables: TablesFile) -> list[str]:
    """The file names `write_figures` draws: `<id>.png` of each table with a figure, and the surface."""
    return [f"{table_id}.png" for table_id, spec in tables.tables.items() if spec.figure is not None] + [SURFACE_FILE]


def table_figure_caption(table: Table) -> str:
    return f"{table.spec.caption} Drawn from [{table.id}]({table.id}.md)."


def write_figures(tables: list[Table], folder: Path = FIGURES) -> list[Path]:
    """The figure of each table that has one (`<id>.png`) and the loss surface; the paths written."""
    from pipeline.reporting import figures, surface

    written = []
    for table in tables:
        spec = table.spec.figure
        if spec is None:
            continue
        ticks = spec.ticks or [row.label for row in table.rows]
        column = {header: [row.ours.get(header) for row in table.rows] for header in table.headers}
        image = figures.bar_line_figure(
            ticks, column[spec.bars], column[spec.errors] if spec.errors else None, column[spec.line],
            (spec.bars, spec.line), f"{table.id} ({table.scale} scale)",
        )
        written.append(_write_png(folder / f"{table.id}.png", image))
    ks = np.linspace(*surface.SURFACE_K, surface.SURFACE_POINTS)
    ts = np.linspace(*surface.SURFACE_T, surface.SURFACE_POINTS)
    image = surface.tensor_norm_surface_figure(ks, ts, surface.tensor_norm_surface(ks, ts))
    written.append(_write_png(folder / SURFACE_FILE, image))
    return written


def _write_png(path: Path, data: bytes) -> Path:
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)
    return path


def verdicts_headline(verdicts: list[Verdict]) -> dict[str, str]:
    """The claims in one headline cell: how many the runs support, contradict or leave open (the rest are
    not run, or at another scale or backbone), and a digest of every claim's verdict."""
    count = lambda kinds: sum(result.verdict in kinds for result in verdicts)  # noqa: E731
    listing = "\n".join(f"{result.claim.id}={result.verdict}" for result in verdicts)
    digest = hashlib.sha256(listing.encode("utf-8")).hexdigest()[:6]
    return {"verdicts": f"{count(FOR)} for, {count(AGAINST)} against, {count(OPEN)} open ({digest})"}


def write_reproduction(
    verdicts: list[Verdict], claims: ClaimsFile, params: dict, environments: dict[str, dict],
    page: Path = REPRODUCTION_FILE, counts: Path = CLAIMS_METRICS, inconsistencies: list[Inconsistency] | None = None,
    details: dict[str, dict] | None = None, untrained_avg: float | None = None, gaussian: GaussianShare | None = None,
) -> str:
    """REPRODUCTION.md, the counts and each claim's verdict (claims.json: `by_claim` id → verdict, and
    `details`, every number behind each verdict: `decidability.claim_details`) and beside it the
    headline (verdicts.json, `verdicts_headline`); returns the summary line's part."""
    write_text_atomic(page, reproduction(verdicts, params, environments, claims.default_epsilon, claims.default_epsilon_reason,
                                         inconsistencies, untrained_avg, gaussian))
    tally = verdict_counts(verdicts)
    write_json_atomic(counts, tally | {"by_claim": {result.claim.id: result.verdict for result in verdicts}}
                      | ({"details": details} if details is not None else {}))
    # the headline counts the papers' claims alone; the project's questions are in claims.json
    write_json_atomic(counts.with_name(VERDICTS_HEADLINE.name), verdicts_headline([r for r in verdicts if r.claim.origin == "paper"]))
    with atomic_path(page.parent / "figures" / "claims.png") as temporary:  # linked at the top of the page
        temporary.write_bytes(claims_forest_figure(forest_rows(verdicts)))
    shown = ", ".join(f"{count} {key.replace('_', ' ')}" for key, count in tally["verdicts"].items() if count)
    return f"{tally['claims']} claims ({shown}) -> {page}"
