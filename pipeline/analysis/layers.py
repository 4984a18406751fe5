"""Layer-level analyses of one encoder (for an ensemble the stage reports each tower), from one
forward pass of an *eager-attention* copy of the model (`analyze_layers`):

- `cls_energy(context, mask)`: the CLS energy weight E_CLS (JTCSE Eq. 6) of one layer.
- `attention_received(probs, mask, punct)`: attention received by [CLS], [SEP] and the final
  punctuation token, averaged over heads, queries and sentences (the attention-sink statistic).
- `attention_map(model, sentence)`: per layer, the head-averaged attention matrix of one
  sentence (JTCSE Fig. 9, for `ATTENTION_MAP_SENTENCE`).
- the norms of h^L and h^P per sentence (`pipeline.analysis.norms`).
"""

from __future__ import annotations

import logging
import math
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pipeline.analysis.cost import DEFAULT_SEQ_LEN, thop_gmacs
from pipeline.analysis.norms import norm_statistics
from pipeline.modeling.architecture import architecture_of

log = logging.getLogger(__name__)

# JTCSE Fig. 9's sentence
ATTENTION_MAP_SENTENCE = "This is an example sentence for visualizing attention scores."



def cls_energy(context: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """E_CLS of one layer for each sentence (JTCSE Eq. 6): E_CLS = ||h_cls||_2 / ||H_-||_F.

    Reading of the paper: the "context tensor" is the attention-weighted Value, softmax(QK^T/√d_h)·V
    with the heads concatenated — the self-attention output *before* the output projection W_O
    (JTCSE discussion, B: "the weighted Value is defined as the context tensor"). h_cls is its
    [CLS] row and H_- the matrix of the rows of every other real token ([SEP] and final
    punctuation included, padding excluded). `context` is (B, T, d), `attention_mask` (B, T);
    returns (B,).
    """
    mask = attention_mask.to(torch.float64)
    context = context.to(torch.float64)
    cls = context[:, 0].norm(dim=-1)  # the [CLS] token at position 0 by the paper's definition, not the sentence vector
    others = (context[:, 1:].pow(2).sum(-1) * mask[:, 1:]).sum(-1).sqrt()
    return cls / others.clamp_min(torch.finfo(torch.float64).tiny)


def attention_received(
    probabilities: torch.Tensor, attention_mask: torch.Tensor, final_punct: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Attention received by key positions of one layer, per sentence.

    `probabilities` (B, H, T, T) are softmax attention weights (query rows, key columns). For each
    sentence: received(k) = mean over heads h and real queries q of A[h, q, k]. Returns (B,) tensors
    `cls` = received(0), `sep` = received(n − 1) (the closing special token, n real tokens) and
    `final_punct` = received(n − 2), meaningful where `final_punct` (B,) bool marks that token as
    punctuation (NaN elsewhere). Each is a probability in [0, 1].
    """
    probs = probabilities.to(torch.float64).mean(1)  # (B, T, T), mean over heads
    queries = attention_mask.to(torch.float64)
    received = (probs * queries.unsqueeze(-1)).sum(1) / queries.sum(1, keepdim=True)  # (B, T)
    rows = torch.arange(len(received))
    lengths = attention_mask.sum(1).long()
    punct = received[rows, (lengths - 2).clamp_min(0)]
    return {
        "cls": received[:, 0],  # the sink at position 0 ([CLS]) the paper measures, whatever the sentence vector is
        "sep": received[rows, lengths - 1],
        "final_punct": torch.where(final_punct, punct, torch.full_like(punct, math.nan)),
    }


def is_punctuation_token(token: str) -> bool:
    """A vocabulary entry that is punctuation only, e.g. '.', '?', 'Ġ.' (byte-level BPE), '##!'."""
    text = token.removeprefix("##").lstrip("Ġ▁")
    return bool(text) and all(unicodedata.category(char).startswith("P") for char in text)


def punctuation_ids(tokenizer) -> torch.Tensor:
    """The ids of the tokenizer's punctuation-only tokens (`is_punctuation_token`), special tokens excluded."""
    special = set(tokenizer.all_special_ids)
    ids = [index for token, index in tokenizer.get_vocab().items() if index not in special and is_punctuation_token(token)]
    return torch.tensor(sorted(ids), dtype=torch.long)


@dataclass
class LayerAnalysis:
    """Layer-level results of one encoder over a set of sentences (layers 1…L in order)."""

    e_cls: list[float]  # mean over sentences of E_CLS, per layer
    attention_sink: dict[str, Any]  # cls / sep / final_punct lists per layer + counts
    last_hidden_norms: np.ndarray  # ||h^L|| per sentence
    pooler_norms: np.ndarray  # ||h^P|| per sentence
    sentences: int
    config: Any = field(repr=False, default=None)
    gmacs: float | None = None  # thop's count of one forward pass at `seq_len` tokens
    attention_map: dict[str, Any] | None = None  # JTCSE Fig. 9 (`attention_map`)

    def norms(self) -> dict[str, Any]:
        return norm_statistics(self.last_hidden_norms, self.pooler_norms)



def attention_map(encoder: torch.nn.Module, tokenizer, sentence: str = ATTENTION_MAP_SENTENCE) -> dict[str, Any]:
    """JTCSE Fig. 9: for one sentence, each layer's attention matrix averaged over heads.

    `encoder` is an eager-attention model (`load_eager_model`). Returns {"sentence", "tokens" (the
    model's tokens, special ones included), "layers": one T×T list per layer (query rows, key
    columns; rows sum to 1)}."""
    batch = tokenizer(sentence, return_tensors="pt").to(next(encoder.parameters()).device)
    with torch.inference_mode():
        output = encoder(**batch, output_attentions=True)
    return {
        "sentence": sentence,
        "tokens": tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()),
        "layers": [layer[0].double().mean(0).cpu().round(decimals=6).tolist() for layer in output.attentions],
    }


def load_eager_model(model: str | Path, device: torch.device | str = "cpu"):
    """The model with its pooler and eager attention (so attention weights are returned), in eval mode."""
    from pipeline.modeling.encoder import load_backbone

    return load_backbone(model, attn_implementation="eager").to(device).eval()




class _LayerSums:
    """Running sums of `analyze_layers` over batches: E_CLS and attention received per layer, the
    sentences ending in punctuation, Σ 1/n, and the norms of h^L and h^P per sentence."""

    def __init__(self, layers: int, punct_ids: torch.Tensor):
        self.layers, self.punct_ids = layers, punct_ids
        self.e_cls = torch.zeros(layers, dtype=torch.float64)
        self.sink = {key: torch.zeros(layers, dtype=torch.float64) for key in ("cls", "sep", "final_punct")}
        self.punct_count, self.inverse_length_sum, self.end_inverse_length_sum = 0, 0.0, 0.0
        self.last_norms: list[torch.Tensor] = []
        self.pooler_norms: list[torch.Tensor] = []

    def add(self, input_ids: torch.Tensor, mask: torch.Tensor, output: Any, contexts: Sequence[torch.Tensor],
            sentence_outputs: tuple[torch.Tensor, torch.Tensor]) -> None:
        """One batch: its ids and mask, the encoder output (attentions included), each layer's context tensor
        and (h^L, h^P) as the family's adapter reads them."""
        lengths = mask.sum(1)
        rows = torch.arange(len(mask), device=mask.device)
        has_punct = (lengths >= 3) & torch.isin(input_ids[rows, (lengths - 2).clamp_min(0)], self.punct_ids)
        self.punct_count += int(has_punct.sum())
        self.inverse_length_sum += float((1.0 / lengths.double()).sum())
        self.end_inverse_length_sum += float(((1.0 + has_punct.double()) / lengths.double()).sum())
        for layer in range(self.layers):
            self.e_cls[layer] += cls_energy(contexts[layer], mask).sum().cpu()
            received = attention_received(output.attentions[layer], mask, has_punct)
            for key, values in received.items():
                self.sink[key][layer] += values.nan_to_num(0.0).sum().cpu()
        last_cls, pooler_output = sentence_outputs
        self.last_norms.append(last_cls.double().norm(dim=-1).cpu())
        self.pooler_norms.append(pooler_output.double().norm(dim=-1).cpu())

    def attention_sink(self, count: int) -> dict[str, Any]:
        """Means over the `count` sentences (final punctuation: over those that end in it), and the
        last layer's sink on the end of the sequence (JTCSE: "end-of-sequence tokens at the last encoding
        layer"): `last_end`, the attention [SEP] and the final punctuation (where a sentence ends in it)
        receive together, mean over every sentence; `uniform_end`, what those tokens would receive under
        uniform attention, the mean of 2/n (1/n without final punctuation)."""
        return {
            "cls": (self.sink["cls"] / count).tolist(),
            "sep": (self.sink["sep"] / count).tolist(),
            "final_punct": (self.sink["final_punct"] / self.punct_count).tolist() if self.punct_count else [None] * self.layers,
            "uniform": self.inverse_length_sum / count,  # what one token receives under uniform attention, mean 1/n
            "last_end": float(self.sink["sep"][-1] + self.sink["final_punct"][-1]) / count,
            "uniform_end": self.end_inverse_length_sum / count,
            "sentences": count,
            "sentences_with_final_punct": self.punct_count,
        }


def _run_layers(encoder, tokenizer, unique: list[str], sums: _LayerSums, max_length: int, batch_size: int, device, description: str) -> None:
    """Encode `unique` in batches with a hook on every layer capturing its context tensor (where the
    family's adapter says it is read, `Architecture.capture_context`), adding each batch to `sums`."""
    architecture = architecture_of(encoder)
    layers = architecture.layers(encoder)
    contexts: list[torch.Tensor | None] = [None] * len(layers)

    def capture(index: int):
        def store(context: torch.Tensor) -> None:
            contexts[index] = context

        return store

    handles = [architecture.capture_context(layer, capture(index)) for index, layer in enumerate(layers)]
    try:
        with torch.inference_mode(), tqdm(total=len(unique), desc=description, unit="sent") as progress:
            for start in range(0, len(unique), batch_size):
                batch = tokenizer(
                    unique[start : start + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
                ).to(device)
                mask = batch["attention_mask"]
                output = encoder(input_ids=batch["input_ids"], attention_mask=mask, output_attentions=True)
                sums.add(batch["input_ids"], mask, output, contexts, architecture.sentence_outputs(encoder, output, mask))
                progress.update(len(mask))
    finally:
        for handle in handles:
            handle.remove()


def analyze_layers(
    model: str | Path,
    sentences: Sequence[str],
    max_length: int = 128,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    description: str = "layers",
    seq_len: int = DEFAULT_SEQ_LEN,
) -> LayerAnalysis:
    """E_CLS per layer, attention received per layer and the norms of h^L and h^P, in one eager pass.

    The context tensor of each layer (input of the attention output projection) is read with a
    hook where the family's adapter says (`Architecture.capture_context`; BERT's `attention.self`);
    the attention probabilities come from
    `output_attentions=True`. Every per-sentence quantity is averaged over sentences with equal
    weight; sentences are batched by length (padding never changes a result: padded keys get
    exactly zero attention and padded queries/tokens are masked out).
    """
    from pipeline.modeling.encoder import load_tokenizer

    tokenizer = load_tokenizer(model)
    encoder = load_eager_model(model, device)
    layer_count = architecture_of(encoder).layer_count(encoder.config)
    sums = _LayerSums(layer_count, punctuation_ids(tokenizer).to(device))
    unique = sorted(dict.fromkeys(sentences), key=lambda s: (-len(s), s))
    started = time.perf_counter()
    _run_layers(encoder, tokenizer, unique, sums, max_length, batch_size, device, description)
    seconds = time.perf_counter() - started
    count = len(unique)
    log.info("%s: %d layers over %d sentences in %.1f s (%.0f sentences/s)", description, layer_count, count, seconds, count / max(seconds, 1e-9))
    return LayerAnalysis(
        e_cls=(sums.e_cls / count).tolist(),
        attention_sink=sums.attention_sink(count),
        last_hidden_norms=torch.cat(sums.last_norms).numpy(),
        pooler_norms=torch.cat(sums.pooler_norms).numpy(),
        sentences=count,
        config=encoder.config,
        gmacs=thop_gmacs(encoder, seq_len),
        attention_map=attention_map(encoder, tokenizer),
    )
