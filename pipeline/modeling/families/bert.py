"""BERT's family: BERT and RoBERTa (MiniLM is a BERT) — post-LayerNorm encoder layers, a pooler beside the
encoder, [CLS] as the sentence token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.roberta.modeling_roberta import RobertaLayer

from pipeline.modeling.architecture import Architecture, LayerContext, UnrolledLayer, config_sizes, register_architecture


class BertFamily(Architecture, UnrolledLayer):
    """BERT's layout (BERT, RoBERTa; MiniLM is a BERT): `encoder.layer[i].attention.self/.output`,
    `intermediate`, `output`, a `pooler` beside the encoder, and [CLS] (row 0) as the sentence token."""

    model_types = ("bert", "roberta")
    sentence_row = 0
    layer_classes = (BertLayer, RobertaLayer)
    dropout_config_keys = ("hidden_dropout_prob", "attention_probs_dropout_prob")
    has_pooler_layer = True  # SimCSE's training MLP and the norm loss read it

    def load_options(self) -> dict[str, Any]:
        return {"add_pooling_layer": True}  # random if the checkpoint lacks one

    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        return model.encoder.layer

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        return model.embeddings(input_ids=input_ids)

    def layer_context(self, model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor) -> LayerContext:
        return create_bidirectional_mask(config=model.config, inputs_embeds=hidden, attention_mask=attention_mask)

    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, context: LayerContext) -> torch.Tensor:
        return layer(hidden, context)

    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        return getattr(model, "pooler", None)  # BERT's models take add_pooling_layer=False as None

    def sentence_outputs(self, model: PreTrainedModel, output: BaseModelOutput,
                         attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sentence_row_only() != 0:  # the stock pooler read [CLS]; another sentence vector gets it run again
            return super().sentence_outputs(model, output, attention_mask)
        return self.sentence_vector(output.last_hidden_state, attention_mask), output.pooler_output

    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        return [(layer.attention.output, "LayerNorm"), (layer.output, "LayerNorm")]

    def capture_context(self, layer: nn.Module, store: Callable[[torch.Tensor], None]) -> RemovableHandle:
        return self.self_attention(layer).register_forward_hook(lambda _module, _inputs, output: store(output[0]))

    def inference_macs(self, config: Any, seq_len: int) -> int:
        """L·(4Td² + 2T²d + 2Tdd_ff) + d²: per layer the Q, K, V and output projections, the attention scores
        and weighted sum of V (over all heads) and the feed-forward block; the pooler on its one [CLS] row."""
        d, layers, d_ff = config_sizes(config, ("hidden_size", "num_hidden_layers", "intermediate_size"))
        t = int(seq_len)
        per_layer = 4 * t * d * d + 2 * t * t * d + 2 * t * d * d_ff
        return layers * per_layer + d * d

    def thop_macs(self, config: Any, seq_len: int) -> int:
        """L·(4Td² + 2Tdd_ff) + d² + 4·(1 + 2L)·T·d: every nn.Linear in·out per output row and every
        LayerNorm 4 per element (1 + 2L of them, T·d elements); the attention products count zero."""
        d, layers, d_ff = config_sizes(config, ("hidden_size", "num_hidden_layers", "intermediate_size"))
        t = int(seq_len)
        return layers * (4 * t * d * d + 2 * t * d * d_ff) + d * d + 4 * (1 + 2 * layers) * t * d

    def tiny_config(self, model_type: str) -> PretrainedConfig:
        return AutoConfig.for_model(model_type, vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=64)

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


register_architecture(BertFamily())
