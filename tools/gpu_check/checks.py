"""The correctness checks: the CUDA path computes what the CPU path does (fp32, bf16, fp16, compiled,
CUDA graphs, activation checkpointing), and the launched rank and the lease work. Each check is a record
(name, passed, numbers, tolerance); one that needs CUDA is skipped on a CPU, never passed."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import torch

from tools.gpu_check.modes import SKIPPED_NO_CUDA, log

def check(name: str, passed: bool, numbers: dict, tolerance: str) -> dict:
    return {"name": name, "passed": bool(passed), "numbers": numbers, "tolerance": tolerance}


def skipped(name: str, tolerance: str, reason: str = SKIPPED_NO_CUDA) -> dict:
    return {"name": name, "passed": None, "skipped": reason, "tolerance": tolerance}


def relative_difference(losses: list[float], reference: list[float]) -> float:
    if len(losses) != len(reference):
        return math.inf
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))


class TinyTraining:
    """A few steps of the pretrain stage's training loop (`pipeline.training.loop.train`, SimCSE) on a tiny
    BERT, each run in a fresh folder; returns the loss of every step."""

    STEPS = 8
    BATCH, LENGTH, LR = 16, 32, 1e-4

    def __init__(self, backbone: Path, sentences: list[str], scratch: Path):
        self.backbone, self.examples, self.scratch = backbone, [(sentence,) for sentence in sentences[:128]], scratch
        self.runs = itertools.count()

    def losses(self, device: torch.device, precision: str = "fp32", compile_mode: str = "off", checkpointing: bool = False,
               dropout: float = 0.0) -> list[float]:
        from transformers import AutoTokenizer

        from pipeline.config import OptimSettings
        from pipeline.execution.runtime import run_context, with_precision
        from pipeline.training.loop import RunSpec, train
        from pipeline.training.tasks import SimCSETask

        settings = OptimSettings(batch_size=self.BATCH, max_length=self.LENGTH, max_steps=self.STEPS, eval_every=10_000,
                                 save_every=10_000, eval_at_end=False, schedule="constant", compile=compile_mode,
                                 precision=precision, activation_checkpointing=checkpointing)
        context = with_precision(run_context(device.type), precision, "gpu check precision")
        task = SimCSETask(self.backbone, AutoTokenizer.from_pretrained(self.backbone), dropout, 0.05, None, self.LENGTH)
        folder = self.scratch / f"run-{next(self.runs)}"
        spec = RunSpec(self.LR, 7, folder / "out", folder / "checkpoints", description=f"gpu check {precision}")
        result = train(task, self.examples, settings, spec, context)
        return [row["loss"] for row in result.history if "loss" in row]


def attempted(name: str, tolerance: str, compute: Callable[[], tuple[bool, dict]]) -> dict:
    """A check's record; an exception fails the check with the error in its numbers, and the run goes on
    (one device run: a crash in one check must not cost the others)."""
    try:
        passed, numbers = compute()
    except Exception as error:  # noqa: BLE001 - recorded as the check's failure, never passed
        log.exception("gpu check %s raised", name)
        return check(name, False, {"error": f"{type(error).__name__}: {error}"}, tolerance)
    return check(name, passed, numbers, tolerance)


def correctness_checks(tiny: TinyTraining, device: torch.device, launch_result: dict | None) -> list[dict]:
    cuda = device.type == "cuda"
    fp32 = functools.cache(lambda where: tiny.losses(torch.device(where) if where == "cpu" else device))

    def close(name: str, losses: list[float], reference: list[float], bound: float, finite: bool = False):
        difference = relative_difference(losses, reference)
        passed = difference <= bound and (not finite or all(map(math.isfinite, losses)))
        return passed, {f"{name}_losses": losses, "reference_losses": reference, "max_relative_difference": difference}

    checks = {
        "cuda_fp32_follows_cpu": (
            "max over steps of |loss - CPU loss| / CPU loss <= 5e-3 (dropout 0; CUDA matmuls in TF32, as run_context sets)",
            lambda: close("cuda", fp32("cuda"), fp32("cpu"), 5e-3)),
        "bf16_close_to_fp32": (
            "every loss finite and max |loss - fp32 loss| / fp32 loss <= 5e-2 (autocast)",
            lambda: close("bf16", tiny.losses(device, "bf16"), fp32("cuda"), 5e-2, finite=True)),
        "fp16_close_to_fp32": (
            "every loss finite and max |loss - fp32 loss| / fp32 loss <= 5e-2 (autocast with the gradient scaler)",
            lambda: close("fp16", tiny.losses(device, "fp16"), fp32("cuda"), 5e-2, finite=True)),
        "compiled_matches_eager": (
            "max |compiled loss - eager loss| / eager loss <= 1e-3 (fp32; the objective compiled as one graph, not captured)",
            lambda: close("compiled", tiny.losses(device, compile_mode="on"), fp32("cuda"), 1e-3)),
        "cuda_graphs_match_eager": (
            "max |captured loss - eager loss| / eager loss <= 1e-3 (fp32; compile: graphs, batches at fixed padded widths)",
            lambda: close("captured", tiny.losses(device, compile_mode="graphs"), fp32("cuda"), 1e-3)),
    }
    results = []
    for name, (tolerance, compute) in checks.items():
        if cuda:
            results.append(attempted(name, tolerance, compute))
        else:
            why = (" (compile: auto compiles on CUDA only)" if name == "compiled_matches_eager"
                   else " (CUDA graphs)" if name == "cuda_graphs_match_eager" else "")
            results.append(skipped(name, tolerance, SKIPPED_NO_CUDA + why))

    def recompute() -> tuple[bool, dict]:
        plain = tiny.losses(device, dropout=0.1)
        passed, numbers = close("checkpointed", tiny.losses(device, checkpointing=True, dropout=0.1), plain, 1e-5)
        return passed, {"device": device.type, **numbers}

    results.append(attempted("activation_checkpointing_same_loss",
                             "max relative difference <= 1e-5 (dropout 0.1: the recompute replays the RNG)", recompute))
    results.extend(launch_checks(launch_result, cuda))
    return results


# ---- the launched rank: its process group, its DDP step and the lease ------------------------------------


def launch_checks(result: dict | None, cuda: bool) -> list[dict]:
    """Two checks from the launched rank's report: the launcher ran one rank whose process group and DDP step
    work (NCCL on CUDA, gloo on a CPU), and the lease pinned the device that rank sees."""
    launcher_tolerance = ("the rank's all_reduce of its rank + 1 over 1 process is 1, and its DDP step's loss equals the "
                          "same step's without DDP to 1e-6 relative")
    lease_tolerance = "the rank sees exactly one GPU, the leased one (UUID as nvidia-smi lists it), and PIPELINE_LEASED_GPUS names it"
    if result is None or "error" in result:
        why = (result or {}).get("error", "the launcher process wrote no report")
        return [check("launcher_one_rank", False, {"error": why}, launcher_tolerance),
                check("lease_pins_device", False, {"error": why}, lease_tolerance) if cuda else skipped("lease_pins_device", lease_tolerance)]
    ddp, plain = result["ddp_loss"], result["plain_loss"]
    launcher = check("launcher_one_rank", result["all_reduce"] == 1.0 and abs(ddp - plain) <= 1e-6 * abs(plain),
                     {key: result[key] for key in ("backend", "world_size", "all_reduce", "ddp_loss", "plain_loss")},
                     launcher_tolerance)
    if not cuda:
        return [launcher, skipped("lease_pins_device", lease_tolerance)]
    leased = result["leased"]
    seen = result["visible_uuids"]
    # the lease names devices as nvidia-smi's UUIDs, or as the entries of a CUDA_VISIBLE_DEVICES set beforehand
    pinned = len(leased) == 1 and result["cuda_visible_devices"] == leased[0] == result["pipeline_leased_gpus"]
    matches = pinned and len(seen) == 1 and (seen[0] == leased[0] or not leased[0].startswith("GPU-"))
    lease = check("lease_pins_device", matches, {key: result.get(key) for key in (
        "leased", "visible_uuids", "cuda_visible_devices", "pipeline_leased_gpus")}, lease_tolerance)
    return [launcher, lease]
