"""One sentence encoder over a stock Hugging Face BERT-family model, with the SimCSE poolers.

A single forward pass returns everything the losses and the evaluation need: the last-layer
[CLS] (`h^L`), the backbone's pooler output (`h^P`, dense + tanh over [CLS]; the SimCSE training
MLP) and the embedding of the chosen pooler.
"""

from typing import NamedTuple

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel

from pipeline.config import POOLERS
from pipeline.errors import PipelineError

_POOLERS_NEEDING_ALL_LAYERS = ("avg_first_last", "avg_top2")


class EncoderOutput(NamedTuple):
    last_cls: torch.Tensor  # (B, d) [CLS] of the last hidden state, h^L
    pooler_output: torch.Tensor  # (B, d) dense + tanh over [CLS], h^P
    pooled: torch.Tensor  # (B, d) the embedding of the chosen pooler


def validate_pooler(pooler: str, key: str = "pooler") -> str:
    if pooler not in POOLERS:
        raise PipelineError(f"{key}={pooler} is not a known pooler; allowed: {', '.join(POOLERS)}")
    return pooler


def require_pooler_layer(model: PreTrainedModel) -> None:
    """The norm loss and SimCSE's training MLP both read the backbone's own pooler layer."""
    if getattr(model, "pooler", None) is None:
        raise PipelineError(
            f"backbone {type(model).__name__} has no pooler layer; load it with add_pooling_layer=True"
        )


def set_dropout(model: nn.Module, p: float) -> nn.Module:
    """Set the hidden and attention-probability dropout of an already built model to `p`.

    Every `nn.Dropout` is updated (embeddings, attention probabilities, attention output,
    feed-forward output); the attention functions read `module.dropout.p` at call time, so the
    change applies to SDPA and eager attention alike. The config is updated too, so a saved model
    records the dropout it was trained with.
    """
    if not 0.0 <= p < 1.0:
        raise PipelineError(f"dropout={p} is not a probability; allowed: 0 <= dropout < 1")
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
    config = getattr(model, "config", None)
    if config is not None:
        config.hidden_dropout_prob = p
        config.attention_probs_dropout_prob = p
    return model


def load_backbone(path: str, dropout: float | None = None) -> PreTrainedModel:
    """A BERT-family model with its pooler layer (random if the checkpoint lacks one)."""
    model = AutoModel.from_pretrained(path, add_pooling_layer=True)
    require_pooler_layer(model)
    if dropout is not None:
        set_dropout(model, dropout)
    return model


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the non-padding tokens: (B, T, d), (B, T) -> (B, d)."""
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1)


def pool(
    pooler: str,
    hidden_states: tuple[torch.Tensor, ...],
    pooler_output: torch.Tensor,
    attention_mask: torch.Tensor,
) -> torch.Tensor:
    """SimCSE's poolers. `hidden_states[0]` is the embedding output, `[-1]` the last layer.

    `avg_first_last` averages the first Transformer layer's output (`hidden_states[1]`, as in
    SimCSE's evaluation script) and the last layer's, then takes the masked mean.
    """
    validate_pooler(pooler)
    last = hidden_states[-1]
    if pooler == "cls":
        return pooler_output
    if pooler == "cls_before_pooler":
        return last[:, 0]
    if pooler == "avg":
        return masked_mean(last, attention_mask)
    if pooler == "avg_first_last":
        return masked_mean((hidden_states[1] + last) / 2, attention_mask)
    return masked_mean((hidden_states[-2] + last) / 2, attention_mask)  # avg_top2


class SentenceEncoder(nn.Module):
    """A stock BERT/RoBERTa model plus a pooler choice; `model` stays a plain PreTrainedModel."""

    def __init__(self, model: PreTrainedModel, pooler: str = "cls_before_pooler"):
        super().__init__()
        require_pooler_layer(model)
        self.model = model
        self.pooler = validate_pooler(pooler)

    @classmethod
    def from_pretrained(
        cls, path: str, pooler: str = "cls_before_pooler", dropout: float | None = None
    ) -> "SentenceEncoder":
        return cls(load_backbone(path, dropout), pooler)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> EncoderOutput:
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=self.pooler in _POOLERS_NEEDING_ALL_LAYERS,
        )
        hidden_states = output.hidden_states or (output.last_hidden_state,)
        return EncoderOutput(
            last_cls=output.last_hidden_state[:, 0],
            pooler_output=output.pooler_output,
            pooled=pool(self.pooler, hidden_states, output.pooler_output, attention_mask),
        )
