"""Every analysis for every named model (`analyze_models`) and the plot tables of the results (`Analysis`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.analysis.cost import DEFAULT_SEQ_LEN, efficiency, inference_gmacs
from pipeline.analysis.embedding import (
    CosineDensity,
    alignment,
    cosine_density,
    grid_bin_labels,
    pair_cosines,
    positive_pairs,
    uniformity,
)
from pipeline.analysis.layers import LayerAnalysis, analyze_layers
from pipeline.analysis.norms import norm_histogram



@dataclass
class Analysis:
    """The results of `analyze_models`: one JSON-ready report per model, the cosine densities per
    model and the layer analyses per tower folder."""

    reports: dict[str, dict[str, Any]]
    densities: dict[str, CosineDensity]
    layers: dict[str, LayerAnalysis]

    def align_uniform_table(self) -> list[dict[str, Any]]:
        """Rows model, uniformity, alignment, avg (JTCSE Fig. 7 style scatter)."""
        return [
            {"model": name, "uniformity": report["uniformity"], "alignment": report["alignment"], "avg": report["avg"]}
            for name, report in self.reports.items()
        ]

    def cls_energy_table(self) -> list[dict[str, Any]]:
        """Rows model, e_cls (mean over layers), avg (JTCSE Fig. 10)."""
        return [{"model": name, "e_cls": report["e_cls_mean"], "avg": report["avg"]} for name, report in self.reports.items()]

    def cosine_density_tables(self) -> dict[str, list[dict[str, Any]]]:
        """Per gold bin label: rows cosine (bin centre), then one density column per model."""
        if not self.densities:
            return {}
        first = next(iter(self.densities.values()))
        tables = {}
        for label in first.density:
            tables[label] = [
                {"cosine": float(centre)} | {name: float(density.density[label][row]) for name, density in self.densities.items()}
                for row, centre in enumerate(first.centres)
            ]
        return tables

    def cosine_grid_table(self) -> list[dict[str, Any]]:
        """JTCSE Fig. 5: rows model, gold group, then the share of the group's pairs per cosine bin."""
        return [
            {"model": name, "gold": label} | dict(zip(grid_bin_labels(), shares.tolist()))
            for name, density in self.densities.items()
            for label, shares in density.grid.items()
        ]

    def attention_maps(self) -> dict[str, dict[str, Any]]:
        """JTCSE Fig. 9: the attention map of every distinct tower, keyed by its folder."""
        return {tower: analysis.attention_map for tower, analysis in self.layers.items()}

    def norm_histogram_table(self, towers: Sequence[str]) -> list[dict[str, Any]]:
        """Rows norm (bin centre), last_hidden, pooler (densities) of the given towers' sentences pooled."""
        last = np.concatenate([self.layers[tower].last_hidden_norms for tower in towers])
        pooler = np.concatenate([self.layers[tower].pooler_norms for tower in towers])
        histogram = norm_histogram(last, pooler)
        return [
            {"norm": centre, "last_hidden": a, "pooler": b}
            for centre, a, b in zip(histogram["centre"], histogram["last_hidden"], histogram["pooler"])
        ]


@dataclass(frozen=True)
class _Inputs:
    """What every model's report is computed on: the pairs of the cosine densities and layer
    analyses, the pairs of alignment/uniformity, their distinct sentences and the positives."""

    pairs: Sequence[Any]
    align_pairs: Sequence[Any]
    sentences: list[str]
    align_sentences: list[str]
    positives: list[Any]
    seq_len: int

    @classmethod
    def of(cls, pairs: Sequence[Any], align_pairs: Sequence[Any], seq_len: int) -> "_Inputs":
        def distinct(items: Sequence[Any]) -> list[str]:
            return list(dict.fromkeys(s for pair in items for s in (pair.sentence1, pair.sentence2)))

        return cls(pairs, align_pairs, distinct(pairs), distinct(align_pairs), positive_pairs(align_pairs), seq_len)


def _layer_fields(members: Sequence[tuple[str, float]], layers: Mapping[str, LayerAnalysis]) -> dict[str, Any]:
    """e_cls (the unweighted mean over the towers), norms and attention sink (per tower for an ensemble),
    and the last layer's end-of-sequence sink against its uniform share (`sink_end_last`,
    `sink_end_uniform`: the towers' unweighted means, so every model has them)."""
    member_layers = {tower: layers[tower] for tower, _ in members}
    e_cls = np.mean([analysis.e_cls for analysis in member_layers.values()], axis=0).tolist()
    fields: dict[str, Any] = {"e_cls": e_cls, "e_cls_mean": float(np.mean(e_cls))}
    for name, key in (("sink_end_last", "last_end"), ("sink_end_uniform", "uniform_end")):
        fields[name] = float(np.mean([analysis.attention_sink[key] for analysis in member_layers.values()]))
    if len(members) > 1:
        fields["e_cls_towers"] = {tower: analysis.e_cls for tower, analysis in member_layers.items()}
        fields["norms"] = {tower: analysis.norms() for tower, analysis in member_layers.items()}
        fields["attention_sink"] = {tower: analysis.attention_sink for tower, analysis in member_layers.items()}
    else:
        (analysis,) = member_layers.values()
        fields["norms"] = analysis.norms()
        fields["attention_sink"] = analysis.attention_sink
    return fields


def _model_report(
    name: str, members: Sequence[tuple[str, float]], table, inputs: _Inputs, layers: Mapping[str, LayerAnalysis],
    density: CosineDensity, score: float | None,
) -> dict[str, Any]:
    """The JSON report of one model from its (combined) embedding table and its towers' layer analyses."""
    positives = inputs.positives
    report: dict[str, Any] = {
        "model": name,
        "towers": [{"path": tower, "weight": weight} for tower, weight in members],
        "pairs": len(inputs.pairs),
        "align_pairs": len(inputs.align_pairs),
        "positive_pairs": len(positives),
        "sentences": len(inputs.sentences),
        "align_sentences": len(inputs.align_sentences),
        "alignment": (
            alignment(table.lookup([p.sentence1 for p in positives]), table.lookup([p.sentence2 for p in positives]))
            if positives else None
        ),
        "uniformity": uniformity(table.lookup(inputs.align_sentences)),
    }
    report |= _layer_fields(members, layers)
    report["cosine_density"] = {
        label: {"pairs": density.counts[label], "mean_cosine": density.mean_cosine[label]}
        | dict(zip(grid_bin_labels(), density.grid[label].tolist()))
        for label in density.counts
    }
    gmacs = sum(layers[tower].gmacs for tower, _ in members)
    report |= {
        "seq_len": inputs.seq_len,
        "gmacs": gmacs,
        "gmacs_with_attention": sum(inference_gmacs(layers[tower].config, inputs.seq_len) for tower, _ in members),
        "avg": score,
        "eta": efficiency(score, gmacs),
    }
    if score is None:
        report["eta_note"] = f"no 7-STS average for {name} (reports/metrics/{name}.json missing); run evaluate first"
    return report


def analyze_models(
    models: Mapping[str, Sequence[tuple[str, float]]],
    pairs: Sequence[Any],
    store,
    scores: Mapping[str, float | None] | None = None,
    batch_size: int = 64,
    max_length: int = 128,
    device: torch.device | str = "cpu",
    seq_len: int = DEFAULT_SEQ_LEN,
    align_pairs: Sequence[Any] | None = None,
) -> Analysis:
    """Every analysis for every named model (a weighted sum of tower folders) on scored pairs.

    `pairs` are STS-B test `ScoredPair`s (cosine densities, layer analyses); `align_pairs` the
    STS-B pairs of alignment and uniformity (default: `pairs`). Their embeddings are the towers'
    rows of `store` (an `EmbeddingStore` with the evaluation embedder, so the pooler is the
    evaluated one, and whatever `evaluate` already encoded is read, not encoded again) and ensembles
    are weighted sums of tower tables (`combine_tables`), as in `evaluate_models`. The layer analyses run once per distinct tower on
    the sentences of `pairs`. `scores` gives each model's 7-STS average for η (None or absent: η
    is null with a note).
    """
    from pipeline.evaluation.sts import combine_tables

    scores = scores or {}
    inputs = _Inputs.of(pairs, pairs if align_pairs is None else align_pairs, seq_len)
    gold = np.array([pair.score for pair in pairs], np.float64)
    towers = list(dict.fromkeys(tower for members in models.values() for tower, _ in members))
    to_embed = list(dict.fromkeys(inputs.sentences + inputs.align_sentences))
    tables, layers = {}, {}
    for tower in towers:
        label = "/".join(Path(tower).parts[-2:])
        tables[tower] = store.tower_table(tower, to_embed)
        layers[tower] = analyze_layers(
            tower, inputs.sentences, max_length, batch_size, device, description=f"layers {label}", seq_len=seq_len
        )
    reports, densities = {}, {}
    for name, members in models.items():
        table = combine_tables(tables, members)
        cosines = pair_cosines(table.lookup([p.sentence1 for p in pairs]), table.lookup([p.sentence2 for p in pairs]))
        densities[name] = cosine_density(cosines, gold)
        reports[name] = _model_report(name, members, table, inputs, layers, densities[name], scores.get(name))
    return Analysis(reports, densities, layers)
