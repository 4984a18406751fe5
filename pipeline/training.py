"""The one training loop that pretrain, joint and distill share.

A stage describes its work as a `TrainingTask` (the module to train, how a batch becomes a loss,
how the result is saved); `train` does the rest: tokenisation once, seeded uniform random batches
(or length-bucketed ones, a speed option) with dynamic padding, AdamW with a linear or constant
schedule, gradient accumulation with optional clipping of the accumulated gradient, bf16 autocast
and TF32 on CUDA, DDP under `torchrun`, STS-B dev evaluation with best-model selection,
checkpoints that survive a kill, and a stop with the step number on a NaN/inf loss.

Checkpoints (`<checkpoint_dir>/step-<N>/`): the trained module's weights as safetensors, the
optimizer and scheduler state and the CPU and CUDA RNG states (`torch.load(weights_only=True)` on resume — only
files this loop wrote itself), and `state.json`. Each is written into a temporary folder and
renamed, so a killed run leaves only whole checkpoints.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import psutil
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase, get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from pipeline.config import DEVICES, OptimSettings
from pipeline.data.sources import atomic_directory, write_json_atomic, write_text_atomic
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

# Test hook: make the loss NaN at this step to exercise the NaN stop (never set in real runs).
FORCE_NAN_AT_STEP = "PIPELINE_TEST_NAN_AT_STEP"
COMPLETED_NOTE = "README"

Batch = list[dict[str, torch.Tensor]]  # one padded {input_ids, attention_mask} per text column


class TrainingTask(Protocol):
    """What a training stage hands to `train`."""

    model: nn.Module  # the module whose parameters are trained (DDP wraps it)

    def loss(self, model: nn.Module, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """The objective on one batch: {"loss": total, other terms for logging}."""

    def save(self, model: nn.Module, directory: Path) -> None:
        """Write the trained model(s) in Hugging Face format."""


@dataclass
class RunContext:
    """Where things run: device, precision and the DDP world."""

    device: torch.device
    autocast_dtype: torch.dtype | None
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self):
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


def resolve_device(requested: str) -> torch.device:
    """`auto` → CUDA when present, else CPU; asking for CUDA where there is none is an error."""
    if requested not in DEVICES:
        raise PipelineError(f"device {requested!r} is not one of {', '.join(DEVICES)}")
    if requested == "cuda" and not torch.cuda.is_available():
        raise PipelineError("device=cuda but no CUDA GPU is visible to torch; set device: auto or device: cpu")
    if requested == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    return torch.device("cuda", local_rank)


def run_context(requested_device: str) -> RunContext:
    """Set up the device and, when launched by torchrun (WORLD_SIZE > 1), the process group."""
    device = resolve_device(requested_device)
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = 0
    if world_size > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        rank = torch.distributed.get_rank()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return RunContext(device, torch.bfloat16, rank, world_size)
    return RunContext(device, None, rank, world_size)


def seed_everything(seed: int) -> None:
    """Same seed, same machine, same thread count → same weights (DESIGN §9). CPU kernels are
    deterministic for a fixed thread count, which is torch's default for the machine (logged, as a
    different count may move the last digits); the flag below makes CUDA pick deterministic kernels
    too (cuBLAS needs its workspace setting for that), warning where an op has none."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    log.info("seed %d, %d CPU threads, deterministic algorithms", seed, torch.get_num_threads())


Tokenizers = PreTrainedTokenizerBase | Sequence[PreTrainedTokenizerBase]  # one, or one per text column


def column_tokenizers(tokenizer: Tokenizers, columns: int) -> list[PreTrainedTokenizerBase]:
    """The tokenizer of each text column: one for all, or one each (e.g. a teacher member's own)."""
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return [tokenizer] * columns
    if len(tokenizer) != columns:
        raise PipelineError(f"{len(tokenizer)} tokenizers for {columns} text columns; give one per column")
    return list(tokenizer)


def tokenize_columns(tokenizer: Tokenizers, examples: Sequence[Sequence[str]], max_length: int) -> list[list[list[int]]]:
    """Token ids of every text of every example, once, truncated to `max_length`: [column][example]."""
    columns = list(zip(*examples))
    return [
        column_tokenizer(list(column), truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]
        for column_tokenizer, column in zip(column_tokenizers(tokenizer, len(columns)), columns)
    ]


def random_batches(count: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """A seeded uniform permutation of the examples cut into batches, the last partial batch kept:
    what the reference code's shuffled `DataLoader` (and SimCSE's `Trainer`) feeds."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    return [order[start : start + batch_size].tolist() for start in range(0, count, batch_size)]


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, seed: int, epoch: int, bucket_batches: int = 50
) -> list[list[int]]:
    """Shuffled batches of similar-length examples, so dynamic padding pads little.

    The corpus is shuffled, cut into windows of `bucket_batches` batches, each window sorted by
    length and cut into batches, and the batch order shuffled again: batches stay random samples of
    the corpus at the scale of a window. Incomplete last batches are dropped (in-batch negatives).
    """
    generator = np.random.default_rng([seed, epoch])
    order = generator.permutation(len(lengths))
    window = batch_size * bucket_batches
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(np.asarray(lengths)[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size].tolist() for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    generator.shuffle(batches)
    return batches


def _partial_rows(count: int, batch_size: int, world_size: int) -> int:
    """Rows of the last partial batch that are used: a multiple of the world size, so that every
    DDP rank holds as many rows (the embedding gathers need it)."""
    rest = count % batch_size
    return rest - rest % world_size


def epoch_batches(
    sampling: str, lengths: Sequence[int], batch_size: int, seed: int, epoch: int, world_size: int = 1
) -> list[list[int]]:
    """The batches of one epoch under `sampling` (random | length_bucketed)."""
    if sampling == "length_bucketed":
        return length_bucketed_batches(lengths, batch_size, seed, epoch)
    batches = random_batches(len(lengths), batch_size, seed, epoch)
    if len(batches[-1]) < batch_size:
        kept = _partial_rows(len(lengths), batch_size, world_size)
        batches = batches[:-1] + ([batches[-1][:kept]] if kept else [])
    return batches


def steps_per_epoch(sampling: str, count: int, batch_size: int, grad_accum: int, world_size: int = 1) -> int:
    """Optimiser steps per epoch: random keeps the last partial batch (and a last step of fewer
    than `grad_accum` batches); length_bucketed drops incomplete batches and steps."""
    if sampling == "length_bucketed":
        return count // batch_size // grad_accum
    batches = count // batch_size + (1 if _partial_rows(count, batch_size, world_size) else 0)
    return math.ceil(batches / grad_accum)


def make_scheduler(optimizer: torch.optim.Optimizer, schedule: str, warmup_steps: int, total_steps: int):
    """linear: warm-up then linear decay to zero at the last step; constant: warm-up then the set rate."""
    if schedule == "constant":
        return get_constant_schedule_with_warmup(optimizer, warmup_steps)
    return get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


def planned_steps(
    example_count: int, settings: OptimSettings, description: str = "train", world_size: int = 1
) -> tuple[int, int]:
    """(optimizer steps per epoch, total steps) of a run; a run that would take no step is an error.

    Stages call it before loading any model, so a bad batch_size/grad_accum fails in a second.
    """
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


def pad_batch(token_ids: list[list[int]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence of this batch (dynamic padding)."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), width), dtype=torch.long)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


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


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return psutil.Process().memory_info().rss / 2**20


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    complete = [path for path in checkpoint_dir.glob("step-*") if (path / "state.json").is_file()]
    return max(complete, key=lambda path: int(path.name.split("-")[1]), default=None)


def _rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    """CPU and (on CUDA) this device's generator: dropout masks on a GPU come from the latter. Under
    DDP every rank is seeded alike and draws alike, so rank 0's state stands for each rank's own."""
    states = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda_rng"] = torch.cuda.get_rng_state(device)
    return states


def _save_checkpoint(checkpoint_dir: Path, step: int, model: nn.Module, optimizer, scheduler, state: dict,
                     device: torch.device = torch.device("cpu")) -> None:
    with atomic_directory(checkpoint_dir / f"step-{step}") as folder:
        weights = {name: tensor.detach().contiguous().cpu() for name, tensor in _unwrap(model).state_dict().items()}
        save_file(weights, folder / "model.safetensors")
        torch.save(
            {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), **_rng_states(device)},
            folder / "training_state.pt",
        )
        (folder / "state.json").write_text(json.dumps(state))
    _prune_checkpoints(checkpoint_dir, keep=2)


def _prune_checkpoints(checkpoint_dir: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints: a kill during a save still leaves a whole one."""
    complete = sorted(
        (path for path in checkpoint_dir.glob("step-*") if (path / "state.json").is_file()),
        key=lambda path: int(path.name.split("-")[1]),
    )
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _load_checkpoint(folder: Path, model: nn.Module, optimizer, scheduler,
                     device: torch.device = torch.device("cpu")) -> dict:
    _unwrap(model).load_state_dict(load_file(folder / "model.safetensors"), strict=True)
    training_state = torch.load(folder / "training_state.pt", weights_only=True)
    optimizer.load_state_dict(training_state["optimizer"])
    scheduler.load_state_dict(training_state["scheduler"])
    torch.set_rng_state(training_state["rng"])
    if device.type == "cuda" and "cuda_rng" in training_state:
        torch.cuda.set_rng_state(training_state["cuda_rng"], device)
    return json.loads((folder / "state.json").read_text())


def train(
    task: TrainingTask,
    examples: Sequence[Sequence[str]],
    tokenizer: Tokenizers,
    settings: OptimSettings,
    lr: float,
    output_dir: Path,
    checkpoint_dir: Path,
    context: RunContext,
    seed: int,
    dev_score: Callable[[nn.Module], float] | None = None,
    description: str = "train",
    fingerprint: str = "",
) -> TrainingResult:
    """Train `task.model` on `examples` (tuples of texts, one per column) and save the best model.

    `dev_score(model)` (STS-B dev Spearman) runs every `settings.eval_every` steps and, with
    `settings.eval_at_end`, after the last step;
    the best-scoring weights are what `task.save` writes to `output_dir`. Without `dev_score` the
    final weights are saved. Checkpoints record `fingerprint` (the settings and inputs that
    define the run); one written under another fingerprint is discarded instead of resumed.
    """
    seed_everything(seed)
    token_ids = tokenize_columns(tokenizer, examples, settings.max_length)
    lengths = [len(ids) for ids in token_ids[0]]
    global_batch = settings.batch_size
    epoch_steps, total_steps = planned_steps(len(examples), settings, description, context.world_size)

    model = task.model.to(context.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=settings.weight_decay)
    scheduler = make_scheduler(optimizer, settings.schedule, settings.warmup_steps, total_steps)
    if context.world_size > 1:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[context.device.index] if context.device.type == "cuda" else None,
            find_unused_parameters=getattr(task, "leaves_parameters_unused", False),
        )

    step, best_dev, best_step, history, resumed_from = 0, None, None, [], None
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    best_dir = checkpoint_dir / "best"
    latest = _latest_checkpoint(checkpoint_dir)
    if latest is not None and json.loads((latest / "state.json").read_text()).get("fingerprint") != fingerprint:
        log.info("%s: checkpoints in %s belong to other settings; starting over", description, checkpoint_dir)
        shutil.rmtree(checkpoint_dir)
        checkpoint_dir.mkdir(parents=True)
        latest = None
    if latest is None:
        shutil.rmtree(best_dir, ignore_errors=True)  # a best model of no checkpointed run
    else:
        state = _load_checkpoint(latest, model, optimizer, scheduler, context.device)
        step, best_dev, best_step, history = state["step"], state["best_dev"], state["best_step"], state["history"]
        resumed_from = step
        log.info("%s: resuming from checkpoint %s (step %d of %d)", description, latest, step, total_steps)

    def evaluate_and_keep_best() -> None:
        nonlocal best_dev, best_step
        if dev_score is None or not context.is_main:
            return
        _unwrap(model).eval()
        with torch.no_grad(), context.autocast():
            score = float(dev_score(_unwrap(model)))
        _unwrap(model).train()
        if history and history[-1]["step"] == step:
            history[-1]["dev_stsb"] = score
        else:
            history.append({"step": step, "dev_stsb": score})
        if best_dev is None or score > best_dev:
            best_dev, best_step = score, step
            with atomic_directory(best_dir) as folder:
                task.save(_unwrap(model), folder)
        log.info("%s: step %d STS-B dev %.2f (best %.2f at step %d)", description, step, score, best_dev, best_step)

    pad_ids = [column_tokenizer.pad_token_id for column_tokenizer in column_tokenizers(tokenizer, len(token_ids))]
    # A loss over embeddings gathered from every rank is the same on each rank, with gradients only
    # for the local part: scaling it by the world size undoes DDP's gradient averaging.
    backward_scale = context.world_size if getattr(task, "loss_spans_global_batch", False) else 1
    force_nan_at = int(os.environ.get(FORCE_NAN_AT_STEP, -1))
    model.train()
    # A run resumed at its last step trains no further: its final loss is the checkpoint's last one.
    last_loss = [row["loss"] for row in history if "loss" in row][-1:] or [math.nan]
    started, first_step, loss_value = time.perf_counter(), step, last_loss[0]
    progress = tqdm(total=total_steps, initial=step, desc=description, unit="step", disable=not context.is_main)
    while step < total_steps:
        epoch = step // epoch_steps
        batches = epoch_batches(settings.sampling, lengths, global_batch, seed, epoch, context.world_size)
        batches = batches[: epoch_steps * settings.grad_accum]
        position = (step % epoch_steps) * settings.grad_accum
        while position < len(batches) and step < total_steps:
            optimizer.zero_grad(set_to_none=True)
            terms_total: dict[str, float] = {}
            group = batches[position : position + settings.grad_accum]
            for micro in group:
                shard = micro[context.rank :: context.world_size]
                batch = [pad_batch([column[i] for i in shard], pad_id, context.device)
                         for column, pad_id in zip(token_ids, pad_ids)]
                with context.autocast():
                    terms = task.loss(model, batch, step)
                loss = terms["loss"] / len(group)
                if step + 1 == force_nan_at:
                    loss = loss * math.nan
                if not torch.isfinite(loss):
                    kept = _latest_checkpoint(checkpoint_dir)
                    raise PipelineError(
                        f"{description}: loss is {loss.item()} at step {step + 1}; stopped, last good checkpoint "
                        f"{kept or 'none yet'} kept; lower the learning rate or check the input"
                    )
                (loss * backward_scale).backward()
                for name, value in terms.items():
                    terms_total[name] = terms_total.get(name, 0.0) + value.item() / len(group)
            if settings.max_grad_norm is not None:
                # once per optimiser step, on the accumulated (DDP: already all-reduced) fp32 gradient
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
                terms_total["grad_norm"] = float(norm)
            optimizer.step()
            scheduler.step()
            step += 1
            position += settings.grad_accum
            loss_value = terms_total["loss"]
            history.append({"step": step, **terms_total, "lr": scheduler.get_last_lr()[0]})
            progress.update(1)
            progress.set_postfix(loss=f"{loss_value:.4f}")
            if step % settings.eval_every == 0 and (step < total_steps or not settings.eval_at_end):
                evaluate_and_keep_best()
            if step % settings.save_every == 0 and context.is_main:
                state = {"step": step, "best_dev": best_dev, "best_step": best_step, "history": history,
                         "fingerprint": fingerprint}
                _save_checkpoint(checkpoint_dir, step, model, optimizer, scheduler, state, context.device)
    progress.close()
    elapsed = time.perf_counter() - started
    if settings.eval_at_end:
        evaluate_and_keep_best()

    if context.is_main:
        with atomic_directory(output_dir) as folder:
            if best_dir.is_dir():
                shutil.copytree(best_dir, folder, dirs_exist_ok=True)
            else:
                task.save(_unwrap(model), folder)
        # The run is complete: its checkpoints have served; a forced rerun starts over. The folder
        # keeps only a fixed note, so DVC sees the same (uncached, persistent) output after every run.
        for finished in [*checkpoint_dir.glob("step-*"), best_dir]:
            shutil.rmtree(finished, ignore_errors=True)
        write_text_atomic(checkpoint_dir / COMPLETED_NOTE, "the last run completed; checkpoints appear here while one runs\n")
    return TrainingResult(
        steps=step,
        best_dev=best_dev,
        best_step=best_step,
        final_loss=loss_value,
        steps_per_second=(step - first_step) / elapsed if elapsed > 0 else 0.0,
        peak_memory_mb=_peak_memory_mb(context.device),
        resumed_from=resumed_from,
        history=history,
    )


def write_training_report(result: TrainingResult, metrics_path: Path, curve_path: Path, details_path: Path) -> None:
    """DVC metrics (JSON: best STS-B dev and steps, what `dvc metrics show` prints), the details
    (JSON: also the best step and the final loss) and plot data (CSV, one row per logged step).

    Only what the seed determines goes in: speed and memory vary from run to run, so they would
    make a rerun's dvc.lock differ from the committed one; the stage's summary line prints them and
    the benchmark (`bench`) measures them."""
    details = {
        "steps": result.steps,
        "best_dev_stsb": result.best_dev,
        "best_step": result.best_step,
        "final_loss": result.final_loss,
    }
    write_json_atomic(details_path, details)
    write_json_atomic(metrics_path, {"best_dev_stsb": result.best_dev, "steps": result.steps})
    columns = sorted({key for row in result.history for key in row} - {"step"})
    lines = [",".join(["step", *columns])]
    for row in sorted(result.history, key=lambda row: row["step"]):
        lines.append(",".join([str(row["step"]), *("" if row.get(c) is None else f"{row[c]:.6g}" for c in columns)]))
    write_text_atomic(curve_path, "\n".join(lines) + "\n")
