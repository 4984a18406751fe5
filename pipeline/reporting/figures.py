"""The papers' analysis figures as PNG files (matplotlib, no display needed).

- `cosine_grid_figure`: JTCSE Fig. 5, one 5×5 heat map per model — rows the STS-B gold groups
  0-1 … 4-5, columns the cosine bins 0-0.2 … 0.8-1.0, cells the share of the group's pairs.
- `attention_map_figure`: JTCSE Fig. 9, a grid of head-averaged attention maps of one sentence,
  layers down, models across.

PNGs are written without the software-version metadata, so the same numbers give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
from matplotlib import pyplot as plt  # noqa: E402

_PNG_METADATA = {"Software": None}
# The figures the analyze stage draws (file under reports/analysis/ → what it shows), listed in
# reports/tables/README.md.
ANALYSIS_FIGURES = {
    "cosine_grid.png": "Share of STS-B test pairs per cosine bin in each gold group, per model (JTCSE Fig. 5)",
    "attention_maps.png": "Head-averaged attention maps of one sentence, layers × models (JTCSE Fig. 9)",
}


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata=_PNG_METADATA)
    plt.close(figure)
    return buffer.getvalue()


def cosine_grid_figure(grids: Mapping[str, Mapping[str, Sequence[float]]], cosine_bins: Sequence[str]) -> bytes:
    """`grids[model][gold group]` = the shares per cosine bin (JTCSE Fig. 5), one panel per model."""
    models = list(grids)
    figure, axes = plt.subplots(1, len(models), figsize=(2.6 * len(models), 2.9), squeeze=False)
    for axis, model in zip(axes[0], models):
        groups = list(grids[model])
        axis.imshow([list(grids[model][group]) for group in groups], cmap="Blues", vmin=0, vmax=1, origin="lower")
        axis.set_title(model, fontsize=9)
        axis.set_xticks(range(len(cosine_bins)), cosine_bins, rotation=60, fontsize=6)
        axis.set_yticks(range(len(groups)), groups, fontsize=7)
        axis.set_xlabel("cosine", fontsize=7)
    axes[0][0].set_ylabel("gold group", fontsize=7)
    figure.tight_layout()
    return _png(figure)


def attention_map_figure(maps: Mapping[str, Mapping[str, Any]]) -> bytes:
    """`maps[model]` = `pipeline.analysis.attention_map` output; layers down, models across."""
    models = list(maps)
    layers = max(len(maps[model]["layers"]) for model in models)
    figure, axes = plt.subplots(layers, len(models), figsize=(2.2 * len(models), 2.2 * layers), squeeze=False)
    for column, model in enumerate(models):
        tokens = maps[model]["tokens"]
        for row in range(layers):
            axis = axes[row][column]
            if row >= len(maps[model]["layers"]):
                axis.axis("off")
                continue
            axis.imshow(maps[model]["layers"][row], cmap="viridis", vmin=0)
            axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=4)
            axis.set_yticks(range(len(tokens)), tokens, fontsize=4)
            if row == 0:
                axis.set_title(model, fontsize=8)
            if column == 0:
                axis.set_ylabel(f"layer {row + 1}", fontsize=7)
    figure.tight_layout()
    return _png(figure)
