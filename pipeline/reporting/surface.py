"""The tensor-norm loss surface (TNCSE Figure 2, JTCSE Fig. 3): l_TN over k = ‖h^+‖/‖h‖ and t = cos γ,
computed by the project's loss function `pipeline.losses.norm_ratio` and drawn as a 3-D PNG."""

from __future__ import annotations

import numpy as np
import torch

from pipeline.losses import norm_ratio
from pipeline.reporting.figures import plt, png_bytes

# The papers plot "part of the domain of definition" without printing its bounds: t spans its whole
# range [-1, 1], k (0, +∞) is cut at 4 (docs/method.md).
SURFACE_K = (0.05, 4.0)
SURFACE_T = (-1.0, 1.0)
SURFACE_POINTS = 60


def tensor_norm_surface(ks, ts):
    """l_TN(k, t) on the grid ks × ts, computed by `pipeline.losses.norm_ratio` on vector pairs
    h = e1, h^+ = k (t e1 + √(1 − t²) e2) — the loss function itself, not its closed form: (len(ks), len(ts))."""
    k, t = torch.meshgrid(torch.as_tensor(ks, dtype=torch.float64), torch.as_tensor(ts, dtype=torch.float64), indexing="ij")
    anchor = torch.zeros(*k.shape, 2, dtype=torch.float64)
    anchor[..., 0] = 1.0
    positive = torch.stack([k * t, k * (1 - t * t).clamp(min=0).sqrt()], dim=-1)
    return norm_ratio(anchor, positive).numpy()


def tensor_norm_surface_figure(ks, ts, values) -> bytes:
    """The surface l_TN(k, t) (TNCSE Figure 2, JTCSE Fig. 3) as a 3-D plot."""
    k, t = np.meshgrid(np.asarray(ks), np.asarray(ts), indexing="ij")
    figure = plt.figure(figsize=(5.0, 4.0))
    axis = figure.add_subplot(projection="3d")
    axis.plot_surface(k, t, np.asarray(values), cmap="viridis", linewidth=0, antialiased=True)
    axis.set_xlabel("k = ‖h⁺‖ / ‖h‖", fontsize=8)
    axis.set_ylabel("t = cos γ", fontsize=8)
    axis.set_zlabel("l_TN(k, t)", fontsize=8)
    axis.set_title("Tensor-norm loss l_TN = ‖h − h⁺‖ / (‖h‖ + ‖h⁺‖)", fontsize=8)
    figure.tight_layout()
    return png_bytes(figure)
