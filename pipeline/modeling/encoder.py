"""One sentence encoder over a stock Hugging Face model of a registered family, with the SimCSE poolers.

A single forward pass returns everything the losses and the evaluation need: the last layer's
sentence vector (`h^L`; [CLS] in BERT's family), the pooler output (`h^P`, dense + tanh over [CLS]
in BERT's family, the SimCSE training MLP; the sentence vector itself in a family without a pooler)
and the embedding of the chosen pooler. What is family-specific is asked of its adapter
(`pipeline.modeling.architecture`).

Inference with a [CLS] pooler (`last_layer_cls`) in a family whose layers run part by part
(`UnrolledLayer`) and whose sentence vector is one fixed row (`Architecture.sentence_row_only`: [CLS]):
only the last layer's sentence row is ever read, and the other rows of the last layer feed nothing, so
that layer runs for that row alone (its keys and values still cover every token). A sentence vector read
otherwise (the family's hook overridden) gets the whole last layer. Same values as the stock forward up to float rounding;
it saves about (1 - 1/6)/L of the encoder's matmuls (14% for MiniLM-L6, 7% for BERT-base).
Training keeps the stock forward, so dropout draws the same random masks as the stock model.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError
from torch import nn
from torch.nn import functional as F
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from pipeline.errors import PipelineError
from pipeline.modeling.architecture import UnrolledLayer, architecture_of, architecture_of_layer, unrolled_layer_of
from pipeline.modeling.layernorm import check_missing_keys, drop_layernorms, dropped_layers, quiet_transformers, recorded_drop
from pipeline.settings_rules import POOLERS, validate_pooler

_POOLERS_NEEDING_ALL_LAYERS = ("avg_first_last", "avg_top2")
_CLS_POOLERS = ("cls", "cls_before_pooler")


class EncoderOutput(NamedTuple):
    last_cls: torch.Tensor  # (B, d) the last layer's sentence vector ([CLS] in BERT's family), h^L
    pooler_output: torch.Tensor  # (B, d) the pooler's output (dense + tanh over [CLS] in BERT's family), h^P
    pooled: torch.Tensor  # (B, d) the embedding of the chosen pooler


def require_pooler_layer(model: PreTrainedModel) -> None:
    """The norm loss and SimCSE's training MLP both read the backbone's own pooler layer, where its family has one."""
    architecture = architecture_of(model)
    if architecture.has_pooler_layer and architecture.pooler(model) is None:
        raise PipelineError(
            f"backbone {type(model).__name__} has no pooler layer; load it with its pooler (load_backbone)"
        )


def set_dropout(model: nn.Module, p: float) -> nn.Module:
    """Set the hidden and attention-probability dropout of an already built model to `p`.

    Every dropout the family has is updated (`Architecture.set_dropout`: in BERT's each `nn.Dropout`,
    read at call time by SDPA and eager attention alike), and the config too, so a saved model
    records the dropout it was trained with.
    """
    if not 0.0 <= p < 1.0:
        raise PipelineError(f"dropout={p} is not a probability; allowed: 0 <= dropout < 1")
    architecture_of(model).set_dropout(model, p)
    return model


@contextmanager
def model_folder_errors(path: str | Path) -> Iterator[None]:
    """Turn what loading a model folder raises for corrupt, truncated, missing or unreadable files
    (transformers: OSError/ValueError; safetensors: SafetensorError) into the one-line PipelineError."""
    try:
        yield
    except (OSError, ValueError, SafetensorError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        local = Path(path).is_dir()
        fix = (
            "its files are corrupt, truncated or unreadable; re-create it (`dvc repro -f` the stage that writes it, "
            "or `dvc checkout`)" if local else
            "not a local folder and not loadable from the hub; set HF_HUB_OFFLINE=1 to use only the hub cache"
        )
        raise PipelineError(f"could not load model {path}: {type(error).__name__}: {reason}; {fix}") from None


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a model folder (or hub id), with `model_folder_errors`' one-line errors."""
    with model_folder_errors(path):
        return AutoTokenizer.from_pretrained(str(path))


def load_backbone(path: str | Path, dropout: float | None = None, **options) -> PreTrainedModel:
    """A model of a registered family, loaded as its adapter says (BERT's: with its pooler layer, random if
    the checkpoint lacks one); the one loader
    of model folders: a corrupt or unreadable one is a one-line error (`model_folder_errors`).
    A model saved with LayerNorms removed (`dropped_layernorm_layers` in its config) gets the same
    LayerNorms removed again (`pipeline.modeling.layernorm`), so it embeds as it did in training.
    The weights load in float32 whatever dtype the checkpoint's config declares (transformers 5 would
    load an fp16-saved one in fp16 and train it so); lower precision is autocast's job (`precision`).
    Only safetensors weights load: a hub id or folder with nothing but a pickled `.bin` is refused."""
    options = {"dtype": torch.float32, "use_safetensors": True, **options}
    with model_folder_errors(path):
        options = {**architecture_of(AutoConfig.from_pretrained(str(path))).load_options(), **options}
        if not recorded_drop(path):
            model = AutoModel.from_pretrained(str(path), **options)
        else:  # the removed LayerNorms are missing from the weights on purpose: no "newly initialized" report
            with quiet_transformers():
                model, info = AutoModel.from_pretrained(str(path), output_loading_info=True, **options)
            check_missing_keys(model, info["missing_keys"], path)
    require_pooler_layer(model)
    if dropped_layers(model):
        drop_layernorms(model, dropped_layers(model))
    if dropout is not None:
        set_dropout(model, dropout)
    return model


def checkpoint_activations(model: nn.Module) -> int:
    """Activation checkpointing on every backbone inside `model` (a tower, a twin's two, a student):
    each encoder layer keeps only its input and recomputes the rest in the backward. Transformers
    checkpoints the layer's `forward`, so the twin's layer-by-layer calls are covered; torch's
    non-reentrant checkpoint replays the saved RNG state, so dropout draws the same masks and the
    losses and gradients are those of the plain run. `use_cache` goes off with it (an encoder in training
    keeps no cache; transformers would switch it off itself, with a logged warning that a compiled step
    cannot trace). Returns how many backbones it set."""
    backbones = [module for module in model.modules() if isinstance(module, PreTrainedModel)]
    for backbone in backbones:
        backbone.config.use_cache = False
        if hasattr(backbone, "activation_checkpointing_enable"):
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:  # transformers before the rename (5.17 on the GPU machine): the same switch, its older name
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return len(backbones)


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the non-padding tokens: (B, T, d), (B, T) -> (B, d)."""
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1)


def pool(
    pooler: str,
    hidden_states: tuple[torch.Tensor, ...],
    last_cls: torch.Tensor,
    pooler_output: torch.Tensor,
    attention_mask: torch.Tensor,
) -> torch.Tensor:
    """SimCSE's poolers. `hidden_states[0]` is the embedding output, `[-1]` the last layer; `last_cls` and
    `pooler_output` are the family's h^L and h^P (`Architecture.sentence_outputs`).

    `avg_first_last` averages the first Transformer layer's output (`hidden_states[1]`, as in
    SimCSE's evaluation script) and the last layer's, then takes the masked mean.
    """
    assert pooler in POOLERS, pooler  # SentenceEncoder and the settings checked it
    last = hidden_states[-1]
    if pooler == "cls":
        return pooler_output
    if pooler == "cls_before_pooler":
        return last_cls
    if pooler == "avg":
        return masked_mean(last, attention_mask)
    if pooler == "avg_first_last":
        return masked_mean((hidden_states[1] + last) / 2, attention_mask)
    return masked_mean((hidden_states[-2] + last) / 2, attention_mask)  # avg_top2


def _eager_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """softmax(Q K^T * scaling + mask) V per head, for models configured with eager attention."""
    scores = query @ key.transpose(-1, -2) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = F.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2), weights


def layer_forward(
    layer: nn.Module,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor | None,
    value_layer: nn.Module | None = None,
    value_hidden: torch.Tensor | None = None,
    row: int | None = None,
) -> torch.Tensor:
    """One stock encoder layer, optionally with another tower's values: (B, T, d), or (B, 1, d) with `row`.

    `hidden` is the layer's input (B, T, d); `attention_mask` the mask the stock model built for
    its attention implementation. The queries and keys come from `hidden` through this layer;
    the values from `value_hidden` through `value_layer` (JTCSE's cross-attention,
    `pipeline.modeling.twin`; by default this layer's own). Then projection, residual with
    `hidden`, LayerNorm and FFN, as in the stock layer. The layer's own modules and attention
    function are used, so dropout (in training) applies as in the stock layer.
    With `row` only that query row is computed: attention rows are independent, so it attends over
    all keys and the rest of the layer runs at that row — the same value as the whole layer's `row`.
    """
    architecture = unrolled_layer_of(layer)
    attention = architecture.self_attention(layer)
    query, key, _ = architecture.projections(layer)
    value_layer = layer if value_layer is None else value_layer
    value_hidden = hidden if value_hidden is None else value_hidden
    value_architecture = unrolled_layer_of(value_layer)
    normed, value_normed = architecture.attention_input(layer, hidden), value_architecture.attention_input(value_layer, value_hidden)
    query_hidden = hidden if row is None else hidden[:, row : row + 1]
    if row is not None and isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4:  # (B, 1, T, T) -> that row
        attention_mask = attention_mask[:, :, row : row + 1]

    def split_heads(states: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, heads, T, d_head)
        return states.view(*states.shape[:-1], -1, architecture.head_size(layer)).transpose(1, 2)

    attend = ALL_ATTENTION_FUNCTIONS.get_interface(attention.config._attn_implementation, _eager_attention)
    context, _ = attend(
        attention,
        split_heads(query(normed if row is None else normed[:, row : row + 1])),
        split_heads(key(normed)),
        split_heads(value_architecture.projections(value_layer)[2](value_normed)),
        attention_mask,
        dropout=attention.dropout.p if attention.training else 0.0,
        scaling=attention.scaling,
    )
    context = context.reshape(*query_hidden.shape[:-1], -1)
    attention_output = architecture.attention_output(layer, context, query_hidden)  # projection, residual with own input, LN
    return architecture.feed_forward(layer, attention_output)  # FFN + residual + LN


def layer_cls(
    layer: nn.Module,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor | None,
    value_layer: nn.Module | None = None,
    value_hidden: torch.Tensor | None = None,
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The sentence vector of one stock encoder layer's output, (B, d): its one row, computing that row only,
    where the family's is one fixed row (`Architecture.sentence_row_only`); else the family's hook over the
    whole layer's output, which reads the (B, T) `token_mask` (see `layer_forward`)."""
    architecture = architecture_of_layer(layer)
    row = architecture.sentence_row_only()
    states = layer_forward(layer, hidden, attention_mask, value_layer, value_hidden, row=row)
    return states[:, 0] if row is not None else architecture.sentence_vector(states, token_mask)


def last_sentence_vector(model: PreTrainedModel, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """h^L of the last layer's output before the final norm: `states` (B, 1, d), the sentence row alone, where the
    family's sentence vector is one fixed row (`Architecture.sentence_row_only`); else (B, T, d), read by its hook."""
    architecture = architecture_of(model)
    if architecture.sentence_row_only() is not None:
        return architecture.final_norm(model, states[:, 0])
    return architecture.sentence_vector(architecture.final_norm(model, states), attention_mask)


def last_layer_cls(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """h^L, the stock model's sentence vector (`Architecture.sentence_vector`): (B, d). In a family whose layers run
    part by part (`UnrolledLayer`) and whose sentence vector is one fixed row, that row with the last layer run
    for it alone; otherwise the stock forward read by the family's hook."""
    architecture = architecture_of(model)
    row = architecture.sentence_row_only() if isinstance(architecture, UnrolledLayer) else None
    if row is None:
        last = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return architecture.sentence_vector(last, attention_mask)
    hidden = architecture.embed(model, input_ids)
    mask = architecture.layer_context(model, hidden, attention_mask)
    *lower_layers, last_layer = architecture.layers(model)
    for layer in lower_layers:
        hidden = architecture.run_layer(layer, hidden, mask)
    return last_sentence_vector(model, layer_forward(last_layer, hidden, mask, row=row), attention_mask)


class SentenceEncoder(nn.Module):
    """A stock model of a registered family plus a pooler choice; `model` stays a plain PreTrainedModel."""

    def __init__(self, model: PreTrainedModel, pooler: str = "cls_before_pooler", cls_only_last_layer: bool = True):
        super().__init__()
        require_pooler_layer(model)
        self.model = model
        self.pooler = validate_pooler(pooler)
        # in eval mode with a [CLS] pooler, run the last layer for the sentence row only where the family's layers
        # run part by part and its sentence vector is one fixed row (module doc); False: the stock forward
        self.cls_only_last_layer = cls_only_last_layer

    @classmethod
    def from_pretrained(
        cls, path: str, pooler: str = "cls_before_pooler", dropout: float | None = None, cls_only_last_layer: bool = True
    ) -> "SentenceEncoder":
        return cls(load_backbone(path, dropout), pooler, cls_only_last_layer)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> EncoderOutput:
        architecture = architecture_of(self.model)
        row_only = (self.cls_only_last_layer and isinstance(architecture, UnrolledLayer)
                    and architecture.sentence_row_only() is not None)
        if self.pooler in _CLS_POOLERS and not self.model.training and row_only:
            last_cls = last_layer_cls(self.model, input_ids, attention_mask)
            pooler_output = architecture.pooler_of(self.model, last_cls)
            return EncoderOutput(last_cls, pooler_output, pooler_output if self.pooler == "cls" else last_cls)
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=self.pooler in _POOLERS_NEEDING_ALL_LAYERS,
        )
        hidden_states = output.hidden_states or (output.last_hidden_state,)
        last_cls, pooler_output = architecture.sentence_outputs(self.model, output, attention_mask)
        return EncoderOutput(last_cls, pooler_output, pool(self.pooler, hidden_states, last_cls, pooler_output, attention_mask))
