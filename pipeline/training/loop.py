"""The one training loop that pretrain, joint and distill share.

A stage describes its work as a `TrainingTask` (the module to train, how a batch becomes a loss,
how the result is saved); `train` does the rest, in four phases read top to bottom:

1. **resume** from the newest whole checkpoint of the same settings (or start over);
2. **step** (`training_step`): gradient accumulation over micro-batches (under DDP the gradients
   are all-reduced once per step, on the last micro-batch), optional clipping of the accumulated
   gradient, AdamW (fused on CUDA) with a linear or constant schedule;
3. **evaluate and keep the best**: STS-B dev every `eval_every` steps (and at the end), the best
   weights kept for the output (`best-<step>/`, the step the metrics name, with its files' checksums);
4. **finish**: the best (verified against its checksums; or, with no scorer, the final) model written in
   Hugging Face format, the checkpoints removed.

Batches come from `batching.py` (tokenised once per stage, seeded uniform random batches or
length-bucketed ones, dynamic padding); device, seed and precision (the stage's `precision`
setting: bf16/fp16 autocast on CUDA, fp16 with a gradient scaler, or fp32) from `pipeline.execution.runtime`. The
loss stays on the device: it is read to the host every `LOSS_READ_EVERY` steps, before an
evaluation, before a checkpoint and at the end (`LossLog`), so the host never waits for the GPU
inside a step; a NaN/inf loss stops the run at that read with the step it first appeared at.
With `compile` (`auto`: CUDA graphs on CUDA, eager on a CPU) the task's whole objective is compiled as one
graph and captured per fixed padded width (`compiled.py`); deterministic CUDA kernels only with
`deterministic` (CPU kernels are deterministic anyway at a fixed thread count).
Resume states (`<resume_dir>/step-<N>/`, `resume.py`) survive a kill; a rerun with
the same fingerprint resumes from the newest readable one (a corrupt one is named and skipped). The
resume folder is held by one run at a time (a second run of the same stage is refused).

What a task must provide is declared in `pipeline.training.contract.TrainingTask`; what one run
needs beside the task, its examples and optimisation settings is a `RunSpec`.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from pipeline.config import OptimSettings
from pipeline.errors import PipelineError
from pipeline.io import atomic_directory, write_text_atomic
from pipeline.modeling import checkpoint_activations
from pipeline.modeling.distributed import Shard, shard_dropout
from pipeline.execution.runtime import RunContext, peak_memory_mb, seed_everything
from pipeline.training.compiled import LossFn, StepCompilation, compiled_loss, step_compilation
from pipeline.training.batching import (
    Batch, TokenizedExamples, batch_loader, check_world_size, epoch_batches, steps_per_epoch, to_device,
)
from pipeline.training.contract import TrainingTask
from pipeline.training.resume import (
    BEST_CHECKSUMS, apply_resume_state, best_model_folder, hold_resume_folder, latest_resume_state, prune_best_models,
    record_best_model, resumable_state, save_resume_state, unwrap, verify_best_model,
)

log = logging.getLogger(__name__)

COMPLETED_NOTE = "README"
LOSS_READ_EVERY = 50  # steps between two reads of the loss from the device (one host-device sync each)

LossHook = Callable[[torch.Tensor, int], torch.Tensor]  # (a micro-batch's loss, step) -> the loss to use
DevScore = Callable[[nn.Module], float]  # model -> STS-B dev Spearman x 100 (model selection)


@dataclass(frozen=True)
class RunSpec:
    """One run of `train` beside its task, examples and optimisation settings.

    `dev_score` runs every `eval_every` steps (and at the end with `eval_at_end`); the best-scoring
    weights are what `task.save` writes to `output_dir`; without it the final weights are saved.
    Resume states under `resume_dir` record `fingerprint` (the settings and inputs that define the
    run); one written under another fingerprint is discarded instead of resumed. `loss_hook`: see
    `training_step`."""

    lr: float
    seed: int
    output_dir: Path
    resume_dir: Path
    description: str = "train"  # names the run in logs and errors
    fingerprint: str = ""
    dev_score: DevScore | None = None
    loss_hook: LossHook | None = None


def make_scheduler(optimizer: torch.optim.Optimizer, schedule: str, warmup_steps: int, total_steps: int):
    """linear: warm-up then linear decay to zero at the last step; constant: warm-up then the set rate."""
    if schedule == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup_steps)
    return get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW; on CUDA the fused kernel (one launch for all parameters instead of several per tensor)."""
    fused = True if device.type == "cuda" else None
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused)


def planned_steps(
    example_count: int, settings: OptimSettings, description: str = "train", world_size: int = 1
) -> tuple[int, int]:
    """(optimizer steps per epoch, total steps) of a run; a run that would take no step is an error.

    Stages call it before loading any model, so a bad batch_size/grad_accum fails in a second.
    """
    check_world_size(settings.batch_size, world_size, f"{description}: batch_size")
    if example_count < settings.batch_size:
        raise PipelineError(
            f"{description}: {example_count} training examples are fewer than one batch of {settings.batch_size}; "
            "lower batch_size or use a larger corpus"
        )
    epoch_steps = steps_per_epoch(settings.sampling, example_count, settings.batch_size, settings.grad_accum, world_size)
    if epoch_steps == 0:  # length_bucketed drops incomplete batches and steps
        raise PipelineError(
            f"{description}: 0 optimizer steps: {example_count} examples make {example_count // settings.batch_size} "
            f"batches of {settings.batch_size}, fewer than grad_accum={settings.grad_accum}; lower grad_accum or batch_size"
        )
    total_steps = epoch_steps * settings.epochs
    if settings.max_steps is not None:
        total_steps = min(total_steps, settings.max_steps)
    return epoch_steps, total_steps


@dataclass
class TrainingResult:
    steps: int
    best_dev: float | None
    best_step: int | None
    final_loss: float
    steps_per_second: float
    peak_memory_mb: float
    resumed_from: int | None
    history: list[dict] = field(default_factory=list)


# ---- the loss, read from the device now and then ----------------------------------------------


class LossLog:
    """Per-step loss terms, kept on the device until `read`: one host-device sync per read instead
    of one per step. `read` appends a history row per step — each term the mean of its
    micro-batches, `lr` — and stops the run on a NaN/inf loss, naming the first step that had it."""

    def __init__(self, history: list[dict], description: str, resume_dir: Path):
        self.history, self.description, self.resume_dir = history, description, resume_dir
        self._pending: list[tuple[int, dict[str, list[torch.Tensor]], float]] = []

    def add(self, step: int, terms: dict[str, list[torch.Tensor]], lr: float) -> None:
        self._pending.append((step, terms, lr))

    def read(self) -> None:
        if not self._pending:
            return
        tensors = [value for _, terms, _ in self._pending for values in terms.values() for value in values]
        host = iter(torch.stack([value.to(torch.float64) for value in tensors]).tolist())
        for step, terms, lr in self._pending:
            row: dict = {"step": step}
            for name, values in terms.items():
                micro = [next(host) for _ in values]
                bad = [value for value in micro if not math.isfinite(value)] if name == "loss" else []
                if bad:
                    self._pending = []
                    kept = latest_resume_state(self.resume_dir)
                    raise PipelineError(
                        f"{self.description}: loss is {bad[0]} at step {step}; stopped, last good checkpoint "
                        f"{kept or 'none yet'} kept; lower the learning rate or check the input"
                    )
                row[name] = 0.0
                for value in micro:
                    row[name] += value / len(micro)
            self.history.append({**row, "lr": lr})
        self._pending = []

    @property
    def last_loss(self) -> float:
        """The loss of the last step read (NaN before any); a run resumed at its end keeps the checkpoint's."""
        return ([row["loss"] for row in self.history if "loss" in row][-1:] or [math.nan])[0]


# ---- one optimizer step ------------------------------------------------------------------------


def training_step(
    loss_fn: LossFn,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: Sequence[Batch],
    context: RunContext,
    step: int,
    *,
    max_grad_norm: float | None = None,
    backward_scale: float = 1,
    loss_hook: LossHook | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> dict[str, list[torch.Tensor]]:
    """One optimizer step over `micro_batches` (gradient accumulation): zero the gradients; per
    micro-batch the loss under the run's autocast, divided by the number of micro-batches, times
    `backward_scale`, backward — under DDP without the gradient all-reduce except on the last one
    (`no_sync`), so gradients are reduced once per step; clip the accumulated gradient's norm
    (`max_grad_norm`); the optimizer's step. Under fp16 `scaler` (the context's `grad_scaler`)
    scales the loss before backward and unscales the gradient before the clip; it skips a step
    whose gradient overflowed. `loss_hook(loss, step)` may replace each micro-batch's
    loss (tests inject a NaN with it). Returns each term's per-micro-batch values (and `grad_norm`)
    as detached device tensors: nothing here waits for the device."""
    optimizer.zero_grad(set_to_none=True)
    recorded: dict[str, list[torch.Tensor]] = {}
    distributed = isinstance(model, nn.parallel.DistributedDataParallel)
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with nullcontext() if last or not distributed else model.no_sync():
            with context.autocast():
                terms = loss_fn(model, batch, step)
            if loss_hook is not None:
                terms = {**terms, "loss": loss_hook(terms["loss"], step)}
            loss = terms["loss"]
            if len(micro_batches) > 1 or backward_scale != 1:  # else two kernels (and their backward) for nothing
                loss = loss / len(micro_batches) * backward_scale
            (scaler.scale(loss) if scaler is not None else loss).backward()
        for name, value in terms.items():  # a copy: a captured graph's outputs are overwritten by its next replay
            recorded.setdefault(name, []).append(value.detach().clone())
    if max_grad_norm is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        # once per optimiser step, on the accumulated (DDP: already all-reduced) fp32 gradient
        recorded["grad_norm"] = [torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm).detach()]
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return recorded


# ---- the run -----------------------------------------------------------------------------------


@dataclass
class _Run:
    """One run's model, optimizer and progress, shared by the phases of `train`."""

    task: TrainingTask
    model: nn.Module  # DDP-wrapped under torchrun
    optimizer: torch.optim.Optimizer
    scheduler: object
    context: RunContext
    spec: RunSpec
    step: int = 0
    best_dev: float | None = None
    best_step: int | None = None
    resumed_from: int | None = None
    history: list[dict] = field(default_factory=list)
    losses: LossLog | None = None
    scaler: torch.amp.GradScaler | None = None

    def best_dir(self) -> Path:
        """The folder of the best model so far (`best-<step>/`, the step its metrics name)."""
        return best_model_folder(self.spec.resume_dir, self.best_step)


def _prepare(task: TrainingTask, settings: OptimSettings, lr: float, total_steps: int, context: RunContext,
             compilation: StepCompilation):
    """The model on its device (under DDP with global-batch dropout; activation-checkpointed, its forward
    compiled under DDP, DDP-wrapped where set), AdamW and the schedule."""
    model = task.place(context.device)
    if context.world_size > 1:  # dropout masks drawn over the global batch, as one process draws them
        shard_dropout(model, Shard(context.rank, context.world_size))
    if settings.activation_checkpointing:
        checkpoint_activations(model)
    if compilation.mode == "module":
        model.compile()  # in place: the forward is compiled, names and state dict stay as they are
    optimizer = make_optimizer(model, lr, settings.weight_decay, context.device)
    scheduler = make_scheduler(optimizer, settings.schedule, settings.warmup_steps, total_steps)
    if context.world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[context.device.index] if context.device.type == "cuda" else None,
            find_unused_parameters=task.leaves_parameters_unused,
        )
    return model, optimizer, scheduler


def _resume(run: _Run, total_steps: int) -> None:
    """Phase 1: continue from the newest whole, readable resume state written under the same fingerprint."""
    run.spec.resume_dir.mkdir(parents=True, exist_ok=True)
    stored = resumable_state(run.spec.resume_dir, run.spec.fingerprint, run.spec.description)
    if stored is not None:
        state = apply_resume_state(stored, run.model, run.optimizer, run.scheduler, run.context.device, run.task.generators)
        run.step, run.best_dev, run.best_step = state["step"], state["best_dev"], state["best_step"]
        run.history[:] = state["history"]
        run.resumed_from = run.step
        log.info("%s: resuming from checkpoint %s (step %d of %d)", run.spec.description, stored.folder, run.step, total_steps)


def _epoch_groups(data: TokenizedExamples, settings: OptimSettings, seed: int, step: int, epoch_steps: int,
                  context: RunContext) -> Iterator[list[Batch]]:
    """The rest of the current epoch as groups of `grad_accum` micro-batches (this rank's block of
    rows, padded as the global batch), on the device."""
    batches = epoch_batches(settings.sampling, data.lengths, settings.batch_size, seed, step // epoch_steps,
                            context.world_size)[: epoch_steps * settings.grad_accum]
    position = (step % epoch_steps) * settings.grad_accum
    group: list[Batch] = []
    for batch in batch_loader(data, batches[position:], context.device, context.rank, context.world_size):
        group.append(to_device(batch, context.device))
        if len(group) == settings.grad_accum:
            yield group
            group = []
    if group:
        yield group


def _evaluate_and_keep_best(run: _Run) -> None:
    """Phase 3: score the current weights on STS-B dev; keep them when they are the best so far."""
    run.losses.read()
    if run.spec.dev_score is None or not run.context.is_main:
        return
    model = unwrap(run.model)
    model.eval()
    with torch.no_grad(), run.context.autocast():
        score = float(run.spec.dev_score(model))
    model.train()
    if run.history and run.history[-1]["step"] == run.step:
        run.history[-1]["dev_stsb"] = score
    else:
        run.history.append({"step": run.step, "dev_stsb": score})
    if run.best_dev is None or score > run.best_dev:
        run.best_dev, run.best_step = score, run.step
        with atomic_directory(run.best_dir()) as folder:  # a new folder: the kept ones stay whole
            run.task.save(model, folder)
            record_best_model(folder)
        prune_best_models(run.spec.resume_dir, run.best_step)
    log.info("%s: step %d STS-B dev %.2f (best %.2f at step %d)", run.spec.description, run.step, score, run.best_dev,
             run.best_step)


def _save_resume_state(run: _Run) -> None:
    run.losses.read()  # on every rank: a NaN stops them all, before anything is saved
    if run.context.is_main:
        state = {"step": run.step, "best_dev": run.best_dev, "best_step": run.best_step, "history": run.history,
                 "fingerprint": run.spec.fingerprint}
        save_resume_state(run.spec.resume_dir, run.step, run.model, run.optimizer, run.scheduler, state, run.context.device,
                          run.task.generators)
        prune_best_models(run.spec.resume_dir, run.best_step)


def _finish(run: _Run, steps_per_second: float) -> TrainingResult:
    """Phase 4: the best model (the final one when nothing is scored) to the spec's `output_dir`;
    the finished run's resume states removed. The best model is the one of the step its metrics name, or an error."""
    if run.context.is_main:
        if run.best_step is not None and not run.best_dir().is_dir():
            raise PipelineError(
                f"{run.spec.description}: the best model (step {run.best_step}, STS-B dev {run.best_dev:.2f}) is missing: "
                f"{run.best_dir()} was removed during the run; delete {run.spec.resume_dir} to train again"
            )
        if run.best_step is not None:
            verify_best_model(run.best_dir(), run.spec.resume_dir, run.spec.description)
        with atomic_directory(run.spec.output_dir) as folder:
            if run.best_step is not None:
                shutil.copytree(run.best_dir(), folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(BEST_CHECKSUMS))
            else:
                run.task.save(unwrap(run.model), folder)
        # The run is complete: its checkpoints have served; a forced rerun starts over. The folder
        # keeps only a fixed note (and the lock file), so a rerun finds nothing to resume.
        for finished in [*run.spec.resume_dir.glob("step-*"), *run.spec.resume_dir.glob("best-*")]:
            shutil.rmtree(finished, ignore_errors=True)
        write_text_atomic(run.spec.resume_dir / COMPLETED_NOTE, "the last run completed; checkpoints appear here while one runs\n")
    return TrainingResult(
        steps=run.step, best_dev=run.best_dev, best_step=run.best_step, final_loss=run.losses.last_loss,
        steps_per_second=steps_per_second, peak_memory_mb=peak_memory_mb(run.context.device),
        resumed_from=run.resumed_from, history=run.history,
    )


def train(task: TrainingTask, examples: Sequence[Sequence[str]], settings: OptimSettings, spec: RunSpec,
          context: RunContext) -> TrainingResult:
    """Train `task.model` on `examples` (tuples of texts, one per column, read with
    `task.column_tokenizers`) under `settings` and `spec` (see `RunSpec`), and save the best model."""
    with hold_resume_folder(spec.resume_dir, spec.description) if context.is_main else nullcontext():
        return _train(task, examples, settings, spec, context)


def _train(task: TrainingTask, examples: Sequence[Sequence[str]], settings: OptimSettings, spec: RunSpec,
           context: RunContext) -> TrainingResult:
    seed_everything(spec.seed, deterministic=settings.deterministic or context.device.type != "cuda")
    compilation = step_compilation(settings.compile, context.device, context.world_size, settings.grad_accum)
    if compilation.note:
        log.info("%s: %s", spec.description, compilation.note)
    data = TokenizedExamples(task.column_tokenizers, examples, settings.max_length, compilation.pad_multiple)
    epoch_steps, total_steps = planned_steps(len(examples), settings, spec.description, context.world_size)
    run = _Run(task, *_prepare(task, settings, spec.lr, total_steps, context, compilation), context, spec)
    loss_fn = compiled_loss(task, compilation, settings.max_length)
    run.losses = LossLog(run.history, spec.description, spec.resume_dir)
    run.scaler = context.grad_scaler()
    _resume(run, total_steps)

    # A loss over embeddings gathered from every rank is the same on each rank, with gradients only
    # for the local part: scaling it by the world size undoes DDP's gradient averaging.
    backward_scale = context.world_size if task.loss_spans_global_batch else 1
    run.model.train()
    started, first_step = time.perf_counter(), run.step
    progress = tqdm(total=total_steps, initial=run.step, desc=spec.description, unit="step", disable=not context.is_main)
    while run.step < total_steps:
        for group in _epoch_groups(data, settings, spec.seed, run.step, epoch_steps, context):
            terms = training_step(loss_fn, run.model, run.optimizer, group, context, run.step,
                                  max_grad_norm=settings.max_grad_norm, backward_scale=backward_scale,
                                  loss_hook=spec.loss_hook, scaler=run.scaler)
            run.scheduler.step()
            run.step += 1
            run.losses.add(run.step, terms, run.scheduler.get_last_lr()[0])
            progress.update(1)
            if run.step % LOSS_READ_EVERY == 0:
                run.losses.read()
                progress.set_postfix(loss=f"{run.losses.last_loss:.4f}")
            if run.step % settings.eval_every == 0 and (run.step < total_steps or not settings.eval_at_end):
                _evaluate_and_keep_best(run)
            if run.step % settings.save_every == 0:
                _save_resume_state(run)
            if run.step >= total_steps:
                break
    run.losses.read()
    progress.close()
    elapsed = time.perf_counter() - started
    if settings.eval_at_end:
        _evaluate_and_keep_best(run)
    return _finish(run, (run.step - first_step) / elapsed if elapsed > 0 else 0.0)

