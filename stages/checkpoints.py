"""Score the public checkpoints of the papers' systems (conf/checkpoints.yaml) with the project's
STS evaluator, the 7 tasks with the eval settings of params.yaml.

`checkpoints.source: hub` downloads every scoreable row through huggingface_hub (data.hub_endpoint
or HF_ENDPOINT for a mirror; config, tokenizer and model.safetensors only, never a pickle) and
writes reports/checkpoints.json: per row `scored` (scores and the commit each revision resolved
to), `not_reached` (what the hub answered) or `not_scoreable` (why the row has no checkpoint we can
score). A hub that cannot be reached at all stops with exit code 2. `checkpoints.source: standin`
(the tiny and small presets) scores only the catalogue's stand-in rows, served offline by a
loopback hub. Results are cached in data/cache/checkpoints/, so a rerun scores only what changed.

`--table` renders reports/checkpoints.md (and .csv): each row ours | paper | Δ, and
the authors' README numbers for their released models."""

from pathlib import Path

import typer

from stages.common import ParamsOption, stage, stage_params, summary

NAME = "checkpoints"
RESULTS = Path("reports/checkpoints.json")
TABLE = Path("reports/checkpoints.md")


@stage
def command(
    params: Path = ParamsOption,
    table: bool = typer.Option(False, "--table", help="render the table from the results instead of scoring"),
    results: Path = typer.Option(RESULTS, "--results", help="the results (a DVC metrics file)"),
    output: Path = typer.Option(TABLE, "--output", help="with --table: the table (Markdown; a .csv beside it)"),
) -> None:
    from pipeline.public_checkpoints import load_catalogue

    settings = stage_params(params)
    catalogue = load_catalogue(settings.checkpoints.catalogue)
    if table:
        from pipeline.writeup.checkpoints_table import read_results, write_table

        written = write_table(catalogue, read_results(results), output)
        summary(NAME, f"table: {written.scored} of {written.rows} rows scored -> {output}, {output.with_suffix('.csv')}")
        return
    from pipeline.public_checkpoints import score_catalogue
    from pipeline.io import write_json_atomic

    scored = score_catalogue(settings, catalogue)
    write_json_atomic(results, scored)
    counts: dict[str, int] = {}
    for entry in scored["rows"].values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    done = ", ".join(f"{count} {status}" for status, count in counts.items())
    summary(NAME, f"source {settings.checkpoints.source}: {done} -> {results}")
