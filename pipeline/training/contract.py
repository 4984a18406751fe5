"""What a training task is: everything the loop (`loop.train`) and the stage jobs (`jobs`) read of one.

Every attribute is declared here, none is optional: a task that leaves one out (or misspells it)
cannot be instantiated (`TypeError` from the ABC), so no reader needs a default.

A batch becomes a loss in two parts, so that the GPU can run the second as one captured graph
(`pipeline.training.compiled`): `step_inputs`, what the step draws on the host (GS-InfoNCE's noise,
JTCSE's direction R: from the task's own seeded generators, never from a device value), and
`objective`, a pure tensor function of the model, the batch and those inputs. `loss` is the two in a row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from pipeline.training.batching import Batch, Tokenizers


class TrainingTask(ABC):
    """A model to train, how a batch becomes its loss, how it embeds (model selection) and saves.

    `model`: the module whose parameters are trained (DDP wraps it); `tokenizer`: the tokenizer
    its inputs are read with (the dev scorer's, and the saved model's)."""

    def __init__(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase):
        self.model, self.tokenizer = model, tokenizer

    @property
    @abstractmethod
    def column_tokenizers(self) -> Tokenizers:
        """The tokenizer of each text column of an example: one for all, or one per column."""

    @property
    @abstractmethod
    def loss_spans_global_batch(self) -> bool:
        """Whether the loss is over embeddings gathered from every DDP rank (then the loop scales
        the backward by the world size, undoing DDP's gradient averaging)."""

    @property
    @abstractmethod
    def leaves_parameters_unused(self) -> bool:
        """Whether some parameters of `model` get no gradient (DDP must be told: find_unused_parameters)."""

    @property
    @abstractmethod
    def generators(self) -> dict[str, torch.Generator]:
        """The task's own random generators by name (GS-InfoNCE's noise), apart from torch's global one:
        a resume state keeps their states too, so a resumed run draws what an uninterrupted one draws."""

    @abstractmethod
    def objective(self, model: nn.Module, batch: Batch, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The objective on one batch given the step's `inputs` (`step_inputs`): {"loss": total, other
        terms for logging}. Tensors in, tensors out: no host read, no Python branch on a tensor's value
        (the compiled step traces it as one graph)."""

    def step_inputs(self, step: int, batch: Batch) -> dict[str, torch.Tensor]:
        """What step `step` draws on the host for `objective`, on the batch's device (copied without
        waiting). None by default."""
        return {}

    def loss(self, model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """The objective on one batch at step `step` (eager): `objective` with this step's inputs."""
        return self.objective(model, batch, self.step_inputs(step, batch))

    def place(self, device: torch.device) -> nn.Module:
        """Move what the objective runs on to `device` (the trained model; a task's frozen parts too); the model."""
        return self.model.to(device)

    @abstractmethod
    def embed(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The inference embedding of a batch (what STS-B dev scores for model selection)."""

    @abstractmethod
    def save(self, model: nn.Module, directory: Path) -> None:
        """Write the trained model(s) in Hugging Face format."""
