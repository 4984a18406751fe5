"""Evaluate a model as the `evaluate` stage does: one of the pipeline's models, or any folders.

Pipeline mode (`evaluate@<model>`): a model of the registry (`pipeline.evaluated_models`) with the eval
settings of params.yaml: the 7 STS tasks under the SentEval protocol with their bootstrap intervals
(`eval.bootstrap` resamples drawn with `seed`: pipeline.evaluation.bootstrap) and, when `eval.mteb.enabled`,
the MTEB suites of `eval.mteb.suite` (conf/mteb/: the papers' task lists on the hub, or the local
stand-ins built from the mirror; pipeline.evaluation.mteb_suites). Tower embeddings are cached
under data/cache/embeddings/, so an ensemble reuses its towers' work; MTEB results under
data/cache/mteb/.

Standalone mode: one model folder or hub id, or the two towers of a twin, on a SentEval folder.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from pipeline import paths
from pipeline.config import EvalSettings, MtebSettings, Params
from pipeline.errors import PipelineError
from pipeline.evaluation.bootstrap import draw_resamples, no_bootstrap_record, scores_with_intervals
from pipeline.evaluation.store import EmbeddingStore, embedder_settings, model_tables
from pipeline.evaluation.sts import load_tasks
from pipeline.evaluated_models import WeightedTowers, missing_towers, pipeline_models
from pipeline.execution.runtime import resolve_device

log = logging.getLogger(__name__)


def mteb_suites(settings: MtebSettings) -> list:
    """The selected suites of conf/mteb/, checked (unknown suite or task: one line) before any embedding work."""
    from pipeline.evaluation.mteb_suites import load_suites

    return load_suites(settings.suite)


def mteb_results(settings: EvalSettings, suites: list, towers: WeightedTowers, store: EmbeddingStore) -> dict:
    """The suites' scores for one model (reports/mteb/<model>.json), cached per task under data/cache/mteb/;
    each task's sentences are the towers' rows from `store`, summed (`EmbeddingStore.model_rows`)."""
    from pipeline.evaluation.mteb_suites import CACHE_DIR, evaluate_suites, model_key

    items = settings.mteb.local_items
    cache = CACHE_DIR / model_key(towers, store.settings, items)

    def runner(task):
        from pipeline.evaluation.mteb_tasks import task_runner  # mteb: only when a task is not in the result cache

        return task_runner(lambda sentences: store.model_rows(towers, sentences), settings.batch_size)(task)

    raw_stsb = paths.ORIGINAL_BENCHMARKS / "STSBenchmark"
    return evaluate_suites(suites, runner, raw_stsb, items, cache)


def pipeline_model(name: str, params: Params) -> WeightedTowers:
    """The towers of a model of params.yaml's `models`, all saved; else a one-line error."""
    models = pipeline_models(params)
    if name not in models:
        raise PipelineError(f"--name {name} is not a model of the pipeline; models: {', '.join(models)}")
    missing = missing_towers(models[name])
    if missing:
        raise PipelineError(f"model '{name}' needs {', '.join(map(str, missing))}, which does not exist yet; run `dvc repro`")
    return models[name]


def evaluate_pipeline_model(name: str, params: Params) -> tuple[dict, dict, dict]:
    """The details metrics (reports/metrics/details/<model>.json, the headline's source), the MTEB results
    (reports/mteb/<model>.json) and the per-resample bootstrap scores (reports/metrics/bootstrap/<model>.json)
    of one model."""
    resolve_device(params.device)  # before any work: cached embeddings would skip the embedder's own check
    towers = pipeline_model(name, params)
    settings = params.eval

    from pipeline.evaluation.store import pipeline_store

    store = pipeline_store(params)
    tasks = load_tasks(paths.SENTEVAL, settings.tasks, settings.max_pairs, seed=settings.seed)
    suites = mteb_suites(settings.mteb) if settings.mteb.enabled else []  # before any embedding work
    table = model_tables({name: towers}, tasks, store)[name]
    resamples = draw_resamples(tasks, settings.bootstrap, settings.seed) if settings.bootstrap else None
    results, scores = scores_with_intervals(table, tasks, resamples)
    bootstrap = scores.record() if scores is not None else no_bootstrap_record(settings.seed)
    about = {"model": name, "scale": params.scale, "backbone": params.backbone.name, "pooler": settings.pooler}
    mteb = {**about, "enabled": settings.mteb.enabled, "local_items": settings.mteb.local_items, "suites": {}}
    if suites:
        mteb["suites"] = mteb_results(settings, suites, towers, store)
    log.info("evaluate %s: %s", name, store.counts.line())
    return {**results, **about, "max_pairs": settings.max_pairs}, mteb, bootstrap


@dataclass(frozen=True)
class PipelineEvaluation:
    """What `evaluate@<model>` wrote: the details scores, the MTEB results, and the files."""

    results: dict
    mteb: dict
    headline: Path
    mteb_file: Path


def run_pipeline_evaluation(name: str, params: Params) -> PipelineEvaluation:
    """Evaluate a model of the pipeline (`evaluate_pipeline_model`) and write its files: the details
    (with the environment), the bootstrap scores, the provenance, the headline metrics, the MTEB results,
    as one set: all of them or none (`write_json_files_atomic`)."""
    from pipeline.execution.environment import evaluation_environment, provenance_file, provenance_record
    from pipeline.evaluation.sts import headline_scores
    from pipeline.io import write_json_files_atomic

    results, mteb, bootstrap = evaluate_pipeline_model(name, params)
    headline = paths.metrics_file(name)
    write_json_files_atomic({
        paths.METRICS_DETAILS / f"{name}.json": {**results, "environment": evaluation_environment(params)},
        paths.METRICS_BOOTSTRAP / f"{name}.json": bootstrap,
        provenance_file(f"evaluate-{name}"): provenance_record(f"evaluate-{name}"),
        headline: headline_scores(results),
        paths.MTEB / f"{name}.json": mteb,
    })
    return PipelineEvaluation(results, mteb, headline, paths.MTEB / f"{name}.json")


def evaluate_standalone(models: list[str], pooler: str, tasks: list[str], max_pairs: int | None, senteval: Path,
                        batch_size: int, max_length: int, device: str, token_budget: int | str = "auto",
                        seed: int = EvalSettings.model_fields["seed"].default, bootstrap: int = 0) -> dict:
    """Scores of one model folder or hub id, or of the twin of two (the sum of their embeddings); `seed`
    draws the `max_pairs` sample and the `bootstrap` resamples (0: no intervals). Settings are named
    by the evaluate command's options in errors."""
    from pipeline.config import EvalSettings
    from pipeline.params_file import describe_validation_error
    from pipeline.evaluation.embedder import HFEmbedder, resolve_model_source
    from pipeline.modeling.encoder import validate_pooler
    from pipeline.settings_rules import validate_token_budget

    token_budget = validate_token_budget(token_budget, max_length, "--token-budget", "--max-length")
    try:
        EvalSettings(bootstrap=bootstrap)
    except ValidationError as error:
        raise PipelineError(describe_validation_error(error, "--bootstrap").replace("bootstrap=", "--bootstrap ", 1)) from None
    resolve_device(device)
    if len(models) > 2:
        raise PipelineError(f"--model given {len(models)} times; give one model or the two towers of a twin")
    validate_pooler(pooler, "--pooler")
    if not senteval.is_dir():
        raise PipelineError(f"SentEval data folder {senteval} does not exist; run `dvc repro download` or pass --senteval DIR")
    sts_tasks = load_tasks(senteval, tasks, max_pairs, seed=seed)
    towers = WeightedTowers.of((resolve_model_source(name), 1.0) for name in models)

    def make_embedder(source: str) -> HFEmbedder:
        return HFEmbedder(source, pooler, max_length, batch_size, device, token_budget=token_budget)

    store = EmbeddingStore(None, embedder_settings(pooler, max_length), make_embedder, batch_size)
    table = model_tables({"model": towers}, sts_tasks, store)["model"]
    return scores_with_intervals(table, sts_tasks, draw_resamples(sts_tasks, bootstrap, seed) if bootstrap else None)[0]
