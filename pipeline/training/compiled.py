"""The training step the GPU runs at its pace (DESIGN §14).

A step at the papers' shapes (batch 64, 32-64 tokens) is small: launched op by op, the GPU waits for
the host most of the time. So the task's whole `objective` (encoder, pooler, cross streams and every
loss term) is compiled as one graph (`fullgraph`: a graph break is an error, never a quiet slow
path) and, under `graphs`, replayed as CUDA graphs (torch.compile's `reduce-overhead`). Batches are
padded to a few fixed widths (`batching.padded_width`, multiples of `PAD_MULTIPLE`), so each width is
compiled and captured once; what a step draws on the host comes in as tensors
(`TrainingTask.step_inputs`); nothing in the step reads a device value back.

The `compile` setting:
- `off`: eager;
- `on`: the objective compiled as one graph, launched kernel by kernel;
- `graphs`: the objective compiled as one graph and captured as CUDA graphs (CUDA only);
- `auto`: `graphs` on CUDA, `off` on a CPU (compiling costs more than it saves there, and the CPU path
  stays the committed run's, byte for byte).
Two cases keep the older, narrower compile, each logged when it applies: under DDP (several
processes) the model's forward alone is compiled (the gathers between ranks are not captured), and with
`grad_accum` > 1 `graphs` compiles without capturing (a captured backward's gradients would be
overwritten by the next micro-batch's replay before the optimizer reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import nn

from pipeline.training.batching import Batch, fixed_widths
from pipeline.training.contract import TrainingTask

PAD_MULTIPLE = 8  # padded widths 8, 16, ..., max_length: tensor-core friendly, few enough to capture each
CompileMode = Literal["off", "module", "whole", "graphs"]

LossFn = Callable[[nn.Module, Batch, int], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class StepCompilation:
    """How a run's step is compiled: `off`, `module` (the model's forward only), `whole` (the objective
    as one graph) or `graphs` (that graph captured as CUDA graphs)."""

    mode: CompileMode
    note: str = ""  # why the setting resolved to a narrower mode, when it did (the loop logs it)

    @property
    def whole(self) -> bool:
        return self.mode in ("whole", "graphs")

    @property
    def pad_multiple(self) -> int | None:
        """Fixed widths where the objective is compiled whole (one graph per width); dynamic padding otherwise."""
        return PAD_MULTIPLE if self.whole else None


def step_compilation(setting: str, device: torch.device, world_size: int = 1, grad_accum: int = 1) -> StepCompilation:
    """The `compile` setting resolved for this run (see the module's docstring)."""
    if setting == "off" or (setting == "auto" and device.type != "cuda"):
        return StepCompilation("off")
    if world_size > 1:
        return StepCompilation("module", f"compile={setting} with {world_size} processes: the model's forward is "
                                         "compiled alone (the gathers between ranks are not captured)")
    if setting == "on":
        return StepCompilation("whole")
    if device.type != "cuda":
        return StepCompilation("whole", f"compile=graphs captures CUDA graphs, which a {device.type} has not: "
                                        "the objective is compiled as one graph without")
    if grad_accum > 1:
        return StepCompilation("whole", f"compile={setting} with grad_accum={grad_accum}: the objective is compiled as "
                                        "one graph but not captured (a replay would overwrite the gradients accumulated so far)")
    return StepCompilation("graphs")


def allow_recompiles(widths: int) -> None:
    """Let dynamo keep one graph per fixed width (and the epoch's last, smaller batch) instead of falling
    back to eager past its default limit of 8; past this limit a recompile is an error, not a quiet slow path."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, 2 * widths + 2)
    config.fail_on_recompile_limit_hit = True


def compiled_loss(task: TrainingTask, compilation: StepCompilation, max_length: int, backend: str | None = None) -> LossFn:
    """`task.loss` as the loop calls it, with `task.objective` compiled whole when `compilation` says so.
    `backend`: torch.compile's (tests count compilations with their own); None = inductor."""
    if not compilation.whole:
        return task.loss
    allow_recompiles(len(fixed_widths(PAD_MULTIPLE, max_length)))
    graphs = compilation.mode == "graphs"
    options: dict = {"backend": backend} if backend is not None else {"mode": "reduce-overhead" if graphs else None}
    objective = torch.compile(task.objective, fullgraph=True, dynamic=False, **options)

    def loss(model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        inputs = task.step_inputs(step, batch)
        if graphs:  # a new step: the previous step's graph outputs are no longer read (the loop keeps copies)
            torch.compiler.cudagraph_mark_step_begin()
        return objective(model, batch, inputs)

    return loss
