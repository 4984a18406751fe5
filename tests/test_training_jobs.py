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
