"""The launcher and the lease, in processes of their own: `--role launcher` leases one device as a stage
does and starts one rank through the stages' launcher; `--role rank` joins the process group and takes one
DDP step. Both are this package run again (`python -m tools.gpu_check`) from the project root."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tools.gpu_check.modes import ROOT

LAUNCH_TIMEOUT_S = 150
ITSELF = ["-m", "tools.gpu_check"]  # how a process of its own runs this package (from ROOT)


def run_launcher(device: str, backbone: Path, sentences_file: Path, scratch: Path) -> dict | None:
    """`--role launcher` in a fresh process (the lease pins CUDA_VISIBLE_DEVICES before CUDA starts there)."""
    report = scratch / "launch.json"
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PIPELINE_LEASED_GPUS", "PIPELINE_FAKE_GPUS")}
    environment["PIPELINE_LEASE_DIR"] = str(scratch / "leases")
    try:
        done = subprocess.run([sys.executable, *ITSELF, "--role", "launcher", "--device", device, "--report", str(report),
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
    rank_arguments = [*ITSELF, "--role", "rank", "--device", arguments.device, "--report", arguments.report,
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
