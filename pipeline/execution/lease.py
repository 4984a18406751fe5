"""One GPU (or N) per stage process: a machine-wide lease, so that `dvc queue start -j <GPUs>` fills a
machine with one experiment per GPU (DVC's queue workers all inherit one environment and assign no
device, so without it every experiment would train on `cuda:0`).

A lease is an exclusive `fcntl.flock` on `<lease folder>/gpu-<device>.lock`, held by an open
file for the life of the process: the kernel releases it when the process ends, however it ends
(a killed holder frees its device; there is no stale lock to clean up). Who holds it is noted
beside it, in `gpu-<device>.holder` (written whole by a rename, never through the lock file). A
process that finds every device taken waits and tries again. Having leased, it pins itself with
`CUDA_VISIBLE_DEVICES` (before torch initialises CUDA; the launcher's ranks inherit it) and says
which devices in `PIPELINE_LEASED_GPUS`, which the provenance record copies
(`pipeline.execution.environment`).

The lease folder is the user's own, `${XDG_CACHE_HOME:-~/.cache}/pipeline/gpu-leases/<host>` (made
0700; one rule for every process of the user, and the host because home folders are often shared
between machines), or `PIPELINE_LEASE_DIR` for a folder shared on purpose, e.g. by a group whose
members share the GPUs. Either must be a real folder (no symbolic link), owned by the user or root,
never writable by all, and writable by its group only with the sticky bit (so no member can
replace another's files): a fixed, shared folder such as `/tmp/...` let another user plant
symbolic links that made a stage clobber the victim's files or hold the GPUs. Lock files are
opened without following links and never truncated or written; a link in their place is refused.

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
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.execution.environment import LEASED_GPUS_ENV
from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

LEASE_DIR_ENV = "PIPELINE_LEASE_DIR"  # a folder of the lock files shared on purpose; `off`: no lease
FAKE_GPUS_ENV = "PIPELINE_FAKE_GPUS"  # tests: the device names that stand in for the visible GPUs
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


def default_lease_dir() -> Path:
    """The user's own lock folder on this machine (see the module docstring)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pipeline" / "gpu-leases" / re.sub(r"[^\w.-]", "_", socket.gethostname())


def lease_dir() -> Path | None:
    """The lock folder (`PIPELINE_LEASE_DIR`, else the user's own); None when set to `off`."""
    setting = os.environ.get(LEASE_DIR_ENV, "")
    if setting == "off":
        return None
    return Path(setting) if setting else default_lease_dir()


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


def holder_file(lock: Path) -> Path:
    return lock.with_suffix(".holder")


def _unusable_folder(folder: Path, error: OSError) -> PipelineError:
    return PipelineError(
        f"{LEASE_DIR_ENV}={folder}: cannot hold the GPU lease files ({error.strerror or error}); set it to a "
        "writable folder (or `off`: no lease)"
    )


def _unsafe_folder(folder: Path, why: str, fix: str) -> PipelineError:
    return PipelineError(f"the GPU lease folder {folder} {why}: another user could take or redirect the leases; {fix} "
                         f"(or set {LEASE_DIR_ENV} to a folder of your own)")


def check_lease_folder(folder: Path, info: os.stat_result, uid: int) -> None:
    """Refuse a lease folder another user could tamper with (the rule of the module docstring);
    `info` is its lstat."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise _unsafe_folder(folder, "is a symbolic link", "remove the link")
    if not stat.S_ISDIR(mode):
        raise _unusable_folder(folder, FileExistsError(17, "not a folder"))
    if info.st_uid not in (uid, 0):
        raise _unsafe_folder(folder, f"belongs to another user (uid {info.st_uid})", "use a folder you own")
    if mode & stat.S_IWOTH:
        raise _unsafe_folder(folder, "is writable by every user", f"chmod o-w {folder}")
    if mode & stat.S_IWGRP and not mode & stat.S_ISVTX:
        raise _unsafe_folder(folder, "is writable by its group without the sticky bit",
                             f"chmod +t {folder} (a group-shared folder) or chmod g-w {folder}")


def prepare_lease_dir(folder: Path) -> None:
    """Make the lock folder (0700 for what is made here) and check it is safe (`check_lease_folder`);
    one that is a file, lies under a file or cannot be made is a one-line error."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as error:  # FileExistsError (a file), NotADirectoryError, FileNotFoundError, PermissionError
        raise _unusable_folder(folder, error) from None
    check_lease_folder(folder, info, os.getuid())


def _try_lock(path: Path) -> int | None:
    # Read-only, created if missing, never truncated, never through a link; non-blocking so that a FIFO
    # planted there cannot hang the open; non-inheritable: the lease stays with this process.
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        handle = os.open(path, flags, 0o644)  # readable: a group sharing the folder can flock it too
    except OSError as error:
        if os.path.islink(path):
            raise PipelineError(f"{path} is a symbolic link, not a GPU lease file: it was left as it is; remove it (and "
                                "ask who made it), then rerun") from None
        raise _unusable_folder(path.parent, error) from None
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise PipelineError(f"{path} is not a plain file, so no GPU lease file; remove it, then rerun")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


def _note_holder(lock: Path, holder: str) -> None:
    """Say who holds `lock` in its holder file, written whole (a temporary file renamed over it,
    never through a link); only a courtesy for the waiting message, so a failure is no error."""
    try:
        handle, temporary = tempfile.mkstemp(dir=lock.parent, prefix=f".{lock.stem}.")
    except OSError as error:
        log.debug("could not note the holder of %s: %s", lock, error)
        return
    try:
        with os.fdopen(handle, "w") as note:
            note.write(f"{holder}\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, holder_file(lock))
    except OSError as error:  # e.g. a group member's note in a sticky folder cannot be replaced
        log.debug("could not note the holder of %s: %s", lock, error)
        Path(temporary).unlink(missing_ok=True)


def _holder(lock: Path) -> str:
    try:
        handle = os.open(holder_file(lock), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "?"
    try:
        with os.fdopen(handle, "rb") as note:
            return note.read(300).decode(errors="replace").strip() or "?"
    except OSError:  # a folder planted in its place
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
        lease.handles.append(handle)
        lease.devices += (device,)
        if len(lease.devices) == count:
            for device in lease.devices:
                _note_holder(lock_file(folder, device), holder)
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
