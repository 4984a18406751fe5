"""Percentile intervals of bootstrap samples, alone and paired (docs/method.md, "Evaluation").

Apart from `bootstrap.py` (which computes the resamples with the evaluator) so that reading stored
resamples — the report's claims — needs neither the evaluator nor torch.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95


def percentile_interval(samples: np.ndarray, level: float = CONFIDENCE) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap samples."""
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(np.asarray(samples, dtype=np.float64), [tail, 100 - tail])
    return float(low), float(high)


def paired_interval(ours: np.ndarray, theirs: np.ndarray, level: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of the difference ours − theirs over the same resamples (a paired bootstrap)."""
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    if ours.shape != theirs.shape:
        raise ValueError(f"paired bootstrap needs the same resamples: {ours.shape} vs {theirs.shape}")
    return percentile_interval(ours - theirs, level)
