"""The training loop under DDP (two CPU processes, gloo): one global batch, one process's gradient —
with dropout on, its masks drawn over the global batch (pipeline/modeling/distributed.py)."""

import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file
from transformers import AutoTokenizer

from pipeline.config import OptimSettings
from pipeline.modeling import TwinEncoder, load_backbone
from pipeline.modeling.distributed import Shard, shard_dropout
from pipeline.training.batching import pad_batch, shard_rows, tokenize_columns
from pipeline.execution.runtime import RunContext, run_context
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import SimCSETask

from conftest import MIRROR
from tiny_models import save_tiny_bert

DROPOUT = 0.1  # SimCSE's: the masks are the augmentation, so they must not depend on the world size
SETTINGS = OptimSettings(batch_size=8, max_length=24, max_steps=3, eval_every=100, save_every=100)


def _examples():
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()
    return [(sentence,) for sentence in lines[:32]]


def _task(backbone):
    return SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), DROPOUT, 0.05, None, 24)


def _gradients(task, model, shard=Shard(0, 1), scale=1.0) -> dict[str, torch.Tensor]:
    """Gradients of the task's loss on this rank's block of the global batch (corpus rows 0..7,
    padded together), times `scale`, the dropout generator seeded alike on every rank."""
    (ids,) = tokenize_columns(task.tokenizer, _examples(), SETTINGS.max_length)
    batch = shard_rows([pad_batch(ids[:8], task.tokenizer.pad_token_id, torch.device("cpu"))], shard.rank, shard.world_size)
    model.train().zero_grad()
    torch.manual_seed(9)
    (task.loss(model, batch, 0)["loss"] * scale).backward()
    inner = model.module if hasattr(model, "module") else model
    return {name: p.grad.clone() for name, p in inner.named_parameters() if p.grad is not None}


def _rank(rank: int, world_size: int, port: int, backbone, out) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    context = run_context("cpu")
    try:
        task = _task(backbone)
        shard_dropout(task.model, Shard(rank, world_size))  # as the loop does under DDP
        ddp = torch.nn.parallel.DistributedDataParallel(task.model)
        torch.save(_gradients(task, ddp, Shard(rank, world_size), scale=world_size), out / f"grad-{rank}.pt")
        train(_task(backbone), _examples(), SETTINGS, RunSpec(1e-3, 3, out / "model", out / "ckpt"), context)
        torch.save(torch.get_rng_state(), out / f"rng-{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_global_batch_dropout_gives_each_shard_one_process_s_masks(tmp_path):
    """Two shards' forward passes, each with its own block of rows, are one process's stock forward
    over the whole batch bit for bit, dropout on (hidden and attention), and leave the generator
    where one process leaves it: the twin's cross-attention layers included."""
    save_tiny_bert(tmp_path / "I", seed=3)
    save_tiny_bert(tmp_path / "II", seed=4)
    ids = torch.randint(5, 40, (8, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = mask[6, 3:] = 0  # padding, as a batch of unequal sentences has

    def forward(make, shard):
        model = make().train()
        if shard is not None:
            assert shard_dropout(model, shard) > 0
        rows = slice(None) if shard is None else slice(shard.rank * 4, (shard.rank + 1) * 4)
        torch.manual_seed(11)
        return model(ids[rows], mask[rows]), torch.get_rng_state()

    makers = {
        "encoder": lambda: load_backbone(tmp_path / "I", DROPOUT),
        "twin": lambda: TwinEncoder.from_pretrained(str(tmp_path / "I"), str(tmp_path / "II"), cael=2, dropout=DROPOUT),
    }
    without_dropout, _ = forward(lambda: load_backbone(tmp_path / "I", 0.0), None)
    for name, make in makers.items():
        (whole, whole_rng), *shards = [forward(make, shard) for shard in (None, Shard(0, 2), Shard(1, 2))]
        if name == "encoder":
            assert not torch.equal(whole.last_hidden_state, without_dropout.last_hidden_state)  # the dropout is on
            assert torch.equal(torch.cat([out.last_hidden_state for out, _ in shards]), whole.last_hidden_state)
        else:  # TwinOutput: (tower, view, d) stacks
            for index, tensor in enumerate(whole):
                assert torch.equal(torch.cat([out[index] for out, _ in shards], dim=1), tensor), (name, index)
        assert all(torch.equal(rng, whole_rng) for _, rng in shards), name


def test_two_process_ddp_gives_the_gradient_and_weights_of_one_process_with_dropout_on(tmp_path):
    backbone = save_tiny_bert(tmp_path / "backbone", seed=4)
    single_task = _task(backbone)
    expected = _gradients(single_task, single_task.model)
    # A rendezvous that never completes must fail, not hang CI. The port is free when probed but another
    # test's server may take it before rank 0 binds it (the suite runs in parallel): then the ranks wait
    # for each other forever, so a second try on another port is made before failing.
    for attempt in (1, 2):
        ranks = mp.spawn(_rank, args=(2, _free_port(), backbone, tmp_path), nprocs=2, join=False)
        deadline = time.monotonic() + 120
        while not ranks.join(timeout=2):
            if time.monotonic() > deadline:
                for process in ranks.processes:
                    process.kill()
                break
        else:
            break
    else:
        pytest.fail("the two DDP ranks did not finish within 120 s, twice (on two ports)")

    for rank in (0, 1):
        got = torch.load(tmp_path / f"grad-{rank}.pt", weights_only=True)
        assert got.keys() == expected.keys()
        for name, gradient in expected.items():
            torch.testing.assert_close(got[name], gradient, rtol=1e-4, atol=1e-7, msg=name)
    # the loop itself: rank 0 writes the model, which is one process's to float rounding, and the
    # ranks' generators stay equal (the resume state keeps rank 0's for all)
    single = train(_task(backbone), _examples(), SETTINGS, RunSpec(1e-3, 3, tmp_path / "one", tmp_path / "ckpt-one"),
                   RunContext(torch.device("cpu"), None))
    assert single.steps == SETTINGS.max_steps
    one, two = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "model" / "model.safetensors")
    start = load_file(backbone / "model.safetensors")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
    assert max((one[name] - start[name]).abs().max() for name in start if name in one) > 1e-3  # it trained
    assert torch.equal(torch.load(tmp_path / "rng-0.pt", weights_only=True), torch.load(tmp_path / "rng-1.pt", weights_only=True))
