"""Norm statistics of ||h^L|| ([CLS] of the last hidden state) and ||h^P|| (pooler output) —
the modulus argument of JTCSE's discussion section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

NORM_BINS = 80
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)



def summary_statistics(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """mean, std (population), min, max and the 5/25/50/75/95 % quantiles."""
    values = np.asarray(values, np.float64)
    stats = {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()), "max": float(values.max())}
    stats.update({f"q{round(q * 100):02d}": float(np.quantile(values, q)) for q in QUANTILES})
    return stats


def norm_histogram(
    last_hidden: Sequence[float] | np.ndarray, pooler: Sequence[float] | np.ndarray, bins: int = NORM_BINS
) -> dict[str, list[float]]:
    """Density histograms (Σ density · width = 1) of both norms over the same `bins` equal bins
    spanning [min, max] of the two together; `centre` holds the bin centres."""
    last_hidden, pooler = np.asarray(last_hidden, np.float64), np.asarray(pooler, np.float64)
    low, high = min(last_hidden.min(), pooler.min()), max(last_hidden.max(), pooler.max())
    if high <= low:
        high = low + 1e-6
    edges = np.linspace(low, high, bins + 1)
    return {
        "edges": edges.tolist(),
        "centre": ((edges[:-1] + edges[1:]) / 2).tolist(),
        "last_hidden": np.histogram(last_hidden, bins=edges, density=True)[0].tolist(),
        "pooler": np.histogram(pooler, bins=edges, density=True)[0].tolist(),
    }


def norm_statistics(
    last_hidden: Sequence[float] | np.ndarray, pooler: Sequence[float] | np.ndarray, bins: int = NORM_BINS
) -> dict[str, Any]:
    """Statistics of ||h^L||_2 ([CLS] of the last hidden state) and ||h^P||_2 (pooler output,
    dense + tanh over [CLS]), one value per sentence: `summary_statistics` of each, their histogram
    (`norm_histogram`) and the coefficient of variation std/mean, which shows how little modulus
    information h^L keeps after the last LayerNorm compared with h^P (JTCSE discussion, A)."""
    result: dict[str, Any] = {"last_hidden": summary_statistics(last_hidden), "pooler": summary_statistics(pooler)}
    for key in ("last_hidden", "pooler"):
        result[key]["cv"] = result[key]["std"] / result[key]["mean"] if result[key]["mean"] else None
    result["histogram"] = norm_histogram(last_hidden, pooler, bins)
    return result
