"""One GPU (or N) per stage process: a machine-wide lease, so that `dvc queue start -j <GPUs>` fills a
machine with one experiment per GPU (DVC's queue workers all inherit one environment and assign no
device, so without it every experiment would train on `cuda:0`).

A lease is an exclusive `fcntl.flock` on `<PIPELINE_LEASE_DIR>/gpu-<device>.lock`, held by an open
file for the life of the process: the kernel releases it when the process ends, however it ends
(a killed holder frees its device; there is no stale lock to clean up). A process that finds every
device taken waits and tries again. Having leased, it pins itself with `CUDA_VISIBLE_DEVICES`
(before torch initialises CUDA; the launcher's ranks inherit it) and says which devices in
`PIPELINE_LEASED_GPUS`, which the provenance record copies (`pipeline.execution.environment`).

The visible devices are `PIPELINE_FAKE_GPUS` (a comma-separated stand-in for tests), else the
entries of `CUDA_VISIBLE_DEVICES` when it is set, else the GPU UUIDs `nvidia-smi` lists (UUIDs name
a GPU whatever the CUDA device order). Processes sharing a machine must name devices the same way.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.execution.environment import LEASED_GPUS_ENV
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

LEASE_DIR_ENV = "PIPELINE_LEASE_DIR"  # the machine-wide folder of the lock files; `off`: no lease
FAKE_GPUS_ENV = "PIPELINE_FAKE_GPUS"  # tests: the device names that stand in for the visible GPUs
DEFAULT_LEASE_DIR = Path(tempfile.gettempdir()) / "pipeline-gpu-leases"
POLL_SECONDS = 2.0


@dataclass
class Lease:
    """Devices held by this process: the open lock files keep them until `release` or exit."""

    devices: tuple[str, ...]
    handles: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for handle in self.handles:
            os.close(handle)  # closing the only descriptor drops the flock
        self.handles.clear()


def lease_dir() -> Path | None:
    """The lock folder (`PIPELINE_LEASE_DIR`, default under the system temp folder); None when set to `off`."""
    setting = os.environ.get(LEASE_DIR_ENV, "")
    if setting == "off":
        return None
    return Path(setting) if setting else DEFAULT_LEASE_DIR


def visible_devices() -> list[str]:
    """The devices a lease picks from (see the module docstring); [] on a machine without GPUs. A
    device named twice is an error: its one lock could never be held twice (the lease would wait forever)."""
    for variable in (FAKE_GPUS_ENV, "CUDA_VISIBLE_DEVICES"):
        if variable in os.environ:
            entries = [entry.strip() for entry in os.environ[variable].split(",") if entry.strip()]
            twice = sorted({entry for entry in entries if entries.count(entry) > 1})
            if twice:
                raise PipelineError(
                    f"{variable}={os.environ[variable]} names {', '.join(twice)} more than once; name each device once"
                )
            return [] if entries[:1] == ["-1"] else entries
    if shutil.which("nvidia-smi") is None:
        return []
    listed = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True,
                            check=False)
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()] if listed.returncode == 0 else []


def lock_file(folder: Path, device: str) -> Path:
    safe = re.sub(r"[^\w.-]", "_", device)
    return folder / f"gpu-{safe}.lock"


def _unusable_folder(folder: Path, error: OSError) -> PipelineError:
    return PipelineError(
        f"{LEASE_DIR_ENV}={folder}: cannot hold the GPU lease files ({error.strerror or error}); set it to a "
        "writable folder (or `off`: no lease)"
    )


def prepare_lease_dir(folder: Path) -> None:
    """Make the lock folder; one that is a file, lies under a file or cannot be made is a one-line error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # FileExistsError (a file), NotADirectoryError, FileNotFoundError, PermissionError
        raise _unusable_folder(folder, error) from None


def _try_lock(path: Path) -> int | None:
    try:
        handle = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)  # non-inheritable: the lease stays with this process
    except OSError as error:
        raise _unusable_folder(path.parent, error) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "?"
    except OSError:
        return "?"


def try_lease(count: int, devices: Sequence[str], folder: Path, holder: str) -> Lease | None:
    """`count` free devices of `devices` now, or None (and nothing held): all or nothing, so two
    processes that each need several never hold part of what the other waits for."""
    prepare_lease_dir(folder)
    lease = Lease(())
    for device in devices:
        handle = _try_lock(lock_file(folder, device))
        if handle is None:
            continue
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"{holder}\n".encode(), 0)  # who holds it, for the waiting message
        lease.handles.append(handle)
        lease.devices += (device,)
        if len(lease.devices) == count:
            return lease
    lease.release()
    return None


def lease_devices(count: int, devices: Sequence[str], folder: Path, holder: str,
                  wait: Callable[[float], None] = time.sleep) -> Lease:
    """Block until `count` of `devices` are free, and hold them (logged once while waiting)."""
    if count > len(devices):
        raise PipelineError(
            f"{count} GPUs asked for (PIPELINE_NPROC) but {len(devices)} visible ({', '.join(devices) or 'none'}); "
            "ask for fewer or make more visible (CUDA_VISIBLE_DEVICES)"
        )
    waited = False
    while (lease := try_lease(count, devices, folder, holder)) is None:
        if not waited:
            held = "; ".join(f"{device}: {_holder(lock_file(folder, device))}" for device in devices)
            log.info("waiting for %d free GPU(s) of %d, leased in %s (%s)", count, len(devices), folder, held)
            waited = True
        wait(POLL_SECONDS)
    return lease


_HELD: list[Lease] = []  # the process's lease, kept referenced for its lifetime


def pin_leased_devices(count: int, stage: str) -> tuple[str, ...]:
    """Lease `count` GPUs for this process and pin it to them; nothing on a machine without GPUs,
    with `PIPELINE_LEASE_DIR=off`, or in a process that already holds a lease (a launcher's rank)."""
    folder, devices = lease_dir(), visible_devices()
    if folder is None or not devices or LEASED_GPUS_ENV in os.environ:
        return ()
    lease = lease_devices(count, devices, folder, f"pid {os.getpid()} on {socket.gethostname()}: {stage}")
    _HELD.append(lease)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(lease.devices)
    os.environ[LEASED_GPUS_ENV] = ",".join(lease.devices)
    log.info("%s: leased GPU %s (CUDA_VISIBLE_DEVICES pinned; lock in %s)", stage, ", ".join(lease.devices), folder)
    return lease.devices
