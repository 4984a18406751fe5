"""Where a result was made: the environment record of every training and evaluation record, and
the provenance record beside it.

`environment_record` goes inside DVC outputs (reports/training/details/<stage>.json and
reports/metrics/details/<model>.json, under "environment"), so it holds only what is a function of
the machine kind, the installed (locked) package versions, params and data: a fresh clone's
`dvc repro` on the same kind of machine writes it again byte for byte, and dvc.lock with it. Every
data file it hashes is a dependency the stage declares, and every setting it names a parameter
the stage declares, so a change to either reruns the stage.

What differs between two identical runs — the git commit (a fresh clone of the results commit is
another commit than the one that made them), whether the tree was dirty, the host, the time — goes
in `provenance_record`, which the caller writes to reports/provenance/<stage>.json: no stage
declares that folder and no declared folder holds it, so it leaves dvc.lock and `dvc status` alone.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline import paths
from pipeline.git import git_text_or_none
from pipeline.config import OptimSettings, Params
from pipeline.io import write_json_atomic
from pipeline.cache_entries import sha256_of
from pipeline.execution.runtime import RunContext, resolve_device

# Distribution names, read with importlib.metadata (the installed versions, not the imported modules').
PACKAGES = ("torch", "transformers", "tokenizers", "dvc")
# The GPUs a stage process leased (`pipeline.execution.lease` sets it; its launched ranks inherit it): which
# devices of the machine it ran on, for provenance (another run on the same machine kind leases another).
LEASED_GPUS_ENV = "PIPELINE_LEASED_GPUS"
# What a run writes while the pipeline runs: changes there do not make the code tree dirty.
RUN_OUTPUTS = ("reports/", "dvc.lock")


@dataclass(frozen=True)
class Compute:
    """How a stage computed: its precision, torch.compile as resolved (`off`, or the step's compiled mode:
    `module`, `whole`, `graphs`; pipeline/training/compiled.py), the DDP world, the rows
    each device takes per micro-batch (None where batches are made by a token budget) and whether
    layer activations were recomputed in the backward (activation checkpointing)."""

    precision: str
    compile: str
    world_size: int
    per_device_batch: int | None
    activation_checkpointing: bool = False


def training_compute(settings: OptimSettings, context: RunContext, compile_mode: str) -> Compute:
    """A training stage's `Compute`: `settings.batch_size` is the global batch, split over the ranks
    (`pipeline.training.batching`: rank r takes rows r, r + world, ...; the first ranks take one more row
    when it does not divide)."""
    per_device = -(-settings.batch_size // context.world_size)
    return Compute(context.precision, compile_mode, context.world_size, per_device, settings.activation_checkpointing)


# The evaluate stage embeds in fp32, uncompiled, in one process, in batches of a token budget.
EVALUATION_COMPUTE = Compute("fp32", "off", 1, None)


def training_data(params: Params, towers: Sequence[str] | None = None) -> list[Path]:
    """The corpus and the round trips of `towers` (default: every tower): the files whose hashes a
    record carries; the stage that writes the record declares each as a dependency."""
    return [paths.CORPUS, *(paths.rtt_file(tower) for tower in (params.towers if towers is None else towers))]


def package_versions() -> dict[str, str | None]:
    """python and the installed versions of `PACKAGES` (None: not installed), CUDA and cuDNN as torch
    was built with them (None: a CPU build)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    versions["cuda"] = torch.version.cuda
    versions["cudnn"] = str(cudnn) if cudnn is not None else None
    return versions


def gpu_record(device: torch.device) -> dict | None:
    """The GPU model and how many this process sees, on CUDA; None on a CPU."""
    if device.type != "cuda":
        return None
    return {"model": torch.cuda.get_device_name(device), "count": torch.cuda.device_count()}


# The CPU features that choose a kernel's code path (torch's dispatch, MKL's and oneDNN's): two CPUs that
# print the same model name (a virtual machine's "Intel(R) Xeon(R) Processor") may differ in these.
KERNEL_FEATURES = re.compile(r"^(avx\w*|fma\w*|f16c|amx\w*|sse4\w*)$")


# Where the kernel's cache sizes come from: MKL and oneDNN size their GEMM blocks by them, and a virtual
# machine that reports its host's model and features may sit on a host with other caches.
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_caches(root: Path = CPU_CACHES) -> dict[str, str]:
    """The first CPU's caches as the kernel reports them: {"L1d": "48K", "L1i": "32K", "L2": ..., "L3": ...}."""
    caches = {}
    for index in sorted(root.glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def cpu_record() -> dict:
    """The CPU model, its microarchitecture (vendor, family, model, stepping), the vector features kernels
    choose their code path by, its caches and logical CPUs (what BLAS libraries size and split their work
    by), and the instruction set torch's kernels dispatch to (AVX2, AVX512, ...; `ATEN_CPU_CAPABILITY`
    lowers it): two CPUs that differ in any of these may train other last bits of the weights (a
    reproduction made there differs in its hashes, not its science)."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                break  # the first processor's block
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    microarchitecture = "/".join(fields.get(key, "?") for key in ("vendor_id", "cpu family", "model", "stepping"))
    return {
        "model": fields.get("model name") or platform.processor() or None,
        "microarchitecture": microarchitecture if fields else platform.machine(),
        "features": sorted(flag for flag in fields.get("flags", "").split() if KERNEL_FEATURES.match(flag)),
        "caches": cpu_caches(),
        "logical_cpus": os.cpu_count(),
        "capability": torch.backends.cpu.get_cpu_capability(),
    }


def environment_record(device: torch.device, params: Params, data_files: Sequence[Path], compute: Compute) -> dict:
    """Where and how a result was made (the "environment" of a training or evaluation record).

    Data are hashed with `sha256_of` (the files as the stage read them, not the md5 dvc.lock held
    for them: a stage run by hand, or before DVC committed its upstream stage, still records what
    it read); a file that is not there is recorded as null."""
    return {
        "device": device.type,
        "gpu": gpu_record(device),
        "cpu": cpu_record(),
        "versions": package_versions(),
        # the `threads` setting as applied (apply_threads): another count, other weights
        "threads": torch.get_num_threads(),
        "precision": compute.precision,
        "compile": compute.compile,
        "world_size": compute.world_size,
        "per_device_batch": compute.per_device_batch,
        "activation_checkpointing": "on" if compute.activation_checkpointing else "off",
        "data_sha256": {path.as_posix(): sha256_of(path) if path.is_file() else None for path in map(Path, data_files)},
        "sick_splits": list(params.data.sick_splits) if params.data.add_sick else [],
    }


def evaluation_environment(params: Params) -> dict:
    """The environment of an `evaluate@<model>` record: the device params resolve to, fp32, and the
    pipeline's corpus and round trips (declared deps of every evaluate stage)."""
    return environment_record(resolve_device(params.device), params, training_data(params), EVALUATION_COMPUTE)


def provenance_record(stage: str, cwd: Path | None = None) -> dict:
    """What made a stage's outputs that is no function of code, data and params: the git commit
    (None outside a git checkout), whether tracked or new files other than the run's own outputs
    (`RUN_OUTPUTS`) differed from it, the host, the GPUs it leased (None: no lease) and the time."""
    cwd = cwd or Path.cwd()
    commit = git_text_or_none(cwd, "rev-parse", "HEAD")
    status = git_text_or_none(cwd, "status", "--porcelain", "--untracked-files=all", "--no-renames")
    changed = [line[3:] for line in (status or "").splitlines()]
    return {
        "stage": stage,
        "git_commit": commit.strip() if commit else None,
        "git_dirty": None if status is None else any(not path.startswith(RUN_OUTPUTS) for path in changed),
        "host": socket.gethostname(),
        "gpu_lease": os.environ[LEASED_GPUS_ENV].split(",") if os.environ.get(LEASED_GPUS_ENV) else None,
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def provenance_file(stage: str, folder: Path = paths.PROVENANCE) -> Path:
    """reports/provenance/<stage>.json; not a DVC output (see the module's docstring)."""
    return folder / f"{stage}.json"


def write_provenance(stage: str, folder: Path = paths.PROVENANCE, **extra) -> Path:
    """The stage's provenance file (`provenance_file`), written atomically; `extra` adds stage-specific
    facts of the same kind (the download's resolved commits and recorded digests)."""
    path = provenance_file(stage, folder)
    write_json_atomic(path, {**provenance_record(stage), **extra})
    return path
