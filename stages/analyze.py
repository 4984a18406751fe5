"""Alignment/uniformity, CLS energy, norm statistics, attention sink and maps, inference cost.

Reads params.yaml (eval.max_pairs, eval.batch_size, eval.max_length, eval.pooler, eval.cost_length,
analysis.align_data, device), the pipeline's models (`pipeline.evaluated_models.pipeline_models`;
those not trained yet are skipped with a log line, the backbone is required), STS-B
(data/raw/senteval) and each model's 7-STS average from reports/metrics/<model>.json. Writes
reports/analysis/<model>.json and the plot data align_uniform.csv, cls_energy.csv,
cosine_density_<lo>-<hi>.csv, cosine_grid.csv (JTCSE Fig. 5), attention_maps.json (JTCSE Fig. 9),
norm_histogram.csv, and the figures (PNG) under reports/figures/: alignment_uniformity,
cls_energy, cosine_density, norm_histogram, attention_sink, cosine_grid, attention_maps.

Per model JSON: alignment (pairs with gold > 4) and uniformity (t = 2) on the STS-B sentences of
analysis.align_data (all splits, or the capped test split), e_cls (per layer; for an ensemble the
unweighted mean over its towers, each tower's list under e_cls_towers), e_cls_mean, norms and
attention_sink (an ensemble: one entry per tower folder), cosine_density (per gold group: pairs,
mean cosine, shares per cosine bin), gmacs (thop's count of one forward pass at seq_len tokens,
every tower; JTCSE Table VII), gmacs_with_attention (also the attention matrix products),
eta = avg / gmacs (null without metrics). norm_histogram.csv is the joint model's two towers
pooled (the h^P the norm loss constrains), or the backbone while no joint model exists (a log line
says which). norm_probe (the LayerNorm study, TNCSE Figure 5): statistics of ‖h^L‖ and ‖h^P‖ over
analysis.norm_probe_sentences lines of data/raw/corpus.txt drawn with `seed`, every tower pooled,
with each tower's removed LayerNorm layers (`pipeline.analysis.norm_probe`). The work and the file
writing are `pipeline.analysis.pipeline_analysis`."""

from pathlib import Path

from stages.common import ParamsOption, stage, stage_params, summary

NAME = "analyze"


@stage
def command(
    params: Path = ParamsOption,
) -> None:
    from pipeline import paths
    from pipeline.analysis.pipeline_analysis import analyze_pipeline

    settings = stage_params(params)
    result = analyze_pipeline(settings)
    backbone, models, skipped = result.analysis.reports["backbone"], result.models, result.skipped
    summary(
        NAME,
        f"{len(models)} of {len(models) + len(skipped)} models on {result.pairs} STS-B pairs ({len(skipped)} not trained yet), "
        f"alignment/uniformity on {result.align_pairs} ({settings.analysis.align_data}); backbone: "
        f"alignment {_fmt(backbone['alignment'])}, uniformity {backbone['uniformity']:.3f}, "
        f"E_CLS {backbone['e_cls_mean']:.4f}, {backbone['gmacs']:.2f} GMAC at {settings.eval.cost_length} tokens, "
        f"eta {_fmt(backbone['eta'])}; {_probe_line(result.analysis.reports)} -> {paths.ANALYSIS}/, {paths.FIGURES}/",
    )


def _probe_line(reports: dict) -> str:
    """The norm probe of the joint model (the backbone's until one exists): mean ± std of both norms."""
    name = "joint" if "joint" in reports else "backbone"
    probe = reports[name]["norm_probe"]
    last, pooler = probe["last_hidden_cls"], probe["pooler"]
    return (f"norm probe {name} on {probe['sentences']} sentences: ‖h^L‖ {last['mean']:.2f} ± {last['std']:.2f}, "
            f"‖h^P‖ {pooler['mean']:.2f} ± {pooler['std']:.2f}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
