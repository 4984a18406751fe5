"""The optimizer step every timed training measurement runs: the training loop's own
`pipeline.training.loop.training_step`, on one batch (grad_accum 1, one process), with the loop's
optimizer (`make_optimizer`: fused AdamW on CUDA)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pipeline.training.batching import Batch
from pipeline.execution.runtime import RunContext
from pipeline.training.loop import make_optimizer, training_step


def bench_optimizer(model: nn.Module, lr: float, device: torch.device, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The training loop's AdamW. The decay does not change a step's cost; 0.01 is torch's default."""
    return make_optimizer(model, lr, weight_decay, device)


def timed_step(task, model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, context: RunContext,
               step: int = 0, loss_fn: Callable | None = None) -> None:
    """One step as `train` takes it with grad_accum 1 on one process. `loss_fn` (same signature as
    `task.loss`) replaces the task's loss (the released code's looped loss)."""
    training_step(loss_fn or task.loss, model, optimizer, [batch], context, step)
