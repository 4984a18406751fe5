"""The figure of a settling: each look's interval of the improvement against the margin, narrowing as
seeds are added, the decision marked (reports/settle/<claim id>.png)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.io import atomic_path  # noqa: E402
from pipeline.reporting.figures import png_bytes  # noqa: E402

DECISION_COLOURS = {"holds": "tab:green", "contradicted": "tab:red", "futile": "tab:gray", "continue": "tab:blue",
                    "inconclusive": "tab:orange"}


def _view(looks: list[dict], margin: float) -> tuple[float, float]:
    """The y range: the looks whose interval is at most ten times the last one's (the first looks' boundaries,
    O'Brien–Fleming's, are thousands of points wide and would flatten the rest; they run off the axis)."""
    last = looks[-1]["interval"][1] - looks[-1]["interval"][0]
    shown = [look["interval"] for look in looks if look["interval"][1] - look["interval"][0] <= 10 * last] or [looks[-1]["interval"]]
    low, high = min(min(pair[0] for pair in shown), margin), max(max(pair[1] for pair in shown), margin)
    pad = 0.1 * (high - low or 1.0)
    return low - pad, high + pad


def looks_figure(record: dict, path: Path) -> None:
    """One point per look: Δ̂ with its sequential interval (the look's boundary), the margin as a line."""
    looks = record["looks"]
    figure, axis = plt.subplots(figsize=(6.0, 3.4), layout="constrained")
    for look in looks:
        low, high = look["interval"]
        colour = DECISION_COLOURS.get(look["decision"], "black")
        axis.errorbar([look["seeds_per_arm"]], [look["difference"]], yerr=[[look["difference"] - low], [high - look["difference"]]],
                      fmt="o", color=colour, capsize=4, label=look["decision"])
    axis.axhline(record["margin"], color="black", linewidth=0.8, linestyle="--", label="margin")
    axis.set_ylim(*_view(looks, record["margin"]))
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axis.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    axis.set_xlabel("seeds per arm at the look")
    axis.set_ylabel(f"{record['better']} − {record['worse']} ({record['column']})")
    axis.set_title(f"{record['claim']}: {record['outcome']}", fontsize=9)
    with atomic_path(path) as temporary:
        temporary.write_bytes(png_bytes(figure))
