"""Checkpoints of the training loop: `<checkpoint_dir>/step-<N>/` holds the trained module's weights
(safetensors), the optimizer and scheduler state and the CPU and CUDA RNG states in
`training_state.pt` (`torch.load(weights_only=True)` on resume — only files this loop wrote
itself), and `state.json` (step, best dev score, history, fingerprint), written last. Each is
written into a temporary folder and renamed, so a killed run leaves only whole checkpoints; the
newest two are kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from pipeline.io import atomic_directory


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _complete_checkpoints(checkpoint_dir: Path) -> list[Path]:
    """Whole checkpoints (their state.json written last), oldest first."""
    complete = [path for path in checkpoint_dir.glob("step-*") if (path / "state.json").is_file()]
    return sorted(complete, key=lambda path: int(path.name.split("-")[1]))


def latest_checkpoint(checkpoint_dir: Path) -> Path | None:
    return (_complete_checkpoints(checkpoint_dir) or [None])[-1]


def _rng_states(device: torch.device) -> dict[str, torch.Tensor]:
    """CPU and (on CUDA) this device's generator: dropout masks on a GPU come from the latter. Under
    DDP every rank is seeded alike and draws alike, so rank 0's state stands for each rank's own."""
    states = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda_rng"] = torch.cuda.get_rng_state(device)
    return states


def save_checkpoint(checkpoint_dir: Path, step: int, model: nn.Module, optimizer, scheduler, state: dict,
                    device: torch.device) -> None:
    with atomic_directory(checkpoint_dir / f"step-{step}") as folder:
        weights = {name: tensor.detach().contiguous().cpu() for name, tensor in unwrap(model).state_dict().items()}
        save_file(weights, folder / "model.safetensors")
        torch.save(
            {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), **_rng_states(device)},
            folder / "training_state.pt",
        )
        (folder / "state.json").write_text(json.dumps(state))
    for old in _complete_checkpoints(checkpoint_dir)[:-2]:  # the newest two: a kill during a save leaves one
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model: nn.Module, optimizer, scheduler, device: torch.device) -> dict:
    unwrap(model).load_state_dict(load_file(folder / "model.safetensors"), strict=True)
    training_state = torch.load(folder / "training_state.pt", weights_only=True)
    optimizer.load_state_dict(training_state["optimizer"])
    scheduler.load_state_dict(training_state["scheduler"])
    torch.set_rng_state(training_state["rng"])
    if device.type == "cuda" and "cuda_rng" in training_state:
        torch.cuda.set_rng_state(training_state["cuda_rng"], device)
    return json.loads((folder / "state.json").read_text())
