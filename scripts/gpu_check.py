"""The CUDA path proven and the papers' cost measured, in one prepared run (issue 41).

Writes one JSON (committed as reports/bench-gpu.json): the machine (pipeline/execution/environment.py's records);
`checks`, whether the CUDA path computes what the CPU path does (each: name, passed, numbers,
tolerance; a check that needs CUDA is "skipped: no CUDA" on a CPU, never passed); `throughput` at the
papers' shapes with random weights of the real architectures (the rehearsal's stand-in builder):
steps/s, FLOPs per step (torch.utils.flop_counter), achieved TFLOP/s and its share of the chip's bf16
peak, peak memory, and a torch.profiler summary of the target stages (kernel launches, host syncs,
copies per step, GPU busy fraction); `targets` (H100: pretrain 64x32 >= 70 steps/s, TNCSE 64x64 >= 35,
the evaluator >= 30,000 sentences/s); `cost`, the GPU hours of every table at paper scale from the
measured seconds (tools/gpu_hours.py, the computation docs/tables.md describes).

    bash scripts/gpu_check.sh --output $OUT/bench-gpu.json          # on the GPU machine (`. .gpu/setup.sh` first)
    bash scripts/gpu_check.sh --device cpu --output /tmp/gpu-check.json   # the CPU mode: tiny shapes, seconds (tests)

It reads only the project and the data mirror (PIPELINE_DATA_MIRROR, else the bundle's .gpu/data),
and imports only what ../shared/gpu/prepare.sh's bundle brings (no dvc, no
Hydra, no mteb). The JSON is rewritten (atomically) after each part, so a run stopped by its time
limit keeps what it measured; `--budget-s` skips the throughput items that would start after it, and
`--reuse EARLIER.json` takes the items an earlier run on the same GPU model measured, so a second run
spends its minutes on the checks and the items still missing.
Bad arguments: one line, exit 2.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import itertools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the project's packages
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from pipeline import paths  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402

log = logging.getLogger("gpu_check")

SKIPPED_NO_CUDA = "skipped: no CUDA"
# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from NVIDIA's data sheets, by a substring of
# torch.cuda.get_device_name; the first that matches wins (NVL before the plain names).
BF16_PEAK_TFLOPS = (("H200 NVL", 835.0), ("H200", 989.4), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.4))
# The targets, on an H100 (an H200 is compared against the same figures, and says so)
TARGETS = {"pretrain_bert_64x32": ("steps_per_s", 70.0), "tncse_bert_64x64": ("steps_per_s", 35.0),
           "evaluator_bert_seven_benchmarks": ("sentences_per_s", 30_000.0)}
# The CPU mode's architecture: BERT's and RoBERTa's own configurations made small (6 layers: 6 CAELs fit)
CPU_SHRINK = {"hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 2, "intermediate_size": 64}
ROBERTA_CPU_VOCAB = 2_000  # the corpus BPE of the CPU mode's RoBERTa (the paper's 50,265 takes long to train)


@dataclass(frozen=True)
class Mode:
    """The shapes of one mode: the papers' (CUDA) or tiny ones (the CPU mode)."""

    name: str
    shrink: dict | None
    steps: int  # timed optimizer steps per item
    warmup: int  # untimed steps first (the compile happens in the first)
    profile_steps: int
    eval_max_pairs: int | None
    eval_repeats: int
    corpus_lines: int
    # item -> (stage kind, backbone, batch, length, activation checkpointing)
    items: dict[str, tuple[str, str, int, int, bool]]


def _items(scale: Callable[[int], int]) -> dict[str, tuple[str, str, int, int, bool]]:
    return {
        "pretrain_bert_64x32": ("pretrain", "bert", scale(64), scale(32), False),
        "tncse_bert_64x64": ("tncse", "bert", scale(64), scale(64), False),
        "jtcse6_bert_64x64": ("jtcse-6", "bert", scale(64), scale(64), False),
        "distill_bert_64x32": ("distill", "bert", scale(64), scale(32), False),
        "tncse_roberta_256x64_checkpointed": ("tncse", "roberta", scale(256), scale(64), True),
        "tncse_roberta_256x64": ("tncse", "roberta", scale(256), scale(64), False),
    }


MODES = {
    "cuda": Mode("paper shapes", None, steps=20, warmup=3, profile_steps=5, eval_max_pairs=None, eval_repeats=3,
                 corpus_lines=20_000, items=_items(lambda size: size)),
    "cpu": Mode("CPU mode: tiny shapes, not the papers'", CPU_SHRINK, steps=2, warmup=1, profile_steps=1, eval_max_pairs=12,
                eval_repeats=1, corpus_lines=400, items=_items(lambda size: size // 8)),
}
EVALUATOR_ITEM = "evaluator_bert_seven_benchmarks"
LAUNCH_TIMEOUT_S = 150


# ---- the machine -----------------------------------------------------------------------------------


def bf16_peak(device_name: str | None) -> tuple[float | None, str]:
    if device_name is None:
        return None, "no GPU: no bf16 peak"
    for fragment, peak in BF16_PEAK_TFLOPS:
        if fragment in device_name:
            return peak, f"dense bf16 peak of the {fragment} (NVIDIA data sheet)"
    return None, f"no bf16 peak known for {device_name!r}: add it to BF16_PEAK_TFLOPS"


def machine_record(device: torch.device) -> dict:
    from pipeline.execution.environment import cpu_record, gpu_record, package_versions

    # the CPU record holds the logical CPU count (cpu.logical_cpus)
    record = {"device": device.type, "gpu": gpu_record(device), "cpu": cpu_record(), "versions": package_versions()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    record["bf16_peak_tflops"], record["bf16_peak_note"] = bf16_peak(name)
    if device.type == "cuda":
        record["gpu_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return record


# ---- inputs ------------------------------------------------------------------------------------------


GPU_BUNDLE_DATA = Path(".gpu/data")  # the data the GPU bundle carries (its prepare.sh)


def mirror_folder() -> Path:
    """The data mirror PIPELINE_DATA_MIRROR names, else the GPU bundle's copy of it."""
    from pipeline.data.sources import MIRROR_VARIABLE, configured_mirror

    mirror = configured_mirror()
    folder = mirror.root if mirror is not None else GPU_BUNDLE_DATA.resolve()
    if not (folder / "senteval").is_dir():
        raise PipelineError(f"data mirror {folder} has no senteval/: set {MIRROR_VARIABLE} to a data mirror, or bring "
                            f"the GPU bundle's {GPU_BUNDLE_DATA} (`. .gpu/setup.sh` first)")
    return folder


def corpus_file(mirror: Path) -> Path:
    return mirror / "wiki1m" / "wiki1m_for_simcse.head.txt"


def build_backbones(scratch: Path, mirror: Path, mode: Mode) -> dict[str, Path]:
    """BERT-base and RoBERTa-base stand-ins (random weights; `mode.shrink` makes them small)."""
    from pipeline.data.standin_models import build_standin
    from tools.gpu_hours import PAPER_BACKBONES

    folders = {}
    for backbone in PAPER_BACKBONES:
        source = paper_settings(backbone).backbone.source  # the hub id conf/backbone/<name>.yaml names
        shrink = mode.shrink
        if shrink is not None and backbone == "roberta":
            shrink = {**shrink, "vocab_size": ROBERTA_CPU_VOCAB}
        folders[backbone] = scratch / backbone
        build_standin(source, folders[backbone], corpus_file(mirror), seed=0, shrink=shrink)
    return folders


@functools.cache
def paper_settings(backbone: str):
    from pipeline.config import parse_params
    from tools.gpu_hours import compose_paper_params

    return parse_params(compose_paper_params(backbone, conf=ROOT / "conf"))


# ---- 1. checks: the CUDA path computes what the CPU path does ------------------------------------------


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


# ---- the launcher and the lease, in their own processes --------------------------------------------------


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


def run_launcher(device: str, backbone: Path, sentences_file: Path, scratch: Path) -> dict | None:
    """`--role launcher` in a fresh process (the lease pins CUDA_VISIBLE_DEVICES before CUDA starts there)."""
    report = scratch / "launch.json"
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PIPELINE_LEASED_GPUS", "PIPELINE_FAKE_GPUS")}
    environment["PIPELINE_LEASE_DIR"] = str(scratch / "leases")
    try:
        done = subprocess.run([sys.executable, __file__, "--role", "launcher", "--device", device, "--report", str(report),
                               "--backbone", str(backbone), "--sentences", str(sentences_file)],
                              capture_output=True, text=True, env=environment, cwd=ROOT, timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"the launcher and its rank took longer than {LAUNCH_TIMEOUT_S} s (a rendezvous or NCCL init that hangs)"}
    if report.is_file():
        return json.loads(report.read_text())
    return {"error": f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"}


def uuid_of(index: int) -> str:
    return f"GPU-{torch.cuda.get_device_properties(index).uuid}"


def role_launcher(arguments: argparse.Namespace) -> None:
    """Lease one device as a stage does (`pin_leased_devices`), then start one rank through the stages'
    launcher (`launch_ranks`, torch's elastic launcher), which reports to the same file."""
    from pipeline.execution.launch import launch_ranks
    from pipeline.execution.lease import pin_leased_devices

    leased = list(pin_leased_devices(1, "gpu-check"))
    rank_arguments = [__file__, "--role", "rank", "--device", arguments.device, "--report", arguments.report,
                      "--backbone", arguments.backbone, "--sentences", arguments.sentences, "--leased", ",".join(leased)]
    launch_ranks(1, rank_arguments, "gpu-check")


def role_rank(arguments: argparse.Namespace) -> None:
    """One rank: join the process group (NCCL on CUDA), all_reduce, and one SimCSE step with and without DDP."""
    import torch.distributed as distributed
    from transformers import AutoTokenizer

    from pipeline.io import write_json_atomic
    from pipeline.execution.runtime import run_context
    from pipeline.training.batching import pad_batch
    from pipeline.training.loop import make_optimizer, training_step
    from pipeline.training.tasks import SimCSETask

    context = run_context(arguments.device)
    device = context.device
    backend = "nccl" if device.type == "cuda" else "gloo"
    distributed.init_process_group(backend)
    value = torch.tensor([float(distributed.get_rank() + 1)], device=device)
    distributed.all_reduce(value)
    sentences = Path(arguments.sentences).read_text(encoding="utf-8").splitlines()[:16]
    tokenizer = AutoTokenizer.from_pretrained(arguments.backbone)
    batch = [pad_batch([tokenizer(sentence, truncation=True, max_length=32)["input_ids"] for sentence in sentences],
                       tokenizer.pad_token_id, device)]
    losses = {}
    for wrapped in (False, True):
        torch.manual_seed(0)
        task = SimCSETask(Path(arguments.backbone), tokenizer, 0.0, 0.05, None, 32)
        model = task.model.to(device).train()
        optimizer = make_optimizer(model, 1e-4, 0.0, device)
        if wrapped:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        terms = training_step(task.loss, model, optimizer, [batch], context, 0)
        losses[wrapped] = float(terms["loss"][0])
    report = {"backend": backend, "world_size": distributed.get_world_size(), "all_reduce": float(value.item()),
              "ddp_loss": losses[True], "plain_loss": losses[False],
              "leased": [name for name in arguments.leased.split(",") if name],
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "pipeline_leased_gpus": os.environ.get("PIPELINE_LEASED_GPUS")}
    if device.type == "cuda":
        report["visible_uuids"] = [uuid_of(index) for index in range(torch.cuda.device_count())]
    distributed.destroy_process_group()
    write_json_atomic(Path(arguments.report), report)


# ---- 2. throughput ---------------------------------------------------------------------------------------


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


# ---- 3. the papers' cost ----------------------------------------------------------------------------------


COST_ITEMS = ("pretrain_bert_64x32", "tncse_bert_64x64", "jtcse6_bert_64x64", "distill_bert_64x32", "tncse_roberta_256x64")
COST_BASIS = {"pretrain": "pretrain_bert_64x32", "tncse": "tncse_bert_64x64", "jtcse-6": "jtcse6_bert_64x64",
              "distill": "distill_bert_64x32", "tncse@roberta": ("tncse_roberta_256x64", "tncse_roberta_256x64_checkpointed")}


def cost_record(throughput: dict, device: str, precision: str) -> dict:
    """GPU hours per table from the measured steps (tools.gpu_hours); the RoBERTa twin's plain step when
    it fit, else the checkpointed one (the paper preset trains it plain)."""
    from tools.gpu_hours import MeasuredCosts, StepTiming, paper_cost

    steps, basis = {}, {}
    for kind, items in COST_BASIS.items():
        for item in (items,) if isinstance(items, str) else items:
            record = throughput.get(item, {})
            if "step_seconds" in record:
                steps[kind] = StepTiming(record["step_seconds"], record["batch_size"], record["max_length"])
                basis[kind] = item
                break
    evaluator = throughput.get(EVALUATOR_ITEM, {})
    if "sentences_per_s" not in evaluator:
        return {"error": "the evaluator was not measured: it is the basis of every evaluation's cost"}
    measured = MeasuredCosts(steps, evaluator["sentences_per_s"], evaluator["sentences"], precision, device)
    try:
        cost = paper_cost(measured, ROOT / "tables.yaml", ROOT / "conf", ROOT / "dvc.yaml")
    except PipelineError as error:
        return {"error": str(error), "basis": basis}
    return {"basis": basis, **cost}


def cost_markdown(report: dict) -> str:
    """The measured GPU hours of every table as docs/tables.md shows them (`--cost-table FILE`)."""
    cost = report["cost"]
    if "tables" not in cost:
        raise PipelineError(f"the report has no cost: {cost.get('error', 'not measured')}")
    machine = report["machine"]
    where = (machine.get("gpu") or {}).get("model") or "a CPU (the CPU mode: not the papers' cost)"
    lines = [f"Measured on {where}, {report['created'][:10]} (training steps in {cost['precision']}; "
             f"{cost['gpu_hours_total']} GPU hours in all, MTEB suites excluded):", "",
             "| table id | runs | GPU hours it adds | GPU hours of its runs alone |", "|---|---|---|---|"]
    for table_id, table in cost["tables"].items():
        lines.append(f"| `{table_id}` | {len(table['runs'])} | {table['gpu_hours_added']:g} | {table['gpu_hours_needed']:g} |")
    runs = ", ".join(f"{backbone} {breakdown['total']:g}" for backbone, breakdown in cost["per_run"].items())
    lines += ["", f"One whole run (every stage): {runs} GPU hours."]
    return "\n".join(lines)


# ---- the run -----------------------------------------------------------------------------------------


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


def reusable_items(earlier_file: Path | None, gpu_name: str | None, precision: str) -> tuple[dict, dict | None]:
    """The throughput items an earlier report measured (neither skipped nor failed), when it was made on the
    same GPU model with the same step precision: a second run then measures only the rest. Another model or
    precision would mix two machines' seconds in one cost, so that is bad input."""
    if earlier_file is None:
        return {}, None
    if not earlier_file.is_file():
        raise PipelineError(f"--reuse {earlier_file}: no such file; give a report an earlier gpu check wrote")
    earlier = json.loads(earlier_file.read_text(encoding="utf-8"))
    earlier_gpu = (earlier.get("machine", {}).get("gpu") or {}).get("model")
    if earlier_gpu != gpu_name:
        raise PipelineError(f"--reuse {earlier_file}: measured on {earlier_gpu or 'no GPU'}, this run is on "
                            f"{gpu_name or 'no GPU'}; reuse only a report from the same GPU model")
    measured = {name: record for name, record in earlier.get("throughput", {}).items()
                if "error" not in record and "skipped" not in record}
    other = sorted(name for name, record in measured.items() if name != EVALUATOR_ITEM and record.get("precision") != precision)
    if precision != "preset" and other:
        raise PipelineError(f"--reuse {earlier_file}: {', '.join(other)} ran in another precision than --precision "
                            f"{precision}; rerun with that report's --precision")
    reused = {name: {**record, "reused_from": earlier["created"]} for name, record in measured.items()}
    return reused, {"file": earlier_file.name, "created": earlier["created"], "items": sorted(reused)}


def measure_item(name: str, records: dict, report: "Report", budget_s: float, measure: Callable[[], dict],
                 part: str | None = None) -> None:
    """One throughput item into `records`: measured, skipped past the time budget, or its error (the other
    items still run); the JSON rewritten after it."""
    if report.elapsed() > budget_s:
        records[name] = {"skipped": f"time budget: {budget_s:.0f} s spent before it started"}
        return
    log.info("gpu check: %s", name)
    try:
        records[name] = measure()
    except Exception as error:  # noqa: BLE001 - recorded in the JSON; the other items still run
        log.exception("gpu check %s raised", name)
        records[name] = {"error": f"{type(error).__name__}: {error}"}
    report.part_done(part or name)
    report.save()


class Report:
    """The JSON being written: each part's seconds, and the file rewritten (atomically) after each part."""

    def __init__(self, output: Path, results: dict):
        self.output, self.results = output, results
        self.started = self.part_started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def part_done(self, name: str) -> None:
        now = time.perf_counter()
        self.results["part_seconds"][name] = round(now - self.part_started, 1)
        self.part_started = now

    def save(self) -> None:
        from pipeline.io import write_json_atomic

        self.results["wall_seconds"] = round(self.elapsed(), 1)
        write_json_atomic(self.output, self.results)


def tiny_checks(scratch: Path, mirror: Path, sentences: list[str], device: torch.device, report: Report) -> list[dict]:
    """The correctness checks on a 2-layer stand-in BERT, the launcher's rank included (each part timed)."""
    from pipeline.data.standin_models import build_standin

    tiny = scratch / "tiny"
    build_standin(paper_settings("bert").backbone.source, tiny, corpus_file(mirror), seed=0,
                  shrink={**CPU_SHRINK, "num_hidden_layers": 2})
    sentences_file = scratch / "sentences.txt"
    sentences_file.write_text("\n".join(sentences[:64]) + "\n", encoding="utf-8")
    launched = run_launcher(device.type, tiny, sentences_file, scratch)
    report.part_done("launcher")
    return correctness_checks(TinyTraining(tiny, sentences, scratch / "runs"), device, launched)


def run(device_name: str, output: Path, budget_s: float, precision: str, reuse: Path | None = None) -> dict:
    from tools.benchmark.timing_inputs import read_sentences
    from pipeline.execution.runtime import apply_threads, run_context, seed_everything

    context = run_context(device_name)
    device = context.device
    mode = MODES[device.type]
    if device.type == "cpu":
        apply_threads(1)  # tiny tensors: a second thread only waits (and on a shared machine, spins)
        precision = "fp32"  # autocast is CUDA-only (the stages' rule)
    machine = machine_record(device)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    reused, reuse_record = reusable_items(reuse, gpu_name, precision)
    report = Report(output, {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "mode": mode.name, "machine": machine,
        "checks": [], "throughput": {}, "targets": {}, "cost": {}, "part_seconds": {},
        **({"reused": reuse_record} if reuse_record is not None else {}),
    })
    results, throughput = report.results, report.results["throughput"]
    mirror = mirror_folder()
    sentences = read_sentences(corpus_file(mirror), mode.corpus_lines)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch_name:
        scratch = Path(scratch_name)
        results["checks"] = tiny_checks(scratch, mirror, sentences, device, report)
        report.part_done("checks")
        report.save()

        backbones = build_backbones(scratch, mirror, mode)
        settings = {backbone: paper_settings(backbone) for backbone in backbones}
        report.part_done("stand-in backbones")
        # as every stage does: deterministic CUDA kernels only where the run asks for them (`deterministic`)
        seed_everything(settings["bert"].seed, deterministic=settings["bert"].train.deterministic)
        items = list(mode.items)
        for name in [*items[:2], EVALUATOR_ITEM, *items[2:]]:
            if name in reused:
                log.info("gpu check: %s reused from the run of %s", name, reused[name]["reused_from"])
                throughput[name] = reused[name]
                continue
            measure_item(name, throughput, report, budget_s, lambda: throughput_item(
                name, backbones, settings, sentences, mirror, context, mode, machine["bf16_peak_tflops"], precision))
        if precision == "bf16" and device.type == "cuda":  # the second cost: each stage in its paper preset's precision
            preset = results.setdefault("throughput_preset", {})
            for name in [name for name in COST_ITEMS if name in mode.items]:
                measure_item(name, preset, report, budget_s, lambda: throughput_item(
                    name, backbones, settings, sentences, mirror, context, mode, machine["bf16_peak_tflops"], "preset"),
                    part=f"{name} (preset precision)")
    results["targets"] = target_record(throughput, device, gpu_name)
    results["cost"] = cost_record(throughput, gpu_name or f"cpu ({mode.name})", precision)
    if "throughput_preset" in results:
        preset_cost = cost_record({**results["throughput_preset"], EVALUATOR_ITEM: throughput.get(EVALUATOR_ITEM, {})},
                                  gpu_name, "preset")
        incomplete = [name for name in COST_ITEMS if "step_seconds" not in results["throughput_preset"].get(name, {})]
        results["cost_preset"] = ({"skipped": f"not measured in the preset precision: {', '.join(incomplete)}"}
                                  if incomplete else preset_cost)
    report.part_done("cost")
    if device.type == "cpu":
        results["cost"]["note"] = "CPU mode: seconds of tiny shapes, scaled by tokens; not the papers' cost"
    report.save()
    return results


def summary_line(results: dict, output: Path) -> str:
    checks = results["checks"]
    passed = sum(1 for item in checks if item["passed"] is True)
    failed = [item["name"] for item in checks if item["passed"] is False]
    skipped_count = sum(1 for item in checks if item["passed"] is None)
    cost = results["cost"].get("gpu_hours_total")
    return (f"gpu check ({results['mode']}): checks {passed} passed, {len(failed)} failed{' ' + str(failed) if failed else ''}, "
            f"{skipped_count} skipped; papers' tables {cost} GPU hours; {results['wall_seconds']} s -> {output}")


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda (the device run) or cpu (the CPU mode)")
    parser.add_argument("--output", type=Path, default=paths.BENCH.with_name("bench-gpu.json"), help="the JSON to write")
    parser.add_argument("--budget-s", type=float, default=360.0,
                        help="no throughput item starts after this many seconds (one item may take 1-2 minutes more; the run is to fit 8)")
    parser.add_argument("--precision", default="bf16", choices=("bf16", "preset"),
                        help="the training steps' precision: bf16 (the documented fast choice) or each stage's paper preset")
    parser.add_argument("--reuse", type=Path, default=None, metavar="JSON",
                        help="take the throughput items an earlier report (same GPU model) measured; measure only the rest")
    parser.add_argument("--cost-table", type=Path, default=None, metavar="JSON",
                        help="print the GPU hours per table of a written report as docs/tables.md's markdown, and stop")
    parser.add_argument("--role", default="check", choices=("check", "launcher", "rank"), help=argparse.SUPPRESS)
    for internal in ("--report", "--backbone", "--sentences", "--leased"):
        parser.add_argument(internal, default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if arguments.cost_table is not None:
            if not arguments.cost_table.is_file():
                raise PipelineError(f"--cost-table {arguments.cost_table}: no such file; run the GPU check first")
            print(cost_markdown(json.loads(arguments.cost_table.read_text(encoding="utf-8"))))
        elif arguments.role == "launcher":
            role_launcher(arguments)
        elif arguments.role == "rank":
            role_rank(arguments)
        else:
            results = run(arguments.device, arguments.output, arguments.budget_s, arguments.precision, arguments.reuse)
            print(summary_line(results, arguments.output))
            return 1 if any(item["passed"] is False for item in results["checks"]) else 0
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
