"""The twin objective's term table (pipeline/losses.py `LOSS_TERM_TABLE`): a term added in one place is
an allowed `train.losses` name, part of the objective and of the DDP unused-parameter rule."""

import pytest
import torch
from transformers import AutoTokenizer

from conftest import MIRROR
from pipeline import losses
from pipeline.config import TrainSettings
from pipeline.errors import PipelineError
from pipeline.execution.runtime import RunContext
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import TwinTask
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


def cross_tower_alignment(inputs: losses.ObjectiveInputs) -> torch.Tensor:
    """A made-up term: the towers' pooler outputs of each view pulled together (reads the pooler)."""
    pooled_I, pooled_II = inputs.out.pooler_output
    return (pooled_I - pooled_II).pow(2).mean()


@pytest.fixture
def align_term(monkeypatch):
    """The table with one more term; monkeypatch restores it afterwards."""
    term = losses.LossTerm("align", cross_tower_alignment, lambda norm_input: True, (), "a test's term")
    monkeypatch.setitem(losses.LOSS_TERM_TABLE, term.name, term)
    return term


def test_the_table_is_the_papers_three_terms_in_summation_order():
    assert losses.loss_term_names() == ("nce", "icnce", "ictn")
    assert [name for name, term in losses.LOSS_TERM_TABLE.items() if term.reads_pooler("pooler")] == ["ictn"]
    assert not any(term.reads_pooler("last_hidden_cls") for term in losses.LOSS_TERM_TABLE.values())


def test_a_term_added_in_one_place_trains_a_twin_step(align_term, tmp_path):
    sentences = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:32]
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    settings = TrainSettings(losses=["nce", "align"], batch_size=8, max_length=24, max_steps=2, save_every=100)
    task = TwinTask(towers, tokenizer, settings, seed=5)
    assert not task.leaves_parameters_unused  # the new term reads the pooler: DDP needs no unused-parameter search
    result = train(task, [(s,) for s in sentences], settings, RunSpec(1e-4, 5, tmp_path / "joint", tmp_path / "ckpt"), CPU)
    step = result.history[0]
    assert set(step) >= {"loss", "nce", "align"} and "icnce" not in step and "ictn" not in step
    assert step["align"] > 0 and step["loss"] == pytest.approx(step["nce"] + step["align"], rel=1e-5)


def test_an_unknown_term_names_the_table(align_term):
    with pytest.raises(PipelineError, match="names unknown loss magic; allowed: nce, icnce, ictn, align"):
        losses.validate_loss_names(["nce", "magic"])
    with pytest.raises(PipelineError, match="registered twice"):
        losses.register_loss_term(align_term)
