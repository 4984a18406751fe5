"""The results layout a DVC user reads (issue 14): `dvc metrics show` holds the headline only
(seven scores and avg per model, best dev and steps per training stage); every other number sits
in plain outputs (reports/metrics/details/, reports/training/details/, reports/analysis/,
reports/bench.json) that the report stage still reads, from the workspace and from experiment
revisions; the figures are PNG image plots."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline.declarations.sts_tasks import PAPERS_TASK_NAMES as STS_TASKS
from pipeline.evaluation.sts import headline_scores, reported_score
from pipeline.reporting.figures import FIGURES, TRAINING_FIGURES, training_figures
from pipeline.writeup.report import figure_files
from pipeline.reporting.runs import experiment_runs, revision_files, workspace_run
from pipeline.reporting.spec import load_tables
from pipeline.reporting.tables import RunSource, build_table
from pipeline.reporting.runs import ExperimentSearch, Run

from conftest import MIRROR, REPO_ROOT, tiny_preset
from tiny_models import save_tiny_bert

HEADLINE = [*STS_TASKS, "avg"]


def full_results(base: float) -> dict:
    """An evaluate stage's full results (the details file's shape)."""
    tasks = {f"STS1{k}": {"all": base + k, "mean": base - 1, "subsets": {"a": base, "b": base + 2}} for k in range(2, 7)}
    tasks |= {"STSBenchmark": {"test": base + 7}, "SICKRelatedness": {"test": base + 8}}
    return tasks | {"avg": base + 5, "mteb": {"STS17": base + 9}, "model": "joint", "scale": "tiny", "pooler": "cls"}


def test_headline_is_the_seven_reported_scores_and_the_average():
    results = full_results(60.0)
    headline = headline_scores(results)
    assert list(headline) == HEADLINE
    assert headline["STS12"] == 62.0 and headline["STSBenchmark"] == 67.0 and headline["avg"] == 65.0
    assert all(isinstance(value, float) for value in headline.values())


# ----------------------------------------------------------------------------- the stages write it


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Path:
    """A small project (tiny random backbone, the mirror's benchmarks) after `evaluate --name backbone`."""
    root = tmp_path_factory.mktemp("project")
    save_tiny_bert(root / "data" / "backbone", seed=5)
    shutil.copytree(MIRROR / "senteval", root / "data" / "raw" / "senteval")
    raw = tiny_preset()
    raw["device"] = "cpu"
    raw["eval"].update(max_pairs=100, batch_size=64, max_length=32)
    raw["eval"]["mteb"]["enabled"] = False
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [sys.executable, "-m", "stages", "evaluate", "--name", "backbone"], cwd=root, capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_evaluate_writes_a_headline_file_and_a_details_file(evaluated):
    headline = json.loads((evaluated / "reports" / "metrics" / "backbone.json").read_text())
    details = json.loads((evaluated / "reports" / "metrics" / "details" / "backbone.json").read_text())
    assert list(headline) == HEADLINE
    for task in STS_TASKS:
        assert headline[task] == pytest.approx(reported_score(details[task]))
    assert headline["avg"] == details["avg"]
    assert set(details["STS12"]) == {"all", "mean", "subsets"} and details["STS12"]["subsets"]  # a 100-pair sample across subsets
    assert details["model"] == "backbone" and details["max_pairs"] == 100


def test_the_report_reads_the_scores_from_the_details(evaluated):
    run = workspace_run({}, evaluated)
    details = json.loads((evaluated / "reports" / "metrics" / "details" / "backbone.json").read_text())
    assert run.value("backbone", "STS12.all") == pytest.approx(details["STS12"]["all"])
    assert run.value("backbone", "STS12.mean") == pytest.approx(details["STS12"]["mean"])  # only in the details
    assert run.value("backbone", "avg") == pytest.approx(details["avg"])


def test_a_table_cell_comes_from_the_details_file():
    params = tiny_preset()
    tables = load_tables(REPO_ROOT / "tables.yaml")

    def tncse_row(files: dict):
        source = RunSource(Run("workspace", params, files), lambda: ExperimentSearch([], "none here"))
        table = build_table(tables, "tncse-sts-bert", source)
        return next(row for row in table.rows if row.label == "TNCSE")

    headline = {"reports/metrics/joint.json": headline_scores(full_results(60.0))}
    row = tncse_row(headline | {"reports/metrics/details/joint.json": full_results(60.0)})
    assert row.ours["STS12"] == 62.0 and row.ours["SICK-R"] == 68.0 and row.ours["Avg."] == 65.0
    assert tncse_row(headline).ours["STS12"] is None  # the table's path STS12.all is in the details only


# ----------------------------------------------------------------------------- experiments: details from git


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def test_experiment_runs_read_their_details_and_analysis_from_git(tmp_path):
    """`dvc exp show --json` lists only the headline metrics; the rest is read at the run's commit."""
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    for folder, data in (("reports/metrics", headline_scores(full_results(60.0))), ("reports/metrics/details", full_results(60.0)),
                         ("reports/analysis", {"gmacs": 1.5, "eta": 40.0}),
                         ("reports/mteb", {"suites": {"local-sts": {"avg": 71.5}}})):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "joint.json").write_text(json.dumps(data))
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "run")
    rev = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "reports" / "metrics" / "details" / "joint.json").write_text("{}")  # the workspace moved on

    files = revision_files(rev, tmp_path)
    assert set(files) == {"reports/metrics/details/joint.json", "reports/analysis/joint.json", "reports/mteb/joint.json"}
    exp_show = [{"rev": rev, "name": "main", "error": None, "data": {
        "timestamp": "2026-11-24T00:00:00", "params": {"params.yaml": {"data": {"train": {"cael": 2}}}},
        "metrics": {"reports/metrics/joint.json": {"data": headline_scores(full_results(60.0))}},
    }, "experiments": None}]
    (run,) = experiment_runs(exp_show, lambda revision: revision_files(revision, tmp_path))
    assert run.value("joint", "STS13.mean") == 59.0  # a detail
    assert run.value("joint", "mteb.STS17") == 69.0
    assert run.value("joint", "analysis:gmacs") == 1.5
    assert run.value("joint", "mteb:suites.local-sts.avg") == 71.5  # an MTEB result, also a plain output
    (bare,) = experiment_runs(exp_show)  # without git: the headline only
    assert bare.value("joint", "STS13.mean") is None and bare.value("joint", "avg") == 65.0


def test_a_revision_git_does_not_know_gives_no_files_and_a_warning(tmp_path, caplog):
    git(tmp_path, "init", "-q")
    assert revision_files("0" * 40, tmp_path) == {}
    assert "details and analysis count as missing" in caplog.text


# ----------------------------------------------------------------------------- dvc.yaml


def dvc_sections(path: Path) -> dict[str, list[str]]:
    """Paths per section (metrics, outs, plots) over every stage of a dvc.yaml."""
    found: dict[str, list[str]] = {"metrics": [], "outs": [], "plots": []}
    for stage in yaml.safe_load(path.read_text())["stages"].values():
        body = stage.get("do", stage)
        for section in found:
            found[section] += [next(iter(entry)) if isinstance(entry, dict) else entry for entry in body.get(section) or []]
    return found


def test_dvc_metrics_are_the_headline_files_only():
    sections = dvc_sections(REPO_ROOT / "dvc.yaml")
    assert sorted(sections["metrics"]) == sorted([
        "reports/metrics/${key}.json", "reports/training/pretrain-${key}.json", "reports/training/joint.json",
        "reports/training/jtcse.json",
        "reports/training/distill-${key}.json", "reports/training/baseline-${key}.json",
        "reports/verdicts.json",  # the claims' headline: for / against / open and a digest
    ])
    for placed in ("reports/metrics/details/${key}.json", "reports/mteb/${key}.json", "reports/analysis/backbone.json",
                   "reports/training/details/joint.json", *(f"reports/figures/{name}" for name in FIGURES)):
        assert placed in sections["outs"], placed
    assert dvc_sections(REPO_ROOT / "bench" / "dvc.yaml")["metrics"] == []  # the timings are a plain output


def every_figure() -> list[str]:
    """Every PNG the stages draw: the analyze and training figures, then the report's table figures."""
    return [*FIGURES, *figure_files(load_tables(REPO_ROOT / "tables.yaml"))]


def test_every_figure_is_an_image_plot_in_one_folder():
    plots = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["plots"]
    images = [entry for entry in plots if isinstance(entry, str)]
    assert images == [f"reports/figures/{name}" for name in every_figure()]
    assert len(plots) > len(images)  # the Vega plots stay beside them
    report_outs = [next(iter(entry)) for entry in yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]["report"]["outs"]]
    for name in figure_files(load_tables(REPO_ROOT / "tables.yaml")):
        assert f"reports/figures/{name}" in report_outs, name


# ----------------------------------------------------------------------------- figures


def colours(png: bytes) -> int:
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


def test_training_figures_draw_one_line_per_stage(tmp_path):
    pd.DataFrame({"step": [1, 2, 3, 4], "loss": [1.0, 0.7, 0.5, 0.4], "dev_stsb": [None, 60.0, None, 65.0]}).to_csv(
        tmp_path / "joint.csv", index=False)
    pd.DataFrame({"step": [1, 2], "loss": [2.0, 1.0]}).to_csv(tmp_path / "pretrain-I.csv", index=False)
    figures = training_figures(tmp_path)
    assert list(figures) == list(TRAINING_FIGURES)
    for png in figures.values():
        assert png.startswith(b"\x89PNG") and colours(png) > 10
    assert training_figures(tmp_path) == figures  # same numbers, same bytes


def colour_bars(figure) -> int:
    return sum(axis.get_label() == "<colorbar>" for axis in figure.axes)


def labels(ticks) -> list[str]:
    return [tick.get_text() for tick in ticks]


def attention_of(tokens: list[str], layers: int, seed: int) -> dict:
    weights = np.random.default_rng(seed).random((layers, len(tokens), len(tokens)))
    return {"tokens": tokens, "layers": (weights / weights.sum(-1, keepdims=True)).tolist()}


def test_attention_maps_carry_one_colour_bar_and_token_labels_on_the_outer_panels():
    from matplotlib import pyplot as plt

    from pipeline.reporting.figures import TOKEN_FONT_SIZE, attention_map_plot, attention_sink_plot

    tokens = ["[CLS]", "the", "cat", "sleeps", ".", "[SEP]"]
    maps = {"backbone": attention_of(tokens, 2, 0), "joint": attention_of(tokens, 2, 1)}
    figure = attention_map_plot(maps)
    assert colour_bars(figure) == 1
    panels = [axis for axis in figure.axes if axis.get_label() != "<colorbar>"]  # row by row
    bottom_left, bottom_right, top_right = panels[2], panels[3], panels[1]
    assert labels(bottom_left.get_xticklabels()) == tokens and labels(bottom_right.get_xticklabels()) == tokens
    assert all(tick.get_rotation() == 90 and tick.get_fontsize() >= TOKEN_FONT_SIZE >= 6 for tick in bottom_left.get_xticklabels())
    assert labels(bottom_left.get_yticklabels()) == tokens
    assert not any(labels(top_right.get_xticklabels())) and not any(labels(bottom_right.get_yticklabels()))
    plt.close(figure)

    sink = attention_sink_plot(maps)
    assert colour_bars(sink) == 1
    assert all(labels(axis.get_xticklabels()) == tokens for axis in sink.axes if axis.get_label() != "<colorbar>")
    plt.close(sink)


def test_a_long_sentence_labels_at_most_the_legible_number_of_tokens():
    from matplotlib import pyplot as plt

    from pipeline.reporting.figures import MAX_TOKEN_LABELS, attention_map_plot

    tokens = [f"w{index}" for index in range(3 * MAX_TOKEN_LABELS + 1)]
    figure = attention_map_plot({"backbone": attention_of(tokens, 1, 0)})
    shown = labels(figure.axes[0].get_xticklabels())
    assert 0 < len(shown) <= MAX_TOKEN_LABELS and shown[:2] == ["w0", "w4"]  # every 4th token
    plt.close(figure)


def test_the_cosine_grid_carries_a_colour_bar_bin_labels_and_its_shares():
    from matplotlib import pyplot as plt

    from pipeline.reporting.figures import cosine_grid_plot

    bins = ["0-0.5", "0.5-1"]
    figure = cosine_grid_plot({"backbone": {"0-1": [0.75, 0.25], "1-2": [0.1, 0.9]}}, bins)
    assert colour_bars(figure) == 1
    panel = figure.axes[0]
    assert labels(panel.get_xticklabels()) == bins and labels(panel.get_yticklabels()) == ["0-1", "1-2"]
    assert sorted(text.get_text() for text in panel.texts) == ["0.10", "0.25", "0.75", "0.90"]
    plt.close(figure)


def test_dvc_metrics_show_fits_one_screen():
    """The headline stays readable: at most 12 columns and 200 characters (issue 43); the claims are one cell
    (reports/verdicts.json), their counts and each verdict shown by naming reports/claims.json."""
    shown = subprocess.run([sys.executable, "-m", "dvc", "metrics", "show"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    lines = [line for line in shown.splitlines() if line.strip()]
    assert len(lines[0].split()) <= 12, lines[0]
    assert max(map(len, lines)) <= 200
    assert "verdicts" in lines[0].split() and not any(column.startswith("verdicts.") for column in lines[0].split())
