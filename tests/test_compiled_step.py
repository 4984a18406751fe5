"""The step the GPU runs at its pace (pipeline/training/compiled.py), proven on CPU: every task's
objective is one graph with no break, a whole epoch compiles once per padded shape and never again,
nothing in the step reads a device value back, and fixed-width padding changes no loss."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import AutoTokenizer

from pipeline import losses
from pipeline.config import OptimSettings, TrainSettings
from pipeline.execution.runtime import RunContext
from pipeline.modeling import checkpoint_activations
from pipeline.training import compiled as compiled_module
from pipeline.training.batching import fixed_widths, pad_batch, padded_width
from pipeline.training.compiled import PAD_MULTIPLE, StepCompilation, compiled_loss, step_compilation
from pipeline.training.loop import RunSpec, make_optimizer, train, training_step
from pipeline.training.tasks import DistillTask, FrozenEnsemble, SimCSETask, TwinTask, gaussian_negatives
from pipeline.config import GaussianNegativesSettings

from conftest import MIRROR
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)
CUDA = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:96]


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("towers")
    return save_tiny_bert(root / "I", seed=1, layers=2), save_tiny_bert(root / "II", seed=2, layers=2)


def simcse(towers, gaussian: bool = False) -> SimCSETask:
    noise = gaussian_negatives(GaussianNegativesSettings(enabled=True, count=12), seed=3) if gaussian else None
    return SimCSETask(towers[0], AutoTokenizer.from_pretrained(towers[0]), 0.1, 0.05, noise, 24)


def twin(towers, cael: int = 0) -> TwinTask:
    return TwinTask(towers, AutoTokenizer.from_pretrained(towers[0]), TrainSettings(dropout=0.1, cael=cael), seed=5)


def distill(towers) -> DistillTask:
    teacher = FrozenEnsemble([(towers[0], 1.0), (towers[1], 1.0)])
    return DistillTask(towers[0], teacher, AutoTokenizer.from_pretrained(towers[0]), 0.1, 24)


def checkpointed(task):
    checkpoint_activations(task.model)
    return task


TASKS = {"simcse": simcse, "simcse-gs-infonce": lambda t: simcse(t, gaussian=True), "tncse": twin,
         "jtcse": lambda t: twin(t, cael=2), "distill": distill,
         "tncse-checkpointed": lambda t: checkpointed(twin(t))}  # the paper's RoBERTa twin on a smaller card


def batch_of(task, sentences, rows=8):
    ids = task.tokenizer(sentences[:rows], truncation=True, max_length=24)["input_ids"]
    return [pad_batch(ids, task.tokenizer.pad_token_id, width=padded_width(max(map(len, ids)), PAD_MULTIPLE, 24))]


@pytest.mark.parametrize("name", TASKS)
def test_every_objective_is_one_graph_without_a_break(towers, sentences, name):
    task = TASKS[name](towers)
    model = task.place(torch.device("cpu")).train()
    batch = batch_of(task, sentences)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(task.objective)(model, batch, task.step_inputs(3, batch))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_the_compile_setting_resolves_per_device_and_run():
    cpu = torch.device("cpu")
    assert [step_compilation(s, cpu).mode for s in ("auto", "on", "graphs", "off")] == ["off", "whole", "whole", "off"]
    assert [step_compilation(s, CUDA).mode for s in ("auto", "on", "graphs", "off")] == ["graphs", "whole", "graphs", "off"]
    assert step_compilation("graphs", cpu).note  # asked for what a CPU cannot do: said, not silent
    assert step_compilation("auto", CUDA, world_size=2).mode == "module"
    accumulated = step_compilation("auto", CUDA, grad_accum=2)
    assert accumulated.mode == "whole" and "grad_accum=2" in accumulated.note
    assert StepCompilation("off").pad_multiple is None and StepCompilation("graphs").pad_multiple == PAD_MULTIPLE


def test_fixed_widths_are_multiples_up_to_max_length():
    assert fixed_widths(8, 32) == [8, 16, 24, 32]
    assert fixed_widths(8, 30) == [8, 16, 24, 30]
    assert [padded_width(n, 8, 30) for n in (1, 8, 9, 25, 30)] == [8, 8, 16, 30, 30]
    assert padded_width(13, None, 30) == 13


def test_padding_to_a_fixed_width_changes_no_loss(towers, sentences):
    task = simcse(towers)
    model = task.model.eval()  # no dropout: the same values from both widths
    ids = task.tokenizer(sentences[:8], truncation=True, max_length=24)["input_ids"]
    dynamic = [pad_batch(ids, task.tokenizer.pad_token_id)]
    fixed = [pad_batch(ids, task.tokenizer.pad_token_id, width=40)]
    assert fixed[0]["input_ids"].shape[1] > dynamic[0]["input_ids"].shape[1]
    with torch.no_grad():
        torch.testing.assert_close(task.loss(model, fixed, 0)["loss"], task.loss(model, dynamic, 0)["loss"])


def test_a_whole_epoch_compiles_once_per_padded_shape(towers, sentences, tmp_path, monkeypatch):
    counter = CompileCounter()
    shapes = set()
    real = compiled_module.compiled_loss

    def counted(task, compilation, max_length, backend=None):
        loss = real(task, compilation, max_length, backend=counter)

        def recording(model, batch, step):
            shapes.add(tuple(batch[0]["input_ids"].shape))
            return loss(model, batch, step)
        return recording

    monkeypatch.setattr("pipeline.training.loop.compiled_loss", counted)
    torch._dynamo.reset()
    task = simcse(towers)
    settings = OptimSettings(batch_size=16, max_length=24, epochs=2, eval_every=1000, save_every=1000, compile="on")
    result = train(task, [(s,) for s in sentences[:88]], settings,  # 5 full batches and a partial one per epoch
                   RunSpec(1e-4, 7, tmp_path / "out", tmp_path / "ckpt"), CPU)
    assert result.steps == 12 and all(torch.isfinite(torch.tensor(row["loss"])) for row in result.history)
    assert {width for _, width in shapes} <= set(fixed_widths(PAD_MULTIPLE, 24))
    assert {rows for rows, _ in shapes} == {16, 8}  # the epoch's last, partial batch is a shape of its own
    assert counter.frame_count == len(shapes)  # one compile per shape over two epochs: no recompile


class NoHostRead(torch.Tensor):
    """A device value as the step holds it: reading it on the host raises."""

    def item(self):
        raise AssertionError("host read of a device value inside the step")

    def tolist(self):
        raise AssertionError("host read of a device value inside the step")

    def __bool__(self):
        raise AssertionError("host read of a device value inside the step")

    def __float__(self):
        raise AssertionError("host read of a device value inside the step")


@pytest.mark.parametrize("name", TASKS)
def test_the_step_reads_no_device_value(towers, sentences, name):
    """Every value the objective returns, and the loss the loop backpropagates, stays unread through a
    whole optimizer step (clip included): a `.item()`, `bool()` or `float()` added to the step fails here."""
    task = TASKS[name](towers)
    model = task.place(torch.device("cpu")).train()
    optimizer = make_optimizer(model, 1e-4, 0.0, torch.device("cpu"))
    batch = batch_of(task, sentences)

    def guarded(model, batch, step):
        return {key: value.as_subclass(NoHostRead) for key, value in task.loss(model, batch, step).items()}

    terms = training_step(guarded, model, optimizer, [batch], CPU, 0, max_grad_norm=1.0)
    assert "loss" in terms and "grad_norm" in terms
    with pytest.raises(AssertionError, match="host read"):
        terms["loss"][0].as_subclass(NoHostRead).item()


def test_gs_infonce_noise_drawn_before_the_step_is_the_noise_drawn_inside(towers, sentences):
    """The pre-drawn noise (a compiled step's input) is what the eager loss drew: same generator, same order."""
    drawn, inside = simcse(towers, gaussian=True), simcse(towers, gaussian=True)
    model = drawn.model.eval()
    batch = batch_of(drawn, sentences)
    with torch.no_grad():
        anchors = model(batch[0]["input_ids"], batch[0]["attention_mask"]).pooler_output
        noise = drawn.step_inputs(0, batch)["gaussian_noise"]
        expected = inside.gaussian.logits(anchors, 0.05, len(anchors))
    torch.testing.assert_close(drawn.gaussian.logits(anchors, 0.05, len(anchors), noise), expected, rtol=0, atol=0)


def test_jtcse_direction_as_a_tensor_is_the_direction_as_an_int():
    generator = torch.Generator().manual_seed(0)
    last, cross = torch.randn(2, 8, 6, generator=generator), torch.randn(2, 8, 6, generator=generator)
    for direction in (0, 1):
        mixed = losses.joint_icnce(last, cross, torch.tensor(float(direction)))
        assert torch.equal(mixed, losses.joint_icnce(last, cross, direction))
