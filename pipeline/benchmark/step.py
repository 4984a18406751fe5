"""The one optimizer step every timed training measurement runs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pipeline.training import Batch, RunContext


# TODO(lead): switch to pipeline.training.training_step once h-train lands
def training_step(task, model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, context: RunContext,
                  step: int = 0, loss_fn: Callable | None = None) -> torch.Tensor:
    """One step as `train` takes it with grad_accum 1 on one process: zero the gradients, the task's
    loss under the run's autocast, backward, AdamW. `loss_fn` (same signature as `task.loss`)
    replaces the task's loss (the released code's looped loss)."""
    optimizer.zero_grad(set_to_none=True)
    with context.autocast():
        loss = (loss_fn or task.loss)(model, batch, step)["loss"]
    loss.backward()
    optimizer.step()
    return loss.detach()
