"""Llama's family: decoder-only — causal attention, rotary positions, RMSNorm, no pooler, the last real token
as the sentence vector."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import LlamaConfig, PretrainedConfig, PreTrainedModel
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

from pipeline.modeling.architecture import Architecture, LayerContext, config_sizes, register_architecture


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's state at its last real token, padded on either side: (B, T, d), (B, T) -> (B, d)."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.to(positions.dtype) * positions).argmax(1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class LlamaFamily(Architecture):
    """Llama's decoder-only layout: `layers[i]` with a pre-RMSNorm before the attention (`input_layernorm`)
    and before the MLP (`post_attention_layernorm`), rotary positions, causal attention, a final `norm`, no
    pooler. The sentence vector is the last real token's state (the only one that has read the whole
    sentence under causal attention), and h^P is that vector itself."""

    model_types = ("llama",)
    layer_classes = (LlamaDecoderLayer,)
    dropout_config_keys = ("attention_dropout",)  # Llama has no hidden dropout
    norm_classes = (LlamaRMSNorm,)
    sentence_transformers_pooling = "lasttoken"

    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        return model.layers

    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        return model.embed_tokens(input_ids)

    def layer_context(self, model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor) -> LayerContext:
        position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        mask = create_causal_mask(config=model.config, inputs_embeds=hidden, attention_mask=attention_mask, cache=None,
                                  position_ids=position_ids)
        return {"attention_mask": mask, "position_ids": position_ids,
                "position_embeddings": model.rotary_emb(hidden, position_ids=position_ids)}

    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, context: LayerContext) -> torch.Tensor:
        return layer(hidden, **context)

    def final_norm(self, model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
        return model.norm(hidden)

    def sentence_vector(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return last_token(hidden, attention_mask)

    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        return None

    def set_dropout(self, model: nn.Module, p: float) -> None:
        super().set_dropout(model, p)
        for module in model.modules():  # its attention reads a float, not an nn.Dropout
            if hasattr(module, "attention_dropout"):
                module.attention_dropout = p

    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        return [(layer, "input_layernorm"), (layer, "post_attention_layernorm")]

    def capture_context(self, layer: nn.Module, store: Callable[[torch.Tensor], None]) -> RemovableHandle:
        return layer.self_attn.o_proj.register_forward_pre_hook(lambda _module, inputs: store(inputs[0]))

    def _sizes(self, config: Any) -> tuple[int, int, int, int, int]:
        """(d, L, d_ff, the query width heads·d_head, the key/value width kv_heads·d_head)."""
        d, layers, d_ff, heads = config_sizes(config, ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                       "num_attention_heads"))
        get = config.get if isinstance(config, Mapping) else lambda key: getattr(config, key, None)
        head = get("head_dim") or d // heads
        return d, layers, d_ff, heads * head, (get("num_key_value_heads") or heads) * head

    def thop_macs(self, config: Any, seq_len: int) -> int:
        """L·(T·d·(2·q + 2·kv) + 3·T·d·d_ff): the Q, K, V and output projections and the gated MLP's three
        Linears; thop counts nothing for RMSNorm, rotary positions or the attention products."""
        d, layers, d_ff, q, kv = self._sizes(config)
        t = int(seq_len)
        return layers * (t * d * (2 * q + 2 * kv) + 3 * t * d * d_ff)

    def inference_macs(self, config: Any, seq_len: int) -> int:
        """`thop_macs` plus the attention scores and weighted sum of V, L·2T²·q (causal masking not subtracted)."""
        _, layers, _, q, _ = self._sizes(config)
        t = int(seq_len)
        return self.thop_macs(config, seq_len) + layers * 2 * t * t * q

    def tiny_config(self, model_type: str) -> PretrainedConfig:
        # two query heads share one key/value head, so the cost formulas' grouped-query widths are exercised
        return LlamaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                           intermediate_size=64, max_position_embeddings=64, attention_dropout=0.1, pad_token_id=0)


register_architecture(LlamaFamily())
