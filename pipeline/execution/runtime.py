"""Where and how a stage computes: the device, the DDP world, the precision, the seed, peak memory.

`run_context(device)` is what every stage that runs a model calls first: it resolves `auto` to a
GPU when there is one, joins the process group when launched by `torchrun` (WORLD_SIZE > 1), and
on CUDA turns on TF32 matmuls. It computes in fp32; `with_precision(context, precision, key)` sets
a training stage's `precision` setting (bf16 or fp16 autocast, CUDA only). `apply_threads(threads)`
(every stage, first) fixes the CPU thread count and `seed_everything(seed)` makes a run repeatable.
"""

from __future__ import annotations

import logging
import os
import random
import resource
import socket
import sys
from contextlib import nullcontext
from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.settings_rules import DEVICES, validate_precision

log = logging.getLogger(__name__)


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

    @property
    def precision(self) -> str:
        """The `precision` setting this context computes in: bf16, fp16 or fp32."""
        return next(name for name, dtype in AUTOCAST_DTYPES.items() if dtype == self.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """fp16's loss scaling (its gradients would underflow unscaled); a pass-through otherwise."""
        return torch.amp.GradScaler(self.device.type, enabled=self.autocast_dtype == torch.float16)


# The autocast dtype of each `precision` setting; fp32 runs without autocast.
AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


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


# One machine: the rendezvous and the process group's store listen here alone. torch's own stores
# bind every interface, so another machine could reach (and disturb) a run's coordination ports.
LOOPBACK = "127.0.0.1"


def loopback_store(port: int = 0, world_size: int | None = None, wait_for_workers: bool = False):
    """A torch TCPStore server that listens on the loopback alone (torch's binds every interface):
    on a socket bound here and handed to it (the store closes it). Multi-tenant: the launcher's
    rendezvous, asking for a store on its port, reuses this one."""
    from torch.distributed import TCPStore

    listener = socket.create_server((LOOPBACK, port), backlog=128)
    bound = listener.getsockname()[1]
    return TCPStore(LOOPBACK, bound, world_size, is_master=True, multi_tenant=True,
                    wait_for_workers=wait_for_workers, master_listen_fd=listener.detach())


def process_group_store(world_size: int):
    """The process group's store when the ranks run on this machine alone (MASTER_ADDR is the
    loopback, as `pipeline.execution.launch` sets it): rank 0 hosts it on the loopback only, where
    torch's `env://` store would listen on every interface. None otherwise (torch's own, e.g. torchrun
    across machines, or the launcher's agent store)."""
    if os.environ.get("MASTER_ADDR") != LOOPBACK or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    port = int(os.environ["MASTER_PORT"])
    if int(os.environ["RANK"]) == 0:
        return loopback_store(port, world_size, wait_for_workers=True)
    return torch.distributed.TCPStore(LOOPBACK, port, world_size, is_master=False)


def run_context(requested_device: str) -> RunContext:
    """Set up the device and, when launched by torchrun (WORLD_SIZE > 1), the process group."""
    device = resolve_device(requested_device)
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = 0
    if world_size > 1 and not torch.distributed.is_initialized():
        store = process_group_store(world_size)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if store is None:
            torch.distributed.init_process_group(backend)
        else:
            torch.distributed.init_process_group(backend, store=store, rank=int(os.environ["RANK"]), world_size=world_size)
        rank = torch.distributed.get_rank()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return RunContext(device, None, rank, world_size)


def with_precision(context: RunContext, precision: str, key: str, device_setting: str | None = None) -> RunContext:
    """`context` computing in `precision` (a training stage's setting `key`): bf16 or fp16 autocast
    on CUDA, fp32 anywhere; another on a CPU is a one-line error naming `key`."""
    validate_precision(precision, context.device.type, key, device_setting)
    return replace(context, autocast_dtype=AUTOCAST_DTYPES[precision])


def apply_threads(threads: int) -> None:
    """Fix torch's CPU thread count to the `threads` setting, whatever OMP_NUM_THREADS or the core
    count says: CPU kernels split their reductions across threads, so another count moves the last
    bits of every gradient (runs with OMP_NUM_THREADS=1 trained other weights than with 2)."""
    environment = os.environ.get("OMP_NUM_THREADS")
    if environment is not None and environment != str(threads):
        log.info("threads: %d (params.yaml) in place of OMP_NUM_THREADS=%s", threads, environment)
    torch.set_num_threads(threads)


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Same seed, same machine, same thread count → same weights (docs/reproducing.md). CPU kernels are
    deterministic for a fixed thread count, which every stage fixes first (`apply_threads`, the
    `threads` setting; logged here); `deterministic` makes CUDA pick deterministic kernels too
    (cuBLAS needs its workspace setting for that), warning where an op has none. On CUDA they cost
    time (on an H200 26% of pretrain's steps/s, 38% of the twin's: docs/scaling.md), so training asks for them only where its
    `deterministic` setting does."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    log.info("seed %d, %d CPU threads, %s algorithms", seed, torch.get_num_threads(),
             "deterministic" if deterministic else "non-deterministic CUDA")


def peak_rss_mb() -> float:
    """The process's peak resident memory since it started (`getrusage` ru_maxrss: KiB on Linux,
    bytes on macOS), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process so far: CUDA's max allocated on a GPU, else the peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()
