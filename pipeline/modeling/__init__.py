"""Encoders of the pipeline: one sentence encoder, the TNCSE/JTCSE twin, DDP gathering.

All models are stock Hugging Face `PreTrainedModel`s of a registered family (BERT, RoBERTa, MiniLM
as a BERT, XLM-RoBERTa-XL, Llama; `pipeline.modeling.families`), loaded as the family says (BERT's
with their pooler layer), so every tower saves and loads with `save_pretrained` /
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
    loss = losses.twin_objective(out, losses=None, generator=g).total   # None: every declared term (pipeline.declarations.loss_terms)
    embedding = twin.encode(input_ids, attention_mask)     # h_I^L + h_II^L for inference

The public names are `__all__` below, each documented where it is defined (tests/test_modeling.py
checks that `__all__` is exactly what this module imports). The settings' allowed values and rules
(`POOLERS`, `validate_cael`, ...) live in `pipeline.settings_rules`; ensembles of saved towers
(twin, UC) are `pipeline.evaluated_models.WeightedTowers`.

Bad settings raise `pipeline.errors.PipelineError` with one line naming key, value and what is
allowed. The losses live in `pipeline.losses`; the method as implemented is in docs/method.md.
"""

from pipeline.modeling.distributed import gather_with_grad
from pipeline.modeling.encoder import (
    EncoderOutput,
    SentenceEncoder,
    checkpoint_activations,
    last_layer_cls,
    layer_cls,
    layer_forward,
    load_backbone,
    load_tokenizer,
    masked_mean,
    model_folder_errors,
    pool,
    set_dropout,
)
from pipeline.modeling.layernorm import (
    count_layernorms,
    drop_layernorms,
    dropped_layers,
)
from pipeline.modeling.twin import (
    TwinEncoder,
    TwinOutput,
    cael_layers,
    cross_layer_cls,
)

__all__ = [
    "EncoderOutput",
    "SentenceEncoder",
    "TwinEncoder",
    "TwinOutput",
    "cael_layers",
    "checkpoint_activations",
    "count_layernorms",
    "cross_layer_cls",
    "drop_layernorms",
    "dropped_layers",
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
]
