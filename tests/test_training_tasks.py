"""pipeline/training/contract.py and tasks.py: what a task declares, and the papers' three tasks."""

import ast

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from conftest import MIRROR, REPO_ROOT
from pipeline import losses
from pipeline.config import OptimSettings, TrainSettings
from pipeline.execution.runtime import RunContext
from pipeline.training.batching import pad_batch
from pipeline.training.contract import TrainingTask
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import DistillTask, FrozenEnsemble, SimCSETask, TwinTask
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()
    return lines[:96]


def settings(**overrides) -> OptimSettings:
    values = dict(batch_size=8, max_length=24, max_steps=6, eval_every=100, save_every=3)
    return OptimSettings(**{**values, **overrides})


# ---- the contract ------------------------------------------------------------------------------


def complete_task_members() -> dict:
    """Every member a task must declare, with trivial bodies."""
    return {
        "column_tokenizers": None,
        "loss_spans_global_batch": False,
        "leaves_parameters_unused": False,
        "generators": {},
        "objective": lambda self, model, batch, inputs: {"loss": torch.zeros(())},
        "embed": lambda self, model, input_ids, attention_mask: input_ids.float(),
        "save": lambda self, model, directory: None,
    }


def test_a_task_that_declares_every_member_is_a_training_task():
    task_class = type("Complete", (TrainingTask,), complete_task_members())
    task = task_class(torch.nn.Linear(2, 2), None)
    assert isinstance(task, TrainingTask) and isinstance(task.model, torch.nn.Linear)


@pytest.mark.parametrize("member", sorted(complete_task_members()))
def test_a_task_missing_a_member_is_refused(member):
    members = complete_task_members()
    del members[member]
    with pytest.raises(TypeError, match=member):
        type("Partial", (TrainingTask,), members)(torch.nn.Linear(2, 2), None)


def test_a_misspelt_member_is_refused_not_read_as_false():
    members = complete_task_members()
    members["leaves_parameter_unused"] = members.pop("leaves_parameters_unused")  # the typo
    with pytest.raises(TypeError, match="leaves_parameters_unused"):
        type("Misspelt", (TrainingTask,), members)(torch.nn.Linear(2, 2), None)


def test_the_training_package_reads_no_task_attribute_by_name():
    """No getattr/hasattr/setattr with a default in pipeline/training: every member is declared."""
    for path in sorted((REPO_ROOT / "pipeline" / "training").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("getattr", "hasattr"), f"{path.name}:{node.lineno} reads an attribute by name"


def test_the_three_tasks_declare_what_the_loop_reads(tmp_path):
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    simcse = SimCSETask(towers[0], tokenizer, 0.1, 0.05, None, 24)
    assert (simcse.loss_spans_global_batch, simcse.leaves_parameters_unused, simcse.column_tokenizers) == (True, False, tokenizer)
    twin = TwinTask(towers, tokenizer, TrainSettings(), seed=5)
    assert (twin.loss_spans_global_batch, twin.leaves_parameters_unused) == (True, False)
    # without the norm term the pooler layers get no gradient: DDP must be told
    assert TwinTask(towers, tokenizer, TrainSettings(losses=["nce", "icnce"]), seed=5).leaves_parameters_unused
    assert TwinTask(towers, tokenizer, TrainSettings(norm_input="last_hidden_cls"), seed=5).leaves_parameters_unused
    student = DistillTask(towers[0], FrozenEnsemble([(towers[0], 1.0), (towers[1], 1.0)]), tokenizer, 0.1, 24)
    assert (student.loss_spans_global_batch, student.leaves_parameters_unused) == (False, True)
    assert len(student.column_tokenizers) == 1  # the members share the student's tokenizer


def test_the_twin_task_computes_ictn_with_the_kernel_it_is_given(tmp_path, sentences):
    """The benchmark's released-code baseline passes its kernel; nothing in `losses` is replaced."""
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    task = TwinTask(towers, tokenizer, TrainSettings(dropout=0.0), seed=5)
    ids = tokenizer(sentences[:4], truncation=True, max_length=24)["input_ids"]
    batch = [pad_batch(ids, tokenizer.pad_token_id)]
    model = task.model.eval()
    doubled = task.with_ictn(lambda last, norms, factor: 2 * losses.ictn(last, norms, factor))
    with torch.no_grad():
        own, other = task.loss(model, batch, 0), doubled.loss(model, batch, 0)
    torch.testing.assert_close(other["ictn"], 2 * own["ictn"])
    torch.testing.assert_close(other["nce"], own["nce"])
    assert doubled.model is task.model and task.ictn is losses.ictn


# ---- the tasks train and save ------------------------------------------------------------------


def test_twin_and_distill_tasks_train_and_save(sentences, tmp_path):
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    twin_settings = TrainSettings(cael=1, batch_size=8, max_length=24, max_steps=2, save_every=100)
    twin_task = TwinTask(towers, tokenizer, twin_settings, seed=5)
    result = train(twin_task, [(s,) for s in sentences], twin_settings,
                   RunSpec(1e-4, 5, tmp_path / "joint", tmp_path / "ckpt-joint"), CPU)
    assert set(result.history[0]) >= {"loss", "nce", "icnce", "ictn"}
    assert all((tmp_path / "joint" / tower / "model.safetensors").is_file() for tower in ("I", "II"))

    teacher = FrozenEnsemble([(tmp_path / "joint" / "I", 1.0), (tmp_path / "joint" / "II", 1.0)])
    student = DistillTask(towers[0], teacher, tokenizer, 0.1, 24)
    distilled = train(student, [(s,) for s in sentences], settings(max_steps=3),
                      RunSpec(1e-3, 5, tmp_path / "student", tmp_path / "ckpt-student"), CPU)
    assert distilled.steps == 3 and np.isfinite(distilled.final_loss)
    assert all(not p.requires_grad for p in teacher.parameters())
    assert (tmp_path / "student" / "model.safetensors").is_file()


def test_the_gs_infonce_task_logs_the_gaussian_share_of_its_loss(tmp_path, sentences):
    tower = save_tiny_bert(tmp_path / "I", seed=1)
    tokenizer = AutoTokenizer.from_pretrained(tower)
    gaussian = losses.GaussianNegatives(count=24, generator=torch.Generator().manual_seed(0))
    gs, plain = (SimCSETask(tower, tokenizer, 0.1, 0.05, noise, 24) for noise in (gaussian, None))
    encoded = tokenizer(sentences[:8], padding=True, return_tensors="pt", truncation=True, max_length=24)
    terms = gs.loss(gs.model, [dict(encoded)], step=1)
    assert set(terms) == {"loss", "gaussian_share"} and 0.0 < terms["gaussian_share"].item() < 1.0
    assert not terms["gaussian_share"].requires_grad  # logged, never trained on
    assert set(plain.loss(plain.model, [dict(encoded)], step=1)) == {"loss"}
