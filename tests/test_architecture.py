"""pipeline/modeling/architecture.py and its families: every module that reaches inside a backbone asks the
adapter of its family, so a family with another layout (XLM-RoBERTa-XL: pre-LayerNorm, a final encoder
LayerNorm) trains and embeds through the same twin, LayerNorm study and [CLS]-only last layer."""

import re

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from conftest import MIRROR
from pipeline.config import TrainSettings
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.sts import evaluate_embedder, load_tasks
from pipeline.modeling import TwinEncoder, count_layernorms, drop_layernorms, last_layer_cls, load_backbone
from pipeline.modeling.architecture import architecture_of, registered_architectures
from pipeline.modeling.families.bert import BertFamily
from pipeline.modeling.families.prelayernorm import PreLayerNormFamily
from pipeline.execution.runtime import RunContext
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import TwinTask
from tiny_models import save_tiny_bert, save_tiny_prelayernorm, save_tower_pair

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    return save_tower_pair(tmp_path_factory.mktemp("prelayernorm"), save_tiny_prelayernorm)


@pytest.fixture(scope="module")
def batch(towers):
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    return tokenizer(["a girl is styling her hair .", "a man plays a guitar", "two dogs run"], padding=True, return_tensors="pt")


def test_each_family_has_its_adapter(towers, tmp_path):
    assert isinstance(architecture_of(load_backbone(towers[0])), PreLayerNormFamily)
    assert isinstance(architecture_of(load_backbone(save_tiny_bert(tmp_path / "bert", seed=1))), BertFamily)


def test_an_unknown_family_is_one_line():
    supported = re.escape(", ".join(sorted(registered_architectures())))
    with pytest.raises(PipelineError, match=f"model type 'no-such-family' has no architecture adapter; supported: {supported} "
                                            r"\(add one as a module in pipeline/modeling/families/"):
        architecture_of({"model_type": "no-such-family"})


def test_the_layer_by_layer_twin_equals_the_stock_forward_on_another_layout(towers, batch):
    """JTCSE's twin runs the towers layer by layer through the adapter; its normal streams must be the stock
    model's (final LayerNorm included), and the [CLS]-only last layer the stock [CLS]."""
    twin = TwinEncoder(load_backbone(towers[0]), load_backbone(towers[1]), cael=2).eval()
    with torch.no_grad():
        out = twin(batch["input_ids"], batch["attention_mask"])
        for index, tower in enumerate(twin.towers):
            stock = tower(input_ids=batch["input_ids"].repeat_interleave(2, 0),
                          attention_mask=batch["attention_mask"].repeat_interleave(2, 0))
            torch.testing.assert_close(out.last_cls[index], stock.last_hidden_state[:, 0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.pooler_output[index], stock.pooler_output, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(last_layer_cls(tower, batch["input_ids"], batch["attention_mask"]),
                                       stock.last_hidden_state[0::2, 0], atol=1e-5, rtol=1e-5)
    assert out.cross_cls.shape == out.last_cls.shape and not torch.allclose(out.cross_cls, out.last_cls)


def test_a_jtcse_twin_step_trains_on_another_layout(towers, tmp_path):
    sentences = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:32]
    settings = TrainSettings(cael=2, batch_size=8, max_length=24, max_steps=2, save_every=100)
    task = TwinTask(towers, AutoTokenizer.from_pretrained(towers[0]), settings, seed=5)
    result = train(task, [(s,) for s in sentences], settings, RunSpec(1e-4, 5, tmp_path / "joint", tmp_path / "ckpt"), CPU)
    assert set(result.history[0]) >= {"loss", "nce", "icnce", "ictn"}
    assert all(torch.isfinite(torch.tensor(step["loss"])) for step in result.history)
    saved = AutoModel.from_pretrained(tmp_path / "joint" / "I")
    assert saved.config.model_type == "xlm-roberta-xl"


def test_the_layernorm_study_finds_the_other_layouts_layernorms(towers):
    model = load_backbone(towers[0])
    assert count_layernorms(model) == 2 * 3
    drop_layernorms(model, 2)
    assert count_layernorms(model) == 2


def test_a_checkpoint_saved_in_half_precision_loads_in_float32(tmp_path):
    """transformers 5 loads in the dtype the config declares; the pipeline's weights are float32 whatever
    a checkpoint says, so an fp16-saved model never trains in fp16 weights."""
    folder = save_tiny_bert(tmp_path / "half", seed=1)
    model = AutoModel.from_pretrained(folder).half()
    model.save_pretrained(folder)
    assert AutoModel.from_pretrained(folder).dtype == torch.float16  # what transformers alone would do
    loaded = load_backbone(folder)
    assert loaded.dtype == torch.float32 and {p.dtype for p in loaded.parameters()} == {torch.float32}


def _reads_the_second_token(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 1]  # a sentence vector other than [CLS]


@pytest.mark.parametrize("save", [save_tiny_bert, save_tiny_prelayernorm], ids=["bert", "prelayernorm"])
def test_the_familys_sentence_vector_hook_is_what_evaluation_and_training_read(save, tmp_path, monkeypatch):
    """Changing `Architecture.sentence_vector` changes h^L everywhere (issue 64): the STS evaluator's score (its
    [CLS]-only last layer no longer applies) and the twin's h^L, h^P and cross outputs, with and without CAELs."""
    tower_I, tower_II = save_tower_pair(tmp_path, save)
    tasks = load_tasks(MIRROR / "senteval", ["STSBenchmark"], max_pairs=100, seed=0)
    batch = AutoTokenizer.from_pretrained(tower_I)(["a girl is styling her hair .", "a man plays a guitar", "two dogs run"],
                                                   padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]

    def evaluated() -> tuple[float, torch.Tensor]:
        embedder = HFEmbedder(tower_I, "cls_before_pooler", max_length=32, token_budget=64)
        return evaluate_embedder(embedder, tasks)["avg"], embedder.encoder(ids, mask).pooled

    def twin_outputs(cael: int):
        with torch.no_grad():
            return TwinEncoder(load_backbone(tower_I), load_backbone(tower_II), cael=cael).eval()(ids, mask)

    score, _ = evaluated()
    cross_of_cls = twin_outputs(1).cross_cls
    monkeypatch.setattr(BertFamily, "sentence_vector", _reads_the_second_token)
    patched_score, vectors = evaluated()
    assert patched_score != score
    with torch.no_grad():
        stock = load_backbone(tower_I).eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(vectors, stock[:, 1], atol=1e-5, rtol=1e-5)
    for cael in (0, 1):
        out = twin_outputs(cael)
        for index, folder in enumerate((tower_I, tower_II)):
            tower = load_backbone(folder).eval()
            with torch.no_grad():
                stock = tower(input_ids=ids.repeat_interleave(2, 0), attention_mask=mask.repeat_interleave(2, 0))
                pooled = tower.pooler(stock.last_hidden_state[:, 1:2])
            torch.testing.assert_close(out.last_cls[index], stock.last_hidden_state[:, 1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(out.pooler_output[index], pooled, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out.cross_cls, cross_of_cls)  # c, the cross streams' sentence vector, moved too
