"""Embedding-level analyses (any model, ensembles included; inputs are embedding matrices).

- `alignment(x, y, alpha=2)` and `uniformity(x, t=2)` (Wang & Isola 2020; JTCSE Eq. 16-17),
  on L2-normalised embeddings. As SimCSE defines them: STS-B pairs with gold > 4 are the
  positives (`positive_pairs`), the STS-B sentences the data distribution (which splits:
  `analysis.align_data`, docs/method.md).
- `cosine_density(cosines, gold)`: per gold group [0,1), [1,2), [2,3), [3,4), [4,5], the shares
  of its pairs in five cosine bins over [0, 1] (JTCSE Fig. 5's grid, `grid`) and a 40-bin
  density histogram over [-1, 1] (SimCSE's figure, `density`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

GOLD_BINS: tuple[tuple[float, float], ...] = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))
POSITIVE_GOLD = 4.0  # STS-B pairs with gold > 4 are the positives of `alignment` (SimCSE's definition)
COSINE_BINS = 40  # histogram bins over [-1, 1] (width 0.05)
GRID_BINS = 5  # JTCSE Fig. 5: cosine bins 0-0.2 … 0.8-1.0



def _normalised(x: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Rows scaled to unit L2 norm, in float64 (a zero row stays zero)."""
    x = torch.as_tensor(x).to(torch.float64)
    return torch.nn.functional.normalize(x, dim=-1)


def alignment(x: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray, alpha: float = 2) -> float:
    """l_align = E_{(x, x+) ~ p_pos} ||f(x) - f(x+)||_2^alpha over the positive pairs (rows i of x, y).

    f(.) is the L2-normalised embedding; with alpha = 2 this is JTCSE Eq. 16 and lies in [0, 4].
    """
    a, b = _normalised(x), _normalised(y)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"alignment needs two (N, d) matrices of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if len(a) == 0:
        raise ValueError("alignment needs at least one positive pair")
    return float((a - b).norm(dim=1).pow(alpha).mean())


def uniformity(x: torch.Tensor | np.ndarray, t: float = 2, block: int = 1024) -> float:
    """l_uniform = log E_{i<j} exp(-t ||f(x_i) - f(x_j)||_2^2) over all pairs of distinct rows.

    f(.) is the L2-normalised embedding (JTCSE Eq. 17 with t = 2); rows are distinct sentences.
    On the unit sphere ||u - v||^2 = 2 - 2 u.v; the mean over the N(N-1)/2 pairs is taken as a
    log-sum-exp, row block by row block, so memory stays O(block * N).
    """
    z = _normalised(x)
    n = len(z)
    if n < 2:
        raise ValueError("uniformity needs at least two embeddings")
    chunks = []
    for start in range(0, n, block):
        rows = z[start : start + block]
        squared = (2 - 2 * rows @ z.T).clamp_min(0)  # (b, N)
        index = torch.arange(start, start + len(rows)).unsqueeze(1)
        upper = torch.arange(n).unsqueeze(0) > index  # pairs i < j only
        chunks.append(torch.logsumexp((-t * squared)[upper], dim=0))
    return float(torch.logsumexp(torch.stack(chunks), dim=0) - math.log(n * (n - 1) / 2))


def positive_pairs(pairs: Sequence[Any]) -> list[Any]:
    """The positive pairs of `alignment`: gold strictly above 4 ("pairs with a score higher than 4", SimCSE)."""
    return [pair for pair in pairs if pair.score > POSITIVE_GOLD]


def pair_cosines(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> np.ndarray:
    """cos(a_i, b_i) row by row, in float64 (a zero row scores 0)."""
    return (_normalised(a) * _normalised(b)).sum(1).numpy()


def gold_bin_label(low: float, high: float) -> str:
    """'0-1' … '4-5': the names of the gold bins in file names and JSON keys."""
    return f"{low:g}-{high:g}"


def grid_bin_labels(bins: int = GRID_BINS) -> list[str]:
    """'0-0.2' … '0.8-1': the cosine bins of JTCSE Fig. 5's grid."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    return [f"{low:g}-{high:g}" for low, high in zip(edges[:-1], edges[1:])]


@dataclass(frozen=True)
class CosineDensity:
    """Per gold bin: the density histogram of cosine similarities over `edges`, JTCSE's grid row
    (shares of the pairs in `GRID_BINS` bins over [0, 1]) and the pair count."""

    edges: np.ndarray
    density: dict[str, np.ndarray]
    counts: dict[str, int]
    mean_cosine: dict[str, float | None]
    grid: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def centres(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2


def cosine_density(
    cosines: Sequence[float] | np.ndarray,
    gold: Sequence[float] | np.ndarray,
    gold_bins: Sequence[tuple[float, float]] = GOLD_BINS,
    bins: int = COSINE_BINS,
) -> CosineDensity:
    """For each gold bin [lo, hi) (the last one [lo, hi]):

    - `grid`: JTCSE Fig. 5, the share of its pairs in each of `GRID_BINS` equal cosine bins over
      [0, 1] (the last bin closed); a negative cosine counts in the first bin. Sums to 1.
    - `density`: the histogram of its cosines over `bins` equal bins of [-1, 1] with density=True,
      count / (n · width), so Σ density · width = 1 (SimCSE's figure).
    An empty gold bin has all-zero shares and density.
    """
    cosines, gold = np.clip(np.asarray(cosines, np.float64), -1, 1), np.asarray(gold, np.float64)
    edges = np.linspace(-1.0, 1.0, bins + 1)
    grid_index = np.minimum(np.floor(np.clip(cosines, 0, 1) * GRID_BINS), GRID_BINS - 1).astype(int)
    density, counts, means, grid = {}, {}, {}, {}
    for number, (low, high) in enumerate(gold_bins):
        last = number == len(gold_bins) - 1
        inside = (gold >= low) & ((gold <= high) if last else (gold < high))
        label = gold_bin_label(low, high)
        counts[label] = int(inside.sum())
        if counts[label]:
            density[label] = np.histogram(cosines[inside], bins=edges, density=True)[0]
            means[label] = float(cosines[inside].mean())
            grid[label] = np.bincount(grid_index[inside], minlength=GRID_BINS) / counts[label]
        else:
            density[label], means[label], grid[label] = np.zeros(bins), None, np.zeros(GRID_BINS)
    return CosineDensity(edges, density, counts, means, grid)
