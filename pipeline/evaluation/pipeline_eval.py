"""Evaluate a model as the `evaluate` stage does: one of the pipeline's models, or any folders.

Pipeline mode (`evaluate@<model>`): a model of the registry (`pipeline.models`) with the eval
settings of params.yaml: the 7 STS tasks under the SentEval protocol, and MTEB when
`eval.mteb.enabled` (the local STS-B task built from the mirror's original files when
`eval.mteb.local`, else mteb's own tasks: the papers' "3 Avg." STS tasks and the zero-shot suites
in `eval.mteb.zero_shot_tasks`). Tower embeddings are cached under data/cache/embeddings/, so an
ensemble reuses its towers' work.

Standalone mode: one model folder or hub id, or the two towers of a twin, on a SentEval folder.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import paths
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.sts import Embedder, evaluate_models, load_tasks
from pipeline.models import WeightedTowers, missing_towers, pipeline_models
from pipeline.runtime import resolve_device


def ensemble_embedder(towers: WeightedTowers, make_embedder) -> Embedder:
    """Σ_i w_i · tower_i(sentences): an ensemble as one Embedder (for MTEB)."""
    members = [make_embedder(tower) for tower in towers.folders]

    def embed(sentences: list[str]):
        return towers.combine([embedder(sentences) for embedder in members])

    return embed


def mteb_tasks(params: Params) -> list:
    """The MTEB tasks of the settings, their data loaded (a hub that cannot be reached is one line)."""
    from pipeline.evaluation.mteb_tasks import LocalSTSBenchmark, english_sts_tasks, load_task_data

    settings = params.eval.mteb
    if settings.local:
        tasks = [LocalSTSBenchmark(paths.ORIGINAL_BENCHMARKS / "STSBenchmark", params.eval.max_pairs)]
    else:
        import mteb

        tasks = english_sts_tasks(settings.sts_tasks) + (list(mteb.get_tasks(tasks=settings.zero_shot_tasks)) if settings.zero_shot_tasks else [])
    for task in tasks:
        load_task_data(task)
    return tasks


def mteb_scores(params: Params, tasks: list, towers: WeightedTowers, make_embedder) -> dict[str, float]:
    from pipeline.evaluation.mteb_tasks import run_mteb

    settings = params.eval.mteb
    scores = run_mteb(ensemble_embedder(towers, make_embedder), tasks, params.eval.batch_size)
    sts = [scores[name] for name in settings.sts_tasks if name in scores]
    return {**scores, **({"avg": sum(sts) / len(sts)} if sts else {})}


def pipeline_model(name: str, params: Params) -> WeightedTowers:
    """The towers of a model of params.yaml's `models`, all saved; else a one-line error."""
    models = pipeline_models(params)
    if name not in models:
        raise PipelineError(f"--name {name} is not a model of the pipeline; models: {', '.join(models)}")
    missing = missing_towers(models[name])
    if missing:
        raise PipelineError(f"model '{name}' needs {', '.join(map(str, missing))}, which does not exist yet; run `dvc repro`")
    return models[name]


def evaluate_pipeline_model(name: str, params: Params) -> dict:
    resolve_device(params.device)  # before any work: cached embeddings would skip the embedder's own check
    towers = pipeline_model(name, params)
    settings = params.eval

    def make_embedder(tower: str) -> HFEmbedder:
        return HFEmbedder(tower, settings.pooler, settings.max_length, settings.batch_size, params.device,
                          token_budget=settings.token_budget)

    tasks = load_tasks(paths.SENTEVAL, settings.tasks, settings.max_pairs)
    extra_tasks = mteb_tasks(params) if settings.mteb.enabled else []  # before any embedding work
    results = evaluate_models(
        {name: towers}, tasks, make_embedder, settings.batch_size, paths.EMBEDDINGS_CACHE,
        embedder_settings=f"{settings.pooler}|{settings.max_length}|{settings.token_budget}",
    )[name]
    if settings.mteb.enabled:
        results["mteb"] = mteb_scores(params, extra_tasks, towers, make_embedder)
    return {**results, "model": name, "scale": params.scale, "backbone": params.backbone.name, "pooler": settings.pooler,
            "max_pairs": settings.max_pairs}


def evaluate_standalone(models: list[str], pooler: str, tasks: list[str], max_pairs: int | None, senteval: Path,
                        batch_size: int, max_length: int, device: str, token_budget: int | str = "auto") -> dict:
    """Scores of one model folder or hub id, or of the twin of two (the sum of their embeddings)."""
    from pipeline.evaluation.embedder import resolve_model_source
    from pipeline.modeling.encoder import validate_pooler

    resolve_device(device)
    if len(models) > 2:
        raise PipelineError(f"--model given {len(models)} times; give one model or the two towers of a twin")
    validate_pooler(pooler, "--pooler")
    if not senteval.is_dir():
        raise PipelineError(f"SentEval data folder {senteval} does not exist; run `dvc repro download` or pass --senteval DIR")
    sts_tasks = load_tasks(senteval, tasks, max_pairs)
    towers = WeightedTowers.of((resolve_model_source(name), 1.0) for name in models)

    def make_embedder(source: str) -> HFEmbedder:
        return HFEmbedder(source, pooler, max_length, batch_size, device, token_budget=token_budget)

    return evaluate_models({"model": towers}, sts_tasks, make_embedder, batch_size)["model"]
