"""The report: write every filled table as .md, .csv and .tex, the training figures, the index
(with every figure drawn) and a summary line."""

from __future__ import annotations

from pathlib import Path

from pipeline.io import write_text_atomic
from pipeline.paths import FIGURES, TABLES, TRAINING_REPORTS
from pipeline.reporting.render import index, latex, markdown, numbers
from pipeline.reporting.tables import Table

TABLE_SUFFIXES = (".md", ".csv", ".tex")


def write_tables(tables: list[Table], folder: Path = TABLES) -> list[Path]:
    """Each table as .md, .csv and .tex plus README.md; files of tables no longer in the spec go."""
    written = []
    for table in tables:
        for suffix, text in (
            (".md", markdown(table)),
            (".csv", numbers(table).to_csv(index=False)),
            (".tex", latex(table)),
        ):
            path = folder / f"{table.id}{suffix}"
            write_text_atomic(path, text)
            written.append(path)
    from pipeline.reporting.figures import FIGURES as CAPTIONS

    figures = {
        Path("..", FIGURES.name, name).as_posix(): caption
        for name, caption in CAPTIONS.items()
        if (folder.parent / FIGURES.name / name).is_file()
    }
    readme = folder / "README.md"
    write_text_atomic(readme, index(tables, figures))
    written.append(readme)
    for stale in folder.iterdir():
        if stale.suffix in TABLE_SUFFIXES and stale not in written:
            stale.unlink()
    return written


def write_training_figures(training: Path = TRAINING_REPORTS, folder: Path = FIGURES) -> list[Path]:
    """The training loss and STS-B dev curves of every training stage (reports/training/*.csv) as PNG."""
    from pipeline.reporting.figures import training_figures, write_figures

    return write_figures(training_figures(training), folder)


def summary_line(tables: list[Table], folder: Path = TABLES) -> str:
    complete = sum(table.complete for table in tables)
    missing = sum(len(table.missing_rows) for table in tables)
    not_applicable = sum(bool(row.not_applicable) for table in tables for row in table.rows)
    return (
        f"{len(tables)} tables rendered at {tables[0].scale} scale: {complete} complete, "
        f"{len(tables) - complete} with missing rows or cells ({missing} rows missing, "
        f"{not_applicable} not applicable to this backbone) -> {folder}/"
    )
