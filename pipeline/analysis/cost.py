"""Inference cost (JTCSE Table VII): `thop_gmacs(model, seq_len)` counts one forward pass with the
thop package, as the paper does (its count equals `thop_formula_gmacs`: the Linear and LayerNorm
layers); `inference_gmacs` also counts the attention matrix products; `efficiency(score, gmacs)` = η.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from pipeline.modeling.architecture import architecture_of

DEFAULT_SEQ_LEN = 64  # the twin stage's max length in the released code


def inference_gmacs(config: Any, seq_len: int = DEFAULT_SEQ_LEN, towers: int = 1) -> float:
    """Multiply-accumulates (×1e-9) of one forward pass of one sentence of `seq_len` tokens (T),
    attention matrix products included (thop does not count them; see `thop_gmacs`), by the formula of
    the config's family (`Architecture.inference_macs`). An ensemble of `towers` encoders costs `towers`
    times one encoder.

    BERT's family: per encoder layer the Q, K, V and output projections 4·T·d², attention scores QKᵀ
    and the weighted sum of V 2·T²·d (over all heads), feed-forward 2·T·d·d_ff; plus the pooler d² (one
    [CLS] vector). Not counted: embeddings (lookups), LayerNorm, softmax, GELU, biases, residual
    additions (O(T·d) each). GMAC = L·(4Td² + 2T²d + 2Tdd_ff) + d², ×towers, ×1e-9.
    """
    return towers * architecture_of(config).inference_macs(config, seq_len) / 1e9


def thop_formula_gmacs(config: Any, seq_len: int = DEFAULT_SEQ_LEN, towers: int = 1) -> float:
    """What thop counts for one encoder of the config's family, written out (`Architecture.thop_macs`;
    tests prove it equal to `thop_gmacs`). BERT's family: every nn.Linear in·out per output row (Q, K, V,
    output 4·T·d², feed-forward 2·T·d·d_ff, the pooler d² on its one [CLS] row) and every LayerNorm 4 per
    element (normalise 2, affine 2; 1 + 2L of them, T·d elements); embeddings, softmax, GELU and the
    attention matrix products count zero.

    GMAC = L·(4Td² + 2Tdd_ff) + d² + 4·(1 + 2L)·T·d, ×towers, ×1e-9."""
    return towers * architecture_of(config).thop_macs(config, seq_len) / 1e9


def thop_gmacs(model: torch.nn.Module, seq_len: int = DEFAULT_SEQ_LEN) -> float:
    """GMAC of one forward pass of one sentence of `seq_len` tokens, counted by thop (JTCSE Table VII:
    "We use the Thop package to evaluate the inference overhead of the model")."""
    import thop

    input_ids = torch.full((1, int(seq_len)), 3, dtype=torch.long, device=next(model.parameters()).device)
    try:
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # thop's distutils version check
            macs, _ = thop.profile(model, inputs=(input_ids,), verbose=False)
    finally:
        for module in model.modules():  # thop leaves its counters as buffers on every module
            for name in ("total_ops", "total_params"):
                module._buffers.pop(name, None)
    return float(macs) / 1e9


def efficiency(score: float | None, gmacs: float) -> float | None:
    """η = Score / Cost (JTCSE Table VII): the 7-STS average per GMAC; None without a score."""
    if score is None or gmacs <= 0:
        return None
    return float(score) / gmacs
