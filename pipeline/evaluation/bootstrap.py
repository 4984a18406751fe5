"""Bootstrap uncertainty of STS scores (DESIGN.md §10).

INTERFACE (fixed by the lead; h-boot fills in the resampling, h-claims reads the files):

- Details metrics `reports/metrics/details/<model>.json` gain
    "intervals": {"<task>": {"low": float, "high": float, "se": float}, ..., "avg": {...}}
    "bootstrap": {"resamples": int, "seed": int, "indices": "<sha256 of the resample indices>"}
  (absent when `eval.bootstrap: 0`).
- Per-resample scores, a plain output: `reports/metrics/bootstrap/<model>.json`
    {"resamples": int, "seed": int, "indices": "<sha256>", "scores": {"<task>": [float × resamples], ..., "avg": [...]}}
  Two models' files pair only when their "indices" are equal (same seed, same pairs).
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
