"""The throughput items: each stage's training step at the papers' shapes (beside a plain reference step
on CUDA) and the evaluator's pass, timed, with their FLOPs, peak memory and a profiler summary; and the
issue's targets judged from them."""

from __future__ import annotations

import copy
import itertools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tools.gpu_check.modes import EVALUATOR_ITEM, SKIPPED_NO_CUDA, TARGETS, Mode, log

def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_flops(function: Callable[[], object]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        function()
    return int(counter.get_total_flops())


SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemsetAsync")


def profile_summary(function: Callable[[], object], calls: int, device: torch.device) -> dict:
    """torch.profiler over `calls` calls: per call the kernel launches, host syncs and copies the host asked
    for, and how much of the wall time the GPU was busy (None on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        synchronize(device)
        wall_us = (time.perf_counter() - started) * 1e6
    events = profiler.key_averages()

    def count(names: tuple[str, ...]) -> float:
        return round(sum(event.count for event in events if event.key in names) / calls, 1)

    busy_us = sum(event.self_device_time_total for event in events if str(event.device_type).endswith("CUDA"))
    busy = round(busy_us / wall_us, 3) if device.type == "cuda" else None
    summary = {"calls": calls, "wall_ms_per_call": round(wall_us / calls / 1e3, 3), "kernel_launches_per_call": count(LAUNCH_CALLS),
               "host_syncs_per_call": count(SYNC_CALLS), "copies_per_call": count(COPY_CALLS), "gpu_busy_fraction": busy,
               "note": "kernel time over the wall time under the profiler (its overhead included: a lower bound)"}
    summary["bound"] = ("no GPU" if busy is None else "GPU (busy ≥ 90% of the wall time)" if busy >= 0.9
                        else "host: the GPU waits for the launches" if summary["kernel_launches_per_call"] > 0
                        else "host")
    return summary


def guarded_profile(function: Callable[[], object], calls: int, device: torch.device) -> dict:
    """`profile_summary`, or the error it raised (the item's timings are kept either way)."""
    try:
        return profile_summary(function, calls, device)
    except Exception as error:  # noqa: BLE001 - recorded in the JSON
        log.exception("gpu check: the profiler raised")
        return {"error": f"{type(error).__name__}: {error}"}


def achieved(flops: int, seconds: float, peak: float | None) -> dict:
    tflops = flops / seconds / 1e12
    return {"flops_per_call": flops, "achieved_tflops": round(tflops, 3),
            "fraction_of_bf16_peak": round(tflops / peak, 4) if peak else None}


def time_calls(function: Callable[[], object], calls: int, device: torch.device) -> tuple[float, float]:
    """(seconds per call, peak memory MB) over `calls` calls."""
    from tools.benchmark.timing import PeakMemory

    with PeakMemory(device) as memory:
        synchronize(device)
        started = time.perf_counter()
        for _ in range(calls):
            function()
        synchronize(device)
        elapsed = time.perf_counter() - started
    return elapsed / calls, memory.peak_mb


def stage_section(kind: str, settings):
    """The optimisation settings of the stage a training item runs (the twin kinds share `train`)."""
    return {"pretrain": settings.pretrain, "distill": settings.distill.teachers["joint"]}.get(kind, settings.train)


def reference_step(task, model: torch.nn.Module, batch, inputs: dict, lr: float, max_grad_norm: float | None,
                   context) -> Callable[[], None]:
    """A plain step beside the project's (issue 58): a copy of the same model and the same objective,
    compiled whole with CUDA graphs (torch.compile's reduce-overhead), fixed inputs already on the device,
    fused AdamW; zero_grad, forward, backward, the stage's clip, step — no loop, no schedule, nothing logged or read back."""
    plain = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=lr, fused=True)

    def objective(module, batch, inputs):  # its own code object: compiled apart from the project's step
        return task.objective(module, batch, inputs)

    compiled = torch.compile(objective, fullgraph=True, dynamic=False, mode="reduce-overhead")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)  # first: the last step's gradients live in the graphs' memory
        torch.compiler.cudagraph_mark_step_begin()
        with context.autocast():
            loss = compiled(plain, batch, inputs)["loss"]
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(plain.parameters(), max_grad_norm)
        optimizer.step()

    return step


def interleaved_seconds(steps: dict[str, Callable[[], None]], calls: int, rounds: int, device: torch.device) -> dict:
    """Seconds per call of each step, timed in `rounds` alternating rounds of `calls` calls (a drift of the
    machine's clock or temperature falls on both alike), with each one's peak memory."""
    totals = {name: 0.0 for name in steps}
    peaks = {name: math.nan for name in steps}
    for _ in range(rounds):
        for name, function in steps.items():
            seconds, peak_mb = time_calls(function, calls, device)
            totals[name] += seconds * calls
            peaks[name] = peak_mb if math.isnan(peaks[name]) else max(peaks[name], peak_mb)
    return {name: (totals[name] / (calls * rounds), peaks[name]) for name in steps}


def timed_beside_reference(timed: dict[str, Callable[[], None]], flops: int, mode: Mode, device: torch.device,
                           peak: float | None) -> dict:
    """The project's step (and the reference's, where there is one) warmed up (compiled and captured), then
    timed in alternating rounds: the item's timings, the reference's and their ratio."""
    started = time.perf_counter()
    for function in timed.values():
        for _ in range(mode.warmup):
            function()
    synchronize(device)
    record: dict = {"warmup_seconds": round(time.perf_counter() - started, 2)}
    seconds = interleaved_seconds(timed, max(1, mode.steps // 2), 2, device)
    step_seconds, peak_mb = seconds["project"]
    record.update(steps_per_s=round(1 / step_seconds, 3), step_seconds=round(step_seconds, 6), steps_timed=mode.steps,
                  peak_memory_mb=round(peak_mb, 1), **achieved(flops, step_seconds, peak))
    if "reference" not in seconds:
        return {**record, "reference": {"skipped": SKIPPED_NO_CUDA + " (CUDA graphs)"}}
    reference_seconds = seconds["reference"][0]
    record["reference"] = {"what": "the same model and objective compiled whole with CUDA graphs (reduce-overhead), "
                                   "fixed inputs on the device, fused AdamW: zero_grad, forward, backward, clip, step",
                           "steps_per_s": round(1 / reference_seconds, 3), **achieved(flops, reference_seconds, peak)}
    record["reference_steps_per_s"] = record["reference"]["steps_per_s"]
    record["ratio_to_reference"] = round(reference_seconds / step_seconds, 3)
    return record


def training_item(kind: str, backbone: Path, settings, batch_size: int, max_length: int, checkpointing: bool,
                  sentences: list[str], context, mode: Mode, peak: float | None, profile: bool) -> dict:
    """One stage's optimizer step as the training loop takes it here: `compile: auto` resolved
    (`pipeline.training.compiled`: on CUDA the whole objective as one graph, captured per fixed padded width),
    the typical batch padded to its fixed width, the loop's `training_step` with the stage's clip and gradient
    scaler, AdamW and its schedule, in `context`'s precision. On CUDA the plain `reference_step` at the same
    shape is timed beside it, in alternating rounds: `ratio_to_reference` is the project's steps/s over the
    reference's."""
    from transformers import AutoTokenizer

    from tools.benchmark.timing_inputs import typical_batch
    from tools.benchmark.timing import free_memory
    from tools.benchmark.training_grid import make_task
    from pipeline.modeling import checkpoint_activations
    from pipeline.training.batching import pad_batch, padded_width
    from pipeline.training.compiled import compiled_loss, step_compilation
    from pipeline.training.loop import make_optimizer, make_scheduler, training_step
    device = context.device
    torch._dynamo.reset()  # each item compiles its own graphs, within the recompile limit
    task, lr = make_task(kind, backbone, settings)
    section = stage_section(kind, settings)
    model = task.place(device).train()
    if checkpointing:
        checkpoint_activations(model)
    compilation = step_compilation("auto", device)  # what the stage's `compile: auto` runs on this device
    optimizer = make_optimizer(model, lr, section.weight_decay, device)
    scheduler = make_scheduler(optimizer, "constant", 0, 1)
    scaler = context.grad_scaler()
    typical = typical_batch(AutoTokenizer.from_pretrained(backbone), sentences, batch_size, max_length, settings.seed, device)
    width = padded_width(typical.width, compilation.pad_multiple, max_length)
    batch = [pad_batch(typical.token_ids, typical.pad_id, device, width=width)]
    loss_fn, steps = compiled_loss(task, compilation, max_length), itertools.count()

    def step(loss=loss_fn) -> None:
        training_step(loss, model, optimizer, [batch], context, next(steps), max_grad_norm=section.max_grad_norm,
                      scaler=scaler)
        scheduler.step()

    record: dict = {"stage": kind, "batch_size": batch_size, "max_length": max_length, "padded_width": width,
                    "dynamic_width": typical.width, "activation_checkpointing": checkpointing,
                    "precision": context.precision, "max_grad_norm": section.max_grad_norm,
                    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}
    timed: dict[str, Callable[[], None]] = {"project": step}
    try:
        flops = count_flops(lambda: step(task.loss))  # eager, before compiling: also the first warm-up step
        if device.type == "cuda":
            timed["reference"] = reference_step(task, model, batch, task.step_inputs(0, batch), lr,
                                                section.max_grad_norm, context)
        record.update(compiled=compilation.mode, **timed_beside_reference(timed, flops, mode, device, peak))
        if profile:
            record["profile"] = guarded_profile(step, mode.profile_steps, device)
    except torch.cuda.OutOfMemoryError:
        record["error"] = "out of memory"
    finally:
        optimizer.zero_grad(set_to_none=True)
        timed.clear()  # the reference's model and optimizer go with its step
        del task, model, optimizer, loss_fn, step
        torch._dynamo.reset()
        free_memory(device)
    return record


def evaluator_item(backbone: Path, settings, senteval: Path, device: torch.device, mode: Mode, peak: float | None) -> dict:
    """The evaluate stage's encoder pass (`embed_sentences` with `HFEmbedder`, fp32, the token budget) over
    every sentence of the seven benchmarks (the full test sets at paper shapes)."""
    from pipeline.evaluation.embedder import HFEmbedder
    from pipeline.evaluation.sts import embed_sentences, load_tasks

    evaluation = settings.eval
    tasks = load_tasks(senteval, evaluation.tasks, mode.eval_max_pairs, seed=settings.seed)
    sentences = [sentence for task in tasks for sentence in task.sentences]
    embedder = HFEmbedder(backbone, evaluation.pooler, evaluation.max_length, evaluation.batch_size, device.type,
                          token_budget=evaluation.token_budget)

    def encode() -> None:
        embed_sentences(embedder, sentences, evaluation.batch_size, description="gpu check evaluator")

    logging.getLogger("pipeline.evaluation.sts").setLevel(logging.WARNING)
    flops = count_flops(encode)  # also the warm-up
    seconds, peak_mb = time_calls(encode, mode.eval_repeats, device)
    return {"tasks": [task.name for task in tasks], "sentences": len(sentences), "unique_sentences": len(set(sentences)),
            "token_budget": embedder.token_budget, "precision": "fp32", "sentences_per_s": round(len(sentences) / seconds, 1),
            "pass_seconds": round(seconds, 4), "peak_memory_mb": round(peak_mb, 1), **achieved(flops, seconds, peak),
            "profile": guarded_profile(encode, 1, device)}


def target_record(throughput: dict, device: torch.device, gpu_name: str | None) -> dict:
    records = {}
    for item, (unit, target) in TARGETS.items():
        measured = throughput.get(item, {}).get(unit)
        if device.type != "cuda":
            records[item] = {"target": target, "unit": unit, "measured": measured, "met": None, "note": SKIPPED_NO_CUDA}
            continue
        record = {"target": target, "unit": unit, "measured": measured, "met": measured is not None and measured >= target}
        if gpu_name and "H100" not in gpu_name:
            record["note"] = f"the target is an H100's; measured on {gpu_name}"
        if record["met"] is False and "profile" in throughput.get(item, {}):
            record["bound_by"] = throughput[item]["profile"]
        records[item] = record
    return records


def throughput_item(name: str, backbones: dict, settings: dict, sentences: list[str], mirror: Path, context,
                    mode: Mode, peak: float | None, precision: str) -> dict:
    """One throughput item measured: the evaluator's pass, or a training stage's steps in `precision` (bf16, or
    each stage's paper preset with `preset`)."""
    from pipeline.execution.runtime import with_precision

    if name == EVALUATOR_ITEM:
        return evaluator_item(backbones["bert"], settings["bert"], mirror / "senteval", context.device, mode, peak)
    kind, backbone, batch_size, max_length, checkpointing = mode.items[name]
    stage_settings = settings[backbone]
    section = stage_section(kind, stage_settings)
    step_precision = precision if precision != "preset" else section.precision
    item_context = with_precision(context, step_precision, "gpu check --precision")
    return training_item(kind, backbones[backbone], stage_settings, batch_size, max_length, checkpointing,
                         sentences, item_context, mode, peak, profile=name in TARGETS)
