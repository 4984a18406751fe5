"""Evaluate a model on the 7 STS tasks (SentEval protocol): Spearman × 100 of cosine similarity.

`--model` twice evaluates a twin (the sum of the two towers' embeddings). Prints the table and
writes the scores as JSON: per task {"all", "mean", "subsets"} (STS12–16) or {"test"} (STS-B,
SICK-R), and "avg", the 7-task average."""

import json
from pathlib import Path

import typer

from pipeline.config import EvalSettings
from pipeline.data.sources import write_text_atomic
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder, resolve_model_source
from pipeline.evaluation.sts import evaluate_models, format_table, load_tasks
from pipeline.modeling.encoder import POOLERS, validate_pooler
from stages.common import stage, summary

NAME = "evaluate"
DEFAULTS = EvalSettings()


@stage
def command(
    model: list[str] = typer.Option(..., "--model", help="model folder or hub id; give two for a twin (sum of towers)"),
    output: Path = typer.Option(..., "--output", help="the scores as JSON"),
    pooler: str = typer.Option(DEFAULTS.pooler, "--pooler", help=", ".join(POOLERS)),
    tasks: list[str] = typer.Option(list(DEFAULTS.tasks), "--tasks", help="STS task, repeatable; default all seven"),
    max_pairs: int | None = typer.Option(None, "--max-pairs", min=1, help="first N pairs of each task; default all"),
    senteval: Path = typer.Option(Path("data/raw/senteval"), "--senteval", help="SentEval-layout data folder"),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size", min=1),
    max_length: int = typer.Option(DEFAULTS.max_length, "--max-length", min=4),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
) -> None:
    if len(model) > 2:
        raise PipelineError(f"--model given {len(model)} times; give one model or the two towers of a twin")
    validate_pooler(pooler, "--pooler")
    if not senteval.is_dir():
        raise PipelineError(f"SentEval data folder {senteval} does not exist; run `dvc repro download` or pass --senteval DIR")
    sts_tasks = load_tasks(senteval, tasks, max_pairs)
    sources = [resolve_model_source(name) for name in model]

    def make_embedder(source: str) -> HFEmbedder:
        return HFEmbedder(source, pooler, max_length, batch_size, device)

    results = evaluate_models({"model": [(source, 1.0) for source in sources]}, sts_tasks, make_embedder, batch_size)["model"]
    typer.echo(format_table(results))
    write_text_atomic(output, json.dumps(results, indent=2) + "\n")
    summary(NAME, f"{' + '.join(model)} ({pooler}): avg {results['avg']:.2f} over {len(sts_tasks)} tasks -> {output}")
