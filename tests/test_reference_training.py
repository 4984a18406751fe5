"""Training as the reference code trains: batch sampling, schedule, clipping, weight decay, the
per-mode settings, and ensembles whose members have their own tokenizers."""

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from pipeline.config import OptimSettings, TrainSettings
from pipeline.params_file import parse_params
from pipeline.data.readers import ScoredPair
from pipeline.errors import PipelineError
from pipeline.evaluation.embedder import HFEmbedder
from pipeline.evaluation.store import evaluate_models
from pipeline.evaluation.sts import StsTask, combine_tables, embed_sentences
from pipeline.evaluated_models import WeightedTowers
from pipeline.training.batching import (
    epoch_batches, length_bucketed_batches, pad_batch, random_batches, steps_per_epoch, tokenize_columns,
)
from pipeline.execution.runtime import RunContext
from pipeline.training.resume import load_resume_state as _load_checkpoint, save_resume_state as _save_checkpoint
from pipeline.training.loop import RunSpec, train
from pipeline.training.tasks import DistillTask, FrozenEnsemble, SimCSETask, TwinTask, distill_examples

from conftest import MIRROR
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()
    return lines[:100]


@pytest.fixture
def backbone(tmp_path):
    return save_tiny_bert(tmp_path / "backbone", seed=3)


def optim(**overrides) -> OptimSettings:
    values = dict(batch_size=8, max_length=24, max_steps=4, eval_every=100, save_every=100)
    return OptimSettings(**{**values, **overrides})


def run(task, examples, tmp_path, settings, lr=1e-3):
    return train(task, examples, settings, RunSpec(lr, 7, tmp_path / "out", tmp_path / "ckpt"), CPU)


# --- batch sampling -------------------------------------------------------------------------------

def test_random_sampling_is_a_seeded_uniform_permutation_with_the_last_partial_batch_kept():
    batches = random_batches(100, 8, seed=7, epoch=0)
    assert [len(batch) for batch in batches] == [8] * 12 + [4]
    assert sorted(i for batch in batches for i in batch) == list(range(100))
    assert batches == random_batches(100, 8, seed=7, epoch=0)
    assert batches != random_batches(100, 8, seed=7, epoch=1) and batches != random_batches(100, 8, seed=8, epoch=0)
    assert steps_per_epoch("random", 100, 8, grad_accum=1) == 13 and steps_per_epoch("random", 100, 8, 4) == 4
    assert steps_per_epoch("length_bucketed", 100, 8, grad_accum=1) == 12
    # under DDP the partial batch is cut to a multiple of the world size (every rank as many rows)
    assert len(epoch_batches("random", [1] * 101, 8, 7, 0, world_size=2)[-1]) == 4
    assert len(epoch_batches("random", [1] * 97, 8, 7, 0, world_size=2)) == 12
    assert steps_per_epoch("random", 97, 8, 1, world_size=2) == 12


def test_random_batches_mix_lengths_like_a_random_sample_and_bucketed_ones_do_not(backbone):
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:3200]
    lengths = np.array(tokenize_columns(AutoTokenizer.from_pretrained(backbone), [(s,) for s in lines], 64)[0], dtype=object)
    lengths = np.array([len(ids) for ids in lengths])

    def mean_spread(batches):
        return np.mean([np.ptp(lengths[batch]) for batch in batches if len(batch) == 64])

    random_spread = mean_spread(epoch_batches("random", lengths, 64, 7, 0))
    bucketed_spread = mean_spread(length_bucketed_batches(lengths, 64, 7, 0))
    # the expected range of 64 lengths drawn uniformly from the corpus, by resampling
    generator = np.random.default_rng(0)
    sampled_spread = np.mean([np.ptp(generator.choice(lengths, 64, replace=False)) for _ in range(200)])
    assert abs(random_spread - sampled_spread) < 0.1 * sampled_spread
    assert bucketed_spread < 0.2 * random_spread


def test_an_epoch_of_random_batches_trains_on_every_example(backbone, sentences, tmp_path):
    seen = []
    task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
    loss = task.loss
    task.loss = lambda model, batch, step: seen.append(batch[0]["input_ids"].shape[0]) or loss(model, batch, step)
    result = run(task, [(s,) for s in sentences], tmp_path, optim(max_steps=None))
    assert result.steps == 13 and seen == [8] * 12 + [4]


# --- schedule, weight decay, clipping -------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_schedule_constant_keeps_the_rate_and_linear_reaches_zero(backbone, sentences, tmp_path, schedule):
    task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
    result = run(task, [(s,) for s in sentences], tmp_path, optim(schedule=schedule, max_steps=5), lr=2e-4)
    rates = [row["lr"] for row in result.history]
    if schedule == "constant":
        assert rates == [2e-4] * 5
    else:
        assert rates == pytest.approx([2e-4 * (5 - step) / 5 for step in range(1, 6)]) and rates[-1] == 0


def test_clipping_bounds_the_accumulated_gradient_once_per_step(backbone, sentences, tmp_path, monkeypatch):
    task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
    loss, losses_computed = task.loss, []

    def amplified_loss(model, batch, step):  # big gradients, so that the clip acts
        losses_computed.append(step)
        terms = loss(model, batch, step)
        return {"loss": terms["loss"] * 1e3}

    task.loss = amplified_loss
    clip, calls = torch.nn.utils.clip_grad_norm_, []

    def recording_clip(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        norm = clip(parameters, max_norm, *args, **kwargs)
        after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters if p.grad is not None]))
        calls.append((len(losses_computed), float(norm), float(after)))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    result = run(task, [(s,) for s in sentences], tmp_path, optim(max_grad_norm=1.0, grad_accum=4, max_steps=3))
    assert [micro for micro, _, _ in calls] == [4, 8, 12]  # after all four micro-batches of each step
    assert all(before > 1.0 and after <= 1.0 + 1e-5 for _, before, after in calls)
    assert [row["grad_norm"] for row in result.history] == pytest.approx([before for _, before, _ in calls])

    calls.clear()
    run(task, [(s,) for s in sentences], tmp_path / "unclipped", optim(grad_accum=4, max_steps=3))
    assert calls == []


@pytest.mark.parametrize("cael", [0, 2])
def test_the_twin_configured_like_the_released_code_equals_a_plain_adamw_loop(sentences, tmp_path, cael):
    towers = (save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2))
    tokenizer = AutoTokenizer.from_pretrained(towers[0])
    lr = 1e-4
    released = TrainSettings(
        cael=cael, batch_size=8, max_length=24, max_steps=3, eval_every=100, save_every=100, sampling="random",
        schedule="constant", weight_decay=0.01, max_grad_norm=None, dropout=0.0, jtcse_dropout=0.0,
    )
    ours = run(TwinTask(towers, tokenizer, released, seed=5), [(s,) for s in sentences], tmp_path, released, lr=lr)
    assert ours.steps == 3

    reference = TwinTask(towers, tokenizer, released, seed=5)
    model = reference.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr)  # PyTorch's defaults: weight decay 0.01
    for step, rows in enumerate(random_batches(len(sentences), 8, seed=7, epoch=0)[:3]):
        batch = tokenizer([sentences[i] for i in rows], padding=True, truncation=True, max_length=24, return_tensors="pt")
        loss = reference.loss(model, [dict(batch)], step)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    for name, tower in zip(("I", "II"), model.towers):
        saved = AutoModel.from_pretrained(tmp_path / "out" / name).state_dict()
        for key, tensor in tower.state_dict().items():
            torch.testing.assert_close(saved[key], tensor, rtol=0, atol=1e-6, msg=f"{name}.{key}")
        start = AutoModel.from_pretrained(towers[0] if name == "I" else towers[1]).state_dict()
        assert not torch.equal(start["encoder.layer.0.attention.self.query.weight"],
                               saved["encoder.layer.0.attention.self.query.weight"])


def test_eval_at_end_adds_an_evaluation_after_the_last_step(backbone, sentences, tmp_path):
    task = SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
    examples = [(s,) for s in sentences]
    for eval_at_end, expected in [(False, [2, 4]), (True, [2, 4, 5])]:
        result = train(task, examples, optim(eval_every=2, max_steps=5, eval_at_end=eval_at_end),
                       RunSpec(1e-4, 7, tmp_path / f"out-{eval_at_end}", tmp_path / f"ckpt-{eval_at_end}",
                               dev_score=lambda model: 1.0), CPU)
        assert [row["step"] for row in result.history if "dev_stsb" in row] == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_checkpoints_restore_the_cuda_generator(backbone, tmp_path):
    device = torch.device("cuda", 0)
    model = torch.nn.Linear(2, 2).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    torch.cuda.manual_seed(11)
    torch.rand(5, device=device)
    _save_checkpoint(tmp_path, 1, model, optimizer, scheduler, {"step": 1}, device)
    expected = torch.rand(5, device=device)
    torch.rand(100, device=device)  # move on, as a killed run would have
    _load_checkpoint(tmp_path / "step-1", model, optimizer, scheduler, device)
    torch.testing.assert_close(torch.rand(5, device=device), expected, rtol=0, atol=0)


# --- per-mode settings -----------------------------------------------------------------------------

def test_jtcse_takes_its_own_lr_and_dropout_and_uc_weight(tiny_params_dict):
    tncse = TrainSettings(lr=1e-6, jtcse_lr=1.3e-6, dropout=0.00025, jtcse_dropout=0.1)
    jtcse = tncse.model_copy(update={"cael": 6})
    assert (tncse.mode_lr, tncse.mode_dropout) == (1e-6, 0.00025)
    assert (jtcse.mode_lr, jtcse.mode_dropout) == (1.3e-6, 0.1)
    assert TrainSettings(cael=6, dropout=0.01).mode_dropout == 0.01  # null = the TNCSE value

    raw = {**tiny_params_dict, "backbone": {**tiny_params_dict["backbone"], "uc_weight": 0.75, "jtcse_uc_weight": 0.7}}
    assert parse_params(raw).uc_weight == 0.75
    raw["train"] = {**raw["train"], "cael": 2}
    assert parse_params(raw).uc_weight == 0.7


@pytest.mark.parametrize(
    "key, value",
    [("sampling", "shuffled"), ("schedule", "cosine"), ("max_grad_norm", 0.0), ("weight_decay", -0.1)],
)
def test_invalid_training_settings_are_one_line_errors(tiny_params_dict, key, value):
    raw = {**tiny_params_dict, "train": {**tiny_params_dict["train"], key: value}}
    with pytest.raises(PipelineError) as error:
        parse_params(raw)
    assert f"train.{key}" in str(error.value) and "\n" not in str(error.value)


def test_sick_splits_are_validated(tiny_params_dict):
    raw = {**tiny_params_dict, "data": {**tiny_params_dict["data"], "sick_splits": ["train", "dev"]}}
    with pytest.raises(PipelineError, match="data.sick_splits"):
        parse_params(raw)


# --- ensembles whose members have their own tokenizers -------------------------------------------

@pytest.fixture
def mixed_members(tmp_path):
    """Two towers with one tokenizer and a UC partner with another (other ids, another [PAD] id)."""
    first, second = save_tiny_bert(tmp_path / "I", seed=1), save_tiny_bert(tmp_path / "II", seed=2)
    partner = save_tiny_bert(tmp_path / "uc", seed=4, reversed_vocab=True)
    ids = [AutoTokenizer.from_pretrained(path)("a girl is styling her hair .")["input_ids"] for path in (first, partner)]
    assert ids[0] != ids[1]
    return str(first), str(second), str(partner)


def hand_weighted_sum(members, sentences):
    """Σ w_i · last-layer [CLS] of each member, each reading the text with its own tokenizer."""
    total = 0
    for path, weight in members:
        tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        with torch.no_grad():
            inputs = tokenizer(sentences, padding=True, truncation=True, max_length=24, return_tensors="pt")
            total = total + weight * model(**inputs).last_hidden_state[:, 0]
    return total


def test_a_two_tokenizer_uc_teacher_equals_the_hand_computed_weighted_sum(mixed_members, sentences, tmp_path):
    members = WeightedTowers.uc(*mixed_members, weight=0.75)
    teacher = FrozenEnsemble(members)
    student_tokenizer = AutoTokenizer.from_pretrained(mixed_members[0])
    task = DistillTask(mixed_members[0], teacher, student_tokenizer, 0.1, 24)
    assert len(task.column_tokenizers) == 2 and task.teacher_columns == [0, 0, 1]

    texts = sentences[:6]
    token_ids = tokenize_columns(task.column_tokenizers, distill_examples(texts, task.column_tokenizers), 24)
    batch = [pad_batch(column, tokenizer.pad_token_id, torch.device("cpu"))
             for column, tokenizer in zip(token_ids, task.column_tokenizers)]
    target = teacher([batch[column] for column in task.teacher_columns])
    torch.testing.assert_close(target, hand_weighted_sum(members, texts), rtol=1e-5, atol=1e-5)

    result = train(task, distill_examples(sentences, task.column_tokenizers), optim(max_steps=2),
                   RunSpec(1e-3, 7, tmp_path / "student", tmp_path / "ckpt"), CPU)
    assert result.steps == 2 and np.isfinite(result.final_loss)


def test_a_two_tokenizer_uc_ensemble_evaluates_the_hand_computed_weighted_sum(mixed_members, sentences):
    """The evaluator encodes each member with its own tokenizer and sums the weighted tables."""
    texts = sentences[:20]
    members = WeightedTowers.uc(*mixed_members, weight=0.75)
    tables = {tower: embed_sentences(HFEmbedder(tower, max_length=24), texts) for tower in members.folders}
    combined = combine_tables(tables, members).lookup(texts)
    np.testing.assert_allclose(combined, hand_weighted_sum(members, texts).numpy(), rtol=1e-4, atol=1e-5)

    pairs = [ScoredPair(texts[i], texts[i + 1], float(i % 5)) for i in range(0, 20, 2)]
    scores = evaluate_models({"uc": members}, [StsTask("STSBenchmark", {"test": pairs})],
                             lambda tower: HFEmbedder(tower, max_length=24))
    assert np.isfinite(scores["uc"]["STSBenchmark"]["test"])


# --- the paper presets hold the reference values --------------------------------------------------

def test_paper_presets_hold_the_reference_code_values():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from conftest import REPO_ROOT

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        bert, roberta = (
            parse_params(OmegaConf.to_container(compose("config", overrides=["scale=paper", f"backbone={name}"]), resolve=True))
            for name in ("bert", "roberta")
        )
    for params in (bert, roberta):
        pretrain, train_, students = params.pretrain, params.train, params.distill.teachers.values()
        assert (pretrain.sampling, pretrain.schedule, pretrain.weight_decay, pretrain.max_grad_norm) == ("random", "linear", 0, 1.0)
        assert (train_.sampling, train_.schedule, train_.weight_decay, train_.max_grad_norm) == ("random", "constant", 0.01, None)
        assert not pretrain.eval_at_end and not train_.eval_at_end and train_.eval_every == 100
        assert train_.jtcse_dropout == 0.1 and params.data.sick_splits == ["train", "trial"]
        assert all(student.schedule == "constant" and student.weight_decay == 0.01 for student in students)
    assert (bert.train.lr, bert.train.jtcse_lr, bert.train.dropout, bert.train.batch_size) == (1e-6, 1.3e-6, 0.00025, 64)
    assert (roberta.train.lr, roberta.train.mode_lr, roberta.train.dropout, roberta.train.batch_size) == (1e-6, 1e-6, 0.0175, 256)
    assert roberta.train.model_copy(update={"cael": 6}).mode_lr == 1e-6
    assert (roberta.backbone.uc_source, roberta.backbone.uc_weight, roberta.backbone.jtcse_uc_weight) == (
        "ffgcc/InfoCSE-bert-base", 0.75, 0.7)
    assert (bert.uc_weight, bert.backbone.uc_source) == (0.7, "ffgcc/InfoCSE-bert-base")


def test_a_tokenizer_that_has_been_called_is_still_the_same_tokenizer(backbone, tmp_path):
    from pipeline.training.tasks import same_tokenizer

    used, fresh = AutoTokenizer.from_pretrained(backbone), AutoTokenizer.from_pretrained(backbone)
    used(["a b c"], truncation=True, max_length=8, padding=True)
    assert same_tokenizer(used, fresh)
    assert not same_tokenizer(fresh, AutoTokenizer.from_pretrained(save_tiny_bert(tmp_path / "other", 1, reversed_vocab=True)))
