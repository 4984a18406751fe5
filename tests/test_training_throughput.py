"""What keeps training steps bound by the device (issue 15), checked on CPU: the pre-tokenized
loader gives the batches of the plain path, the loss is read from the device only now and then
without changing what is recorded, and a compiled forward trains like the eager one."""

import pytest
import torch
from transformers import AutoTokenizer

from pipeline.training import loop as training
from pipeline.training.batching import TokenizedExamples, batch_loader, epoch_batches, pad_batch, tokenize_columns
from pipeline.config import OptimSettings
from pipeline.execution.runtime import RunContext
from pipeline.training.compiled import step_compilation
from pipeline.training.loop import RunSpec, make_optimizer, train, training_step
from pipeline.training.tasks import SimCSETask

from conftest import MIRROR
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:90]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("backbone") / "bert", seed=3)


@pytest.mark.parametrize("sampling", ["random", "length_bucketed"])
def test_pretokenized_loader_yields_the_batches_of_the_plain_path(tmp_path, sentences, sampling):
    # two columns with different tokenizers (another vocabulary, [PAD] not 0): a distill teacher's case
    tokenizers = [AutoTokenizer.from_pretrained(save_tiny_bert(tmp_path / name, seed=1, reversed_vocab=reverse))
                  for name, reverse in (("a", False), ("b", True))]
    examples = [(sentence, sentence.upper()) for sentence in sentences]
    data = TokenizedExamples(tokenizers, examples, max_length=20)
    columns = tokenize_columns(tokenizers, examples, 20)
    for epoch in (0, 1):
        batches = epoch_batches(sampling, data.lengths, 16, seed=11, epoch=epoch)
        loaded = list(batch_loader(data, batches, torch.device("cpu")))
        assert len(loaded) == len(batches) > 1
        for batch, indices in zip(loaded, batches):
            for column, ids, tokenizer in zip(batch, columns, tokenizers):
                expected = pad_batch([ids[i] for i in indices], tokenizer.pad_token_id, torch.device("cpu"))
                assert column.keys() == expected.keys()
                for key in expected:
                    assert torch.equal(column[key], expected[key]), key


def test_the_loss_read_now_and_then_records_what_a_read_per_step_records(backbone, sentences, tmp_path, monkeypatch):
    def run(folder):
        task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
        settings = OptimSettings(batch_size=8, max_length=24, epochs=2, max_steps=7, grad_accum=2, max_grad_norm=1.0,
                                 eval_every=100, save_every=100)
        return train(task, [(s,) for s in sentences], settings,
                     RunSpec(1e-3, 7, tmp_path / folder / "out", tmp_path / folder / "ckpt"), CPU)

    reads = []
    real_read = training.LossLog.read
    monkeypatch.setattr(training.LossLog, "read", lambda self: (reads.append(len(self._pending)), real_read(self)))
    lazy = run("lazy")
    assert max(reads) == 7 and sum(1 for pending in reads if pending) == 1  # one host read for the 7 steps
    monkeypatch.setattr(training, "LOSS_READ_EVERY", 1)
    eager = run("eager")
    assert lazy.history == eager.history and len(lazy.history) == 7
    assert set(lazy.history[0]) == {"step", "loss", "grad_norm", "lr"}
    assert lazy.final_loss == eager.history[-1]["loss"]


def test_fused_adamw_and_compile_only_where_they_pay():
    linear = torch.nn.Linear(2, 2)
    assert not make_optimizer(linear, 1e-3, 0.0, torch.device("cpu")).defaults["fused"]
    assert [step_compilation(s, torch.device("cpu")).mode for s in ("auto", "on", "off")] == ["off", "whole", "off"]
    assert [step_compilation(s, torch.device("cuda", 0)).mode for s in ("auto", "on", "off")] == ["graphs", "whole", "off"]


def _loss_and_gradients(backbone, batch, compiled: bool):
    task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.0, 0.05, None, 24)  # no dropout: same values
    model = task.model.train()
    if compiled:
        model.compile()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # a step that leaves the weights as they are
    terms = training_step(task.loss, model, optimizer, [batch], CPU, 0)
    return terms["loss"][0], {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow  # compiling the forward and backward takes 20 s of CPU, minutes of wall time on a loaded machine
def test_compiled_and_eager_steps_agree(backbone, sentences):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    (ids,) = tokenize_columns(tokenizer, [(s,) for s in sentences[:8]], 24)
    batch = [pad_batch(ids, tokenizer.pad_token_id, torch.device("cpu"))]
    torch._dynamo.reset()
    eager_loss, eager_grads = _loss_and_gradients(backbone, batch, compiled=False)
    compiled_loss, compiled_grads = _loss_and_gradients(backbone, batch, compiled=True)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    assert compiled_grads.keys() == eager_grads.keys() and len(eager_grads) > 10
    # A random model's embeddings are nearly alike, so its InfoNCE gradient is a small difference of
    # large terms: float32 reassociation moves each entry by ~1e-3 of the entry, not of the step.
    # Compared as one vector: a wrong graph would be off by its whole size.
    eager = torch.cat([gradient.flatten() for gradient in eager_grads.values()])
    compiled = torch.cat([compiled_grads[name].flatten() for name in eager_grads])
    assert (compiled - eager).norm() < 5e-3 * eager.norm()
    assert torch.nn.functional.cosine_similarity(compiled, eager, dim=0) > 0.99999


def test_peak_memory_is_the_peak_not_the_current_rss():
    import numpy as np
    import psutil

    from pipeline.execution.runtime import peak_memory_mb

    def rss_mb() -> float:
        return psutil.Process().memory_info().rss / 2**20

    block = np.ones(256 * 2**20 // 8)  # 256 MiB, touched; large arrays are mapped and unmapped whole
    during = rss_mb()
    del block
    after = rss_mb()
    assert during - after > 200  # the memory went back: the current RSS would miss it
    peak = peak_memory_mb(torch.device("cpu"))
    assert peak > after + 200 and peak > during - 16  # the kernel's high-water mark lags the RSS by a few pages
