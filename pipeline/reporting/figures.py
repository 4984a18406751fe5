"""The papers' figures as PNG files under reports/figures/ (matplotlib's Agg backend: no display,
no JavaScript; DVC embeds them as image plots, so `dvc plots show` shows them offline).

Drawn by the analyze stage (`analysis_figures`) from its results:
- `alignment_uniformity_figure`: JTCSE Fig. 7 style, one labelled point per model.
- `cls_energy_figure`: E_CLS (mean over layers) vs the 7-STS average, with the least-squares line.
- `cosine_density_figure`: the cosine-similarity density of each STS-B gold group, one line per model.
- `norm_histogram_figure`: the distributions of ||h^L|| and ||h^P||.
- `attention_sink_figure`: the last layer's head-averaged attention of one sentence, one map per
  model (the columns of [CLS], [SEP] and "." are the sinks).
- `cosine_grid_figure`: JTCSE Fig. 5, one 5×5 heat map per model — rows the STS-B gold groups
  0-1 … 4-5, columns the cosine bins 0-0.2 … 0.8-1.0, cells the share of the group's pairs.
- `attention_map_figure`: JTCSE Fig. 9, a grid of head-averaged attention maps of one sentence,
  layers down, models across.
The heat maps carry a colour bar and token labels of a legible size (`token_ticks`); each has a
`*_plot` twin that returns the matplotlib figure (what the tests inspect).

PNGs are written without the software-version metadata, so the same numbers give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
from matplotlib import pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_PNG_METADATA = {"Software": None}
# Every figure (file under reports/figures/ → what it shows), in the order reports/tables/README.md
# lists them; the report stage draws the first three, the analyze stage the others.
FIGURES = {
    "training_loss.png": "Training loss per step, one line per training stage",
    "training_dev.png": "STS-B dev Spearman × 100 per evaluation step, one line per training stage",
    "claims.png": "Every judged comparison of the claims: the difference, its pair-only (thin) and pair + seed (thick) "
                  "95% interval, the margin or ε band shaded, the verdict as the colour",
    "alignment_uniformity.png": "Alignment vs uniformity, one point per model; lower left is better (JTCSE Fig. 7)",
    "cls_energy.png": "CLS energy weight E_CLS (mean over layers) vs 7-STS average, with the trend line (JTCSE Fig. 10)",
    "cosine_density.png": "Density of cosine similarities of STS-B test pairs per gold group, per model",
    "norm_histogram.png": "Norms of the last-hidden [CLS] vector h^L and the pooler output h^P (JTCSE discussion)",
    "attention_sink.png": "Last layer's head-averaged attention of one sentence per model: the attention sink",
    "cosine_grid.png": "Share of STS-B test pairs per cosine bin in each gold group, per model (JTCSE Fig. 5)",
    "attention_maps.png": "Head-averaged attention maps of one sentence, layers × models (JTCSE Fig. 9)",
}
TRAINING_FIGURES = ("training_loss.png", "training_dev.png")
# Heat maps over tokens: beyond this many tokens only every n-th is labelled, so labels stay legible.
MAX_TOKEN_LABELS = 40
TOKEN_FONT_SIZE = 7


def png_bytes(figure) -> bytes:
    """A figure as PNG bytes, with the fixed metadata that keeps a redrawn figure byte-identical; the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata=_PNG_METADATA)
    plt.close(figure)
    return buffer.getvalue()


def cosine_grid_plot(grids: Mapping[str, Mapping[str, Sequence[float]]], cosine_bins: Sequence[str]):
    """`grids[model][gold group]` = the shares per cosine bin (JTCSE Fig. 5), one panel per model,
    each cell written out, one colour bar for all (shares 0 to 1)."""
    models = list(grids)
    figure, axes = plt.subplots(1, len(models), figsize=(2.6 * len(models) + 1.0, 3.0), squeeze=False, layout="constrained")
    for axis, model in zip(axes[0], models):
        groups = list(grids[model])
        shares = np.array([list(grids[model][group]) for group in groups], dtype=float)
        image = axis.imshow(shares, cmap="Blues", vmin=0, vmax=1, origin="lower")
        for (row, column), share in np.ndenumerate(shares):
            axis.text(column, row, f"{share:.2f}", ha="center", va="center", fontsize=6,
                      color="white" if share > 0.5 else "black")
        axis.set_title(model, fontsize=9)
        axis.set_xticks(range(len(cosine_bins)), cosine_bins, rotation=45, ha="right", fontsize=7)
        axis.set_yticks(range(len(groups)), groups, fontsize=7)
        axis.set_xlabel("cosine", fontsize=8)
    axes[0][0].set_ylabel("gold group", fontsize=8)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="share of the gold group's pairs")
    return figure


def cosine_grid_figure(grids: Mapping[str, Mapping[str, Sequence[float]]], cosine_bins: Sequence[str]) -> bytes:
    return png_bytes(cosine_grid_plot(grids, cosine_bins))


def token_ticks(axis, tokens: Sequence[str], x: bool, y: bool) -> None:
    """Token labels on the axes asked for, at most MAX_TOKEN_LABELS of them (every n-th beyond
    that), the x ones upright; the other axis gets ticks without labels."""
    step = -(-len(tokens) // MAX_TOKEN_LABELS)
    positions = range(0, len(tokens), step)
    labels = [tokens[position] for position in positions]
    axis.set_xticks(positions, labels if x else [], rotation=90, fontsize=TOKEN_FONT_SIZE)
    axis.set_yticks(positions, labels if y else [], fontsize=TOKEN_FONT_SIZE)


def attention_map_plot(maps: Mapping[str, Mapping[str, Any]]):
    """`maps[model]` = `pipeline.analysis.attention_map` output; layers down, models across, one
    colour scale for all panels (0 to the largest weight) with its bar. Token labels sit on the
    bottom row (keys) and the first column (queries), and on any column whose tokens differ."""
    models = list(maps)
    layers = max(len(maps[model]["layers"]) for model in models)
    longest = max(len(maps[model]["tokens"]) for model in models)
    side = max(2.2, 0.14 * longest + 0.8)  # room for one legible label per token
    top = max(float(np.max(matrix)) for model in models for matrix in maps[model]["layers"])
    figure, axes = plt.subplots(layers, len(models), figsize=(side * len(models) + 1.2, side * layers), squeeze=False, layout="constrained")
    first_tokens = maps[models[0]]["tokens"]
    image = None
    for column, model in enumerate(models):
        tokens = maps[model]["tokens"]
        drawn = len(maps[model]["layers"])
        for row in range(layers):
            axis = axes[row][column]
            if row >= drawn:
                axis.axis("off")
                continue
            image = axis.imshow(maps[model]["layers"][row], cmap="viridis", vmin=0, vmax=top)
            token_ticks(axis, tokens, x=row == drawn - 1, y=column == 0 or tokens != first_tokens)
            if row == 0:
                axis.set_title(model, fontsize=9)
            if column == 0:
                axis.set_ylabel(f"layer {row + 1}", fontsize=8)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.5, label="attention (mean over heads)")
    return figure


def attention_map_figure(maps: Mapping[str, Mapping[str, Any]]) -> bytes:
    return png_bytes(attention_map_plot(maps))


def _labelled_scatter(axis, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str]) -> None:
    """One coloured, labelled point per model."""
    colours = plt.get_cmap("tab10")
    for index, (x, y, label) in enumerate(zip(xs, ys, labels)):
        axis.scatter([x], [y], color=colours(index % 10), s=40, zorder=3)
        axis.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axis.grid(alpha=0.3)


def alignment_uniformity_figure(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """`rows` of `Analysis.align_uniform_table` (model, uniformity, alignment); models without an
    alignment (no positive pairs) are left out and named in the title."""
    shown = [row for row in rows if row["alignment"] is not None]
    figure, axis = plt.subplots(figsize=(6, 4.5))
    _labelled_scatter(axis, [row["uniformity"] for row in shown], [row["alignment"] for row in shown], [row["model"] for row in shown])
    missing = [row["model"] for row in rows if row["alignment"] is None]
    axis.set_title("Alignment vs uniformity" + (f" (no positive pairs: {', '.join(missing)})" if missing else ""), fontsize=10)
    axis.set_xlabel("uniformity  l_uniform (lower is better)")
    axis.set_ylabel("alignment  l_align (lower is better)")
    figure.tight_layout()
    return png_bytes(figure)


def cls_energy_figure(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """`rows` of `Analysis.cls_energy_table` (model, e_cls, avg): models with a 7-STS average as
    labelled points and, with two or more, the least-squares line avg = a · E_CLS + b."""
    shown = [row for row in rows if row["avg"] is not None]
    figure, axis = plt.subplots(figsize=(6, 4.5))
    xs, ys = np.array([row["e_cls"] for row in shown], float), np.array([row["avg"] for row in shown], float)
    _labelled_scatter(axis, xs, ys, [row["model"] for row in shown])
    title = "E_CLS vs 7-STS average"
    if len(shown) >= 2 and np.ptp(xs) > 0:
        slope, intercept = np.polyfit(xs, ys, 1)
        line = np.linspace(xs.min(), xs.max(), 50)
        axis.plot(line, slope * line + intercept, "--", color="grey", label=f"trend: {slope:.1f} · E_CLS + {intercept:.1f}")
        axis.legend(fontsize=8)
    else:
        title += " (fewer than two evaluated models: no trend line)"
    axis.set_title(title, fontsize=10)
    axis.set_xlabel("E_CLS, mean over layers")
    axis.set_ylabel("7-STS average (Spearman × 100)")
    figure.tight_layout()
    return png_bytes(figure)


def cosine_density_figure(tables: Mapping[str, Sequence[Mapping[str, float]]]) -> bytes:
    """`tables[gold group]` = rows of `Analysis.cosine_density_tables` (cosine, then one density per model)."""
    groups = list(tables)
    figure, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.2), squeeze=False, sharey=True)
    for axis, group in zip(axes[0], groups):
        rows = tables[group]
        cosines = [row["cosine"] for row in rows]
        for model in [key for key in rows[0] if key != "cosine"]:
            axis.plot(cosines, [row[model] for row in rows], label=model, linewidth=1.2)
        axis.set_title(f"gold {group}", fontsize=9)
        axis.set_xlabel("cosine similarity", fontsize=8)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("density", fontsize=8)
    axes[0][-1].legend(fontsize=6)
    figure.tight_layout()
    return png_bytes(figure)


def norm_histogram_figure(rows: Sequence[Mapping[str, float]], towers: str) -> bytes:
    """`rows` of `Analysis.norm_histogram_table` (norm, last_hidden, pooler densities) of `towers`."""
    figure, axis = plt.subplots(figsize=(6, 4))
    centres = [row["norm"] for row in rows]
    width = centres[1] - centres[0] if len(centres) > 1 else 1.0
    for key, label in (("last_hidden", "||h^L|| (last hidden [CLS])"), ("pooler", "||h^P|| (pooler output)")):
        axis.bar(centres, [row[key] for row in rows], width=width, alpha=0.6, label=label)
    axis.set_title(f"Norm distributions ({towers})", fontsize=10)
    axis.set_xlabel("L2 norm")
    axis.set_ylabel("density")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return png_bytes(figure)


def attention_sink_plot(maps: Mapping[str, Mapping[str, Any]]):
    """The last layer of each model's `attention_map`: query rows, key columns, one panel per model."""
    models = list(maps)
    columns = min(4, len(models))
    rows = -(-len(models) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.4 * columns + 1.0, 3.6 * rows), squeeze=False, layout="constrained")
    for axis in axes.flat[len(models):]:
        axis.axis("off")
    for axis, model in zip(axes.flat, models):
        tokens = maps[model]["tokens"]
        image = axis.imshow(maps[model]["layers"][-1], cmap="magma", vmin=0, vmax=1)
        token_ticks(axis, tokens, x=True, y=True)
        axis.set_title(f"{model}, layer {len(maps[model]['layers'])}", fontsize=8)
        axis.set_xlabel("key (attended to)", fontsize=7)
        axis.set_ylabel("query", fontsize=7)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention")
    return figure


def attention_sink_figure(maps: Mapping[str, Mapping[str, Any]]) -> bytes:
    return png_bytes(attention_sink_plot(maps))


def training_curve_figure(curves: Mapping[str, Any], column: str, label: str) -> bytes:
    """`curves[stage]` = the stage's reports/training/<stage>.csv as a DataFrame; one line per stage
    of `column` (rows where it is empty are skipped) against the step."""
    figure, axis = plt.subplots(figsize=(7, 4))
    drawn = 0
    for stage, frame in curves.items():
        if column in frame:
            points = frame[["step", column]].dropna()
            axis.plot(points["step"], points[column], marker="o" if len(points) < 30 else None, markersize=3, label=stage)
            drawn += bool(len(points))
    if not drawn:
        axis.text(0.5, 0.5, f"no training stage has logged {column} yet", ha="center", va="center", transform=axis.transAxes)
    else:
        axis.legend(fontsize=8)
    axis.set_title(label, fontsize=10)
    axis.set_xlabel("step")
    axis.set_ylabel(label)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return png_bytes(figure)


def training_figures(folder: Path) -> dict[str, bytes]:
    """The two training figures from every <stage>.csv of reports/training/ (`folder`), each checked on read."""
    from pipeline.reporting.inputs import read_training_curve

    curves = {path.stem: read_training_curve(path) for path in sorted(folder.glob("*.csv"))}
    return {
        "training_loss.png": training_curve_figure(curves, "loss", "training loss"),
        "training_dev.png": training_curve_figure(curves, "dev_stsb", "STS-B dev Spearman × 100"),
    }


def analysis_figures(
    analysis: Any, maps: Mapping[str, Mapping[str, Any]], norm_towers: Sequence[str], norm_label: str, cosine_bins: Sequence[str]
) -> dict[str, bytes]:
    """Every figure of the analyze stage (file name → PNG bytes) from a `pipeline.analysis.Analysis`,
    the attention maps keyed by model label, the towers whose norms are pooled (and their name in
    the title) and the cosine bins of JTCSE Fig. 5."""
    return {
        "alignment_uniformity.png": alignment_uniformity_figure(analysis.align_uniform_table()),
        "cls_energy.png": cls_energy_figure(analysis.cls_energy_table()),
        "cosine_density.png": cosine_density_figure(analysis.cosine_density_tables()),
        "norm_histogram.png": norm_histogram_figure(analysis.norm_histogram_table(norm_towers), norm_label),
        "attention_sink.png": attention_sink_figure(maps),
        "cosine_grid.png": cosine_grid_figure({name: density.grid for name, density in analysis.densities.items()}, cosine_bins),
        "attention_maps.png": attention_map_figure(maps),
    }


def write_figures(figures: Mapping[str, bytes], folder: Path) -> list[Path]:
    """Each PNG atomically under `folder`; returns the paths written."""
    from pipeline.io import atomic_path

    written = []
    for name, data in figures.items():
        with atomic_path(folder / name) as temporary:
            temporary.write_bytes(data)
        written.append(folder / name)
    return written


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


VERDICT_COLOURS = {"holds": "tab:green", "reproduced": "tab:green", "reproduced, higher": "tab:green",
                   "contradicted": "tab:red", "not reproduced": "tab:red", "consistent within seed noise": "tab:blue"}


def claims_forest_figure(groups: Mapping[str, Sequence[Mapping[str, Any]]]) -> bytes:
    """The forest plot of the claims: per paper (a group), one row per judged comparison with
    `label`, `difference`, `interval` (pair + seed), `pair_interval` (pair only, or None), `band`
    ((low, high) shaded: the margin or ±ε) and `verdict` (the marker's colour; grey when undecided)."""
    rows = [(group, row) for group, entries in groups.items() for row in entries]
    figure, axis = plt.subplots(figsize=(10, 1.2 + 0.32 * max(len(rows), 1)))
    for position, (group, row) in enumerate(reversed(rows)):
        colour = VERDICT_COLOURS.get(row["verdict"], "tab:gray")
        low, high = row["band"]
        axis.fill_betweenx([position - 0.4, position + 0.4], low, high, color="0.9", zorder=0)
        axis.hlines(position, *row["interval"], color=colour, linewidth=3.5, zorder=2)
        if row.get("pair_interval") is not None:
            axis.hlines(position, *row["pair_interval"], color="black", linewidth=1, zorder=3)
        axis.plot(row["difference"], position, "o", color=colour, markeredgecolor="black", zorder=4)
    axis.set_yticks(range(len(rows)), [f"{group}: {row['label']}" for group, row in reversed(rows)], fontsize=7)
    axis.axvline(0.0, color="black", linewidth=0.6)
    axis.set_xlabel("difference (points; ours − paper for a value claim, better − worse for an order)")
    axis.set_title("Claims: pair-only interval (thin), pair + seed interval (thick), band shaded", fontsize=9)
    figure.tight_layout()
    return png_bytes(figure)
