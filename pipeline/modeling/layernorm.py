"""The papers' LayerNorm study (TNCSE Figure 5, JTCSE Fig. 8): LayerNorms of the last k encoder layers removed.

"Removed" in code: in each of the last k encoder layers, both LayerNorms — the one after the
attention block (`layer.attention.output.LayerNorm`) and the one after the feed-forward block
(`layer.output.LayerNorm`) — become `nn.Identity`. The residual additions stay: each block still
returns dropout(dense(x)) + its input, only the normalisation of that sum is gone. The embeddings'
LayerNorm and the pooler are untouched. TNCSE: "include two LayerNorms in each of their encoder
layers, which are located after the attention layer and after the FNN, respectively"; "remove the
last several layers of LayerNorm of the encoder" (docs/method.md, "LayerNorm study").

The count is recorded in the model's config (`dropped_layernorm_layers`), so `save_pretrained`
writes it to config.json and `pipeline.modeling.load_backbone` removes the same LayerNorms again on
load: a saved model embeds as it did in training. Stock `AutoModel.from_pretrained` does not read
that key; it would re-create the removed LayerNorms with fresh unit weights (docs/method.md says
so), which is why the pipeline loads models through `load_backbone` only.
"""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel

from pipeline.config import describe_allowed_drop
from pipeline.errors import PipelineError

CONFIG_KEY = "dropped_layernorm_layers"
LAYERNORMS_PER_LAYER = 2  # after attention, after the feed-forward block


def validate_drop_layernorm(k: int, num_layers: int, key: str = "train.drop_layernorm") -> int:
    """0 ≤ k ≤ L, as an int; otherwise one line naming the key."""
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= num_layers:
        raise PipelineError(f"{key}={k!r} is out of range; allowed: {describe_allowed_drop(num_layers)}")
    return k


def dropped_layers(model: PreTrainedModel) -> int:
    """How many final encoder layers of `model` have their LayerNorms removed (its config's record)."""
    return int(getattr(model.config, CONFIG_KEY, 0) or 0)


def _layer_norm_slots(layer: nn.Module) -> list[tuple[nn.Module, str]]:
    """(parent module, attribute) of a BERT-family encoder layer's two LayerNorms."""
    return [(layer.attention.output, "LayerNorm"), (layer.output, "LayerNorm")]


def drop_layernorms(model: PreTrainedModel, k: int) -> PreTrainedModel:
    """Replace both LayerNorms of the last `k` encoder layers with `nn.Identity`, in place; record k.

    k = 0 changes nothing. A model that already has LayerNorms removed accepts the same k again
    (reapplying on load) and refuses another: what was removed cannot be put back.
    """
    layers = model.encoder.layer
    validate_drop_layernorm(k, len(layers))
    already = dropped_layers(model)
    if already and already != k:
        raise PipelineError(
            f"drop_layernorm={k}: this model already has the LayerNorms of its last {already} layers removed "
            f"({CONFIG_KEY} in its config.json); start from a model with every LayerNorm, or set drop_layernorm: {already}"
        )
    for layer in layers[len(layers) - k:] if k else []:
        for parent, name in _layer_norm_slots(layer):
            if not isinstance(getattr(parent, name), (nn.LayerNorm, nn.Identity)):
                raise PipelineError(
                    f"drop_layernorm: {type(model).__name__} layer has no LayerNorm at {name}; "
                    "only BERT-family encoders (BERT, RoBERTa, MiniLM) are supported"
                )
            setattr(parent, name, nn.Identity())
    if k:
        setattr(model.config, CONFIG_KEY, k)
    return model


def count_layernorms(model: PreTrainedModel) -> int:
    """The `nn.LayerNorm` modules left in the encoder layers (2 per layer in a stock model)."""
    return sum(isinstance(module, nn.LayerNorm) for module in model.encoder.layer.modules())
