"""DistilBERT's family: BERT's post-LayerNorm layers under other names (`transformer.layer[i]` with `attention`,
`sa_layer_norm`, `ffn`, `output_layer_norm`), no pooler, [CLS] as the sentence token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import DistilBertConfig, PretrainedConfig, PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.distilbert.modeling_distilbert import TransformerBlock

from pipeline.modeling.architecture import Architecture, LayerContext, UnrolledLayer, config_sizes, register_architecture


class DistilBertFamily(Architecture, UnrolledLayer):
    """DistilBERT's layout: embeddings (word + position, LayerNorm), `transformer.layer[i]` whose attention
    module holds the Q, K, V and output projections (`q_lin`, `k_lin`, `v_lin`, `out_lin`), a LayerNorm after
    each residual, and no pooler: h^P is the [CLS] vector itself."""

    model_types = ("distilbert",)
    sentence_row = 0
    layer_classes = (TransformerBlock,)
    dropout_config_keys = ("dropout", "attention_dropout")
    has_pooler_layer = False

    def layer_count(self, config: PretrainedConfig) -> int:
        return int(config.n_layers)

    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        return model.transformer.layer

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        return model.embeddings(input_ids)

    def layer_context(self, model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor) -> LayerContext:
        return create_bidirectional_mask(config=model.config, inputs_embeds=hidden, attention_mask=attention_mask)

    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, context: LayerContext) -> torch.Tensor:
        return layer(hidden, context)

    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        return None

    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        return [(layer, "sa_layer_norm"), (layer, "output_layer_norm")]

    def capture_context(self, layer: nn.Module, store: Callable[[torch.Tensor], None]) -> RemovableHandle:
        # the attention module's output is already projected: the context is what its output projection reads
        return layer.attention.out_lin.register_forward_pre_hook(lambda _module, inputs: store(inputs[0]))

    def inference_macs(self, config: Any, seq_len: int) -> int:
        """L·(4Td² + 2T²d + 2Tdd_ff): BERT's count without a pooler."""
        d, layers, d_ff = config_sizes(config, ("dim", "n_layers", "hidden_dim"))
        t = int(seq_len)
        return layers * (4 * t * d * d + 2 * t * t * d + 2 * t * d * d_ff)

    def thop_macs(self, config: Any, seq_len: int) -> int:
        """L·(4Td² + 2Tdd_ff) + 4·(1 + 2L)·T·d: the Linears and the LayerNorms (the embeddings' and two per
        layer, 4 per element); the attention products count zero."""
        d, layers, d_ff = config_sizes(config, ("dim", "n_layers", "hidden_dim"))
        t = int(seq_len)
        return layers * (4 * t * d * d + 2 * t * d * d_ff) + 4 * (1 + 2 * layers) * t * d

    def tiny_config(self, model_type: str) -> PretrainedConfig:
        return DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64,
                                pad_token_id=0)

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.attention

    def projections(self, layer: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module]:
        attention = layer.attention
        return attention.q_lin, attention.k_lin, attention.v_lin

    def head_size(self, layer: nn.Module) -> int:
        return layer.attention.attention_head_size

    def attention_output(self, layer: nn.Module, context: torch.Tensor, layer_input: torch.Tensor) -> torch.Tensor:
        return layer.sa_layer_norm(layer.attention.out_lin(context) + layer_input)

    def feed_forward(self, layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
        return layer.output_layer_norm(layer.ffn(attention_output) + attention_output)


register_architecture(DistilBertFamily())
