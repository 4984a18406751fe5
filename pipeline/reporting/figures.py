"""The papers' analysis figures as PNG files (matplotlib, no display needed).

- `cosine_grid_figure`: JTCSE Fig. 5, one 5×5 heat map per model — rows the STS-B gold groups
  0-1 … 4-5, columns the cosine bins 0-0.2 … 0.8-1.0, cells the share of the group's pairs.
- `attention_map_figure`: JTCSE Fig. 9, a grid of head-averaged attention maps of one sentence,
  layers down, models across.
- `bar_line_figure`: TNCSE Figure 5 / JTCSE Fig. 8, bars and a line per run (a table's `figure`).
(The tensor-norm loss surface, TNCSE Figure 2, is in `pipeline.reporting.surface`.)

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


def png_bytes(figure) -> bytes:
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
    return png_bytes(figure)


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
    return png_bytes(figure)


def bar_line_figure(
    ticks: Sequence[str],
    bars: Sequence[float | None],
    errors: Sequence[float | None] | None,
    line: Sequence[float | None],
    labels: tuple[str, str],
    title: str,
) -> bytes:
    """TNCSE Figure 5 / JTCSE Fig. 8's form: one x tick per run, bars (left axis, optional error
    bars) and a line (right axis); a missing value leaves a gap."""
    import numpy as np

    def values(numbers: Sequence[float | None]) -> np.ndarray:
        return np.array([np.nan if number is None else number for number in numbers], dtype=float)

    x = np.arange(len(ticks))
    figure, axis = plt.subplots(figsize=(max(4.0, 0.9 * len(ticks) + 1.5), 3.4))
    spread = None if errors is None else np.nan_to_num(values(errors))
    axis.bar(x, values(bars), yerr=spread, color="#9ecae1", edgecolor="#3182bd", capsize=3, label=labels[0])
    axis.set_ylabel(labels[0], fontsize=8)
    axis.set_xticks(x, list(ticks), fontsize=7, rotation=30 if max(map(len, ticks), default=0) > 6 else 0)
    other = axis.twinx()
    other.plot(x, values(line), color="#d94801", marker="o", label=labels[1])
    other.set_ylabel(labels[1], fontsize=8)
    axis.set_title(title, fontsize=8)
    figure.legend(loc="upper right", fontsize=7)
    figure.tight_layout()
    return png_bytes(figure)

