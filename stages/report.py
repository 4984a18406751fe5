"""Render every table of tables.yaml, ours beside the paper's: each cell is ours | paper | Δ.

Reads tables.yaml, params.yaml (the scale), reports/metrics/*.json and details/*.json,
reports/analysis/*.json and, for rows that are DVC experiments, `dvc exp show --json` (their details
and analysis files from git); writes reports/tables/<id>.md, .csv, .tex, README.md and
experiments.md (every run: its changed settings and each model's 7-STS average), the table figures
and the loss surface (reports/figures/<id>.png, tensor_norm_surface.png) and the training curves
reports/figures/training_loss.png and training_dev.png (from reports/training/*.csv).
Checks the papers' claims of claims.yaml against the same runs, and the papers' own numbers against
themselves (tables.yaml, conf/checkpoints.yaml): reports/REPRODUCTION.md and the verdict counts
reports/claims.json. `--queue <table>` prints the `dvc exp run --queue` commands of that table's
missing experiments (`--run` queues them), after naming the queue's failed experiments — those DVC's
queue lost without a log (a race of `dvc queue start -j N`) with the command that removes them."""

from pathlib import Path

import typer

from pipeline.params_file import load_params, read_yaml_file
from stages.common import ParamsOption, stage, summary

NAME = "report"


@stage
def command(
    params: Path = ParamsOption,
    tables_file: Path = typer.Option(Path("tables.yaml"), "--tables", help="the table specs"),
    claims_file: Path = typer.Option(Path("claims.yaml"), "--claims", help="the papers' claims"),
    queue: str | None = typer.Option(None, "--queue", help="print the commands queueing this table's experiments"),
    run: bool = typer.Option(False, "--run", help="with --queue: queue them now"),
) -> None:
    from pipeline.errors import PipelineError
    from pipeline.reporting.inconsistencies import check_references
    from pipeline.reporting.queue import failed_experiments
    from pipeline.reporting.runs import run_queue_command, search_experiments, workspace_run
    from pipeline.reporting.spec import load_tables
    from pipeline.reporting.tables import RunSource, build_table, check_override_keys

    if run and queue is None:
        raise PipelineError("--run queues a table's experiments; give the table with --queue <table id>")
    workspace_params = load_params(params).model_dump()
    tables = load_tables(tables_file)
    check_override_keys(tables, workspace_params)
    problem = check_references(tables)
    if problem:
        raise PipelineError(f"invalid {tables_file}: {problem}")
    source = RunSource(workspace_run(workspace_params), lambda: search_experiments(tables.experiment_commits))
    if queue is None:
        _render_everything(params, claims_file, workspace_params, tables, source)
        return

    if queue not in tables.tables:
        raise PipelineError(f"--queue {queue}: no such table in {tables_file}; tables: {', '.join(tables.tables)}")
    table = build_table(tables, queue, source)
    for failed in failed_experiments():
        typer.echo(failed.line())
    for row in table.missing_rows:
        if not row.queued:
            typer.echo(f"# {row.label} is not an experiment; produce it with: {row.command}")
    for queue_command in table.queue_commands:
        typer.echo(queue_command)
        if run:
            run_queue_command(queue_command)
    done = "queued" if run else "to queue"
    summary(NAME, f"{queue}: {len(table.queue_commands)} experiments {done}; then `dvc queue start`, and once "
                  "they finish `dvc repro report` renders them")


def _render_everything(params: Path, claims_file: Path, workspace_params: dict, tables, source) -> None:
    """The tables, the figures, the claims' verdicts (REPRODUCTION.md, claims.json) and the summary line."""
    from pipeline import paths
    from pipeline.verdicts.claims_file import evaluate_claims, load_claims
    from pipeline.writeup.decidability import annotate, claim_details, gpu_hours_per_seed, settled_records
    from pipeline.reporting.experiments import experiments_table
    from pipeline.reporting.inconsistencies import inconsistencies
    from pipeline.writeup.report import (
        TABLES, gaussian_share, summary_line, write_index, write_reproduction, write_tables, write_training_figures,
    )
    from pipeline.reporting.runs import recorded_environments
    from pipeline.reporting.seed_record import load_record
    from pipeline.reporting.tables import build_tables

    claims = load_claims(tables, workspace_params, claims_file)
    built = build_tables(tables, source)
    verdicts = evaluate_claims(claims, tables, source, load_record())  # arms from the committed seed record
    annotate(verdicts, tables, gpu_hours_per_seed(paths.BENCH.with_name("bench-gpu.json")), settled_records())
    environments = recorded_environments()  # every input read (and checked) before the first write
    write_training_figures()
    found = source.experiments
    baseline = read_yaml_file(params, "run from the project root")  # as written, like each experiment's
    write_tables(built, TABLES, experiments_table(source.workspace, baseline, found.runs, found.problem))
    own_numbers = inconsistencies(tables, Path(workspace_params["checkpoints"]["catalogue"]))
    claims_line = write_reproduction(verdicts, claims, workspace_params, environments, inconsistencies=own_numbers,
                                     details=claim_details(verdicts, tables, workspace_params["scale"]),
                                     untrained_avg=source.workspace.value("backbone", "avg"),
                                     gaussian=gaussian_share(workspace_params))
    write_index(built, TABLES)  # last: it lists every figure, the claims' included
    summary(NAME, f"{summary_line(built, TABLES)}; {claims_line}")
