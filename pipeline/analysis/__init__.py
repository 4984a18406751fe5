"""Analysis metrics of the papers' ablation and discussion sections, and inference cost.

- `embedding`: alignment and uniformity (JTCSE Eq. 16-17), cosine densities per gold group
  (JTCSE Fig. 5, SimCSE's density figure), on any model's embeddings (ensembles included).
- `layers`: one eager-attention pass of one encoder: E_CLS per layer (JTCSE Eq. 6), attention
  received by [CLS]/[SEP]/final punctuation (attention sink), the attention map of one sentence
  (JTCSE Fig. 9), the norms of h^L and h^P.
- `norms`: statistics and histograms of those norms (JTCSE discussion, A).
- `norm_probe`: ‖h^L‖ and ‖h^P‖ per model over a seeded sample of corpus sentences (the LayerNorm
  study, TNCSE Figure 5 / JTCSE Fig. 8).
- `cost`: GMAC of one forward pass (thop, as JTCSE Table VII) and η = score / cost.
- `models`: every analysis for every pipeline model (`analyze_models`) and its plot tables.
"""

from pipeline.analysis.cost import (
    DEFAULT_SEQ_LEN,
    efficiency,
    inference_gmacs,
    thop_formula_gmacs,
    thop_gmacs,
)
from pipeline.analysis.embedding import (
    COSINE_BINS,
    GOLD_BINS,
    GRID_BINS,
    POSITIVE_GOLD,
    CosineDensity,
    alignment,
    cosine_density,
    gold_bin_label,
    grid_bin_labels,
    pair_cosines,
    positive_pairs,
    uniformity,
)
from pipeline.analysis.layers import (
    ATTENTION_MAP_SENTENCE,
    LayerAnalysis,
    analyze_layers,
    attention_map,
    attention_received,
    cls_energy,
    is_punctuation_token,
    load_eager_model,
    punctuation_ids,
)
from pipeline.analysis.per_model import Analysis, analyze_models
from pipeline.analysis.norm_probe import PROBE_SENTENCES, norm_probe, probe_sentences, tower_norms
from pipeline.analysis.norms import NORM_BINS, QUANTILES, norm_histogram, norm_statistics, summary_statistics

__all__ = [
    "ATTENTION_MAP_SENTENCE", "COSINE_BINS", "DEFAULT_SEQ_LEN", "GOLD_BINS", "GRID_BINS", "NORM_BINS", "POSITIVE_GOLD",
    "PROBE_SENTENCES", "QUANTILES", "Analysis", "CosineDensity", "LayerAnalysis", "alignment", "analyze_layers", "analyze_models",
    "attention_map", "attention_received", "cls_energy", "cosine_density", "efficiency", "gold_bin_label",
    "grid_bin_labels", "inference_gmacs", "is_punctuation_token", "load_eager_model", "norm_histogram",
    "norm_probe", "norm_statistics", "pair_cosines", "positive_pairs", "probe_sentences", "punctuation_ids", "summary_statistics", "thop_formula_gmacs",
    "thop_gmacs", "tower_norms", "uniformity",
]
