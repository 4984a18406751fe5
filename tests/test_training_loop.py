import logging
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from pipeline.config import OptimSettings
from pipeline.errors import PipelineError
from pipeline.modeling import SentenceEncoder
from pipeline.execution.runtime import RunContext, resolve_device
from pipeline.training.loop import COMPLETED_NOTE, RunSpec, train
from pipeline.training import resume  # a module: on code without the lock only its tests fail
from pipeline.training.tasks import SimCSETask

from pipeline import io as io_module
from conftest import MIRROR
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()
    return lines[:96]


@pytest.fixture
def backbone(tmp_path):
    return save_tiny_bert(tmp_path / "backbone", seed=3)


def simcse_task(backbone, dropout=0.1):
    return SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), dropout, 0.05, None, 24)


def settings(**overrides) -> OptimSettings:
    values = dict(batch_size=8, max_length=24, max_steps=6, eval_every=100, save_every=3)
    return OptimSettings(**{**values, **overrides})


def run(task, examples, tmp_path, optim, lr=1e-3, dev_score=None, fingerprint="run", loss_hook=None):
    spec = RunSpec(lr, 7, tmp_path / "out", tmp_path / "ckpt", fingerprint=fingerprint, dev_score=dev_score,
                   loss_hook=loss_hook)
    return train(task, examples, optim, spec, CPU)


def nan_at_step(bad_step):
    """A loss hook that makes the loss NaN at this (1-based) step, to exercise the NaN stop."""
    return lambda loss, step: loss * math.nan if step + 1 == bad_step else loss


def test_a_few_steps_reduce_the_simcse_loss(backbone, sentences, tmp_path):
    examples = [(sentence,) for sentence in sentences]
    result = run(simcse_task(backbone), examples, tmp_path, settings(max_steps=24, epochs=2, save_every=100), lr=3e-4)
    losses = [row["loss"] for row in result.history]
    assert len(losses) == 24
    assert np.mean(losses[-4:]) < 0.9 * np.mean(losses[:4])


def test_resume_after_a_stop_continues_steps_and_optimizer_state(backbone, sentences, tmp_path):
    examples = [(sentence,) for sentence in sentences]
    straight = run(simcse_task(backbone), examples, tmp_path / "straight", settings())
    straight_weights = SentenceEncoder.from_pretrained(str(tmp_path / "straight" / "out")).state_dict()

    with pytest.raises(PipelineError) as stopped:
        run(simcse_task(backbone), examples, tmp_path / "killed", settings(), loss_hook=nan_at_step(5))
    message = str(stopped.value)
    assert "loss is nan at step 5" in message and "step-3" in message and "\n" not in message
    assert (tmp_path / "killed" / "ckpt" / "step-3" / "model.safetensors").is_file()
    assert not (tmp_path / "killed" / "out").exists()

    assert (tmp_path / "killed" / "ckpt" / "step-3").is_dir()
    resumed = run(simcse_task(backbone), examples, tmp_path / "killed", settings())
    assert resumed.resumed_from == 3 and resumed.steps == 6
    assert [row["step"] for row in resumed.history] == [1, 2, 3, 4, 5, 6]
    resumed_weights = SentenceEncoder.from_pretrained(str(tmp_path / "killed" / "out")).state_dict()
    for name, tensor in straight_weights.items():
        torch.testing.assert_close(resumed_weights[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_a_resumed_gs_infonce_run_draws_the_noise_an_uninterrupted_one_draws(backbone, sentences, tmp_path):
    """GS-InfoNCE's Gaussian negatives come from a generator of the task's own, not torch's global one: a
    resume state keeps its state too, or the resumed steps train on other noise (other weights)."""
    from pipeline.config import GaussianNegativesSettings
    from pipeline.training.tasks import gaussian_negatives

    def gs_task():
        noise = gaussian_negatives(GaussianNegativesSettings(enabled=True, count=16, std=1.0), seed=7)
        return SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, noise, 24)

    examples = [(sentence,) for sentence in sentences]
    uninterrupted = run(gs_task(), examples, tmp_path / "straight", settings())
    with pytest.raises(PipelineError):
        run(gs_task(), examples, tmp_path / "killed", settings(), loss_hook=nan_at_step(5))
    resumed = run(gs_task(), examples, tmp_path / "killed", settings())
    assert resumed.resumed_from == 3
    # the losses of the resumed steps are over the same noise (other noise moves them in the sixth digit)
    assert [row["loss"] for row in resumed.history] == [row["loss"] for row in uninterrupted.history]
    straight = SentenceEncoder.from_pretrained(str(tmp_path / "straight" / "out")).state_dict()
    again = SentenceEncoder.from_pretrained(str(tmp_path / "killed" / "out")).state_dict()
    for name, tensor in straight.items():
        torch.testing.assert_close(again[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_a_checkpoint_without_the_noise_state_is_refused_never_reseeded(backbone, sentences, tmp_path):
    """A resume state written without the task's generator (an older version) would make the resumed steps
    draw other noise: one line naming the folder to delete."""
    from pipeline.config import GaussianNegativesSettings
    from pipeline.training.tasks import gaussian_negatives

    examples = [(sentence,) for sentence in sentences]
    with pytest.raises(PipelineError):
        run(simcse_task(backbone), examples, tmp_path, settings(), loss_hook=nan_at_step(5))  # no generator saved
    noise = gaussian_negatives(GaussianNegativesSettings(enabled=True, count=16), seed=7)
    gs = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, noise, 24)
    with pytest.raises(PipelineError, match="holds no state of the task's generator.s. gaussian .* delete .*ckpt to train again"):
        run(gs, examples, tmp_path, settings())


def test_checkpoints_of_other_settings_are_not_resumed(backbone, sentences, tmp_path):
    examples = [(sentence,) for sentence in sentences]
    run(simcse_task(backbone), examples, tmp_path, settings(), fingerprint="a")
    again = run(simcse_task(backbone), examples, tmp_path, settings(), fingerprint="b")
    assert again.resumed_from is None and again.steps == 6


def test_best_dev_model_is_saved_and_reloads_to_identical_embeddings(backbone, sentences, tmp_path):
    from sentence_transformers import SentenceTransformer

    task = simcse_task(backbone)
    batch = task.tokenizer(sentences[:5], padding=True, truncation=True, max_length=24, return_tensors="pt")
    scores, seen = iter([1.0, 5.0, 2.0]), []  # best at the second evaluation (step 4)

    def dev_score(model):
        seen.append(model(batch["input_ids"], batch["attention_mask"]).last_cls.clone())
        return next(scores)

    result = run(task, [(s,) for s in sentences], tmp_path, settings(eval_every=2), dev_score=dev_score)
    assert (result.best_dev, result.best_step) == (5.0, 4)
    assert [row.get("dev_stsb") for row in result.history if "dev_stsb" in row] == [1.0, 5.0, 2.0]
    assert sorted(path.name for path in (tmp_path / "ckpt").iterdir()) == sorted([COMPLETED_NOTE, resume.LOCK_FILE])

    saved = tmp_path / "out"
    reloaded = SentenceEncoder.from_pretrained(str(saved)).eval()
    with torch.no_grad():
        ours = reloaded(batch["input_ids"], batch["attention_mask"]).last_cls
    torch.testing.assert_close(ours, seen[1], rtol=0, atol=1e-6)
    assert not torch.allclose(ours, seen[2])
    st_embeddings = SentenceTransformer(str(saved), device="cpu").encode(sentences[:5], convert_to_tensor=True)
    torch.testing.assert_close(st_embeddings, ours, rtol=1e-4, atol=1e-5)


# ---- the saved model is the one its metrics name (issue 34 A) ---------------------------------


def scored_run(task, sentences, tmp_path, scores, loss_hook=None, seen=None):
    """Evaluate at steps 2, 4, 6 with the given scores; record each evaluated model's embeddings in `seen`."""
    batch = task.tokenizer(sentences[:5], padding=True, truncation=True, max_length=24, return_tensors="pt")
    scores = iter(scores)

    def dev_score(model):
        if seen is not None:
            seen.append(model(batch["input_ids"], batch["attention_mask"]).last_cls.clone())
        return next(scores)

    return run(task, [(s,) for s in sentences], tmp_path, settings(eval_every=2), dev_score=dev_score, loss_hook=loss_hook)


def saved_embeddings(folder, task, sentences):
    batch = task.tokenizer(sentences[:5], padding=True, truncation=True, max_length=24, return_tensors="pt")
    with torch.no_grad():
        return SentenceEncoder.from_pretrained(str(folder)).eval()(batch["input_ids"], batch["attention_mask"]).last_cls


def test_a_removed_best_model_is_an_error_not_the_final_weights(backbone, sentences, tmp_path):
    with pytest.raises(PipelineError):  # stopped at step 5: checkpoint step-3 names the best of step 2
        scored_run(simcse_task(backbone), sentences, tmp_path, [1.0, 5.0], loss_hook=nan_at_step(5))
    removed = [shutil.rmtree(best) for best in (tmp_path / "ckpt").glob("best*")]
    assert removed
    with pytest.raises(PipelineError) as refused:
        scored_run(simcse_task(backbone), sentences, tmp_path, [0.5, 0.5])
    assert "best model of step 2" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_corrupt_best_model_is_named_on_resume_never_copied(backbone, sentences, tmp_path):
    """Issue 43 D6: a killed run's best model with one byte flipped; the rerun used to copy it unchecked."""
    with pytest.raises(PipelineError):  # stopped at step 5: checkpoint step-3 names the best of step 2
        scored_run(simcse_task(backbone), sentences, tmp_path, [1.0, 5.0], loss_hook=nan_at_step(5))
    flip_a_byte(tmp_path / "ckpt" / "best-2" / "model.safetensors")
    with pytest.raises(PipelineError) as refused:
        scored_run(simcse_task(backbone), sentences, tmp_path, [0.5, 0.5])
    message = str(refused.value)
    assert "best-2" in message and "model.safetensors" in message and "corrupt" in message and "\n" not in message
    assert f"delete {tmp_path / 'ckpt'}" in message
    assert not (tmp_path / "out").exists()


def test_a_best_model_corrupted_during_the_run_is_not_copied_to_the_output(backbone, sentences, tmp_path):
    scores = iter([1.0, 5.0, 2.0])  # best at step 4; the third evaluation (step 6) damages it

    def dev_score(model):
        score = next(scores)
        if score == 2.0:
            flip_a_byte(tmp_path / "ckpt" / "best-4" / "model.safetensors")
        return score

    with pytest.raises(PipelineError, match="best-4 is corrupt .*model.safetensors"):
        run(simcse_task(backbone), [(s,) for s in sentences], tmp_path, settings(eval_every=2), dev_score=dev_score)
    assert not (tmp_path / "out").exists()


def test_the_output_holds_the_best_model_s_files_only(backbone, sentences, tmp_path):
    """The best folder's checksum record stays in the checkpoint folder: the output is the model alone."""
    scored_run(simcse_task(backbone), sentences, tmp_path, [1.0, 5.0, 2.0])
    assert not list((tmp_path / "out").rglob(".checksums*"))
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_kill_while_a_new_best_is_saved_keeps_the_best_the_checkpoint_names(backbone, sentences, tmp_path, monkeypatch):
    """A kill at the moment an existing folder of the checkpoint folder is moved aside (the old
    rename-over of best/) must not lose the best model the kept checkpoint names."""
    real_replace = os.replace

    def killed_when_moving_aside(source, destination):
        source = Path(source)  # temporaries outside the project are hidden twins beside the destination
        if source.resolve().parent == (tmp_path / "ckpt").resolve() and not source.name.startswith("."):
            real_replace(source, destination)
            raise KeyboardInterrupt  # the process dies between the two renames
        real_replace(source, destination)

    seen = []
    monkeypatch.setattr(io_module.os, "replace", killed_when_moving_aside)
    with pytest.raises((PipelineError, KeyboardInterrupt)):
        scored_run(simcse_task(backbone), sentences, tmp_path, [1.0, 5.0], loss_hook=nan_at_step(5), seen=seen)
    monkeypatch.setattr(io_module.os, "replace", real_replace)
    result = scored_run(simcse_task(backbone), sentences, tmp_path, [0.5, 0.5])  # resumed at step 3: best stays step 2
    assert (result.resumed_from, result.best_step, result.best_dev) == (3, 2, 1.0)
    torch.testing.assert_close(saved_embeddings(tmp_path / "out", simcse_task(backbone), sentences), seen[0], rtol=0, atol=1e-6)


def test_a_second_run_of_the_same_stage_is_refused_while_the_first_trains(backbone, sentences, tmp_path):
    with resume.hold_resume_folder(tmp_path / "ckpt", "first"):
        with pytest.raises(PipelineError) as refused:
            run(simcse_task(backbone), [(s,) for s in sentences], tmp_path, settings())
        assert "another run" in str(refused.value) and str(tmp_path / "ckpt") in str(refused.value)
        assert not (tmp_path / "out").exists()
    assert run(simcse_task(backbone), [(s,) for s in sentences], tmp_path, settings()).steps == 6  # released


# ---- a corrupt checkpoint is named and skipped (issue 34 B) ------------------------------------


@pytest.mark.parametrize("damaged", ["model.safetensors", "training_state.pt", "state.json"])
def test_a_corrupt_checkpoint_is_named_and_the_run_resumes_from_the_one_before(backbone, sentences, tmp_path, caplog, damaged):
    examples = [(sentence,) for sentence in sentences]
    with pytest.raises(PipelineError):  # checkpoints step-2 and step-4 kept
        run(simcse_task(backbone), examples, tmp_path, settings(save_every=2), loss_hook=nan_at_step(5))
    newest = tmp_path / "ckpt" / "step-4" / damaged
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        resumed = run(simcse_task(backbone), examples, tmp_path, settings(save_every=2))
    assert resumed.resumed_from == 2 and resumed.steps == 6
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step-4" in warnings[0] and damaged in warnings[0] and "trying step-2" in warnings[0]


def test_when_every_checkpoint_is_corrupt_the_run_starts_over(backbone, sentences, tmp_path, caplog):
    examples = [(sentence,) for sentence in sentences]
    with pytest.raises(PipelineError):
        run(simcse_task(backbone), examples, tmp_path, settings(save_every=2), loss_hook=nan_at_step(5))
    for checkpoint in (tmp_path / "ckpt").glob("step-*"):
        (checkpoint / "model.safetensors").write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING):
        again = run(simcse_task(backbone), examples, tmp_path, settings(save_every=2))
    assert again.resumed_from is None and again.steps == 6
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("corrupt" in warning for warning in warnings)
    assert "step-4" in warnings[0] and "step-2" in warnings[1] and warnings[1].endswith("starting over")


def test_asking_for_cuda_without_one_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(PipelineError, match="device=cuda but no CUDA GPU"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"


def test_same_seed_gives_identical_weights_and_deterministic_algorithms(backbone, sentences, tmp_path):
    examples = [(sentence,) for sentence in sentences]
    torch.use_deterministic_algorithms(False)
    first = run(simcse_task(backbone), examples, tmp_path / "first", settings(max_steps=4))
    assert torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(12345)  # whatever ran before: training reseeds everything it draws from
    second = run(simcse_task(backbone), examples, tmp_path / "second", settings(max_steps=4))
    assert [row["loss"] for row in first.history] == [row["loss"] for row in second.history]
    weights = [(folder / "out" / "model.safetensors").read_bytes() for folder in (tmp_path / "first", tmp_path / "second")]
    assert weights[0] == weights[1]
