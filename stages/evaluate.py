"""Evaluate a model on the 7 STS tasks (SentEval protocol): Spearman × 100 of cosine similarity.

Pipeline mode (the `evaluate@<model>` DVC stages): `--name <model>` evaluates one of the
pipeline's models (`models` of params.yaml, from the registry in pipeline/evaluated_models.py) with the
eval settings of params.yaml and writes
reports/metrics/details/<model>.json (every score: subsets, "mean", the bootstrap "intervals", the
settings, the environment of `pipeline.execution.environment`), reports/provenance/evaluate-<model>.json (git
commit, host, time), the headline reports/metrics/<model>.json (the seven reported scores and avg:
`dvc metrics show`), reports/metrics/bootstrap/<model>.json (each bootstrap resample's scores,
`eval.bootstrap` resamples drawn with `eval.seed`; pipeline.evaluation.bootstrap) and
reports/mteb/<model>.json: the MTEB suites of eval.mteb.suite (conf/mteb/) when eval.mteb.enabled.
Tower embeddings come from the embedding store (data/cache/embeddings/, pipeline.evaluation.store).

Standalone: `--model` (a folder or hub id; twice for a twin, the sum of the two towers) with
`--output`. Prints the table and writes the scores as JSON: per task {"all", "mean", "subsets"}
(STS12–16) or {"test"} (STS-B, SICK-R), and "avg", the 7-task average; with --bootstrap N, "intervals"
(each score's 95 % interval and standard error) and "bootstrap"."""

from pathlib import Path

import typer

from pipeline import paths
from pipeline.config import MIN_EVAL_PAIRS, EvalSettings
from pipeline.errors import PipelineError
from stages.common import ParamsOption, stage, stage_params, summary

NAME = "evaluate"
DEFAULTS = EvalSettings()
DEFAULT_SEED = DEFAULTS.seed  # eval.seed: the sample and the resamples, not the training seed


@stage
def command(
    name: str | None = typer.Option(None, "--name", help="pipeline mode: a model of the pipeline, settings from params.yaml"),
    model: list[str] | None = typer.Option(None, "--model", help="model folder or hub id; give two for a twin (sum of towers)"),
    output: Path | None = typer.Option(None, "--output", help="the scores as JSON (standalone mode)"),
    pooler: str = typer.Option(DEFAULTS.pooler, "--pooler", help="cls, cls_before_pooler, avg, avg_first_last, avg_top2"),
    tasks: list[str] = typer.Option(list(DEFAULTS.tasks), "--tasks", help="STS task, repeatable; default all seven"),
    max_pairs: int | None = typer.Option(None, "--max-pairs", min=MIN_EVAL_PAIRS,
                                         help="a sample of N pairs of each task (drawn with --seed); default all"),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", min=0, help="seed of the --max-pairs sample and the bootstrap"),
    bootstrap: int = typer.Option(0, "--bootstrap", help="bootstrap resamples for 95 % intervals; 0 = none"),
    senteval: Path = typer.Option(paths.SENTEVAL, "--senteval", help="SentEval-layout data folder"),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size", min=1),
    max_length: int = typer.Option(DEFAULTS.max_length, "--max-length", min=4),
    token_budget: str = typer.Option(DEFAULTS.token_budget, "--token-budget",
                                     help="padded tokens per batch (sentences sorted by length), at least --max-length; "
                                     "auto: by device"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
    params: Path = ParamsOption,
) -> None:
    if name is not None:
        if model or output:
            raise PipelineError("--name (pipeline mode) takes its models and output from the pipeline; drop --model/--output")
        pipeline_mode(name, params)
    else:
        if not model or output is None:
            raise PipelineError("give --name <pipeline model>, or --model <folder or hub id> with --output <file.json>")
        standalone_mode(model, output, pooler, tasks, max_pairs, senteval, batch_size, max_length, device, token_budget,
                        seed, bootstrap)


def pipeline_mode(name: str, params: Path) -> None:
    """`evaluate@<name>`: one library call evaluates and writes; the stage prints."""
    settings = stage_params(params)  # a bad params file fails before the evaluator's imports (seconds)
    from pipeline.evaluation.mteb_suites import suite_lines
    from pipeline.evaluation.pipeline_eval import run_pipeline_evaluation

    evaluation = run_pipeline_evaluation(name, settings)
    _print_scores(evaluation.results)
    for line in suite_lines(evaluation.mteb["suites"]):
        typer.echo(line)
    _summary(name, evaluation.results, settings.eval.pooler, f"{evaluation.headline}, {evaluation.mteb_file}")


def standalone_mode(model: list[str], output: Path, pooler: str, tasks: list[str], max_pairs: int | None, senteval: Path,
                    batch_size: int, max_length: int, device: str, token_budget: str, seed: int, bootstrap: int) -> None:
    """`--model ... --output FILE`: one library call scores; the stage prints and writes the JSON."""
    from pipeline.evaluation.pipeline_eval import evaluate_standalone
    from pipeline.io import write_json_atomic

    results = evaluate_standalone(model, pooler, tasks, max_pairs, senteval, batch_size, max_length, device, token_budget,
                                  seed, bootstrap)
    _print_scores(results)
    write_json_atomic(output, results)
    _summary(" + ".join(model), results, pooler, str(output))


def _print_scores(results: dict) -> None:
    from pipeline.evaluation.sts import format_table

    typer.echo(format_table({key: value for key, value in results.items() if key in DEFAULTS.tasks or key == "avg"}))


def _summary(label: str, results: dict, pooler: str, written: str) -> None:
    interval = results.get("intervals", {}).get("avg")
    shown = f" [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else ""
    summary(NAME, f"{label} ({results.get('pooler', pooler)}): 7-task avg {results['avg']:.2f}{shown} -> {written}")
