"""The report stage: table specs, rows from the workspace and from DVC experiments, cells, captions,
and the papers' numbers in tables.yaml checked against a second transcription.

tests/fixtures/exp_show_cael.json is real `dvc exp show --json` output of DVC 3.67.1, recorded in a
scratch git copy of this repository whose evaluate stage was a stand-in writing metrics files of
the real shape. Its experiments: cael 1, 2, 3 and 6, cael 6 with losses [nce, ictn], cael 0 with
seeds 1 and 2, cael 0 with MTEB on, a failed run (cael 5) and a queued one (cael 4). Trimmed to
params.yaml and the joint / joint-D metrics; nothing else was changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline.errors import PipelineError
from pipeline.writeup.render import cell, latex, markdown, numbers
from pipeline.reporting.runs import ExperimentSearch, Run, experiment_runs, metric_at, workspace_run
from pipeline.reporting.spec import load_tables, parse_tables
from pipeline.reporting.tables import Row, RunSource, build_table, check_override_keys

from conftest import REPO_ROOT, committed_text, tiny_preset

EXP_SHOW = json.loads((Path(__file__).parent / "fixtures" / "exp_show_cael.json").read_text())
TABLES = load_tables(REPO_ROOT / "tables.yaml")
SEVEN = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg."]
MTEB = ["STS17", "STS22.v2", "STSBM", "3 Avg."]


def metrics(base: float, **extra) -> dict:
    """A metrics file of the evaluate stage's shape whose seven scores are base, base+1, …"""
    tasks = {f"STS1{k}": {"all": base + k - 2, "mean": base, "subsets": {}} for k in range(2, 7)}
    tasks |= {"STSBenchmark": {"test": base + 5}, "SICKRelatedness": {"test": base + 6}}
    return tasks | {"avg": base + 3, "scale": "tiny", "pooler": "cls_before_pooler"} | extra


def baseline_params() -> dict:
    """The params of the fixture's baseline commit: the tiny preset its experiments were composed from."""
    return EXP_SHOW[1]["data"]["params"]["params.yaml"]["data"]


def roberta_params() -> dict:
    """The fixture's params relabelled as a paper-scale RoBERTa-base run."""
    params = baseline_params() | {"scale": "paper"}
    params["backbone"] = params["backbone"] | {"name": "roberta", "num_layers": 12}
    return params


def source_with(files: dict[str, dict], params: dict | None = None, runs: list[Run] | None = None) -> RunSource:
    metrics_files = {f"reports/metrics/{model}.json": data for model, data in files.items()}
    workspace = Run("workspace", params or baseline_params(), metrics_files)
    return RunSource(workspace, lambda: ExperimentSearch(runs or [], None if runs else "no experiments here"))


def row_of(table, label: str) -> Row:
    return next(row for row in table.rows if row.label == label)


# --- cells, captions, missing rows -------------------------------------------------------------


def test_cells_show_ours_paper_and_delta_to_two_decimals():
    row = Row("TNCSE", {"STS12": 68.40, "STS13": 70.00}, {"STS12": 70.126, "STS13": 69.998, "STS14": 71.0})
    assert cell(row, "STS12") == "70.13 | 68.40 | +1.73"
    assert cell(row, "STS13") == "70.00 | 70.00 | +0.00"  # -0.002 rounds to zero, without a minus sign
    assert cell(row, "STS14") == "71.00 | — | —"
    assert cell(Row("x", {"STS12": 75.0}, {"STS12": None}), "STS12") == "missing | 75.00 | —"
    assert cell(Row("x", {"STS12": 75.0}, {"STS12": 74.0}), "STS12") == "74.00 | 75.00 | -1.00"


def test_table_cells_compare_with_the_paper_numbers():
    table = build_table(TABLES, "tncse-sts-bert", source_with({"joint": metrics(70.0)}))
    tncse = row_of(table, "TNCSE")
    assert tncse.run == "workspace"
    assert cell(tncse, "STS12") == "70.00 | 75.52 | -5.52"
    assert cell(tncse, "Avg.") == "73.00 | 79.58 | -6.58"
    assert r"70.00 \| 75.52 \| -5.52" in markdown(table)  # pipes escaped inside Markdown cells
    frame = numbers(table).set_index("row")
    assert frame.loc["TNCSE", "STS12 Δ"] == pytest.approx(-5.52)


def test_tiny_scale_tables_say_so_in_their_first_line():
    table = build_table(TABLES, "jtcse-cael", source_with({"joint": metrics(70.0)}))
    first_line = markdown(table).splitlines()[0]
    assert "TINY SCALE" in first_line and "NOT A PAPER-SCALE RESULT" in first_line
    assert "minilm stands in for BERT-base" in first_line
    assert "already a trained sentence embedder (all-MiniLM-L6-v2): its untrained rows (backbone, towers' ensemble) already score high" in first_line
    assert r"\caption{TINY SCALE, NOT A PAPER-SCALE RESULT" in latex(table)
    assert set(numbers(table)["scale"]) == {"tiny"}


def test_missing_rows_are_listed_with_the_command_that_produces_them():
    table = build_table(TABLES, "jtcse-sts-bert", source_with({"joint": metrics(70.0)}))
    text = markdown(table)
    assert row_of(table, "TNCSE").present
    assert row_of(table, "TNCSE+UC").command == "dvc repro evaluate@uc"
    assert "- TNCSE+UC: reports/metrics/uc.json not in the workspace: `dvc repro evaluate@uc`" in text
    jtcse = row_of(table, "JTCSE")  # the committed run's own JTCSE twin (the jtcse stage), not an experiment
    assert not jtcse.queued and jtcse.command == "dvc repro evaluate@jtcse"
    assert r"| JTCSE " in text and r"missing \| 79.70 \| —" in text
    jtcse_uc = row_of(table, "JTCSE+UC")  # the UC ensemble is the joint twin's: JTCSE's is an experiment
    assert jtcse_uc.queued and jtcse_uc.command == "dvc exp run --queue -S scale=tiny -S backbone=minilm -S train.cael=6"
    assert f"`{jtcse_uc.command}`" in text
    assert "experiments could not be listed: no experiments here" in text
    assert "python -m stages report --queue jtcse-sts-bert --run" in text


def test_a_row_the_backbone_cannot_run_is_not_applicable():
    """Table IX's counts are of BERT-base's 12 layers (`of_layers: 12`): on MiniLM's 6, 1 and 3 of 12 have no
    counterpart; 2, 4, 6 and 12 run as 1, 2, 3 and 6 CAELs."""
    table = build_table(TABLES, "jtcse-cael", source_with({}))
    assert "train.cael=1 of 12 layers has no counterpart on this backbone (6 layers" in row_of(table, "1 CAEL").not_applicable
    assert "no counterpart" in row_of(table, "3 CAELs").not_applicable
    assert row_of(table, "12 CAELs").not_applicable is None and row_of(table, "4 CAELs").not_applicable is None
    queued = " ".join(table.queue_commands)
    assert "train.cael=12" not in queued and all(f"train.cael={count}" in queued for count in (1, 2, 3, 6))
    assert len(table.queue_commands) == 4  # 2, 4, 6 and 12 of 12; "w/o" is the workspace's own run


def test_the_index_lists_every_figure_of_the_registries_whatever_the_folder_holds(tmp_path):
    """The index is written from the figure registries, not from the figures folder: a figure drawn after
    it (the claims' forest plot) or by the analyze stage is listed all the same (issue 64)."""
    from pipeline.reporting.figures import FIGURES
    from pipeline.writeup.report import write_index, write_tables

    (tmp_path / "tables").mkdir()
    tables = [build_table(TABLES, "jtcse-cael", source_with({})), build_table(TABLES, "layernorm-tncse", source_with({}))]
    write_tables(tables, tmp_path / "tables")
    readme = write_index(tables, tmp_path / "tables", with_experiments=False).read_text()
    listed = [line.split("](")[0].removeprefix("- [") for line in readme.splitlines() if line.startswith("- [")]
    assert listed == [*FIGURES, "layernorm-tncse.png", "tensor_norm_surface.png"]
    assert "- [claims.png](../figures/claims.png): Every judged comparison" in readme
    assert "experiments.md" not in readme


def test_placeholders_scale_with_the_batch_size(tiny_params_dict):
    table = build_table(TABLES, "gs-infonce-m", source_with({}, tiny_params_dict))
    half = row_of(table, "M = 0.5 × batch").command
    assert half.endswith("-S baselines.gs-infonce.gaussian.count=8")  # tiny batch 16


def test_paper_scale_rows_of_another_backbone_are_queued_with_the_papers_settings():
    params = baseline_params() | {"scale": "paper"}
    params["backbone"] = params["backbone"] | {"name": "bert", "num_layers": 12}
    table = build_table(TABLES, "jtcse-sts-roberta", source_with({"joint": metrics(70.0)}, params))
    assert table.scale_line.startswith("Paper scale: RoBERTa-base")
    assert "trained sentence embedder" not in table.scale_line  # BERT is not one
    assert not row_of(table, "TNCSE").present  # the workspace is BERT
    assert row_of(table, "JTCSE").command == "dvc exp run --queue -S scale=paper -S backbone=roberta"  # its jtcse stage
    assert row_of(table, "JTCSE+UC").command == (
        "dvc exp run --queue -S scale=paper -S backbone=roberta -S train.cael=6"  # JTCSE lr: train.jtcse_lr of the preset
    )


# --- experiments from `dvc exp show --json` ---------------------------------------------------


def test_only_finished_experiments_are_runs():
    names = [run.name for run in experiment_runs(EXP_SHOW)]
    assert "exp cael-five" not in names  # failed: it lists the baseline's stale metrics
    assert "exp waiting-four" not in names  # queued
    assert "workspace" not in names
    assert {"exp seely-tuts", "exp toned-eric", "exp bawdy-dita", "exp blank-tort"} <= set(names)
    assert names[-1].startswith("commit ")  # newest first; the baseline commit is the oldest


def test_cael_table_renders_from_recorded_experiments():
    baseline = experiment_runs(EXP_SHOW)[-1]
    searches = []

    def search() -> ExperimentSearch:
        searches.append(1)
        return ExperimentSearch(experiment_runs(EXP_SHOW))

    source = RunSource(Run("workspace", baseline.params, baseline.files), search)
    table = build_table(TABLES, "jtcse-cael", source)
    ours = {row.label: (row.ours.get("7 Avg."), row.run) for row in table.rows if row.present}
    # the recorded MiniLM runs of 1, 2, 3 and 6 CAELs are the paper's 2, 4, 6 and 12 of BERT-base's 12 layers
    assert ours == {
        "2 CAELs": (69.17, "exp seely-tuts"),
        "4 CAELs": (69.54, "exp toned-eric"),
        "6 CAELs": (69.91, "exp bawdy-dita"),
        "12 CAELs": (71.02, "exp blank-tort"),  # not the newer cael-6 run that also changed the losses
        "w/o (TNCSE)": (68.8, "workspace"),
    }
    assert table.missing_rows == [] and table.queue_commands == []  # 1 and 3 of 12: no counterpart on 6 layers
    assert len(searches) == 1
    assert r"69.91 \| 79.70 \| -9.79" in markdown(table)


def test_seed_table_aggregates_n_mean_std_and_range_over_the_seeds_present():
    source = source_with({}, runs=experiment_runs(EXP_SHOW))
    table = build_table(TABLES, "seeds-tncse", source)
    assert [row.present for row in table.rows] == [True, True, False, False, False]
    aggregate = table.aggregate
    assert aggregate.count == 2 and aggregate.run == "n = 2"
    assert aggregate.ours["Avg."] == pytest.approx((68.81 + 68.82) / 2)
    assert aggregate.spread["Avg."] == pytest.approx(0.00707, abs=1e-5)
    assert aggregate.extent["Avg."] == pytest.approx((68.81, 68.82))
    assert cell(aggregate, "Avg.") == "68.81 ± 0.01 [68.81–68.82] | 79.58 | -10.77"
    frame = numbers(table).set_index("row")
    assert frame.loc[aggregate.label, "n"] == 2
    assert frame.loc[aggregate.label, ["Avg. min", "Avg. max"]].tolist() == pytest.approx([68.81, 68.82])


def test_a_table_whose_rows_are_seeds_must_aggregate_them():
    spec = minimal_spec(experiment={"overrides": ["seed=1"]})
    with pytest.raises(PipelineError, match="rows are a seed sweep.*aggregate"):
        parse_tables(spec)
    spec["tables"]["t"]["aggregate"] = {"label": "mean ± std"}
    assert parse_tables(spec).tables["t"].aggregate.label == "mean ± std"


def test_cells_carry_the_bootstrap_interval_of_their_run():
    details = metrics(70.0) | {"intervals": {"STS12": {"low": 67.0, "high": 72.0, "se": 1.2},
                                             "avg": {"low": 72.5, "high": 73.5, "se": 0.25}}}
    workspace = Run("workspace", roberta_params(), {"reports/metrics/details/joint.json": details})
    table = build_table(TABLES, "tncse-sts-roberta", RunSource(workspace, lambda: ExperimentSearch([])))
    tncse = row_of(table, "TNCSE")
    assert tncse.intervals == {"STS12": (67.0, 72.0), "Avg.": (72.5, 73.5)}
    assert cell(tncse, "STS12") == "70.00 ± 2.50 | 74.11 | -4.11"
    assert cell(tncse, "STS13") == "71.00 | 84.00 | -13.00"  # no interval for it: no ±
    frame = numbers(table).set_index("row")
    assert frame.loc["TNCSE", ["STS12 low", "STS12 high"]].tolist() == [67.0, 72.0]
    assert pd.isna(frame.loc["TNCSE", "STS13 low"])


def test_experiments_are_not_listed_when_the_workspace_has_every_row():
    def search() -> ExperimentSearch:
        raise AssertionError("dvc exp show should not run")

    models = ["simcse", "pretrain-I", "pretrain-II", "ensemble", "joint", "joint-D", "uc", "uc-D"]
    files = {f"reports/metrics/{model}.json": metrics(70.0) for model in models}
    table = build_table(TABLES, "tncse-sts-roberta", RunSource(Run("workspace", roberta_params(), files), search))
    assert table.complete and {row.run for row in table.rows} == {"workspace"}


def test_rows_of_another_backbone_below_paper_scale_are_not_applicable():
    """A MiniLM run stands in for BERT-base (conf/backbone/minilm.yaml): it is no RoBERTa-base row."""
    files = {"reports/metrics/joint.json": metrics(70.0)}
    table = build_table(TABLES, "tncse-sts-roberta", source_with(files))
    assert all(row.not_applicable and not row.present for row in table.rows)
    assert "minilm (it stands in for BERT-base)" in row_of(table, "TNCSE").not_applicable
    assert table.scale_line.startswith("TINY SCALE, NOT COMPARED: RoBERTa-base is not this run's backbone")


def test_metric_paths_may_contain_dots():
    data = {"mteb": {"STS22.v2": 61.0, "avg": 70.0}, "STSBenchmark": {"test": 80.0}}
    assert metric_at(data, "mteb.STS22.v2") == 61.0
    assert metric_at(data, "STSBenchmark.test") == 80.0
    assert metric_at(data, "mteb.STS17") is None
    assert metric_at(None, "avg") is None


# --- spec validation --------------------------------------------------------------------------


def minimal_spec(**row_changes) -> dict:
    row = {"label": "TNCSE", "model": "joint", "paper": {"Avg.": 79.58}} | row_changes
    table = {"caption": "c", "paper_source": "s", "scale_note": "n", "backbone": "bert", "columns": {"avg": "Avg."},
             "rows": [row]}
    return {"tables": {"t": table}}


@pytest.mark.parametrize(
    "spec, expected",
    [
        (minimal_spec(colour="red"), "unknown setting 'tables.t.rows.0.colour' in tables.yaml"),
        (minimal_spec(paper={"STS99": 1.0}), "tables.t: rows.0.paper: unknown column 'STS99'"),
        (minimal_spec(model="tower"), "tables.t.rows.0.model"),
        (minimal_spec(experiment={"overrides": ["train.cael:2"]}), "'train.cael:2' is not of the form key=value"),
        (minimal_spec(experiment={"overrides": ["backbone=bert"]}), "set by the table's backbone"),
    ],
)
def test_spec_errors_are_one_line_naming_the_key(spec, expected):
    with pytest.raises(PipelineError) as caught:
        parse_tables(spec)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def with_column(path: str) -> dict:
    spec = minimal_spec()
    spec["tables"]["t"]["columns"] = {path: "Score"}
    spec["tables"]["t"]["rows"][0]["paper"] = {}
    return spec


@pytest.mark.parametrize(
    "path, expected",
    [  # a mistyped path made every cell "missing" with no warning (issue 43, D8)
        ("STS12.al", "column 'STS12.al': no such score in reports/metrics/details/<model>.json; did you mean 'STS12.all'?"),
        ("STS12.subsets.MSRpr", "did you mean 'STS12.subsets.MSRpar'?"),
        ("STSBenchmark.all", "did you mean 'STSBenchmark.test'?"),
        ("analysis:gmac", "column 'analysis:gmac': no such number in reports/analysis/<model>.json; did you mean 'gmacs'?"),
        ("analysis:norm_probe.pooler.mena", "did you mean 'norm_probe.pooler.mean'?"),
        ("mteb:suites.local-stss.avg", "no MTEB suite 'local-stss' in conf/mteb/; did you mean 'local-sts'?"),
        ("mteb:suites.jtcse-sts-en.tasks.STS17.mian", "suite jtcse-sts-en records no 'tasks.STS17.mian'"),
        ("mteb:suites.jtcse-sts22.tasks.en.subsets.de", "suite jtcse-sts22 records no 'tasks.en.subsets.de'"),
        ("mteb:jtcse-sts22.avg", "an MTEB column is suites.<suite>.<number>"),
    ],
)
def test_a_column_path_outside_the_files_layout_is_one_line(path, expected):
    with pytest.raises(PipelineError) as caught:
        parse_tables(with_column(path))
    assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("invalid tables.yaml: tables.t.columns")


@pytest.mark.parametrize("path", [
    "STS12.all", "STS16.mean", "STS12.subsets.surprise.OnWN", "SICKRelatedness.test", "avg", "analysis:eta", "analysis:sink_end_last",
    "analysis:norm_probe.last_hidden_cls.q95", "mteb:suites.jtcse-sts-en.tasks.STS22.v2.main",
    "mteb:suites.jtcse-sts-en.tasks.STS17.subsets.en-en", "mteb:suites.local-retrieval.metrics.map_at_10",
    "mteb:suites.jtcse-retrieval.metrics_mean",
])
def test_column_paths_of_the_files_layout_are_accepted(path):
    assert parse_tables(with_column(path)).tables["t"].columns == {path: "Score"}


def test_every_analysis_column_the_spec_accepts_is_a_number_the_analyze_stage_writes():
    """The declared layout (pipeline.reporting.columns.analysis_columns) against a file the analyze
    stage wrote (the committed one), so that it cannot drift from what pipeline/analysis writes."""
    from pipeline.reporting.columns import ATTENTION_SINK_NUMBERS, analysis_columns

    written = json.loads(committed_text("reports/analysis/joint.json"))
    # the end-of-sequence sink numbers are newer than a committed file written before them (the analysis
    # tests check that the analysis writes them); once the file holds one, it must hold both
    newer = () if any(name in written for name in ATTENTION_SINK_NUMBERS) else ATTENTION_SINK_NUMBERS
    for column in analysis_columns():
        if column not in newer:
            assert metric_at(written, column) is not None, column


def test_paper_numbers_must_be_finite():
    spec = minimal_spec(paper={"Avg.": float("nan")})
    with pytest.raises(PipelineError, match=r"tables.t.rows.0.paper.Avg..*finite number"):
        parse_tables(spec)


def test_an_override_of_an_unknown_setting_is_refused():
    tables = parse_tables(minimal_spec(experiment={"overrides": ["train.cale=2"]}))
    with pytest.raises(PipelineError, match=r"tables\.t\.rows\.0\.experiment: unknown setting 'train\.cale'"):
        check_override_keys(tables, baseline_params())


def test_committed_specs_name_only_known_settings():
    check_override_keys(TABLES, tiny_preset())


# --- the runs side by side (experiments.md) ------------------------------------------------------


def test_experiments_table_shows_each_runs_changed_settings_beside_the_headline(tiny_params_dict):
    import copy

    from pipeline.reporting.experiments import experiments_table

    baseline = copy.deepcopy(tiny_params_dict)
    workspace = Run("workspace", {"parsed": "settings"}, {"reports/metrics/joint.json": metrics(70.0),
                                                          "reports/metrics/backbone.json": metrics(60.0)})
    cael = copy.deepcopy(baseline)
    cael["train"]["cael"], cael["seed"] = 2, baseline["seed"] + 1
    older = copy.deepcopy(baseline)
    del older["train"]["drop_layernorm"]  # recorded before the setting existed: it ran at the default, 0
    runs = [Run("exp cael-2", cael, {"reports/metrics/joint.json": metrics(72.5)}), Run("commit abc1234", older, {})]

    text = experiments_table(workspace, baseline, runs)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == [
        "Run", "Changed settings (vs the workspace)", "joint", "backbone"]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]  # lines[0]: the header
    assert cells[0] == ["workspace", "—", "73.00", "63.00"]
    assert cells[1] == ["exp cael-2", f"`seed={baseline['seed'] + 1}`, `train.cael=2`", "75.50", "—"]
    assert cells[2] == ["commit abc1234", "—", "—", "—"]  # drop_layernorm at its default is no change
    assert "dvc exp show --only-changed" in text

    assert "Experiments could not be listed: no git here." in experiments_table(workspace, baseline, [], "no git here")


def test_a_setting_a_run_lacks_counts_at_its_default_or_not_at_all():
    from pipeline.reporting.experiments import changed_settings

    baseline = {"a": {"b": 1.0, "c": "x"}, "eval": {"max_pairs": 300}, "train": {"cael": 0}}
    run = {"a": {"b": 1}, "train": {"cael": 0, "gone": True}}
    # eval.max_pairs defaults to None (all pairs); a.c and train.gone have no default: not comparable
    assert changed_settings(run, baseline) == {"eval.max_pairs": None}
    assert changed_settings({**run, "train": {"cael": 2}}, baseline) == {"train.cael": 2, "eval.max_pairs": None}


# --- the stage ----------------------------------------------------------------------------------


def _file_bytes(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_report_stage_writes_every_table_and_queues_one(tmp_path, monkeypatch, capsys, tiny_params_dict):
    from stages.report import command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params_dict))
    (tmp_path / "tables.yaml").write_text((REPO_ROOT / "tables.yaml").read_text())
    (tmp_path / "claims.yaml").write_text((REPO_ROOT / "claims.yaml").read_text())
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "checkpoints.yaml").write_text((REPO_ROOT / "conf" / "checkpoints.yaml").read_text())
    (tmp_path / "reports" / "metrics").mkdir(parents=True)
    (tmp_path / "reports" / "metrics" / "joint.json").write_text(json.dumps(metrics(70.0)))
    (tmp_path / "reports" / "tables").mkdir()
    (tmp_path / "reports" / "tables" / "dropped-table.md").write_text("stale")
    (tmp_path / "reports" / "tables" / "layernorm-tncse.png").write_bytes(b"\x89PNG")  # from before figures/
    monkeypatch.setattr("pipeline.reporting.runs.search_experiments", lambda commits: ExperimentSearch([]))

    command(params=Path("params.yaml"), tables_file=Path("tables.yaml"), claims_file=Path("claims.yaml"), queue=None, run=False)
    first_run = _file_bytes(tmp_path / "reports")
    written = {path.name for path in (tmp_path / "reports" / "tables").iterdir()}
    expected = {f"{table}{suffix}" for table in TABLES.tables for suffix in (".md", ".csv", ".tex")}
    assert written == expected | {"README.md", "experiments.md"}  # the stale table and the old figure are gone
    assert "| workspace " in (tmp_path / "reports" / "tables" / "experiments.md").read_text()
    assert "[experiments.md](experiments.md)" in (tmp_path / "reports" / "tables" / "README.md").read_text()
    figures = {f"{table}.png" for table, spec in TABLES.tables.items() if spec.figure} | {"tensor_norm_surface.png"}
    drawn = {path.name for path in (tmp_path / "reports" / "figures").iterdir()}
    assert drawn == figures | {"training_loss.png", "training_dev.png", "claims.png"}  # every figure in one folder
    assert workspace_run({}, tmp_path).files["reports/metrics/joint.json"]["avg"] == 73.0
    out = capsys.readouterr().out
    assert f"[report] {len(TABLES.tables)} tables rendered at tiny scale" in out
    assert "claims (" in out and (tmp_path / "reports" / "REPRODUCTION.md").is_file()
    assert json.loads((tmp_path / "reports" / "claims.json").read_text())["claims"] > 0
    assert "[claims.png](../figures/claims.png)" in (tmp_path / "reports" / "tables" / "README.md").read_text()

    command(params=Path("params.yaml"), tables_file=Path("tables.yaml"), claims_file=Path("claims.yaml"), queue=None, run=False)
    assert _file_bytes(tmp_path / "reports") == first_run  # a second report writes the same bytes (issue 64)
    capsys.readouterr()
    command(params=Path("params.yaml"), tables_file=Path("tables.yaml"), claims_file=Path("claims.yaml"), queue="jtcse-cael", run=False)
    printed = capsys.readouterr().out.splitlines()
    # Table IX's 2, 4, 6 and 12 of BERT-base's 12 layers, on MiniLM's 6 (1 and 3 of 12 have no counterpart)
    queued = [f"dvc exp run --queue -S scale=tiny -S backbone=minilm -S train.cael={cael}" for cael in (1, 2, 3, 6)]
    assert printed[:4] == queued


# --- the papers' numbers: a second, independent transcription -----------------------------------
# Typed again from the seed files, not copied from tables.yaml. Columns: STS12 STS13 STS14 STS15
# STS16 STS-B SICK-R Avg. (and, for JTCSE Table I, STS17 STS22 STSBM 3 Avg.).

# seeds/000_7f5ce723e1f20bd6.txt Table 1 (TNCSE), BERT-base block
TNCSE_T1_BERT = {
    "SimCSE": [68.40, 82.41, 74.38, 80.91, 78.56, 76.85, 72.23, 76.25],
    "TNCSE": [75.52, 83.91, 77.57, 84.97, 80.42, 81.72, 72.97, 79.58],
    "TNCSE D": [75.42, 84.64, 77.62, 74.92, 80.50, 81.79, 73.52, 79.77],
    "TNCSE+UC": [75.79, 85.27, 78.67, 85.99, 82.01, 83.16, 73.01, 80.56],
    "TNCSE+UC D": [75.95, 85.31, 78.50, 85.69, 81.86, 83.03, 73.89, 80.60],
}
# seeds/000_7f5ce723e1f20bd6.txt Table 1 (TNCSE), RoBERTa-base block
TNCSE_T1_ROBERTA = {
    "SimCSE": [70.16, 81.77, 73.24, 81.36, 80.65, 80.22, 68.56, 76.57],
    "TNCSE": [74.11, 84.00, 76.06, 84.80, 81.61, 82.68, 73.47, 79.53],
    "TNCSE D": [74.56, 84.74, 76.30, 84.89, 81.70, 83.01, 74.18, 79.91],
    "TNCSE+UC": [74.52, 85.26, 77.63, 85.85, 82.62, 83.65, 73.35, 80.41],
    "TNCSE+UC D": [74.14, 83.86, 76.09, 84.07, 81.59, 82.90, 73.55, 79.46],
}
# seeds/001_09bc9e7e9169769b.txt Table I (JTCSE), BERT-base block, left and right parts
JTCSE_T1_BERT = {
    "BERT-base": [39.70, 59.38, 49.67, 66.03, 66.19, 53.87, 62.06, 56.70],
    "SimCSE": [68.40, 82.41, 74.38, 80.91, 78.56, 76.85, 72.23, 76.25, 83.90, 59.74, 82.45, 75.36],
    "TNCSE": [75.52, 83.91, 77.57, 84.97, 80.42, 81.72, 72.97, 79.58, 85.78, 61.45, 84.14, 77.13],
    "JTCSE": [74.95, 84.21, 77.79, 84.75, 80.41, 81.88, 73.92, 79.70, 85.88, 62.79, 85.40, 78.02],
    "TNCSE D": [75.42, 84.64, 77.62, 84.92, 80.50, 81.79, 73.52, 79.77, 85.36, 63.79, 85.41, 78.19],
    "JTCSE D": [75.01, 84.86, 77.76, 84.62, 80.38, 82.05, 74.53, 79.89, 85.65, 63.59, 85.55, 78.26],
    "TNCSE+UC": [75.79, 85.27, 78.67, 85.99, 82.01, 83.16, 73.01, 80.56, 86.51, 62.05, 86.35, 78.30],
    "JTCSE+UC": [75.44, 85.34, 78.75, 85.93, 82.00, 83.21, 73.52, 80.60, 86.89, 61.87, 86.35, 78.37],
    "TNCSE+UC D": [75.95, 85.31, 78.50, 85.69, 81.86, 83.03, 73.89, 80.60, 86.38, 63.28, 86.24, 78.63],
    "JTCSE+UC D": [75.22, 85.46, 78.50, 85.50, 81.55, 83.02, 74.24, 80.50, 86.28, 63.06, 83.01, 77.45],
}
# seeds/001_09bc9e7e9169769b.txt Table I (JTCSE), RoBERTa-base block; the +UC lines are overprinted
# with the RankCSE+UC numbers: each value is the second of its pair.
JTCSE_T1_ROBERTA = {
    "RoBERTa-base": [40.88, 58.74, 49.07, 65.63, 61.48, 58.55, 61.63, 56.57],
    "SimCSE": [70.16, 81.77, 73.24, 81.36, 80.65, 80.22, 68.56, 76.57, 81.80, 58.23, 84.45, 74.83],
    "TNCSE": [74.11, 84.00, 76.06, 84.80, 81.61, 82.68, 73.47, 79.53, 84.05, 62.70, 83.03, 76.59],
    "JTCSE": [74.92, 84.22, 77.08, 84.69, 81.39, 82.60, 74.03, 79.94, 83.73, 63.78, 86.33, 77.95],
    "TNCSE D": [74.56, 84.74, 76.30, 84.89, 81.70, 83.01, 74.18, 79.73, 84.01, 64.06, 86.25, 78.11],
    "JTCSE D": [75.42, 85.36, 77.31, 85.04, 81.72, 82.91, 74.16, 80.32, 83.18, 64.69, 86.49, 78.11],
    "TNCSE+UC": [74.52, 85.26, 77.63, 85.85, 82.62, 83.65, 73.35, 80.41, 85.49, 62.00, 86.80, 78.09],
    "JTCSE+UC": [74.57, 85.73, 78.17, 85.78, 82.73, 83.73, 73.52, 80.61, 85.30, 62.87, 86.82, 78.33],
    "TNCSE+UC D": [74.14, 83.86, 76.09, 84.07, 81.59, 82.90, 73.55, 79.46, 84.04, 62.72, 86.07, 77.61],
    "JTCSE+UC D": [74.92, 85.14, 77.07, 84.59, 81.71, 83.18, 74.50, 80.16, 83.79, 64.74, 86.27, 78.27],
}
# Printed numbers tables.yaml deliberately replaces, each with the evidence in its table's notes.
CORRECTIONS = {
    ("tncse-sts-bert", "TNCSE D", "STS15"): (74.92, 84.92),  # JTCSE Table I and the row's average
    ("jtcse-sts-roberta", "TNCSE D", "Avg."): (79.73, 79.91),  # TNCSE Table 1 and the row's mean
}
SPEC_LABELS = {
    "SimCSE": "SimCSE (ours, Wiki1M alone)",
    "BERT-base": "BERT-base, first-last avg. (untrained backbone)",
    "RoBERTa-base": "RoBERTa-base, first-last avg. (untrained backbone)",
}


@pytest.mark.parametrize(
    "table_id, mteb_table_id, transcription",
    [
        ("tncse-sts-bert", None, TNCSE_T1_BERT),
        ("tncse-sts-roberta", None, TNCSE_T1_ROBERTA),
        ("jtcse-sts-bert", "jtcse-mteb-sts-bert", JTCSE_T1_BERT),
        ("jtcse-sts-roberta", "jtcse-mteb-sts-roberta", JTCSE_T1_ROBERTA),
    ],
)
def test_paper_numbers_match_a_second_transcription(table_id, mteb_table_id, transcription):
    for label, numbers_read in transcription.items():
        spec_label = SPEC_LABELS.get(label, label)
        expected = dict(zip(SEVEN, numbers_read[:8]))
        for (table, row, column), (printed, used) in CORRECTIONS.items():
            if (table, row) == (table_id, spec_label):
                assert expected[column] == printed
                expected[column] = used
        assert _paper(table_id, spec_label) == expected, f"{table_id} / {label}"
        if len(numbers_read) > 8:
            assert _paper(mteb_table_id, spec_label) == dict(zip(MTEB, numbers_read[8:])), f"{mteb_table_id} / {label}"


def _paper(table_id: str, label: str) -> dict[str, float]:
    return next(row.paper for row in TABLES.tables[table_id].rows if row.label == label)


def test_transcribed_averages_are_the_means_of_their_rows():
    # Averages of seven as printed; two JTCSE RoBERTa rows disagree with their own numbers in the paper.
    misprinted = {("jtcse-sts-roberta", "JTCSE"), ("jtcse-sts-roberta", "JTCSE D")}
    for table_id, spec in TABLES.tables.items():
        for row in spec.rows + ([spec.aggregate] if spec.aggregate else []):
            for parts, average in ((SEVEN[:7], "Avg."), (MTEB[:3], "3 Avg.")):
                if average in row.paper and all(part in row.paper for part in parts):
                    mean = sum(row.paper[part] for part in parts) / len(parts)
                    if (table_id, row.label) not in misprinted:
                        assert mean == pytest.approx(row.paper[average], abs=0.015), f"{table_id} / {row.label}"


def test_small_scale_tables_say_they_are_not_paper_scale():
    table = build_table(TABLES, "tncse-sts-bert", source_with({}, baseline_params() | {"scale": "small"}))
    assert table.scale_line.startswith("SMALL SCALE, NOT A PAPER-SCALE RESULT: minilm stands in for BERT-base")


def test_rehearsal_tables_say_rehearsal_in_their_first_line_and_queue_the_rehearsal():
    params = baseline_params() | {"scale": "rehearsal"}
    params["backbone"] = params["backbone"] | {"name": "bert", "num_layers": 12}
    table = build_table(TABLES, "jtcse-sts-roberta", source_with({"joint": metrics(70.0)}, params))
    assert markdown(table).splitlines()[0].startswith("**REHEARSAL, NOT A RESULT: the paper preset of RoBERTa-base offline")
    assert row_of(table, "JTCSE+UC").command == "dvc exp run --queue -S scale=rehearsal -S backbone=roberta -S train.cael=6"


def test_the_gaussian_terms_share_is_read_from_the_gs_infonce_history(tmp_path):
    from pipeline.writeup.report import gaussian_share

    params = {"baselines": {"gs-infonce": {"gaussian": {"count": 48}, "dropout": 0.2}, "simcse": {"dropout": 0.1}}}
    assert gaussian_share(params, tmp_path) is None  # no run
    (tmp_path / "baseline-gs-infonce.csv").write_text("step,loss,lr\n1,0.5,1e-5\n")
    assert gaussian_share(params, tmp_path) is None  # a run of a version that logged no share
    (tmp_path / "baseline-gs-infonce.csv").write_text("step,gaussian_share,loss\n1,0.0001,0.5\n2,0.0003,0.4\n")
    share = gaussian_share(params, tmp_path)
    assert (share.count, share.steps) == (48, 2) and share.mean == pytest.approx(0.0002) and share.largest == 0.0003
    line = share.line()
    assert "M = 48" in line and "0.0200%" in line and "at most 0.0300%" in line
    assert "too little to move the weights measurably" in line and "dropouts' (0.2 against 0.1)" in line
    params["baselines"]["gs-infonce"]["dropout"] = 0.1
    (tmp_path / "baseline-gs-infonce.csv").write_text("step,gaussian_share\n1,0.02\n")
    line = gaussian_share(params, tmp_path).line()
    assert "enough to steer the gradient" in line and "differ by this term alone" in line


def test_runs_with_the_workspaces_settings_and_numbers_are_counted_not_listed():
    """The committed table must be what a rerun writes: commits that ran the workspace's settings to the same
    numbers (every commit of a results-only history) are one count line, not rows naming the commits."""
    from pipeline.reporting.experiments import experiments_table

    params = tiny_preset()
    scores = {"reports/metrics/joint.json": {"avg": 73.64}}
    workspace = Run("workspace", params, scores)
    same = [Run(f"commit {name}", params, scores) for name in ("aaaaaaa (main)", "bbbbbbb")]
    other = Run("commit ccccccc", params | {"seed": 7}, {"reports/metrics/joint.json": {"avg": 73.10}})
    text = experiments_table(workspace, params, [*same, other])
    assert "aaaaaaa" not in text and "bbbbbbb" not in text and "2 of the runs found have the workspace's settings" in text
    assert "| commit ccccccc" in text and "73.10" in text
    # another history of the same results (the commit that adds this table among them) writes the same bytes
    later = [Run(f"commit {name}", params, scores) for name in ("ddddddd (main)", "aaaaaaa")]
    assert experiments_table(workspace, params, [*later, other]) == text


def test_a_layer_sweep_is_a_fraction_of_the_backbones_layers():
    """jtcse-cael-best states its CAEL counts of BERT-base's 12 layers: on MiniLM's 6 they are 1, 2, 3 and 6 for the
    paper's 2, 4, 6 and 12, and 1 or 3 of 12 has no counterpart (one line, not a 7-layer run)."""
    from pipeline.reporting.spec import ExperimentSpec
    from pipeline.verdicts.claims_file import load_claims

    claims = load_claims(load_tables(REPO_ROOT / "tables.yaml"), tiny_preset(), REPO_ROOT / "claims.yaml")
    (sweep,) = [claim for claim in claims.claims if claim.id == "jtcse-cael-best"]
    mapped = {subject.label: subject.experiment.on_layers(6) for subject in sweep.subjects()}
    assert {label: overrides for label, (overrides, why) in mapped.items() if why is None} == {
        "6 CAELs": ["train.cael=3"], "2 CAELs": ["train.cael=1"], "4 CAELs": ["train.cael=2"],
        "12 CAELs": ["train.cael=6"], "w/o (TNCSE)": ["train.cael=0"]}
    assert mapped["1 CAEL"][1] == "train.cael=1 of 12 layers has no counterpart on this backbone (6 layers: 0.5)"
    assert mapped["3 CAELs"][0] == [] and "no counterpart" in mapped["3 CAELs"][1]
    assert ExperimentSpec(overrides=["train.cael=6"], of_layers=12).on_layers(12) == (["train.cael=6"], None)
    assert ExperimentSpec(overrides=["train.cael=6"]).on_layers(6) == (["train.cael=6"], None)  # no of_layers: as written
