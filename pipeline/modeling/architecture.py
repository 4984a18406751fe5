"""What a backbone family must say about a model's layout and conventions, and the registry of families.

Everything the method assumes about a backbone is a method of its family's `Architecture`: how to load it
(with a pooler or without), its layers and their count, how one layer is called, which token gives the
sentence vector h^L, where the pooler output h^P comes from (or that there is none), which modules are its
LayerNorms (the LayerNorm study), where a layer's attention context can be read (the layer analyses) and its
multiply-accumulate count (the cost table). The encoder, the twin, the LayerNorm study, the training tasks,
the analyses and the stand-ins ask `architecture_of(model)` instead of spelling `model.encoder.layer[i]`,
`[:, 0]` or `pooler_output` themselves: h^L is `sentence_vector`'s, in training, evaluation, the embedding store
and the analyses alike. Families whose layers the pipeline can also run part by part (JTCSE's
cross-attention, the [CLS]-row-only last layer) implement `UnrolledLayer` too.

The families themselves live in `pipeline.modeling.families`, one module each, each registering itself with
`register_architecture`; the lookups load that package first (`pipeline.plugins.load_plugins`), so a new
family is one module there and nothing here names it (docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from pipeline.errors import PipelineError
from pipeline.plugins import load_plugins

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

    @abstractmethod
    def tiny_config(self, model_type: str) -> PretrainedConfig:
        """A tiny random-model config of `model_type` (one of `model_types`): a few layers, hidden ~32, a small
        vocabulary. tests/test_families.py builds each family's model from it and checks the contract."""


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


# model type → its family; filled by the modules of pipeline/modeling/families as they are imported
_ARCHITECTURES: dict[str, Architecture] = {}
FAMILIES_FOLDER = "pipeline/modeling/families"


def register_architecture(architecture: Architecture) -> Architecture:
    """Serve `architecture.model_types` with it (a family module calls this once, at import). A family that
    serves no model type, one already served, or that says neither its sentence row nor how it reads its
    sentence vector is an error, and leaves the registry as it was."""
    name = type(architecture).__name__
    if not architecture.model_types:
        raise PipelineError(f"{name} declares no model_types (the config.model_type values it serves)")
    if architecture.sentence_row is None and type(architecture).sentence_vector is Architecture.sentence_vector:
        raise PipelineError(f"{name} declares no sentence_row and no sentence_vector")
    for model_type in architecture.model_types:
        if model_type in _ARCHITECTURES:
            raise PipelineError(f"model type {model_type!r} already has an architecture adapter "
                                f"({type(_ARCHITECTURES[model_type]).__name__}); {name} claims it too")
    _ARCHITECTURES.update(dict.fromkeys(architecture.model_types, architecture))
    return architecture


_families_loaded = False


def _load_families() -> None:
    """Import every family module once (each registers itself). A plain flag, not a cache wrapper: the lookups run
    inside compiled steps, where a global's value is a guard torch.compile traces through without a graph break."""
    global _families_loaded
    if not _families_loaded:
        load_plugins("pipeline.modeling.families")
        _families_loaded = True


def registered_architectures() -> dict[str, Architecture]:
    """Every registered family by the model type it serves (a family serving two types appears twice), the
    family modules loaded first."""
    _load_families()
    return dict(_ARCHITECTURES)


def architecture_of(model_or_config: PreTrainedModel | PretrainedConfig | Mapping) -> Architecture:
    """The adapter of a model (or its config, object or mapping), by `model_type`; an unknown family is one line."""
    architectures = registered_architectures()
    config = getattr(model_or_config, "config", model_or_config)
    model_type = config.get("model_type") if isinstance(config, Mapping) else getattr(config, "model_type", None)
    if model_type not in architectures:
        raise PipelineError(
            f"backbone model type {model_type!r} has no architecture adapter; supported: {', '.join(sorted(architectures))} "
            f"(add one as a module in {FAMILIES_FOLDER}/, docs/extending.md)"
        )
    return architectures[model_type]


def architecture_of_layer(layer: nn.Module) -> Architecture:
    """The adapter of one encoder layer, by its class (`Architecture.layer_classes`)."""
    for architecture in dict.fromkeys(registered_architectures().values()):
        if isinstance(layer, architecture.layer_classes):
            return architecture
    raise PipelineError(f"encoder layer {type(layer).__name__} has no architecture adapter; "
                        f"add its class to an Architecture's layer_classes ({FAMILIES_FOLDER}/)")


def unrolled_layer_of(layer: nn.Module) -> UnrolledLayer:
    """The adapter of one layer the pipeline runs part by part; a family that cannot is one line."""
    architecture = architecture_of_layer(layer)
    if not isinstance(architecture, UnrolledLayer):
        raise PipelineError(f"{type(architecture).__name__} layers cannot be run part by part: JTCSE's cross-attention "
                            "(cael > 0) needs a family that implements UnrolledLayer (pipeline/modeling/architecture.py)")
    return architecture
