"""XLM-RoBERTa-XL's family: BERT's layout with pre-LayerNorm layers and a LayerNorm after the last layer."""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.models.xlm_roberta_xl.modeling_xlm_roberta_xl import XLMRobertaXLLayer

from pipeline.modeling.architecture import register_architecture
from pipeline.modeling.families.bert import BertFamily


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


register_architecture(PreLayerNormFamily())
