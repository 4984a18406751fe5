"""Encoders of the pipeline: one sentence encoder, the TNCSE/JTCSE twin, DDP gathering.

All models are stock Hugging Face BERT-family `PreTrainedModel`s (BERT, RoBERTa; MiniLM is BERT)
loaded with their pooler layer, so every tower saves and loads with `save_pretrained` /
`AutoModel.from_pretrained`. Requires transformers >= 5 (layer-by-layer forward and
`create_bidirectional_mask`).

Single encoder (pretraining, distillation, evaluation)::

    encoder = SentenceEncoder.from_pretrained(path, pooler="cls_before_pooler", dropout=None)
    out = encoder(input_ids, attention_mask)      # EncoderOutput(last_cls, pooler_output, pooled)
    # SimCSE pretraining: duplicate rows, contrast the two views' pooler outputs (the MLP)
    z = encoder(ids.repeat_interleave(2, 0), mask.repeat_interleave(2, 0)).pooler_output
    loss = losses.info_nce(z[0::2], z[1::2], gaussian=None)

Twin (joint stage)::

    twin = TwinEncoder.from_pretrained(path_I, path_II, cael=0, dropout=0.00025, cross_mode="stream")
    out = twin(input_ids, attention_mask)          # N sentences -> TwinOutput, views at rows 2k, 2k+1
    out = out.gather()                             # under DDP: global in-batch negatives
    loss = losses.twin_objective(out, losses=("nce", "icnce", "ictn"), generator=g).total
    embedding = twin.encode(input_ids, attention_mask)     # h_I^L + h_II^L for inference

Public API:
- `SentenceEncoder(model, pooler="cls_before_pooler", cls_only_last_layer=True)`,
  `.from_pretrained(path, pooler, dropout, cls_only_last_layer)`,
  `forward(input_ids, attention_mask) -> EncoderOutput(last_cls, pooler_output, pooled)`, each (B, d).
  In eval mode with a [CLS] pooler the last layer runs for [CLS] only (`last_layer_cls`).
- `last_layer_cls(model, input_ids, attention_mask) -> (B, d)`: a stock model's last-layer [CLS],
  the last layer computed for that row only; `layer_forward(layer, hidden, mask, value_layer,
  value_hidden, cls_only)`: one stock layer, optionally with another layer's values (JTCSE's
  cross-attention); `layer_cls(...)`: its [CLS] row only.
- `POOLERS`, `validate_pooler(pooler, key)`, `pool(...)`, `masked_mean(hidden, mask)`.
- `set_dropout(model, p)`: hidden and attention dropout of an existing model (and its config).
- `load_backbone(path, dropout=None, **options)`: AutoModel with its pooler layer; `load_tokenizer(path)`;
  both turn corrupt/truncated/unreadable files into one-line errors (`model_folder_errors(path)`).
- `TwinEncoder(tower_I, tower_II, cael=0, cross_outputs="last", cross_mode="stream")`,
  `.from_pretrained(path_I, path_II, cael, cross_outputs, dropout, cross_mode)`, `forward(input_ids, attention_mask) -> TwinOutput`,
  `encode(input_ids, attention_mask) -> (N, d)`, `.towers`, `.cross_layers` (0-based CAELs).
- `TwinOutput(last_cls, pooler_output, cross_cls)`: (2, 2N, d) stacks, tower I at index 0;
  `cross_cls` is None when cael == 0; `.gather()` all-gathers the views across DDP ranks.
- `validate_cael(cael, num_layers, key="train.cael")` (0 ≤ cael ≤ L), `cael_layers(cael, num_layers)
  -> list[int]` (0-based, the k-th at 1-based layer ⌈k·L/cael⌉), `CROSS_OUTPUTS`,
  `validate_cross_outputs(value, key)`, `CROSS_MODES`, `validate_cross_mode(mode, cross_outputs, key)`.
- `cross_layer_cls(layer, hidden, mask, other_layer, other_hidden) -> (B, d)`: [CLS] of one CAEL's
  cross outputs (the only row the objective reads, so the only one computed).
- Ensembles of saved towers (twin, UC) are `pipeline.models.WeightedTowers`.
- `gather_with_grad(x, dim=0)`: all-gather across DDP ranks keeping the local gradient; identity
  without torch.distributed.

Bad settings raise `pipeline.errors.PipelineError` with one line naming key, value and what is
allowed. The losses live in `pipeline.losses`; the method as implemented is in docs/method.md.
"""

from pipeline.modeling.distributed import gather_with_grad
from pipeline.modeling.encoder import (
    POOLERS,
    EncoderOutput,
    SentenceEncoder,
    last_layer_cls,
    layer_cls,
    layer_forward,
    load_backbone,
    load_tokenizer,
    masked_mean,
    model_folder_errors,
    pool,
    set_dropout,
    validate_pooler,
)
from pipeline.modeling.twin import (
    CROSS_MODES,
    CROSS_OUTPUTS,
    TwinEncoder,
    TwinOutput,
    cael_layers,
    cross_layer_cls,
    validate_cael,
    validate_cross_mode,
    validate_cross_outputs,
)

__all__ = [
    "CROSS_MODES",
    "CROSS_OUTPUTS",
    "POOLERS",
    "EncoderOutput",
    "SentenceEncoder",
    "TwinEncoder",
    "TwinOutput",
    "cael_layers",
    "cross_layer_cls",
    "gather_with_grad",
    "last_layer_cls",
    "layer_cls",
    "layer_forward",
    "load_backbone",
    "load_tokenizer",
    "masked_mean",
    "model_folder_errors",
    "pool",
    "set_dropout",
    "validate_cael",
    "validate_cross_mode",
    "validate_cross_outputs",
    "validate_pooler",
]
