"""Analysis metrics of the papers' ablation and discussion sections, and inference cost.

Embedding level (any model, ensembles included; inputs are embedding matrices):

- `alignment(x, y, alpha=2)` and `uniformity(x, t=2)` (Wang & Isola 2020; JTCSE Eq. 16-17),
  on L2-normalised embeddings. As SimCSE defines them: STS-B pairs with gold > 4 are the
  positives (`positive_pairs`), the STS-B sentences the data distribution (which splits:
  `analysis.align_data`, docs/method.md).
- `cosine_density(cosines, gold)`: per gold group [0,1), [1,2), [2,3), [3,4), [4,5], the shares
  of its pairs in five cosine bins over [0, 1] (JTCSE Fig. 5's grid, `grid`) and a 40-bin
  density histogram over [-1, 1] (SimCSE's figure, `density`).

Layer level (one encoder; for an ensemble the stage reports each tower), from one forward pass of
an *eager-attention* copy of the model (`analyze_layers`):

- `cls_energy(context, mask)`: the CLS energy weight E_CLS (JTCSE Eq. 6) of one layer.
- `attention_received(probs, mask, punct)`: attention received by [CLS], [SEP] and the final
  punctuation token, averaged over heads, queries and sentences (the attention-sink statistic).
- `attention_map(model, sentence)`: per layer, the head-averaged attention matrix of one
  sentence (JTCSE Fig. 9, for `ATTENTION_MAP_SENTENCE`).
- `norm_statistics(last_hidden, pooler)`: ||h^L|| ([CLS] of the last hidden state) vs ||h^P||
  (pooler output) — the modulus argument of JTCSE's discussion section.

Cost (JTCSE Table VII): `thop_gmacs(model, seq_len)` counts one forward pass with the thop package,
as the paper does (its count equals `thop_formula_gmacs`: the Linear and LayerNorm layers);
`inference_gmacs` also counts the attention matrix products; `efficiency(score, gmacs)` = η.
"""

from __future__ import annotations

import logging
import math
import time
import unicodedata
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

GOLD_BINS: tuple[tuple[float, float], ...] = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))
POSITIVE_GOLD = 4.0  # STS-B pairs with gold > 4 are the positives of `alignment` (SimCSE's definition)
COSINE_BINS = 40  # histogram bins over [-1, 1] (width 0.05)
GRID_BINS = 5  # JTCSE Fig. 5: cosine bins 0-0.2 … 0.8-1.0
# JTCSE Fig. 9's sentence
ATTENTION_MAP_SENTENCE = "This is an example sentence for visualizing attention scores."
NORM_BINS = 80
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
DEFAULT_SEQ_LEN = 64  # the twin stage's max length in the released code


# --------------------------------------------------------------------------- embedding level


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


# --------------------------------------------------------------------------- norms


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


# --------------------------------------------------------------------------- layer level


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
    cls = context[:, 0].norm(dim=-1)
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
        "cls": received[:, 0],
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


def _self_attention_modules(model) -> list[torch.nn.Module]:
    """`encoder.layer[i].attention.self` of a BERT-family model (BERT, RoBERTa, MiniLM, …)."""
    try:
        return [layer.attention.self for layer in model.encoder.layer]
    except AttributeError:
        raise PipelineError(
            f"{type(model).__name__} is not a BERT-family encoder (no encoder.layer[i].attention.self); "
            "the layer analyses support BERT and RoBERTa models"
        ) from None


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
    forward hook on `attention.self`; the attention probabilities come from
    `output_attentions=True`. Every per-sentence quantity is averaged over sentences with equal
    weight; sentences are batched by length (padding never changes a result: padded keys get
    exactly zero attention and padded queries/tokens are masked out).
    """
    from pipeline.modeling.encoder import load_tokenizer

    tokenizer = load_tokenizer(model)
    encoder = load_eager_model(model, device)
    punct_ids = punctuation_ids(tokenizer).to(device)
    modules = _self_attention_modules(encoder)
    layers = len(modules)
    contexts: list[torch.Tensor | None] = [None] * layers

    def capture(index: int):
        def hook(_module, _inputs, output):
            contexts[index] = output[0]

        return hook

    handles = [module.register_forward_hook(capture(index)) for index, module in enumerate(modules)]
    unique = sorted(dict.fromkeys(sentences), key=lambda s: (-len(s), s))
    e_cls_sum = torch.zeros(layers, dtype=torch.float64)
    sink_sum = {key: torch.zeros(layers, dtype=torch.float64) for key in ("cls", "sep", "final_punct")}
    punct_count, inverse_length_sum = 0, 0.0
    last_norms, pooler_norms = [], []
    started = time.perf_counter()
    try:
        with torch.inference_mode(), tqdm(total=len(unique), desc=description, unit="sent") as progress:
            for start in range(0, len(unique), batch_size):
                batch = tokenizer(
                    unique[start : start + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
                ).to(device)
                mask = batch["attention_mask"]
                output = encoder(input_ids=batch["input_ids"], attention_mask=mask, output_attentions=True)
                lengths = mask.sum(1)
                rows = torch.arange(len(mask), device=mask.device)
                has_punct = (lengths >= 3) & torch.isin(batch["input_ids"][rows, (lengths - 2).clamp_min(0)], punct_ids)
                punct_count += int(has_punct.sum())
                inverse_length_sum += float((1.0 / lengths.double()).sum())
                for layer in range(layers):
                    e_cls_sum[layer] += cls_energy(contexts[layer], mask).sum().cpu()
                    received = attention_received(output.attentions[layer], mask, has_punct)
                    for key, values in received.items():
                        sink_sum[key][layer] += values.nan_to_num(0.0).sum().cpu()
                last_norms.append(output.last_hidden_state[:, 0].double().norm(dim=-1).cpu())
                pooler_norms.append(output.pooler_output.double().norm(dim=-1).cpu())
                progress.update(len(mask))
    finally:
        for handle in handles:
            handle.remove()
    seconds = time.perf_counter() - started
    count = len(unique)
    log.info("%s: %d layers over %d sentences in %.1f s (%.0f sentences/s)", description, layers, count, seconds, count / max(seconds, 1e-9))
    sink = {
        "cls": (sink_sum["cls"] / count).tolist(),
        "sep": (sink_sum["sep"] / count).tolist(),
        "final_punct": (sink_sum["final_punct"] / punct_count).tolist() if punct_count else [None] * layers,
        "uniform": inverse_length_sum / count,  # what one token receives under uniform attention, mean 1/n
        "sentences": count,
        "sentences_with_final_punct": punct_count,
    }
    return LayerAnalysis(
        e_cls=(e_cls_sum / count).tolist(),
        attention_sink=sink,
        last_hidden_norms=torch.cat(last_norms).numpy(),
        pooler_norms=torch.cat(pooler_norms).numpy(),
        sentences=count,
        config=encoder.config,
        gmacs=thop_gmacs(encoder, seq_len),
        attention_map=attention_map(encoder, tokenizer),
    )


# --------------------------------------------------------------------------- inference cost


def _architecture(config: Any) -> tuple[int, int, int]:
    """(hidden size d, layers L, feed-forward size d_ff) of a config object or mapping."""
    get = config.get if isinstance(config, Mapping) else lambda key: getattr(config, key, None)
    values = [get(key) for key in ("hidden_size", "num_hidden_layers", "intermediate_size")]
    if any(not isinstance(value, int) or value <= 0 for value in values):
        raise PipelineError(
            f"model config lacks hidden_size/num_hidden_layers/intermediate_size (got {values}); "
            "inference cost is counted for BERT-family encoders only"
        )
    return values[0], values[1], values[2]


def inference_gmacs(config: Any, seq_len: int = DEFAULT_SEQ_LEN, towers: int = 1) -> float:
    """Multiply-accumulates (×1e-9) of one forward pass of one sentence of `seq_len` tokens (T),
    attention matrix products included (thop does not count them; see `thop_gmacs`).

    Per encoder layer: Q, K, V and output projections 4·T·d², attention scores QKᵀ and the weighted
    sum of V 2·T²·d (over all heads), feed-forward 2·T·d·d_ff; plus the pooler d² (one [CLS] vector).
    Not counted: embeddings (lookups), LayerNorm, softmax, GELU, biases, residual additions
    (O(T·d) each). An ensemble of `towers` encoders costs `towers` times one encoder.

    GMAC = L·(4Td² + 2T²d + 2Tdd_ff) + d², ×towers, ×1e-9.
    """
    d, layers, d_ff = _architecture(config)
    t = int(seq_len)
    per_layer = 4 * t * d * d + 2 * t * t * d + 2 * t * d * d_ff
    return towers * (layers * per_layer + d * d) / 1e9


def thop_formula_gmacs(config: Any, seq_len: int = DEFAULT_SEQ_LEN, towers: int = 1) -> float:
    """What thop counts for a BERT-family encoder, written out (tests prove it equal to `thop_gmacs`):
    every nn.Linear in·out per output row (Q, K, V, output 4·T·d², feed-forward 2·T·d·d_ff, the
    pooler d² on its one [CLS] row) and every LayerNorm 4 per element (normalise 2, affine 2; 1 + 2L
    of them, T·d elements); embeddings, softmax, GELU and the attention matrix products count zero.

    GMAC = L·(4Td² + 2Tdd_ff) + d² + 4·(1 + 2L)·T·d, ×towers, ×1e-9."""
    d, layers, d_ff = _architecture(config)
    t = int(seq_len)
    return towers * (layers * (4 * t * d * d + 2 * t * d * d_ff) + d * d + 4 * (1 + 2 * layers) * t * d) / 1e9


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


# --------------------------------------------------------------------------- every model at once


@dataclass
class Analysis:
    """The results of `analyze_models`: one JSON-ready report per model, the cosine densities per
    model and the layer analyses per tower folder."""

    reports: dict[str, dict[str, Any]]
    densities: dict[str, CosineDensity]
    layers: dict[str, LayerAnalysis]

    def align_uniform_table(self) -> list[dict[str, Any]]:
        """Rows model, uniformity, alignment, avg (JTCSE Fig. 7 style scatter)."""
        return [
            {"model": name, "uniformity": report["uniformity"], "alignment": report["alignment"], "avg": report["avg"]}
            for name, report in self.reports.items()
        ]

    def cls_energy_table(self) -> list[dict[str, Any]]:
        """Rows model, e_cls (mean over layers), avg (JTCSE Fig. 10)."""
        return [{"model": name, "e_cls": report["e_cls_mean"], "avg": report["avg"]} for name, report in self.reports.items()]

    def cosine_density_tables(self) -> dict[str, list[dict[str, Any]]]:
        """Per gold bin label: rows cosine (bin centre), then one density column per model."""
        if not self.densities:
            return {}
        first = next(iter(self.densities.values()))
        tables = {}
        for label in first.density:
            tables[label] = [
                {"cosine": float(centre)} | {name: float(density.density[label][row]) for name, density in self.densities.items()}
                for row, centre in enumerate(first.centres)
            ]
        return tables

    def cosine_grid_table(self) -> list[dict[str, Any]]:
        """JTCSE Fig. 5: rows model, gold group, then the share of the group's pairs per cosine bin."""
        return [
            {"model": name, "gold": label} | dict(zip(grid_bin_labels(), shares.tolist()))
            for name, density in self.densities.items()
            for label, shares in density.grid.items()
        ]

    def attention_maps(self) -> dict[str, dict[str, Any]]:
        """JTCSE Fig. 9: the attention map of every distinct tower, keyed by its folder."""
        return {tower: analysis.attention_map for tower, analysis in self.layers.items()}

    def norm_histogram_table(self, towers: Sequence[str]) -> list[dict[str, Any]]:
        """Rows norm (bin centre), last_hidden, pooler (densities) of the given towers' sentences pooled."""
        last = np.concatenate([self.layers[tower].last_hidden_norms for tower in towers])
        pooler = np.concatenate([self.layers[tower].pooler_norms for tower in towers])
        histogram = norm_histogram(last, pooler)
        return [
            {"norm": centre, "last_hidden": a, "pooler": b}
            for centre, a, b in zip(histogram["centre"], histogram["last_hidden"], histogram["pooler"])
        ]


def analyze_models(
    models: Mapping[str, Sequence[tuple[str, float]]],
    pairs: Sequence[Any],
    make_embedder,
    scores: Mapping[str, float | None] | None = None,
    batch_size: int = 64,
    max_length: int = 128,
    device: torch.device | str = "cpu",
    seq_len: int = DEFAULT_SEQ_LEN,
    align_pairs: Sequence[Any] | None = None,
) -> Analysis:
    """Every analysis for every named model (a weighted sum of tower folders) on scored pairs.

    `pairs` are STS-B test `ScoredPair`s (cosine densities, layer analyses); `align_pairs` the
    STS-B pairs of alignment and uniformity (default: `pairs`). Their distinct sentences are
    encoded once per distinct tower (`embed_sentences` with `make_embedder(tower)`, the evaluation
    embedder, so the pooler is the evaluated one) and ensembles are weighted sums of tower tables
    (`combine_tables`), as in `evaluate_models`. The layer analyses run once per distinct tower on
    the sentences of `pairs`. `scores` gives each model's 7-STS average for η (None or absent: η
    is null with a note).
    """
    from pipeline.evaluation.sts import combine_tables, embed_sentences

    scores = scores or {}
    align_pairs = pairs if align_pairs is None else align_pairs
    sentences = list(dict.fromkeys(s for pair in pairs for s in (pair.sentence1, pair.sentence2)))
    align_sentences = list(dict.fromkeys(s for pair in align_pairs for s in (pair.sentence1, pair.sentence2)))
    gold = np.array([pair.score for pair in pairs], np.float64)
    positives = positive_pairs(align_pairs)
    towers = list(dict.fromkeys(tower for members in models.values() for tower, _ in members))
    to_embed = list(dict.fromkeys(sentences + align_sentences))
    tables, layers = {}, {}
    for tower in towers:
        label = "/".join(Path(tower).parts[-2:])
        tables[tower] = embed_sentences(make_embedder(tower), to_embed, batch_size, description=f"embed {label}")
        layers[tower] = analyze_layers(
            tower, sentences, max_length, batch_size, device, description=f"layers {label}", seq_len=seq_len
        )

    reports, densities = {}, {}
    for name, members in models.items():
        table = combine_tables(tables, members)
        cosines = pair_cosines(table.lookup([p.sentence1 for p in pairs]), table.lookup([p.sentence2 for p in pairs]))
        densities[name] = density = cosine_density(cosines, gold)
        member_layers = {tower: layers[tower] for tower, _ in members}
        ensemble = len(members) > 1
        e_cls = np.mean([analysis.e_cls for analysis in member_layers.values()], axis=0).tolist()
        gmacs = sum(layers[tower].gmacs for tower, _ in members)
        score = scores.get(name)
        report: dict[str, Any] = {
            "model": name,
            "towers": [{"path": tower, "weight": weight} for tower, weight in members],
            "pairs": len(pairs),
            "align_pairs": len(align_pairs),
            "positive_pairs": len(positives),
            "sentences": len(sentences),
            "align_sentences": len(align_sentences),
            "alignment": (
                alignment(table.lookup([p.sentence1 for p in positives]), table.lookup([p.sentence2 for p in positives]))
                if positives else None
            ),
            "uniformity": uniformity(table.lookup(align_sentences)),
            "e_cls": e_cls,
            "e_cls_mean": float(np.mean(e_cls)),
        }
        if ensemble:
            report["e_cls_towers"] = {tower: analysis.e_cls for tower, analysis in member_layers.items()}
            report["norms"] = {tower: analysis.norms() for tower, analysis in member_layers.items()}
            report["attention_sink"] = {tower: analysis.attention_sink for tower, analysis in member_layers.items()}
        else:
            (analysis,) = member_layers.values()
            report["norms"] = analysis.norms()
            report["attention_sink"] = analysis.attention_sink
        report["cosine_density"] = {
            label: {"pairs": density.counts[label], "mean_cosine": density.mean_cosine[label]}
            | dict(zip(grid_bin_labels(), density.grid[label].tolist()))
            for label in density.counts
        }
        report |= {
            "seq_len": seq_len,
            "gmacs": gmacs,
            "gmacs_with_attention": sum(inference_gmacs(layers[tower].config, seq_len) for tower, _ in members),
            "avg": score,
            "eta": efficiency(score, gmacs),
        }
        if score is None:
            report["eta_note"] = f"no 7-STS average for {name} (reports/metrics/{name}.json missing); run evaluate first"
        reports[name] = report
    return Analysis(reports, densities, layers)
