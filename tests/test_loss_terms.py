"""The twin objective's terms (pipeline/declarations/loss_terms.py, pipeline/losses.py): a term added as
its implementation, its declaration and its test is an allowed `train.losses` name with its own setting,
part of the objective and of the DDP unused-parameter rule."""

import sys

import pytest
import torch
from pydantic import Field
from transformers import AutoTokenizer

from conftest import MIRROR
from pipeline import losses
from pipeline.config import TrainSettings
from pipeline.params_file import setting_default
from pipeline.params_file import parse_params
from pipeline.declarations import loss_terms
from pipeline.errors import PipelineError
from pipeline.execution.runtime import RunContext
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import TwinTask
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


class CrossTowerAlignment(losses.LossTerm):
    """A made-up term with a setting of its own: the towers' pooler outputs pulled together, times `align_weight`."""

    def compute(self, inputs: losses.ObjectiveInputs) -> torch.Tensor:
        pooled_I, pooled_II = inputs.out.pooler_output
        return inputs.term_settings["align_weight"] * (pooled_I - pooled_II).pow(2).mean()

    def reads_pooler(self, term_settings) -> bool:
        return True


ALIGN_TERM = CrossTowerAlignment()  # its "file": this module, which the declaration points at


@pytest.fixture
def align_term(monkeypatch):
    """The declarations with one more term owning `train.align_weight`; monkeypatch restores them afterwards."""
    declaration = loss_terms.LossTermDeclaration(
        "align", "a test's term", f"{__name__}:ALIGN_TERM",
        {"align_weight": loss_terms.TermSetting(float, Field(1.0, ge=0, description="the term's weight"))},
    )
    monkeypatch.setattr(loss_terms, "LOSS_TERM_DECLARATIONS", dict(loss_terms.LOSS_TERM_DECLARATIONS))
    return loss_terms.declare_loss_term(declaration)


def test_the_papers_three_terms_come_first_in_summation_order_and_are_the_default_objective():
    assert loss_terms.loss_term_names()[:3] == loss_terms.PAPERS_OBJECTIVE == ("nce", "icnce", "ictn")
    papers = loss_terms.PAPERS_OBJECTIVE
    assert [name for name in papers if losses.loss_term(name).reads_pooler({"norm_input": "pooler"})] == ["ictn"]
    assert not any(losses.loss_term(name).reads_pooler({"norm_input": "last_hidden_cls"}) for name in papers)
    assert {key: owner for key, (owner, _) in loss_terms.term_settings().items() if owner in papers} == {
        "norm_factor": "ictn", "norm_input": "ictn"}
    assert {key: loss_terms.term_setting_defaults()[key] for key in ("norm_factor", "norm_input")} == {
        "norm_factor": 0.5, "norm_input": "pooler"}


def _random_twin_output(pairs: int = 4, dim: int = 8):
    """A twin's outputs as the objective reads them: h^L, h^P and JTCSE's cross outputs of 2 towers × 2N views."""
    from types import SimpleNamespace

    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(2, 2 * pairs, dim, generator=generator, requires_grad=True) for _ in range(3)]
    return SimpleNamespace(last_cls=tensors[0], pooler_output=tensors[1], cross_cls=tensors[2]), tensors


@pytest.mark.parametrize("name", loss_terms.loss_term_names())
def test_every_declared_term_meets_the_contract(name):
    """What any term must be, read from the registry (a term added in pipeline/objective_terms/ is checked here too):
    its implementation a LossTerm, its settings defaulted and valid, a finite differentiable scalar on a twin's
    outputs, alone and with the papers' terms."""
    declaration = loss_terms.LOSS_TERM_DECLARATIONS[name]
    assert declaration.description and isinstance(losses.loss_term(name), loss_terms.LossTerm)
    for key, setting in declaration.settings.items():
        assert setting.validate(f"train.{key}", setting.default) == setting.default
    for selection in ([name], [*loss_terms.PAPERS_OBJECTIVE, name]):
        out, tensors = _random_twin_output()
        objective = losses.TwinObjective.of(list(dict.fromkeys(selection)))
        value = objective(out, generator=torch.Generator().manual_seed(1))
        assert value.total.dim() == 0 and torch.isfinite(value.total) and set(value.terms) == set(selection)
        value.total.backward()
        assert any(tensor.grad is not None and tensor.grad.abs().sum() > 0 for tensor in tensors)
    assert isinstance(losses.loss_term(name).reads_pooler(loss_terms.term_setting_defaults()), bool)


def test_a_term_with_its_own_setting_trains_a_twin_step(align_term, tmp_path):
    sentences = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:32]
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    history = {}
    for weight in (1.0, 3.0):
        settings = TrainSettings(losses=["nce", "align"], align_weight=weight, batch_size=8, max_length=24, max_steps=1,
                                 save_every=100)
        assert settings.term_settings == loss_terms.term_setting_defaults() | {"align_weight": weight}
        task = TwinTask(towers, tokenizer, settings, seed=5)
        assert not task.leaves_parameters_unused  # the new term reads the pooler: DDP needs no unused-parameter search
        run = RunSpec(1e-4, 5, tmp_path / f"joint{weight}", tmp_path / f"ckpt{weight}")
        history[weight] = train(task, [(s,) for s in sentences], settings, run, CPU).history[0]
    step = history[1.0]
    assert set(step) >= {"loss", "nce", "align"} and "icnce" not in step and "ictn" not in step
    assert step["align"] > 0 and step["loss"] == pytest.approx(step["nce"] + step["align"], rel=1e-5)
    assert history[3.0]["align"] == pytest.approx(3 * step["align"], rel=1e-5)  # the setting reached the term


def test_a_terms_setting_is_checked_and_defaulted_by_its_declaration(align_term):
    assert TrainSettings().align_weight == 1.0 and setting_default("train.align_weight") == (True, 1.0)
    with pytest.raises(PipelineError, match=r"^train.align_weight=-1.0: Input should be greater than or equal to 0$"):
        TrainSettings(align_weight=-1.0)
    with pytest.raises(PipelineError, match=r"^unknown setting 'train.align_wieght' in params.yaml"):
        TrainSettings(align_wieght=2.0)
    with pytest.raises(PipelineError, match="norm_factors is no loss term's setting"):
        losses.twin_objective(torch.zeros(0), ["nce"], align_weight=1.0, norm_factors=2)


def test_an_unknown_term_names_the_declarations(align_term):
    with pytest.raises(PipelineError, match="names unknown loss magic; allowed: nce, icnce, ictn, .*align"):
        loss_terms.validate_loss_names(["nce", "magic"])
    with pytest.raises(PipelineError, match="declared twice"):
        loss_terms.declare_loss_term(align_term)


def test_the_settings_import_no_torch_and_no_data_readers():
    """`import pipeline.config` (every stage's settings) loads neither torch nor pipeline.data: a change to a
    loss term's or a reader's code is no dependency of the settings."""
    import subprocess
    code = ("import sys, pipeline.config; loaded = [m for m in sys.modules if m == 'torch' or m.startswith('pipeline.data')]; "
            "print(loaded); sys.exit(bool(loaded))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_default_objective_is_the_papers_three_terms_whatever_else_is_declared(monkeypatch):
    """A term declared beside the papers' (an extension) joins no run's objective unless the run names it."""
    from pipeline.config import TrainSettings
    from pipeline.declarations import loss_terms

    monkeypatch.setitem(loss_terms.LOSS_TERM_DECLARATIONS, "extra", loss_terms.LossTermDeclaration(
        "extra", "an extension's term", "pipeline.losses:NCE_TERM"))
    assert "extra" in loss_terms.loss_term_names()
    assert TrainSettings.model_fields["losses"].get_default(call_default_factory=True) == ["nce", "icnce", "ictn"]
