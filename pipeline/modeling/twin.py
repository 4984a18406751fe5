"""The twin-tower encoder of TNCSE and its cross-attention extension JTCSE (JTCSE Eq. 7-10).

Each tower is a stock Hugging Face model of a registered family (`pipeline.modeling.architecture`) with its
own weights; h^L is the family's sentence vector ([CLS] in BERT's), h^P its pooler output. A batch of N
sentences becomes 2N interleaved dropout views per tower: the two views of sentence k sit at rows
2k and 2k+1.

Cross-attention encoder layers (CAELs). With L encoder layers and `cael` CAELs, the k-th CAEL is
the 1-based layer ceil(k·L / cael), k = 1..cael: JTCSE Eq. 7 (i mod (L / cael) == 0) when cael
divides L, evenly spaced otherwise; the last CAEL is always layer L. At a CAEL, tower I's cross
computation is

    SA_I   = softmax(Q_I(X_I) K_I(X_I)^T / sqrt(d_head) + mask)   per head     (Eq. 8)
    CACT_I = SA_I · V_II(X_II)                                                (Eq. 10)
    out_I  = FFN_I(LN_I(W_O,I · CACT_I + X_I))  with FFN_I's own residual + LN

with X the layer's inputs; symmetrically for tower II. No new weights: the stock layer's own
modules and attention function run it, so dropout in training applies as in the normal path.

`cross_mode="stream"` (default; JTCSE's "propagated forward to the next EncoderLayer"): each tower
has a cross stream beside its normal stream. At the first CAEL it starts from the towers' normal
layer inputs (X = HD); from then on it is the input of the tower's next layers: an ordinary layer
runs self-attention on it, a further CAEL crosses again between the two cross streams. c = the
sentence vector ([CLS]) of the cross streams after layer L (only that row of layer L is computed where
the family's sentence vector is one fixed row, `Architecture.sentence_row_only`). The cross stream costs
one extra layer per layer from the first CAEL on.

`cross_mode="side"` (the older reading): the cross computation is a side output of each CAEL from
the normal streams' inputs and feeds nothing; c = the sentence vector ([CLS]) of the last CAEL's (`cross_outputs="last"`)
or the mean over all CAELs (`"mean"`). With `"last"` every cael > 0 gives the same model.

In both modes the normal streams never read a cross stream, so inference is two plain encoders.
The cross-attention runs a layer part by part, so cael > 0 needs a family that implements `UnrolledLayer`.
"""

from typing import NamedTuple

import torch
from torch import nn
from transformers import PreTrainedModel

from pipeline.errors import PipelineError
from pipeline.modeling.architecture import Architecture, UnrolledLayer, architecture_of
from pipeline.modeling.distributed import gather_with_grad
from pipeline.modeling.encoder import (last_layer_cls, last_sentence_vector, layer_cls, layer_forward, load_backbone,
                                      require_pooler_layer)
from pipeline.settings_rules import validate_cael, validate_cross_mode, validate_cross_outputs


def cael_layers(cael: int, num_layers: int) -> list[int]:
    """0-based indices of the CAELs: the k-th is the 1-based layer ceil(k·L / cael), k = 1..cael.

    Exactly JTCSE Eq. 7 (1-based i with i mod (L / cael) == 0) when cael divides L; evenly
    spaced and ending at layer L for any other count (6 layers, cael 4 → layers 2, 3, 5, 6)."""
    validate_cael(cael, num_layers)
    return [-(-k * num_layers // cael) - 1 for k in range(1, cael + 1)]


class TwinOutput(NamedTuple):
    """Per-tower stacks, index 0 = tower I, 1 = tower II; rows are the 2N interleaved views."""

    last_cls: torch.Tensor  # (2, 2N, d) h^L
    pooler_output: torch.Tensor  # (2, 2N, d) h^P
    cross_cls: torch.Tensor | None  # (2, 2N, d) c, None for TNCSE (cael=0)

    def gather(self) -> "TwinOutput":
        """All ranks' views (gradients kept for the local ones), for global in-batch negatives."""
        return TwinOutput(*(None if t is None else gather_with_grad(t, dim=1) for t in self))


def cross_layer_cls(
    layer: nn.Module,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor | None,
    other_layer: nn.Module,
    other_hidden: torch.Tensor,
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The sentence vector ([CLS]) of one CAEL's cross outputs for the tower owning `layer` (JTCSE Eq. 8 and 10): (B, d).

    `hidden` / `other_hidden` are the two towers' inputs to this layer (B, T, d);
    `attention_mask` is the mask the stock model built for its own attention implementation, `token_mask`
    the (B, T) padding mask the family's hook reads. The values come from the other tower:
    SA_I[CLS, :] · V_II(HD_II), then the rest of the layer at [CLS] (see `layer_cls`).
    """
    return layer_cls(layer, hidden, attention_mask, value_layer=other_layer, value_hidden=other_hidden, token_mask=token_mask)


class TwinEncoder(nn.Module):
    """Two towers trained jointly: TNCSE when `cael == 0`, JTCSE when `cael > 0`."""

    def __init__(
        self,
        tower_I: PreTrainedModel,
        tower_II: PreTrainedModel,
        cael: int = 0,
        cross_outputs: str = "last",
        cross_mode: str = "stream",
    ):
        super().__init__()
        for tower in (tower_I, tower_II):
            require_pooler_layer(tower)
            if cael and not isinstance(architecture_of(tower), UnrolledLayer):
                raise PipelineError(f"train.cael={cael}: JTCSE's cross-attention runs a layer part by part, which "
                                    f"{type(architecture_of(tower)).__name__} does not; allowed: cael 0 (TNCSE)")
        shapes = [(architecture_of(t).layer_count(t.config), t.config.hidden_size) for t in (tower_I, tower_II)]
        if shapes[0] != shapes[1]:
            raise PipelineError(
                f"towers differ in (layers, hidden size): I={shapes[0]}, II={shapes[1]}; allowed: equal shapes"
            )
        self.tower_I = tower_I
        self.tower_II = tower_II
        self.num_layers = shapes[0][0]
        self.cael = validate_cael(cael, self.num_layers)
        self.cross_outputs = validate_cross_outputs(cross_outputs)
        self.cross_mode = validate_cross_mode(cross_mode, cross_outputs)
        self.cross_layers = cael_layers(cael, self.num_layers)
        # Side mode with "last": earlier CAELs' side outputs feed nothing, so they are not computed.
        self.computed_cross_layers = self.cross_layers[-1:] if cross_outputs == "last" else self.cross_layers

    @classmethod
    def from_pretrained(
        cls,
        path_I: str,
        path_II: str,
        cael: int = 0,
        cross_outputs: str = "last",
        dropout: float | None = None,
        cross_mode: str = "stream",
    ) -> "TwinEncoder":
        return cls(load_backbone(path_I, dropout), load_backbone(path_II, dropout), cael, cross_outputs, cross_mode)

    @property
    def towers(self) -> tuple[PreTrainedModel, PreTrainedModel]:
        return self.tower_I, self.tower_II

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> TwinOutput:
        """N sentences (N, T) -> 2N interleaved dropout views per tower."""
        view_ids = input_ids.repeat_interleave(2, dim=0)
        view_mask = attention_mask.repeat_interleave(2, dim=0)
        if self.cael == 0:
            outputs = [architecture_of(tower).sentence_outputs(tower, tower(input_ids=view_ids, attention_mask=view_mask),
                                                                view_mask) for tower in self.towers]
            return TwinOutput(
                last_cls=torch.stack([last for last, _ in outputs]),
                pooler_output=torch.stack([pooled for _, pooled in outputs]),
                cross_cls=None,
            )
        if self.cross_mode == "side":
            return self._forward_with_side_outputs(view_ids, view_mask)
        return self._forward_with_cross_streams(view_ids, view_mask)

    @property
    def architectures(self) -> list[Architecture]:
        """Each tower's family adapter (`pipeline.modeling.architecture`)."""
        return [architecture_of(tower) for tower in self.towers]

    def _embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """Each tower's embedding output and the attention mask its attention implementation takes."""
        hidden = [architecture_of(tower).embed(tower, input_ids) for tower in self.towers]
        masks = [
            architecture.layer_context(tower, states, attention_mask)
            for architecture, tower, states in zip(self.architectures, self.towers, hidden)
        ]
        return hidden, masks

    def _run_layers(self, layers: list[nn.Module], hidden: list[torch.Tensor], masks: list) -> list[torch.Tensor]:
        """Each tower's stock layer on its own stream."""
        return [architecture.run_layer(layer, states, mask)
                for architecture, layer, states, mask in zip(self.architectures, layers, hidden, masks)]

    def _outputs(self, hidden: list[torch.Tensor], cross_cls: torch.Tensor, attention_mask: torch.Tensor) -> TwinOutput:
        """The stock model's outputs from the last layer's states (after the encoder's final norm, if its
        family has one), and the cross outputs c (2, B, d), already past that norm."""
        architectures = self.architectures
        hidden = [architecture.final_norm(tower, states) for architecture, tower, states in zip(architectures, self.towers, hidden)]
        return TwinOutput(
            last_cls=torch.stack([architecture.sentence_vector(states, attention_mask)
                                  for architecture, states in zip(architectures, hidden)]),
            pooler_output=torch.stack([architecture.pooler_output(tower, states, attention_mask)
                                       for architecture, tower, states in zip(architectures, self.towers, hidden)]),
            cross_cls=cross_cls,
        )

    def _forward_with_cross_streams(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> TwinOutput:
        """The stock forward layer by layer, plus a cross stream per tower from the first CAEL on."""
        hidden, masks = self._embed(input_ids, attention_mask)
        cross: list[torch.Tensor] | None = None  # the towers' cross streams, once started
        last_index = self.num_layers - 1
        for index in range(self.num_layers):
            layers = [architecture_of(tower).layers(tower)[index] for tower in self.towers]
            if index in self.cross_layers:
                inputs = hidden if cross is None else cross  # the first CAEL starts from the normal streams
                # only the sentence row of layer L's cross output is read (the last CAEL is always layer L)
                rows = [architecture.sentence_row_only() if index == last_index else None for architecture in self.architectures]
                cross = [
                    layer_forward(layers[0], inputs[0], masks[0], layers[1], inputs[1], row=rows[0]),
                    layer_forward(layers[1], inputs[1], masks[1], layers[0], inputs[0], row=rows[1]),
                ]
            elif cross is not None:
                cross = self._run_layers(layers, cross, masks)
            hidden = self._run_layers(layers, hidden, masks)
        return self._outputs(hidden, torch.stack([last_sentence_vector(tower, states, attention_mask)
                                                  for tower, states in zip(self.towers, cross)]), attention_mask)

    def _forward_with_side_outputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> TwinOutput:
        """The stock forward, unrolled layer by layer so the CAELs can read both towers' inputs."""
        hidden, masks = self._embed(input_ids, attention_mask)
        cross_cls = []
        for index in range(self.num_layers):
            layers = [architecture_of(tower).layers(tower)[index] for tower in self.towers]
            if index in self.computed_cross_layers:
                cross_cls.append(
                    torch.stack(
                        [
                            cross_layer_cls(layers[0], hidden[0], masks[0], layers[1], hidden[1], attention_mask),
                            cross_layer_cls(layers[1], hidden[1], masks[1], layers[0], hidden[0], attention_mask),
                        ]
                    )
                )
            hidden = self._run_layers(layers, hidden, masks)
        rows = torch.stack(cross_cls).mean(0)  # the final norm acts on each tower's sentence vector
        return self._outputs(hidden, torch.stack([architecture.final_norm(tower, vectors) for architecture, tower, vectors
                                                  in zip(self.architectures, self.towers, rows)]), attention_mask)

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Inference embedding h_I^L + h_II^L (no view duplication, no pooler, no cross path): the
        twin of the model registry (`pipeline.evaluated_models.WeightedTowers.twin`) on the model in training."""
        h_I, h_II = (last_layer_cls(tower, input_ids, attention_mask) for tower in self.towers)
        return h_I + h_II
