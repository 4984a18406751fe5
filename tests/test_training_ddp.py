"""The training loop under DDP (two CPU processes, gloo): one global batch, one process's gradient."""

import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoTokenizer

from pipeline.config import OptimSettings
from pipeline.training.batching import pad_batch, tokenize_columns
from pipeline.runtime import RunContext, run_context
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import SimCSETask

from conftest import MIRROR
from tiny_models import save_tiny_bert

SETTINGS = OptimSettings(batch_size=8, max_length=24, max_steps=2, eval_every=100, save_every=100, dropout=0.0)


def _examples():
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()
    return [(sentence,) for sentence in lines[:32]]


def _task(backbone):
    return SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.0, 0.05, None, 24)


def _gradients(task, model, rows, scale=1.0) -> dict[str, torch.Tensor]:
    """Gradients of the task's loss on these corpus rows (padded together), times `scale`."""
    (ids,) = tokenize_columns(task.tokenizer, _examples(), SETTINGS.max_length)
    batch = [pad_batch([ids[i] for i in rows], task.tokenizer.pad_token_id, torch.device("cpu"))]
    model.zero_grad()
    (task.loss(model, batch, 0)["loss"] * scale).backward()
    inner = model.module if hasattr(model, "module") else model
    return {name: p.grad.clone() for name, p in inner.named_parameters() if p.grad is not None}


def _rank(rank: int, world_size: int, port: int, backbone, out) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    context = run_context("cpu")
    try:
        task = _task(backbone)
        ddp = torch.nn.parallel.DistributedDataParallel(task.model)
        # rank r holds rows r, r+2, ... of the global batch 0..7, as the loop shards it
        torch.save(_gradients(task, ddp, list(range(rank, 8, world_size)), scale=world_size), out / f"grad-{rank}.pt")
        train(_task(backbone), _examples(), SETTINGS, RunSpec(1e-3, 3, out / "model", out / "ckpt"), context)
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_process_ddp_gives_the_gradient_of_one_process_on_the_global_batch(tmp_path):
    backbone = save_tiny_bert(tmp_path / "backbone", seed=4)
    single_task = _task(backbone)
    expected = _gradients(single_task, single_task.model, [0, 2, 4, 6, 1, 3, 5, 7])
    ranks = mp.spawn(_rank, args=(2, _free_port(), backbone, tmp_path), nprocs=2, join=False)
    deadline = time.monotonic() + 180  # a rendezvous that never completes must fail, not hang CI
    while not ranks.join(timeout=2):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail("the two DDP ranks did not finish within 180 s")

    for rank in (0, 1):
        got = torch.load(tmp_path / f"grad-{rank}.pt", weights_only=True)
        assert got.keys() == expected.keys()
        for name, gradient in expected.items():
            torch.testing.assert_close(got[name], gradient, rtol=1e-4, atol=1e-7, msg=name)
    # the loop itself runs under DDP: rank 0 writes the model, the steps complete on both ranks
    assert (tmp_path / "model" / "model.safetensors").is_file()
    single = train(_task(backbone), _examples(), SETTINGS, RunSpec(1e-3, 3, tmp_path / "one", tmp_path / "ckpt-one"),
                   RunContext(torch.device("cpu"), None))
    assert single.steps == 2
