"""Evaluate one of the pipeline's models (DESIGN.md §2) as its `evaluate@<model>` stage does.

The 7 STS tasks under the SentEval protocol and, when `eval.mteb.enabled`, the MTEB suites of
`eval.mteb.suite` (conf/mteb/: the papers' task lists on the hub, or the local stand-ins built from
the mirror; pipeline.evaluation.mteb_suites). Tower embeddings are cached under
data/cache/embeddings/, so an ensemble reuses its towers' work; MTEB results under data/cache/mteb/.
"""

from __future__ import annotations

from pipeline import paths
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.models import missing_towers, pipeline_models
from pipeline.evaluation.sts import Embedder, WeightedTowers, evaluate_models, load_tasks
from pipeline.runtime import resolve_device

EMBEDDING_CACHE = paths.DATA / "cache" / "embeddings"


def ensemble_embedder(towers: WeightedTowers, make_embedder) -> Embedder:
    """Σ_i w_i · tower_i(sentences): an ensemble as one Embedder (for MTEB)."""
    members = [(make_embedder(tower), weight) for tower, weight in towers]

    def embed(sentences: list[str]):
        return sum(weight * embedder(sentences) for embedder, weight in members)

    return embed


def mteb_suites(params: Params) -> list:
    """The selected suites of conf/mteb/, checked (unknown suite or task: one line) before any embedding work."""
    from pipeline.evaluation.mteb_suites import load_suites

    return load_suites(params.eval.mteb.suite)


def mteb_results(params: Params, suites: list, towers: WeightedTowers, make_embedder) -> dict:
    """The suites' scores for one model (reports/mteb/<model>.json), cached per task under data/cache/mteb/."""
    from pipeline.evaluation.mteb_suites import CACHE_DIR, evaluate_suites, model_key
    from pipeline.evaluation.mteb_tasks import task_runner

    settings = params.eval
    items = settings.mteb.local_items
    cache = CACHE_DIR / model_key(towers, f"{settings.pooler}|{settings.max_length}", items)
    runner = task_runner(ensemble_embedder(towers, make_embedder), settings.batch_size)
    raw_stsb = paths.ORIGINAL_BENCHMARKS / "STSBenchmark"
    return evaluate_suites(suites, runner, raw_stsb, items, cache)


def evaluate_pipeline_model(name: str, params: Params) -> tuple[dict, dict]:
    """The metrics (reports/metrics/<model>.json) and the MTEB results (reports/mteb/<model>.json) of one model."""
    resolve_device(params.device)  # before any work: cached embeddings would skip the embedder's own check
    models = pipeline_models(params)
    if name not in models:
        raise PipelineError(f"--name {name} is not a model of the pipeline; models: {', '.join(models)}")
    towers = models[name]
    missing = missing_towers(towers)
    if missing:
        raise PipelineError(f"model '{name}' needs {', '.join(map(str, missing))}, which does not exist yet; run `dvc repro`")
    settings = params.eval

    def make_embedder(tower: str) -> HFEmbedder:
        return HFEmbedder(tower, settings.pooler, settings.max_length, settings.batch_size, params.device)

    tasks = load_tasks(paths.SENTEVAL, settings.tasks, settings.max_pairs)
    suites = mteb_suites(params) if settings.mteb.enabled else []  # before any embedding work
    results = evaluate_models(
        {name: towers}, tasks, make_embedder, settings.batch_size, EMBEDDING_CACHE,
        embedder_settings=f"{settings.pooler}|{settings.max_length}",
    )[name]
    about = {"model": name, "scale": params.scale, "backbone": params.backbone.name, "pooler": settings.pooler}
    mteb = {**about, "enabled": settings.mteb.enabled, "local_items": settings.mteb.local_items, "suites": {}}
    if suites:
        mteb["suites"] = mteb_results(params, suites, towers, make_embedder)
    return {**results, **about, "max_pairs": settings.max_pairs}, mteb
