"""The training loop's resume states — named so as not to be confused with the public checkpoints
of the papers' released systems (`pipeline.public_checkpoints`). On disk they live under
data/checkpoints/<stage>/ (`paths.RESUME_STATES`): `<resume_dir>/step-<N>/` holds the trained module's weights
(safetensors), the optimizer and scheduler state and the CPU and CUDA RNG states in
`training_state.pt` (`torch.load(weights_only=True)` on resume — only files this loop wrote
itself), and `state.json` (step, best dev score, history, fingerprint, the SHA-256 of the other
two files), written last. Each is written into a temporary folder and renamed, so a killed run
leaves only whole checkpoints; the newest two are kept. A checkpoint that fails to read or to match
its recorded checksums is named, discarded, and the next older one tried (`resumable_state`).

The best model so far lives in `best-<step>/`, a new folder per new best: it is never replaced in
place, so a kill at any moment leaves the folder that each kept checkpoint names
(`prune_best_models` removes the others). It records its files' checksums (`record_best_model`),
checked on resume and before it is copied to the output (`verify_best_model`): a corrupt one stops
the run with one line. The folder holding all this is the run's alone while it
trains (`hold_resume_folder`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from pipeline.errors import PipelineError
from pipeline.io import atomic_directory
from pipeline.cache_entries import sha256_of

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CHECKSUMMED = ("model.safetensors", "training_state.pt")
BEST_CHECKSUMS = ".checksums.json"  # in each best-<step>/: its files' SHA-256, not copied to the output


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


@contextmanager
def hold_resume_folder(resume_dir: Path, description: str) -> Iterator[None]:
    """The folder is this run's until the block ends: a second run of the same stage is refused.

    `flock` on a file in the folder: the kernel releases it when the process dies, so a killed run
    never leaves a stale lock behind."""
    resume_dir.mkdir(parents=True, exist_ok=True)
    handle = os.open(resume_dir / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineError(
                f"{description}: another run of this stage is training in {resume_dir} (it holds "
                f"{resume_dir / LOCK_FILE}); wait for it to finish or stop it, then rerun"
            ) from None
        yield
    finally:
        os.close(handle)  # releases the lock


def clear_resume_folder(resume_dir: Path) -> None:
    """Remove every checkpoint and best model (not the lock a running run holds)."""
    for entry in resume_dir.iterdir():
        if entry.name != LOCK_FILE:
            # tolerant: under DDP every rank resumes, and may clear the same folder at once
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() else entry.unlink(missing_ok=True)


def best_model_folder(resume_dir: Path, step: int) -> Path:
    return resume_dir / f"best-{step}"


def _best_model_files(folder: Path) -> dict[str, str]:
    """Every file of a best-model folder but its checksum record: relative path -> SHA-256."""
    return {path.relative_to(folder).as_posix(): sha256_of(path)
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != BEST_CHECKSUMS}


def record_best_model(folder: Path) -> None:
    """Record the checksums of a best model just saved in `folder` (still the temporary folder of
    `atomic_directory`, so the folder never appears without them)."""
    (folder / BEST_CHECKSUMS).write_text(json.dumps(_best_model_files(folder)))


def verify_best_model(folder: Path, resume_dir: Path, description: str) -> None:
    """The best model in `folder` is what was written (every file against its recorded checksum),
    or a one-line error naming the file: a corrupt best model is never copied to the output."""
    try:
        recorded = json.loads((folder / BEST_CHECKSUMS).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        recorded = None
    found = _best_model_files(folder)
    if not isinstance(recorded, dict):
        reason = f"{BEST_CHECKSUMS} is missing or unreadable"
    else:
        differing = sorted(name for name in recorded.keys() | found.keys() if recorded.get(name) != found.get(name))
        if not differing:
            return
        reason = f"{differing[0]} is not what was written (checksum differs)"
    raise PipelineError(
        f"{description}: the best model {folder} is corrupt ({reason}); delete {resume_dir} to train again"
    )


def _complete_states(resume_dir: Path) -> list[Path]:
    """Whole checkpoints (their state.json written last), oldest first."""
    complete = [path for path in resume_dir.glob("step-*")
                if path.name[len("step-"):].isdigit() and (path / "state.json").is_file()]
    return sorted(complete, key=lambda path: int(path.name.split("-")[1]))


def latest_resume_state(resume_dir: Path) -> Path | None:
    return (_complete_states(resume_dir) or [None])[-1]


def _rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    """CPU and (on CUDA) this device's generator: dropout masks on a GPU come from the latter. Under
    DDP every rank is seeded alike and draws the whole global batch's masks (`pipeline.modeling.
    distributed`), so the generators stay equal and rank 0's state stands for each rank's own."""
    states = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda_rng"] = torch.cuda.get_rng_state(device)
    return states


def save_resume_state(resume_dir: Path, step: int, model: nn.Module, optimizer, scheduler, state: dict,
                    device: torch.device, generators: dict[str, torch.Generator] | None = None) -> None:
    """The step's weights, optimizer, schedule and RNG states — torch's and the task's own `generators`."""
    with atomic_directory(resume_dir / f"step-{step}") as folder:
        weights = {name: tensor.detach().contiguous().cpu() for name, tensor in unwrap(model).state_dict().items()}
        save_file(weights, folder / "model.safetensors")
        task_rng = {name: generator.get_state() for name, generator in (generators or {}).items()}
        torch.save(
            {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), **_rng_states(device),
             "task_rng": task_rng},
            folder / "training_state.pt",
        )
        checksums = {name: sha256_of(folder / name) for name in CHECKSUMMED}
        (folder / "state.json").write_text(json.dumps({**state, "checksums": checksums}))
    for old in _complete_states(resume_dir)[:-2]:  # the newest two: a kill during a save leaves one
        shutil.rmtree(old, ignore_errors=True)


class CorruptResumeState(Exception):
    """A checkpoint that cannot be read back as written (the message names the file and why)."""


@dataclass
class ResumeState:
    """A checkpoint read whole into memory, before anything of the run is touched."""

    folder: Path
    weights: dict[str, torch.Tensor]
    training_state: dict
    state: dict


def _read_state(folder: Path) -> dict:
    try:
        state = json.loads((folder / "state.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptResumeState(f"state.json: {error}") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CorruptResumeState("state.json: no step recorded")
    return state


def read_resume_state(folder: Path) -> ResumeState:
    """The checkpoint in `folder`, every file checked; `CorruptResumeState` if any fails."""
    state = _read_state(folder)
    for name, expected in state.get("checksums", {}).items():  # checkpoints of older versions have none
        if not (folder / name).is_file() or sha256_of(folder / name) != expected:
            raise CorruptResumeState(f"{name}: missing or not what was written (checksum differs)")
    try:
        weights = load_file(folder / "model.safetensors")
    except (OSError, SafetensorError) as error:
        raise CorruptResumeState(f"model.safetensors: {error}") from None
    try:
        training_state = torch.load(folder / "training_state.pt", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise CorruptResumeState(f"training_state.pt: {str(error).splitlines()[0]}") from None
    return ResumeState(folder, weights, training_state, state)


def apply_resume_state(stored: ResumeState, model: nn.Module, optimizer, scheduler, device: torch.device,
                       generators: dict[str, torch.Generator] | None = None) -> dict:
    """Put a read checkpoint's weights, optimizer, schedule and RNG states (torch's and the task's own
    `generators`) in place; its state.json. A generator the checkpoint lacks is an error, never a reseed."""
    saved = stored.training_state.get("task_rng", {})
    missing = sorted(set(generators or {}) - set(saved))
    if missing:
        raise PipelineError(f"{stored.folder}/training_state.pt holds no state of the task's generator(s) "
                            f"{', '.join(missing)} (an older version wrote it): resuming would draw other noise; "
                            f"delete {stored.folder.parent} to train again")
    unwrap(model).load_state_dict(stored.weights, strict=True)
    optimizer.load_state_dict(stored.training_state["optimizer"])
    scheduler.load_state_dict(stored.training_state["scheduler"])
    for name, generator in (generators or {}).items():
        generator.set_state(saved[name])
    torch.set_rng_state(stored.training_state["rng"])
    if device.type == "cuda" and "cuda_rng" in stored.training_state:
        torch.cuda.set_rng_state(stored.training_state["cuda_rng"], device)
    return stored.state


def load_resume_state(folder: Path, model: nn.Module, optimizer, scheduler, device: torch.device) -> dict:
    return apply_resume_state(read_resume_state(folder), model, optimizer, scheduler, device)


def resumable_state(resume_dir: Path, fingerprint: str, description: str) -> ResumeState | None:
    """The newest whole, readable checkpoint of this fingerprint, or None to start over.

    A corrupt one is named in one line, removed, and the next older one tried; checkpoints of other
    settings are all removed (with the best models), as is a best model no checkpoint names."""
    for folder in reversed(_complete_states(resume_dir)):
        try:
            stored = read_resume_state(folder)
        except CorruptResumeState as error:
            older = _complete_states(resume_dir)[:-1]
            fallback = f"trying {older[-1].name}" if older and older[-1] != folder else "starting over"
            log.warning("%s: checkpoint %s is corrupt (%s); discarded, %s", description, folder, error, fallback)
            shutil.rmtree(folder, ignore_errors=True)
            continue
        if stored.state.get("fingerprint") != fingerprint:
            log.info("%s: checkpoints in %s belong to other settings; starting over", description, resume_dir)
            break
        best_step = stored.state["best_step"]
        if best_step is not None and not best_model_folder(resume_dir, best_step).is_dir():
            raise PipelineError(
                f"{description}: checkpoint {folder} names the best model of step {best_step}, but "
                f"{best_model_folder(resume_dir, best_step)} is missing; delete {resume_dir} to train again"
            )
        if best_step is not None:
            verify_best_model(best_model_folder(resume_dir, best_step), resume_dir, description)
        prune_best_models(resume_dir, best_step)
        return stored
    clear_resume_folder(resume_dir)
    return None


def prune_best_models(resume_dir: Path, current_best: int | None) -> None:
    """Remove the best-model folders that neither the run now nor a kept checkpoint names."""
    named = {current_best}
    for folder in _complete_states(resume_dir):
        try:
            named.add(_read_state(folder).get("best_step"))
        except CorruptResumeState:
            pass  # resuming will discard it
    for best in resume_dir.glob("best-*"):
        suffix = best.name[len("best-"):]
        if not (suffix.isdigit() and int(suffix) in named):
            shutil.rmtree(best, ignore_errors=True)
