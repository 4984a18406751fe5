"""The `analyze` stage's work: the pipeline's trained models analysed on STS-B, and the files it
writes under reports/analysis/ (per-model JSON, plot tables) and reports/figures/ (PNG).

Models come from the registry (`pipeline.evaluated_models.pipeline_models`); those not trained yet are
skipped with a log line, the backbone is required. Each model's 7-STS average for η is read from
reports/metrics/<model>.json (None while it has not been evaluated).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pipeline import paths
from pipeline.analysis.embedding import grid_bin_labels
from pipeline.analysis.per_model import Analysis, analyze_models
from pipeline.config import AnalysisSettings, EvalSettings, Params
from pipeline.errors import PipelineError
from pipeline.evaluated_models import WeightedTowers, pipeline_models, split_available

log = logging.getLogger(__name__)


@dataclass
class PipelineAnalysis:
    """What the stage reports: the analysis, the models it covers and those skipped, the pair counts."""

    analysis: Analysis
    models: dict[str, WeightedTowers]
    skipped: dict[str, list[str]]
    pairs: int
    align_pairs: int
    norm_towers: list[str]


def metrics_average(path: Path) -> float | None:
    """The 7-STS average ("avg") of a metrics file, None when the model has not been evaluated."""
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get("avg")
    return float(value) if isinstance(value, (int, float)) else None


def tower_label(tower: str, models: dict[str, WeightedTowers]) -> str:
    """A tower folder's name in the figures: the model it is (`pretrain-I`), or its ensemble's name
    and folder (`joint/I`, `uc/uc`)."""
    for name, members in models.items():
        if members.folders == [tower]:
            return name
    name = next(name for name, members in models.items() if tower in members.folders)
    return f"{name}/{Path(tower).name}"


def _sts_pairs(evaluation: EvalSettings, analysis: AnalysisSettings) -> tuple[list, list]:
    """(the STS-B test pairs capped by eval.max_pairs (the evaluator's sample, drawn with eval.seed), the pairs of
    alignment and uniformity)."""
    from pipeline.data.sts_pairs import load_sts_benchmark
    from pipeline.declarations.sts_tasks import STS_BENCHMARK
    from pipeline.evaluation.sts import load_tasks

    (stsb,) = load_tasks(paths.SENTEVAL, [STS_BENCHMARK.name], evaluation.max_pairs, seed=evaluation.seed)
    pairs = stsb.subsets["test"]
    if analysis.align_data == "all":  # SimCSE: every STS-B sentence, uncapped
        return pairs, [pair for split in STS_BENCHMARK.splits
                       for pair in load_sts_benchmark(paths.SENTEVAL, STS_BENCHMARK.name, split)[split]]
    return pairs, pairs


def analyze_pipeline(params: Params, folder: Path = paths.ANALYSIS) -> PipelineAnalysis:
    """Analyse every trained model of the pipeline and write the files of reports/analysis/."""
    from pipeline.evaluation.store import pipeline_store
    from pipeline.execution.runtime import resolve_device

    device = resolve_device(params.device)
    evaluation = params.eval
    if not paths.SENTEVAL.is_dir():
        raise PipelineError(f"SentEval data folder {paths.SENTEVAL} does not exist; run `dvc repro download`")
    models, skipped = split_available(pipeline_models(params))
    if "backbone" not in models:
        raise PipelineError(f"backbone folder {paths.BACKBONE} does not exist; run `dvc repro download`")
    for name, missing in skipped.items():
        log.info("analyze: skipping %s: %s not trained yet", name, ", ".join(missing))
    pairs, align_pairs = _sts_pairs(evaluation, params.analysis)
    scores = {name: metrics_average(paths.metrics_file(name)) for name in models}

    store = pipeline_store(params)
    analysis = analyze_models(
        models, pairs, store, scores, evaluation.batch_size, evaluation.max_length, device,
        evaluation.cost_length, align_pairs,
    )
    log.info("analyze: %s", store.counts.line())
    for name, probe in pipeline_norm_probe(evaluation, params.analysis, models, device).items():
        analysis.reports[name]["norm_probe"] = probe
    norm_towers = write_outputs(analysis, models, folder)
    return PipelineAnalysis(analysis, models, skipped, len(pairs), len(align_pairs), norm_towers)


def pipeline_norm_probe(evaluation: EvalSettings, analysis: AnalysisSettings, models: dict[str, WeightedTowers],
                        device) -> dict[str, dict]:
    """The LayerNorm study's norm probe of every model (`pipeline.analysis.norm_probe`) on
    analysis.norm_probe_sentences lines of data/raw/corpus.txt drawn with `eval.seed`."""
    from pipeline.analysis.norm_probe import norm_probe, probe_sentences
    from pipeline.data.readers import read_corpus

    sentences = probe_sentences(read_corpus(paths.CORPUS), analysis.norm_probe_sentences, evaluation.seed)
    return norm_probe(models, sentences, evaluation.max_length, evaluation.batch_size, device)


def write_outputs(analysis: Analysis, models: dict[str, WeightedTowers], folder: Path, figures: Path = paths.FIGURES) -> list[str]:
    """Every file of reports/analysis/ and the figures (PNG) under reports/figures/ (atomically); returns the towers of norm_histogram.csv: the
    joint model's two towers, or the backbone while no joint model exists."""
    import pandas as pd

    from pipeline.io import json_dumps_compact, write_json_atomic, write_text_atomic
    from pipeline.reporting.figures import analysis_figures, write_figures

    def write_csv(file: str, rows: list[dict]) -> None:
        write_text_atomic(folder / file, pd.DataFrame(rows).to_csv(index=False))

    for name, report in analysis.reports.items():
        write_json_atomic(folder / f"{name}.json", report)
    write_csv("align_uniform.csv", analysis.align_uniform_table())
    write_csv("cls_energy.csv", analysis.cls_energy_table())
    for label, rows in analysis.cosine_density_tables().items():
        write_csv(f"cosine_density_{label}.csv", rows)
    write_csv("cosine_grid.csv", analysis.cosine_grid_table())
    maps = {tower_label(tower, models): data for tower, data in analysis.attention_maps().items()}
    write_text_atomic(folder / "attention_maps.json", json_dumps_compact(maps) + "\n")
    norm_towers = (models["joint"] if "joint" in models else models["backbone"]).folders
    write_csv("norm_histogram.csv", analysis.norm_histogram_table(norm_towers))
    norm_label = "joint model's towers" if "joint" in models else "backbone"
    write_figures(analysis_figures(analysis, maps, norm_towers, norm_label, grid_bin_labels()), figures)
    log.info("analyze: norm_histogram.csv holds the norms of %s", " + ".join(norm_towers))
    return norm_towers
