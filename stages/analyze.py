"""Alignment/uniformity, CLS energy, norm statistics, attention sink and maps, inference cost.

Reads params.yaml (eval.max_pairs, eval.batch_size, eval.max_length, eval.pooler, eval.cost_length,
analysis.align_data, device), the pipeline's models (`pipeline.evaluation.models.pipeline_models`;
those not trained yet are skipped with a log line, the backbone is required), STS-B
(data/raw/senteval) and each model's 7-STS average from reports/metrics/<model>.json. Writes
reports/analysis/<model>.json and the plot data align_uniform.csv, cls_energy.csv,
cosine_density_<lo>-<hi>.csv, cosine_grid.csv + .png (JTCSE Fig. 5), attention_maps.json + .png
(JTCSE Fig. 9), norm_histogram.csv.

Per model JSON: alignment (pairs with gold > 4) and uniformity (t = 2) on the STS-B sentences of
analysis.align_data (all splits, or the capped test split), e_cls (per layer; for an ensemble the
unweighted mean over its towers, each tower's list under e_cls_towers), e_cls_mean, norms and
attention_sink (an ensemble: one entry per tower folder), cosine_density (per gold group: pairs,
mean cosine, shares per cosine bin), gmacs (thop's count of one forward pass at seq_len tokens,
every tower; JTCSE Table VII), gmacs_with_attention (also the attention matrix products),
eta = avg / gmacs (null without metrics). norm_histogram.csv is the joint model's two towers
pooled (the h^P the norm loss constrains), or the backbone while no joint model exists (a log line
says which)."""

from pathlib import Path


from pipeline.config import load_params
from stages.common import ParamsOption, stage, summary

NAME = "analyze"


@stage
def command(
    params: Path = ParamsOption,
) -> None:
    import logging

    import pandas as pd

    from pipeline import paths
    from pipeline.paths import ANALYSIS
    from pipeline.io import json_dumps_compact, write_json_atomic, write_text_atomic
    from pipeline.errors import PipelineError
    from pipeline.analysis import analyze_models
    from pipeline.evaluation.embedder import HFEmbedder
    from pipeline.evaluation.models import pipeline_models, split_available
    from pipeline.data.readers import STSB_SPLITS, load_sts_benchmark
    from pipeline.io import atomic_path
    from pipeline.analysis import grid_bin_labels
    from pipeline.evaluation.sts import load_tasks
    from pipeline.reporting.figures import attention_map_figure, cosine_grid_figure
    from pipeline.runtime import resolve_device

    log = logging.getLogger(NAME)
    settings = load_params(params)
    device = resolve_device(settings.device)
    evaluation = settings.eval
    if not paths.SENTEVAL.is_dir():
        raise PipelineError(f"SentEval data folder {paths.SENTEVAL} does not exist; run `dvc repro download`")
    models, skipped = split_available(pipeline_models(settings))
    if "backbone" not in models:
        raise PipelineError(f"backbone folder {paths.BACKBONE} does not exist; run `dvc repro download`")
    for name, missing in skipped.items():
        log.info("%s: skipping %s: %s not trained yet", NAME, name, ", ".join(missing))

    (stsb,) = load_tasks(paths.SENTEVAL, ["STSBenchmark"], evaluation.max_pairs)
    pairs = stsb.subsets["test"]
    if settings.analysis.align_data == "all":  # SimCSE: every STS-B sentence, uncapped
        align_pairs = [pair for split in STSB_SPLITS for pair in load_sts_benchmark(paths.SENTEVAL, "STSBenchmark", split)[split]]
    else:
        align_pairs = pairs
    scores = {name: _average(paths.METRICS / f"{name}.json") for name in models}
    seq_len = evaluation.cost_length

    def make_embedder(tower: str) -> HFEmbedder:
        return HFEmbedder(tower, evaluation.pooler, evaluation.max_length, evaluation.batch_size, settings.device)

    analysis = analyze_models(
        models, pairs, make_embedder, scores, evaluation.batch_size, evaluation.max_length, device, seq_len, align_pairs
    )

    def write_csv(file: str, rows: list[dict]) -> None:
        write_text_atomic(ANALYSIS / file, pd.DataFrame(rows).to_csv(index=False))

    for name, report in analysis.reports.items():
        write_json_atomic(ANALYSIS / f"{name}.json", report)
    write_csv("align_uniform.csv", analysis.align_uniform_table())
    write_csv("cls_energy.csv", analysis.cls_energy_table())
    for label, rows in analysis.cosine_density_tables().items():
        write_csv(f"cosine_density_{label}.csv", rows)
    write_csv("cosine_grid.csv", analysis.cosine_grid_table())

    def write_png(file: str, data: bytes) -> None:
        with atomic_path(ANALYSIS / file) as temporary:
            temporary.write_bytes(data)

    write_png("cosine_grid.png", cosine_grid_figure({name: density.grid for name, density in analysis.densities.items()}, grid_bin_labels()))
    maps = {_tower_label(tower, models): data for tower, data in analysis.attention_maps().items()}
    write_text_atomic(ANALYSIS / "attention_maps.json", json_dumps_compact(maps) + "\n")
    write_png("attention_maps.png", attention_map_figure(maps))
    joint = [tower for tower, _ in models["joint"]] if "joint" in models else None
    norm_towers = joint or [tower for tower, _ in models["backbone"]]
    write_csv("norm_histogram.csv", analysis.norm_histogram_table(norm_towers))
    log.info("%s: norm_histogram.csv holds the norms of %s", NAME, " + ".join(norm_towers))

    backbone = analysis.reports["backbone"]
    summary(
        NAME,
        f"{len(models)} of {len(models) + len(skipped)} models on {len(pairs)} STS-B pairs ({len(skipped)} not trained yet), "
        f"alignment/uniformity on {len(align_pairs)} ({settings.analysis.align_data}); backbone: "
        f"alignment {_fmt(backbone['alignment'])}, uniformity {backbone['uniformity']:.3f}, "
        f"E_CLS {backbone['e_cls_mean']:.4f}, {backbone['gmacs']:.2f} GMAC at {seq_len} tokens, "
        f"eta {_fmt(backbone['eta'])} -> {ANALYSIS}/",
    )


def _tower_label(tower: str, models: dict) -> str:
    """A tower folder's name in the figures: the model it is (`pretrain-I`), or its ensemble's name
    and folder (`joint/I`, `uc/uc`)."""
    for name, members in models.items():
        if [folder for folder, _ in members] == [tower]:
            return name
    name = next(name for name, members in models.items() if tower in [folder for folder, _ in members])
    return f"{name}/{Path(tower).name}"


def _average(path: Path) -> float | None:
    """The 7-STS average ("avg") of a metrics file, None when the model has not been evaluated."""
    import json

    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get("avg")
    return float(value) if isinstance(value, (int, float)) else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
