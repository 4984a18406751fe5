"""Where a backbone family keeps its parts: the one module that knows a model's layout and conventions.

Everything the method assumes about a backbone is a method of its family's `Architecture`: how to load it
(with a pooler or without), its layers and their count, how one layer is called, which token gives the
sentence vector h^L, where the pooler output h^P comes from (or that there is none), which modules are its
LayerNorms (the LayerNorm study), where a layer's attention context can be read (the layer analyses) and its
multiply-accumulate count (the cost table). The encoder, the twin, the LayerNorm study, the training tasks,
the analyses and the stand-ins ask `architecture_of(model)` instead of spelling `model.encoder.layer[i]`,
`[:, 0]` or `pooler_output` themselves: h^L is `sentence_vector`'s, in training, evaluation, the embedding store
and the analyses alike. Families whose layers the pipeline can also run part by part (JTCSE's
cross-attention, the [CLS]-row-only last layer) implement `UnrolledLayer` too.

A new family is one subclass registered with `register_architecture`, its config and its test
(docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import PretrainedConfig, PreTrainedModel
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_outputs import BaseModelOutput

from transformers.models.bert.modeling_bert import BertLayer
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm
from transformers.models.roberta.modeling_roberta import RobertaLayer
from transformers.models.xlm_roberta_xl.modeling_xlm_roberta_xl import XLMRobertaXLLayer

from pipeline.errors import PipelineError

# What `run_layer` passes every layer besides its input (BERT's layout: the attention mask alone).
LayerContext = Any


class Architecture(ABC):
    """A backbone family's layout. `model_types` are the `config.model_type` values it serves."""

    model_types: tuple[str, ...] = ()
    # the encoder-layer classes of those models: a lone layer (the twin's cross-attention) finds its adapter by them
    layer_classes: tuple[type[nn.Module], ...] = ()
    # the config keys of the hidden and attention-probability dropout (written so a saved model records them)
    dropout_config_keys: tuple[str, ...] = ()
    # the classes of its layers' norms (what the LayerNorm study removes and counts)
    norm_classes: tuple[type[nn.Module], ...] = (nn.LayerNorm,)
    # whether the family's models carry a pooler layer (h^P); without one h^P is the sentence vector itself
    has_pooler_layer: bool = False
    # the sentence-transformers pooling mode that gives its sentence vector (a saved model's 1_Pooling/config.json)
    sentence_transformers_pooling: str = "cls_token"
    # the row of a layer's states that holds every sentence's vector ([CLS]: 0), read by `sentence_vector`; None
    # where the sentence token moves with the sentence (the last real token) and the family overrides the hook
    sentence_row: int | None = None

    def load_options(self) -> dict[str, Any]:
        """Extra `AutoModel.from_pretrained` options the family's models are loaded with."""
        return {}

    def layer_count(self, config: PretrainedConfig) -> int:
        """How many layers the model has, read from its config (not from a separate setting)."""
        return int(config.num_hidden_layers)

    @abstractmethod
    def layers(self, model: PreTrainedModel) -> nn.ModuleList:
        """The encoder layers, first to last."""

    @abstractmethod
    def embed(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding output the first layer reads: (B, T, d)."""

    @abstractmethod
    def layer_context(self, model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor) -> LayerContext:
        """What every layer takes besides its input, as the stock forward builds it from the embeddings."""

    @abstractmethod
    def run_layer(self, layer: nn.Module, hidden: torch.Tensor, context: LayerContext) -> torch.Tensor:
        """One stock layer on `hidden` (B, T, d): the layer's own call signature."""

    def final_norm(self, model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
        """What the model applies after its last layer (nothing in BERT's layout)."""
        return hidden

    def sentence_vector(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """h^L: the (B, d) sentence vector of a layer's (B, T, d) states: row `sentence_row` ([CLS]); a family whose
        sentence token moves with the sentence (the last real token) overrides it. The one hook: every path
        that takes h^L asks it, or reads `sentence_row_only()`'s row where it computes that row alone."""
        return hidden[:, self.sentence_row]

    def sentence_row_only(self) -> int | None:
        """The one row the sentence vector is, where the hook is `sentence_row`'s: the paths that compute a
        layer for that row alone (`UnrolledLayer`) may. None where the hook reads otherwise (overridden, or
        patched): those paths then run the whole layer and ask the hook."""
        reads_the_row = getattr(self.sentence_vector, "__func__", None) is Architecture.sentence_vector
        return self.sentence_row if reads_the_row else None

    @abstractmethod
    def pooler(self, model: PreTrainedModel) -> nn.Module | None:
        """The pooler layer (h^P), or None when the model has none."""

    def pooler_output(self, model: PreTrainedModel, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """h^P of the last layer's states (B, T, d): the pooler over their sentence vector (`pooler_of`)."""
        return self.pooler_of(model, self.sentence_vector(hidden, attention_mask))

    def pooler_of(self, model: PreTrainedModel, vector: torch.Tensor) -> torch.Tensor:
        """h^P of a sentence vector (B, d): the pooler's output over it, or the vector itself without a pooler."""
        pooler = self.pooler(model)
        return vector if pooler is None else pooler(vector.unsqueeze(1))  # a pooler reads the first row it is given

    def sentence_outputs(self, model: PreTrainedModel, output: BaseModelOutput,
                         attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h^L, h^P), each (B, d), of the stock forward's `output`."""
        last = output.last_hidden_state
        return self.sentence_vector(last, attention_mask), self.pooler_output(model, last, attention_mask)

    def set_dropout(self, model: nn.Module, p: float) -> None:
        """Every dropout of the model to `p`: each `nn.Dropout` (the attention functions read `module.dropout.p`
        at call time) and the config keys, so a saved model records it."""
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
        config = getattr(model, "config", None)
        for key in self.dropout_config_keys if config is not None else ():
            setattr(config, key, p)

    @abstractmethod
    def layernorm_slots(self, layer: nn.Module) -> list[tuple[nn.Module, str]]:
        """(parent module, attribute) of each norm of one layer (the LayerNorm study removes them)."""

    @abstractmethod
    def capture_context(self, layer: nn.Module, store: Callable[[torch.Tensor], None]) -> RemovableHandle:
        """Hook `store` to receive the layer's attention context (B, T, d): softmax(QKᵀ)V with the heads
        concatenated, before the output projection (JTCSE's "context tensor", the layer analyses)."""

    @abstractmethod
    def inference_macs(self, config: Any, seq_len: int) -> int:
        """Multiply-accumulates of one forward pass of one sentence of `seq_len` tokens, attention products included."""

    @abstractmethod
    def thop_macs(self, config: Any, seq_len: int) -> int:
        """What thop counts for one forward pass of one sentence of `seq_len` tokens (its Linear and norm layers)."""


class UnrolledLayer(ABC):
    """A family whose layer the pipeline also runs part by part (`pipeline.modeling.encoder.layer_forward`):
    JTCSE's cross-attention (another tower's values) and the last layer run for the sentence row only. Its
    sentence token is row 0 ([CLS]), the row `cls_only` computes, and `run_layer`'s context is the mask."""

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

    @abstractmethod
    def attention_output(self, layer: nn.Module, context: torch.Tensor, layer_input: torch.Tensor) -> torch.Tensor:
        """The attention block after the heads: projection, residual with the layer's input, LayerNorm."""

    @abstractmethod
    def feed_forward(self, layer: nn.Module, attention_output: torch.Tensor) -> torch.Tensor:
        """The feed-forward block: FFN, residual, LayerNorm."""


def config_sizes(config: Any, keys: tuple[str, ...]) -> tuple[int, ...]:
    """Positive integer fields of a config object or mapping (the cost formulas' sizes); one line if any lacks."""
    get = config.get if isinstance(config, Mapping) else lambda key: getattr(config, key, None)
    values = tuple(get(key) for key in keys)
    if any(not isinstance(value, int) or value <= 0 for value in values):
        raise PipelineError(f"model config lacks {'/'.join(keys)} (got {list(values)}); its cost formula needs them")
    return values


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


ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(architecture: Architecture) -> Architecture:
    """Serve `architecture.model_types` with it; a model type served twice, or a family that says neither its
    sentence row nor how it reads its sentence vector, is an error."""
    if architecture.sentence_row is None and type(architecture).sentence_vector is Architecture.sentence_vector:
        raise PipelineError(f"{type(architecture).__name__} declares no sentence_row and no sentence_vector")
    for model_type in architecture.model_types:
        if model_type in ARCHITECTURES:
            raise PipelineError(f"model type {model_type!r} already has an architecture adapter")
        ARCHITECTURES[model_type] = architecture
    return architecture


register_architecture(BertFamily())
register_architecture(PreLayerNormFamily())
register_architecture(LlamaFamily())


def architecture_of(model_or_config: PreTrainedModel | PretrainedConfig | Mapping) -> Architecture:
    """The adapter of a model (or its config, object or mapping), by `model_type`; an unknown family is one line."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = config.get("model_type") if isinstance(config, Mapping) else getattr(config, "model_type", None)
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


def unrolled_layer_of(layer: nn.Module) -> UnrolledLayer:
    """The adapter of one layer the pipeline runs part by part; a family that cannot is one line."""
    architecture = architecture_of_layer(layer)
    if not isinstance(architecture, UnrolledLayer):
        raise PipelineError(f"{type(architecture).__name__} layers cannot be run part by part: JTCSE's cross-attention "
                            "(cael > 0) needs a family that implements UnrolledLayer (pipeline/modeling/architecture.py)")
    return architecture
