"""Where a backbone family keeps its parts: the one module that knows a model's sub-module layout.

The twin's layer-by-layer forward (JTCSE's cross-attention), the [CLS]-only last layer, the LayerNorm
study, dropout, the layer analyses and the cost count all reach inside a backbone; each asks the
`Architecture` of the model's `config.model_type` instead of spelling `model.encoder.layer[i]...` itself.
A new family is one subclass registered with `register_architecture` (docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.roberta.modeling_roberta import RobertaLayer
from transformers.models.xlm_roberta_xl.modeling_xlm_roberta_xl import XLMRobertaXLLayer

from pipeline.errors import PipelineError


class Architecture(ABC):
    """A backbone family's layout. `model_types` are the `config.model_type` values it serves."""

    model_types: tuple[str, ...] = ()
    # the encoder-layer classes of those models: a lone layer (the twin's cross-attention) finds its adapter by them
    layer_classes: tuple[type[nn.Module], ...] = ()
    # the config keys of the hidden and attention-probability dropout (written so a saved model records them)
    dropout_config_keys: tuple[str, ...] = ()

    @abstractmethod
    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        """The encoder layers, first to last."""

    @abstractmethod
    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding output the first layer reads: (B, T, d)."""

    @abstractmethod
    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        """The pooler layer over [CLS] (h^P), or None when the model was built without one."""

    @abstractmethod
    def self_attention(self, layer: nn.Module) -> nn.Module:
        """The module the attention function is called with (its config, scaling, dropout, training)."""

    @abstractmethod
    def projections(self, layer: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module]:
        """The layer's query, key and value projections."""

    @abstractmethod
    def head_size(self, layer: nn.Module) -> int:
        """The width of one attention head."""

    def attention_input(self, layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """What the projections read: the layer's input itself (post-LayerNorm layouts, BERT's)."""
        return hidden

    def final_norm(self, model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
        """What the encoder applies after its last layer (nothing in BERT's layout)."""
        return hidden

    @abstractmethod
    def attention_output(self, layer: nn.Module, context: torch.Tensor, layer_input: torch.Tensor) -> torch.Tensor:
        """The attention block after the heads: projection, residual with the layer's input, LayerNorm."""

    @abstractmethod
    def feed_forward(self, layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
        """The feed-forward block: FFN, residual, LayerNorm."""

    @abstractmethod
    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        """(parent module, attribute) of each LayerNorm of one encoder layer (the LayerNorm study removes them)."""


class BertFamily(Architecture):
    """BERT's layout (BERT, RoBERTa; MiniLM is a BERT): `encoder.layer[i].attention.self/.output`,
    `intermediate`, `output`, and a `pooler` beside the encoder."""

    model_types = ("bert", "roberta")
    layer_classes = (BertLayer, RobertaLayer)
    dropout_config_keys = ("hidden_dropout_prob", "attention_probs_dropout_prob")

    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        return model.encoder.layer

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        return model.embeddings(input_ids=input_ids)

    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        return getattr(model, "pooler", None)  # BERT's models take add_pooling_layer=False as None

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.attention.self

    def projections(self, layer: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module]:
        attention = layer.attention.self
        return attention.query, attention.key, attention.value

    def head_size(self, layer: nn.Module) -> int:
        return layer.attention.self.attention_head_size

    def attention_output(self, layer: nn.Module, context: torch.Tensor, layer_input: torch.Tensor) -> torch.Tensor:
        return layer.attention.output(context, layer_input)

    def feed_forward(self, layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
        return layer.output(layer.intermediate(attention_output), attention_output)

    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        return [(layer.attention.output, "LayerNorm"), (layer.output, "LayerNorm")]


class PreLayerNormFamily(BertFamily):
    """XLM-RoBERTa-XL's pre-LayerNorm layout: a LayerNorm before the attention (`attention.self_attn_layer_norm`)
    and before the feed-forward block (`layer.LayerNorm`), residuals without LayerNorm, and one more
    LayerNorm after the last layer (`encoder.LayerNorm`)."""

    model_types = ("xlm-roberta-xl",)
    layer_classes = (XLMRobertaXLLayer,)

    def attention_input(self, layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        return layer.attention.self_attn_layer_norm(hidden)

    def final_norm(self, model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
        return model.encoder.LayerNorm(hidden)

    def feed_forward(self, layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
        return layer.output(layer.intermediate(layer.LayerNorm(attention_output)), attention_output)

    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        return [(layer.attention, "self_attn_layer_norm"), (layer, "LayerNorm")]


ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(architecture: Architecture) -> Architecture:
    """Serve `architecture.model_types` with it; a model type served twice is an error."""
    for model_type in architecture.model_types:
        if model_type in ARCHITECTURES:
            raise PipelineError(f"model type {model_type!r} already has an architecture adapter")
        ARCHITECTURES[model_type] = architecture
    return architecture


register_architecture(BertFamily())
register_architecture(PreLayerNormFamily())


def architecture_of(model_or_config: PreTrainedModel | PretrainedConfig) -> Architecture:
    """The adapter of a model (or its config), by `config.model_type`; an unknown family is one line."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise PipelineError(
            f"backbone model type {model_type!r} has no architecture adapter; supported: {', '.join(sorted(ARCHITECTURES))} "
            "(add one in pipeline/modeling/architecture.py, docs/extending.md)"
        )
    return ARCHITECTURES[model_type]


def architecture_of_layer(layer: nn.Module) -> Architecture:
    """The adapter of one encoder layer, by its class (`Architecture.layer_classes`)."""
    for architecture in dict.fromkeys(ARCHITECTURES.values()):
        if isinstance(layer, architecture.layer_classes):
            return architecture
    raise PipelineError(f"encoder layer {type(layer).__name__} has no architecture adapter; "
                        "add its class to an Architecture's layer_classes (pipeline/modeling/architecture.py)")
