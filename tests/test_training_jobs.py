"""pipeline/training/jobs.py: the stages' jobs — their examples, checks and reports."""

import json

import pytest

from pipeline.errors import PipelineError
from pipeline.training.jobs import pretraining_examples, read_round_trips, write_training_report
from pipeline.training.loop import TrainingResult


def test_pretraining_examples_pairs_and_sentences(tmp_path):
    corpus = ["a b", "c d", "e f"]
    trips = ["a b.", "", "e f"]
    assert pretraining_examples(corpus, trips, "pairs") == [("a b", "a b."), ("c d", "c d"), ("e f", "e f")]
    assert pretraining_examples(corpus, trips, "sentences") == [("a b",), ("c d",), ("e f",), ("a b.",)]
    path = tmp_path / "I.txt"
    path.write_text("a b.\n\ne f\n")
    assert read_round_trips(path, 3) == trips
    with pytest.raises(PipelineError, match="3 lines but the corpus has 4"):
        read_round_trips(path, 4)


def test_training_report_files(tmp_path):
    result = TrainingResult(2, 50.0, 2, 0.5, 1.5, 100.0, None,
                            [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5, "dev_stsb": 50.0}])
    write_training_report(result, tmp_path / "m.json", tmp_path / "c.csv", tmp_path / "details" / "m.json")
    assert json.loads((tmp_path / "m.json").read_text()) == {"best_dev_stsb": 50.0, "steps": 2}
    assert json.loads((tmp_path / "details" / "m.json").read_text()) == {"steps": 2, "best_dev_stsb": 50.0, "best_step": 2, "final_loss": 0.5}
    assert (tmp_path / "c.csv").read_text().splitlines() == ["step,dev_stsb,loss", "1,,1", "2,50,0.5"]


def test_a_seed_papers_model_trains_on_wiki1m_alone(tmp_path, monkeypatch, tiny_params_dict):
    """baseline@simcse: the corpus less its SICK tail, one sentence per example (no round trips)."""
    from pipeline.params_file import parse_params
    from pipeline.data.download import SICK_SPLIT_FILES, build_corpus, sick_sentences
    from pipeline.training.jobs import baseline_job

    monkeypatch.chdir(tmp_path)
    sick_folder = tmp_path / "data" / "raw" / "senteval" / "SICK"
    sick_folder.mkdir(parents=True)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    for split, name in SICK_SPLIT_FILES.items():
        (sick_folder / name).write_text(header + f"1\tA {split} cat sits.\tThe wiki line two.\t4.5\tNEUTRAL\n")
    wiki = ["The wiki line one.", "The wiki line two.", "The wiki line three."]
    sick = sick_sentences(tmp_path / "data" / "raw" / "senteval", ["train", "trial"])
    assert sick == ["A train cat sits.", "The wiki line two.", "A trial cat sits.", "The wiki line two."]
    (tmp_path / "data" / "raw" / "corpus.txt").write_text("".join(f"{line}\n" for line in build_corpus(wiki, sick)))
    params = parse_params(tiny_params_dict)
    job = baseline_job(params, "gs-infonce")
    assert job.examples() == [(line,) for line in wiki]
    assert (job.name, job.key, job.lr, job.output.as_posix()) == (
        "baseline-gs-infonce", "baselines.gs-infonce", params.baselines["gs-infonce"].lr, "data/models/baseline/gs-infonce")
    assert job.settings.gaussian.enabled and not baseline_job(params, "simcse").settings.gaussian.enabled
    with pytest.raises(PipelineError, match="--name infocse is not in baselines of params.yaml"):
        baseline_job(params, "infocse")


def test_the_paper_presets_train_the_seed_papers_models_as_their_papers_do():
    """As the released scripts train them (docs/method.md): SimCSE BERT-base batch 64 lr 3e-5 (RoBERTa-base
    batch 512 lr 1e-5, its Appendix A), length 32, evaluated every 125 steps; GS-InfoNCE (gsInfoNCE/run.sh)
    batch 64 on both, M = 192, µ 0, λ 1, BERT-base dropout 0.2 σ 0.5, RoBERTa-base dropout 0.1 σ 0.1."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from conftest import REPO_ROOT
    from pipeline.params_file import parse_params

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        presets = {backbone: parse_params(OmegaConf.to_container(
            compose(config_name="config", overrides=["scale=paper", f"backbone={backbone}"]), resolve=True))
            for backbone in ("bert", "roberta")}
    for backbone, (batch, lr) in {"bert": (64, 3e-5), "roberta": (512, 1e-5)}.items():
        simcse, gs = presets[backbone].baselines["simcse"], presets[backbone].baselines["gs-infonce"]
        assert (simcse.batch_size, simcse.lr, simcse.max_length, simcse.epochs, simcse.gaussian.enabled) == (batch, lr, 32, 1, False)
        assert (gs.batch_size, gs.lr, gs.max_length) == (64, lr, 32)
        std, dropout = {"bert": (0.5, 0.2), "roberta": (0.1, 0.1)}[backbone]
        assert (gs.gaussian.enabled, gs.gaussian.count, gs.gaussian.mean, gs.gaussian.std, gs.gaussian.weight) == (True, 192, 0.0, std, 1.0)
        assert (gs.dropout, simcse.dropout, gs.eval_every, simcse.eval_every) == (dropout, 0.1, 125, 125)
