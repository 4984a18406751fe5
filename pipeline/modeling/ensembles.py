"""Ensembles of sentence embeddings (TNCSE/JTCSE inference): sums of towers and the UC weighting.

All functions take embedding tensors of equal shape (B, d) and are plain arithmetic, so they work
on any pooled vectors; the papers use last-layer [CLS] (h^L) of every member.
"""

from collections.abc import Sequence

import torch

# w of the UC ensemble in the papers: 0.7 for BERT, 0.75 for RoBERTa.
PAPER_UC_WEIGHT = {"bert": 0.7, "roberta": 0.75}


def twin_sum(h_I: torch.Tensor, h_II: torch.Tensor) -> torch.Tensor:
    """The twin's embedding h_I + h_II."""
    return h_I + h_II


def tower_sum(embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
    """An N-tower ensemble (e.g. EDFSE's six encoders, or the untrained "None" pair): Σ_i h_i."""
    return torch.stack(list(embeddings)).sum(0)


def uc_ensemble(h_I: torch.Tensor, h_II: torch.Tensor, h_uc: torch.Tensor, weight: float) -> torch.Tensor:
    """The UC ensemble (1 − w)(h_I + h_II) + w · h_UC with an existing unsupervised checkpoint UC."""
    return (1 - weight) * twin_sum(h_I, h_II) + weight * h_uc
