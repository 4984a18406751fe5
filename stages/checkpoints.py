"""Score the public checkpoints of the papers' systems (conf/checkpoints.yaml) with the project's
STS evaluator, the 7 tasks with the eval settings of params.yaml.

`checkpoints.source: hub` downloads every scoreable row through huggingface_hub (data.hub_endpoint
or HF_ENDPOINT for a mirror; config, tokenizer and model.safetensors only, never a pickle) and
writes reports/checkpoints.json: per row `scored` (scores and the commit each revision resolved
to), `not_reached` (what the hub answered) or `not_scoreable` (why the row has no checkpoint we can
score). A hub that cannot be reached at all stops with exit code 2. `checkpoints.source: standin`
(the tiny and small presets) scores only the catalogue's stand-in rows, served offline by a
loopback hub. Results are cached in data/cache/checkpoints/, so a rerun scores only what changed.

`checkpoints-table` renders reports/checkpoints.md (and .csv): each row ours | paper | Δ, and
the authors' README numbers for their released models."""

from pathlib import Path

import typer

from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary

NAME = "checkpoints"
TABLE_NAME = "checkpoints-table"
RESULTS = Path("reports/checkpoints.json")


@stage
def command(
    params: Path = ParamsOption,
    output: Path = typer.Option(RESULTS, "--output", help="the results (a DVC metrics file)"),
) -> None:
    from pipeline.checkpoints import load_catalogue, score_catalogue
    from pipeline.data.sources import write_json_atomic

    settings = load_params(params)
    results = score_catalogue(settings, load_catalogue(settings.checkpoints.catalogue))
    write_json_atomic(output, results)
    counts = {}
    for entry in results["rows"].values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    done = ", ".join(f"{count} {status}" for status, count in counts.items())
    summary(NAME, f"source {settings.checkpoints.source}: {done} -> {output}")


@stage
def table_command(
    params: Path = ParamsOption,
    results: Path = typer.Option(RESULTS, "--results", help="the checkpoints stage's results"),
    output: Path = typer.Option(Path("reports/checkpoints.md"), "--output", help="the table (Markdown; a .csv beside it)"),
) -> None:
    from pipeline.checkpoints import load_catalogue
    from pipeline.reporting.checkpoints_table import read_results, write_table

    settings = load_params(params)
    table = write_table(load_catalogue(settings.checkpoints.catalogue), read_results(results), output)
    summary(TABLE_NAME, f"{table.scored} of {table.rows} rows scored -> {output}, {output.with_suffix('.csv')}")
