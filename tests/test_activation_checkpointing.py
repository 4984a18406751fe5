"""Activation checkpointing (`activation_checkpointing` of every training section): the same losses,
gradients and trained weights as the plain run, with fewer activations kept for the backward."""

import pytest
import torch
from transformers import AutoTokenizer

from pipeline.config import TrainSettings
from pipeline.modeling import checkpoint_activations
from pipeline.execution.runtime import RunContext
from pipeline.training.batching import pad_batch
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import SimCSETask, TwinTask

from conftest import MIRROR
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:32]


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("towers")
    return save_tiny_bert(root / "I", seed=1, layers=4), save_tiny_bert(root / "II", seed=2, layers=4)


def twin_task(towers, **settings) -> TwinTask:
    # dropout on: the recomputed forward must draw the masks the first one drew
    return TwinTask(towers, AutoTokenizer.from_pretrained(towers[0]), TrainSettings(dropout=0.1, **settings), seed=5)


def batch_of(task, sentences):
    ids = task.tokenizer(sentences[:8], truncation=True, max_length=24)["input_ids"]
    return [pad_batch(ids, task.tokenizer.pad_token_id)]


def loss_gradients_and_saved_bytes(task, batch, checkpointed: bool):
    """The loss, every parameter's gradient and the bytes autograd kept for the backward."""
    model = task.model.train()
    if checkpointed:
        assert checkpoint_activations(model) == (2 if isinstance(task, TwinTask) else 1)  # the towers, or the one backbone
    saved = []

    def keep(tensor):
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    torch.manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        loss = task.loss(model, batch, step=3)["loss"]
    loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), gradients, sum(saved)


@pytest.mark.parametrize("cael", [0, 2])  # TNCSE; JTCSE with cross streams from layer 2 on
def test_the_twin_computes_the_same_loss_and_gradients_keeping_fewer_activations(towers, sentences, cael):
    plain_task, checkpointed_task = twin_task(towers, cael=cael), twin_task(towers, cael=cael)
    batch = batch_of(plain_task, sentences)
    plain_loss, plain_grads, plain_bytes = loss_gradients_and_saved_bytes(plain_task, batch, checkpointed=False)
    loss, grads, saved_bytes = loss_gradients_and_saved_bytes(checkpointed_task, batch, checkpointed=True)
    torch.testing.assert_close(loss, plain_loss, rtol=0, atol=1e-6)
    assert grads.keys() == plain_grads.keys() and len(grads) > 20
    for name, gradient in plain_grads.items():
        torch.testing.assert_close(grads[name], gradient, rtol=1e-5, atol=1e-7, msg=name)
    # 4 layers: each keeps its input instead of its attention scores, FFN and dropout masks
    assert saved_bytes < 0.6 * plain_bytes, (saved_bytes, plain_bytes)


def test_simcse_pretraining_computes_the_same_loss_and_gradients(towers, sentences):
    def task():
        return SimCSETask(towers[0], AutoTokenizer.from_pretrained(towers[0]), 0.1, 0.05, None, 24)

    batch = batch_of(task(), sentences)
    plain_loss, plain_grads, plain_bytes = loss_gradients_and_saved_bytes(task(), batch, checkpointed=False)
    loss, grads, saved_bytes = loss_gradients_and_saved_bytes(task(), batch, checkpointed=True)
    torch.testing.assert_close(loss, plain_loss, rtol=0, atol=1e-6)
    for name, gradient in plain_grads.items():
        torch.testing.assert_close(grads[name], gradient, rtol=1e-5, atol=1e-7, msg=name)
    assert saved_bytes < 0.6 * plain_bytes


def test_the_setting_reaches_the_loop_and_trains_the_same_weights(towers, sentences, tmp_path):
    """`train.activation_checkpointing: true` through the one loop: the twin's saved towers equal the plain run's."""
    examples = [(sentence,) for sentence in sentences]
    trained = {}
    for checkpointed in (False, True):
        settings = TrainSettings(dropout=0.1, cael=1, batch_size=8, max_length=24, max_steps=3, save_every=100,
                                 eval_every=100, activation_checkpointing=checkpointed)
        task = twin_task(towers, cael=1)
        out = tmp_path / f"out-{checkpointed}"
        train(task, examples, settings, RunSpec(1e-3, 5, out, tmp_path / f"ckpt-{checkpointed}"), CPU)
        layers = [layer for tower in task.model.towers for layer in tower.encoder.layer]
        assert all(layer.gradient_checkpointing == checkpointed for layer in layers)
        trained[checkpointed] = {name: p.detach().clone() for name, p in task.model.named_parameters()}
    for name, weight in trained[False].items():
        torch.testing.assert_close(trained[True][name], weight, rtol=1e-5, atol=1e-7, msg=name)


def test_transformers_before_the_rename_use_its_older_switch(towers, monkeypatch):
    """transformers 5.17 (the GPU machine's) has only `gradient_checkpointing_enable`; the GPU check failed
    there until checkpoint_activations took the older name when the newer is missing."""
    from transformers import PreTrainedModel

    older_calls = []

    def older_switch(self, gradient_checkpointing_kwargs=None):
        older_calls.append(gradient_checkpointing_kwargs)
        self._activation_checkpointing_enable(gradient_checkpointing_kwargs)

    monkeypatch.delattr(PreTrainedModel, "activation_checkpointing_enable")
    monkeypatch.setattr(PreTrainedModel, "gradient_checkpointing_enable", older_switch)
    model = twin_task(towers).model
    assert checkpoint_activations(model) == 2
    assert older_calls == [{"use_reentrant": False}] * 2
    assert all(module.is_activation_checkpointing for module in model.modules() if isinstance(module, PreTrainedModel))
