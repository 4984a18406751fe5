"""Bad input never gives a wrong number (issue 18): each probe of the fault probe, as a test.

Stage-level probes run `python -m stages` in a subprocess on a small project (a tiny random
backbone, the mirror's benchmarks) and check the promise: one line, exit code 2, no traceback,
nothing half-written, no NaN in a metrics file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoTokenizer

# Modules, not names: on code without the fixes each test fails by itself instead of the whole file.
from pipeline import modeling
from pipeline.execution import runtime
from pipeline.training import jobs, loop, tasks
from pipeline.config import OptimSettings
from pipeline.params_file import parse_params
from pipeline import io as atomic_io
from pipeline.declarations import sts_tasks
from pipeline.data.readers import MalformedDataError
from pipeline.data.sts_pairs import load_sts_benchmark
from pipeline.errors import PipelineError
from pipeline.evaluation import mteb_tasks
from pipeline.reporting import runs as reporting_runs

from conftest import MIRROR, REPO_ROOT, committed_text, tiny_preset
from tiny_models import save_tiny_bert

SENTEVAL = MIRROR / "senteval"


# ----------------------------------------------------------------------------- a small project


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """data/backbone (tiny random BERT), data/raw/senteval (a copy of the mirror's), a corpus, params.yaml."""
    root = tmp_path_factory.mktemp("project")
    save_tiny_bert(root / "data" / "backbone", seed=5)
    shutil.copytree(SENTEVAL, root / "data" / "raw" / "senteval")
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:200]
    (root / "data" / "raw" / "corpus.txt").write_text("\n".join(lines) + "\n")
    (root / "data" / "rtt").mkdir(parents=True)
    (root / "data" / "rtt" / "I.txt").write_text("\n".join(lines) + "\n")
    shutil.copytree(MIRROR / "raw" / "STSBenchmark", root / "data" / "raw" / "original" / "STSBenchmark")  # local MTEB suites
    raw = tiny_preset()
    raw["device"] = "cpu"
    raw["eval"].update(max_pairs=100, batch_size=64, max_length=32)
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    return root


def with_settings(project: Path, name: str, **overrides) -> Path:
    """A params file beside params.yaml with dotted keys overridden."""
    raw = yaml.safe_load((project / "params.yaml").read_text())
    for key, value in overrides.items():
        node = raw
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run_stage(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stages", *args], cwd=project, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env},
    )


def one_line_exit_2(result: subprocess.CompletedProcess) -> str:
    """The promise: exit 2, no traceback, exactly one `error:` line (returned)."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return line


# ----------------------------------------------------------------------------- 1. missing subset


def test_subsets_are_senteval_fixed_lists():
    assert list(load_sts_benchmark(SENTEVAL, "STS12")) == list(sts_tasks.sts_task("STS12").subsets)
    assert [task.name for task in sts_tasks.PAPERS_TASKS if task.subsets] == ["STS12", "STS13", "STS14", "STS15", "STS16"]


def test_missing_subset_file_is_an_error_naming_it(tmp_path):
    shutil.copytree(SENTEVAL / "STS" / "STS12-en-test", tmp_path / "STS" / "STS12-en-test")
    (tmp_path / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt").unlink()
    with pytest.raises(MalformedDataError, match=r"STS.input.MSRpar.txt does not exist"):
        load_sts_benchmark(tmp_path, "STS12")


def test_evaluate_stage_with_a_missing_subset_fails_instead_of_scoring(project):
    subset = project / "data" / "raw" / "senteval" / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt"
    aside = project / "MSRpar.txt"
    subset.rename(aside)
    try:
        line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone"))
    finally:
        aside.rename(subset)
    assert "STS.input.MSRpar.txt does not exist" in line
    assert not (project / "reports" / "metrics" / "backbone.json").exists()


# ----------------------------------------------------------------------------- 2. NaN metrics


def test_max_pairs_too_small_for_a_spearman_is_refused(tiny_params_dict):
    tiny_params_dict["eval"]["max_pairs"] = 1
    with pytest.raises(PipelineError, match=r"eval.max_pairs=1: .*100"):
        parse_params(tiny_params_dict)


def test_evaluate_stage_refuses_max_pairs_1(project):
    line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone", "--params",
                                     str(with_settings(project, "pairs", **{"eval.max_pairs": 1}))))
    assert "eval.max_pairs=1" in line


def test_a_non_finite_metric_is_an_error_naming_it_and_nothing_is_written(tmp_path):
    path = tmp_path / "metrics.json"
    with pytest.raises(PipelineError, match=r"metric STS12.subsets.MSRpar is not a finite number"):
        atomic_io.write_json_atomic(path, {"STS12": {"all": 50.0, "subsets": {"MSRpar": math.nan}}, "avg": 1.0})
    assert not path.exists()
    atomic_io.write_json_atomic(path, {"avg": 1.0, "best": None})
    assert json.loads(path.read_text()) == {"avg": 1.0, "best": None}


def test_a_nan_dev_score_stops_model_selection(tmp_path):
    class ConstantEmbedding:  # a degenerate model: every sentence the same vector, Spearman NaN
        def embed(self, model, input_ids, attention_mask):
            return torch.ones(len(input_ids), 4)

    tokenizer = AutoTokenizer.from_pretrained(save_tiny_bert(tmp_path / "bert", seed=0, layers=1))
    score = jobs.stsb_dev_scorer(ConstantEmbedding(), SENTEVAL, tokenizer, 32, torch.device("cpu"), 100, 64, 42)
    with pytest.raises(PipelineError, match=r"STS-B dev score is nan on 100 pairs"):
        score(torch.nn.Identity())


# ----------------------------------------------------------------------------- 3. zero steps


def test_zero_optimizer_steps_is_an_error():
    # length_bucketed drops incomplete batches and steps, so a large grad_accum can leave none
    bucketed = dict(sampling="length_bucketed", batch_size=16)
    with pytest.raises(PipelineError, match=r"0 optimizer steps.*grad_accum=1000"):
        loop.planned_steps(1000, OptimSettings(**bucketed, grad_accum=1000), "pretrain-I")
    assert loop.planned_steps(1000, OptimSettings(**bucketed, grad_accum=2, max_steps=5)) == (31, 5)
    # random keeps the last partial batch and a last short step: 63 batches, one step of all of them
    assert loop.planned_steps(1000, OptimSettings(batch_size=16, grad_accum=1000)) == (1, 1)
    assert loop.planned_steps(1000, OptimSettings(batch_size=16, grad_accum=2, max_steps=5)) == (32, 5)


def test_pretrain_with_zero_steps_fails_before_loading_a_model(project):
    # The backbone is moved away: the stage must stop on the step count before it would look for it.
    backbone, aside = project / "data" / "backbone", project / "backbone-aside"
    backbone.rename(aside)
    try:
        result = run_stage(project, "pretrain", "--tower", "I", "--params",
                           str(with_settings(project, "accum", **{"pretrain.grad_accum": 1000, "pretrain.max_steps": None,
                                                                   "pretrain.sampling": "length_bucketed"})))
    finally:
        aside.rename(backbone)
    assert "0 optimizer steps" in one_line_exit_2(result)
    assert not (project / "data" / "models").exists() and not (project / "reports" / "training").exists()


def test_a_run_resumed_at_its_last_step_reports_the_checkpoints_final_loss(tmp_path):
    backbone = save_tiny_bert(tmp_path / "backbone", seed=3)
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:48]
    examples = [(line,) for line in lines]
    optim = OptimSettings(batch_size=8, max_length=24, max_steps=4, eval_every=100, save_every=2)
    context = runtime.RunContext(torch.device("cpu"), None)

    def run(task):
        return loop.train(task, examples, optim, loop.RunSpec(1e-3, 7, tmp_path / "out", tmp_path / "ckpt"), context)

    killed = tasks.SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24)
    killed.save = lambda model, directory: (_ for _ in ()).throw(KeyboardInterrupt())  # killed after step 4's checkpoint
    with pytest.raises(KeyboardInterrupt):
        run(killed)
    resumed = run(tasks.SimCSETask(backbone, AutoTokenizer.from_pretrained(backbone), 0.1, 0.05, None, 24))
    assert resumed.resumed_from == 4 and resumed.steps == 4
    assert math.isfinite(resumed.final_loss) and resumed.final_loss == resumed.history[-1]["loss"]


# ----------------------------------------------------------------------------- 4. tracebacks


@pytest.fixture
def truncated_model(tmp_path) -> Path:
    folder = save_tiny_bert(tmp_path / "truncated", seed=1)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return folder


def test_truncated_weights_are_one_line_from_the_one_loader(truncated_model):
    with pytest.raises(PipelineError) as error:
        modeling.load_backbone(truncated_model)
    message = str(error.value)
    assert str(truncated_model) in message and "SafetensorError" in message and "dvc repro" in message
    assert "\n" not in message


def test_evaluate_model_with_truncated_weights_exits_2(project, truncated_model, tmp_path):
    output = tmp_path / "scores.json"
    line = one_line_exit_2(run_stage(project, "evaluate", "--model", str(truncated_model), "--output", str(output)))
    assert str(truncated_model) in line
    assert not output.exists()


def test_seed_out_of_range_is_refused(tiny_params_dict):
    for seed in (-1, 2**32):
        tiny_params_dict["seed"] = seed
        with pytest.raises(PipelineError, match=rf"seed={seed}"):
            parse_params(tiny_params_dict)


def test_mteb_hub_tasks_offline_are_one_line(project):
    settings = with_settings(project, "mteb", **{"eval.mteb.enabled": True, "eval.mteb.suite": ["jtcse-sts-en"]})
    line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone", "--params", str(settings)))
    assert "no MTEB task of eval.mteb.suite could be loaded (MTEB task STS17 could not be loaded" in line
    assert "local-sts" in line


def test_unknown_mteb_suite_is_one_line(project):
    settings = with_settings(project, "suite", **{"eval.mteb.enabled": True, "eval.mteb.suite": "no-such-suite"})
    line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone", "--params", str(settings)))
    assert "unknown suite 'no-such-suite'" in line and "jtcse-classification" in line
    assert not (project / "reports" / "mteb" / "backbone.json").exists()


def test_mteb_task_that_cannot_be_loaded_is_a_pipeline_error(monkeypatch):
    (task,) = mteb_tasks.english_sts_tasks(["STS17"])

    def unreachable(**kwargs):
        raise ConnectionError("Couldn't reach 'mteb/sts17-crosslingual-sts' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(task, "load_data", unreachable)
    with pytest.raises(PipelineError, match=r"MTEB task STS17 could not be loaded \(ConnectionError"):
        mteb_tasks.load_task_data(task)


# ----------------------------------------------------------------------------- 6. fingerprint


def test_fingerprint_covers_the_dev_set_settings(tiny_params_dict):
    params = parse_params(tiny_params_dict)

    def fingerprint(**evaluation) -> str:
        changed = params.model_copy(update={"eval": params.eval.model_copy(update=evaluation)})
        return jobs.run_fingerprint(params.pretrain, 1e-5, changed, [("a sentence",)], [])

    assert fingerprint() == fingerprint()
    assert fingerprint(max_pairs=300) != fingerprint(max_pairs=100)
    assert fingerprint(max_length=32) != fingerprint(max_length=64)


# ----------------------------------------------------------------------------- 7. device


def test_device_must_be_auto_cpu_or_cuda():
    with pytest.raises(PipelineError, match=r"device 'gpu' is not one of auto, cpu, cuda"):
        runtime.resolve_device("gpu")


def test_evaluate_device_gpu_exits_2(project, tmp_path):
    line = one_line_exit_2(run_stage(project, "evaluate", "--model", "data/backbone", "--device", "gpu",
                                     "--output", str(tmp_path / "x.json")))
    assert "'gpu'" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of device: cuda on a machine without CUDA")
def test_device_cuda_is_checked_when_embeddings_are_cached(project):
    first = run_stage(project, "evaluate", "--name", "backbone")  # fills the embedding cache
    assert first.returncode == 0, first.stderr[-3000:]
    assert list((project / "data" / "cache" / "embeddings").glob("*/*.npz"))  # <tower key>/<shard>.npz
    metrics = project / "reports" / "metrics" / "backbone.json"
    assert "NaN" not in metrics.read_text()
    line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone", "--params",
                                     str(with_settings(project, "cuda", device="cuda"))))
    assert "device=cuda" in line


# ----------------------------------------------------------------------------- 8. temp files


def test_temporary_files_are_not_created_in_the_output_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()  # a project: its scratch folder is .tmp/
    tables = Path("reports") / "tables"
    with atomic_io.atomic_path(tables / "t.md") as temporary:
        temporary.write_text("x")
        assert list(tables.iterdir()) == []
        assert temporary.resolve().parent == (tmp_path / ".tmp")
    with atomic_io.atomic_directory(Path("data") / "checkpoints" / "run" / "step-1") as folder:
        (folder / "w").write_text("x")
        assert list((tmp_path / "data" / "checkpoints" / "run").iterdir()) == []
    assert (tables / "t.md").read_text() == "x" and (tmp_path / "data/checkpoints/run/step-1/w").is_file()
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_leftovers_of_a_killed_write_are_swept_by_the_next_one(tmp_path):
    code = (
        "import time; from pathlib import Path; from pipeline.io import atomic_path, atomic_directory\n"
        "with atomic_path(Path('reports/tables/t.md')) as t, atomic_directory(Path('data/checkpoints/r/step-2')) as d:\n"
        "    t.write_text('half'); (d / 'w').write_bytes(b'0' * 1000); print('ready', flush=True); time.sleep(60)\n"
    )
    (tmp_path / "dvc.yaml").touch()
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list((tmp_path / "reports" / "tables").iterdir()) == []
    assert list((tmp_path / "data" / "checkpoints" / "r").iterdir()) == []
    assert len(list((tmp_path / ".tmp").iterdir())) == 2  # the killed run's, outside every output folder
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        atomic_io.write_text_atomic(Path("reports/other.txt"), "y")
    finally:
        os.chdir(cwd)
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_directory_replacement_keeps_the_old_folder_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    destination = tmp_path / "model"
    destination.mkdir()
    (destination / "old.txt").write_text("old")
    real_replace = os.replace

    def failing_replace(source, target):
        if Path(target) == destination and not Path(source).name.endswith(".old"):  # the new folder's move
            raise OSError("disk full")
        return real_replace(source, target)

    monkeypatch.setattr(atomic_io.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        with atomic_io.atomic_directory(destination) as folder:
            (folder / "new.txt").write_text("new")
    assert (destination / "old.txt").read_text() == "old"
    monkeypatch.setattr(atomic_io.os, "replace", real_replace)
    with atomic_io.atomic_directory(destination) as folder:
        (folder / "new.txt").write_text("new")
    assert [path.name for path in destination.iterdir()] == ["new.txt"]


# ----------------------------------------------------------------------------- 9. permissions


def test_outputs_get_the_usual_umask_permissions(tmp_path):
    previous = os.umask(0o022)
    try:
        atomic_io.write_text_atomic(tmp_path / "metrics.json", "{}")
        with atomic_io.atomic_directory(tmp_path / "model") as folder:
            (folder / "w").write_text("x")
    finally:
        os.umask(previous)
    assert (tmp_path / "metrics.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o755


def test_written_weights_get_the_usual_permissions_too(tmp_path):
    """safetensors writes through its own mkstemp twin (0600); outputs are 0666 less the umask."""
    from safetensors.torch import save_file

    previous = os.umask(0o022)
    try:
        with atomic_io.atomic_directory(tmp_path / "model") as folder:
            save_file({"w": torch.zeros(2)}, folder / "model.safetensors")
            (folder / "sub").mkdir(mode=0o700)
            save_file({"w": torch.zeros(2)}, folder / "sub" / "model.safetensors")
        with atomic_io.atomic_path(tmp_path / "alone.safetensors") as temporary:
            save_file({"w": torch.zeros(2)}, temporary)
    finally:
        os.umask(previous)
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "model" / "sub").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "model" / "sub" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "alone.safetensors").stat().st_mode & 0o777 == 0o644


def test_a_scratch_name_whose_number_is_no_pid_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "pipeline-tmp-99999999999-x").write_text("not ours")  # os.kill would raise OverflowError
    atomic_io.write_text_atomic(Path("reports") / "t.md", "x")
    assert (tmp_path / "reports" / "t.md").read_text() == "x"
    assert (tmp_path / ".tmp" / "pipeline-tmp-99999999999-x").read_text() == "not ours"


def test_a_file_in_place_of_the_scratch_folder_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    (tmp_path / ".tmp").write_text("")
    with pytest.raises(PipelineError, match=r"\.tmp is not a folder.*remove") as error:
        atomic_io.write_text_atomic(Path("reports") / "t.md", "x")
    assert "\n" not in str(error.value) and not (tmp_path / "reports" / "t.md").exists()


def test_bad_settings_stop_the_checkpoints_stage_at_load_in_one_line(project):
    """An endpoint without a scheme was a traceback deep in the HTTP client; `rows: []` scored nothing,
    exited 0 and overwrote reports/checkpoints.json with no rows."""
    (project / "conf").mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "conf" / "checkpoints.yaml", project / "conf" / "checkpoints.yaml")
    cases = {
        "endpoint": ({"data.hub_endpoint": "127.0.0.1:9", "checkpoints.source": "hub"},
                     "data.hub_endpoint='127.0.0.1:9' is not a hub URL"),
        "no-rows": ({"checkpoints.rows": []}, "checkpoints.rows"),
    }
    for name, (overrides, expected) in cases.items():
        line = one_line_exit_2(run_stage(project, "checkpoints", "--params", str(with_settings(project, name, **overrides))))
        assert expected in line, (name, line)
    assert not (project / "reports" / "checkpoints.json").exists()


def test_a_stage_whose_params_file_changed_while_it_ran_is_not_recorded(tmp_path, capsys):
    """A second `dvc exp run` rewrites params.yaml under a running stage; DVC would record the stage's
    outputs under settings it never read. The stage exits 2 instead, so DVC keeps it out of dvc.lock."""
    import typer

    from pipeline.params_file import load_params
    from stages.common import stage

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tiny_preset()))

    @stage
    def command(rewrite: bool, params: Path = path) -> str:
        seed = load_params(params).seed
        if rewrite:  # what the second experiment's Hydra composition does meanwhile
            path.write_text(yaml.safe_dump({**tiny_preset(), "train": {**tiny_preset()["train"], "cael": 4}}))
        return f"ran with seed {seed}"

    assert command(False) == f"ran with seed {tiny_preset()['seed']}"
    with pytest.raises(typer.Exit) as stopped:
        command(True)
    assert stopped.value.exit_code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert "params.yaml changed while this stage ran" in line and "dvc exp run --queue" in line


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("eval.tasks", [], "eval.tasks: List should have at least 1 item"),  # was an IndexError in the evaluator
    ("train.cael", True, "train.cael=True"),  # was taken as 1
    ("train.drop_layernorm", True, "train.drop_layernorm=True"),
    ("checkpoints.rows", [], "checkpoints.rows: List should have at least 1 item"),
    ("data.hub_endpoint", "127.0.0.1:9", "is not a hub URL; allowed: http(s)://host[:port]"),
])
def test_settings_of_the_wrong_kind_are_refused_at_load(tiny_params_dict, key, value, expected):
    section, name = key.split(".")
    tiny_params_dict.setdefault(section, {})[name] = value
    with pytest.raises(PipelineError) as error:
        parse_params(tiny_params_dict)
    assert expected in str(error.value) and "\n" not in str(error.value)


# ----------------------------------------------------------------------------- rules between settings, at load


def test_a_bad_combination_stops_the_stage_at_load_before_any_model(project):
    # No pretrained towers exist in this project: the joint stage must stop on the settings first
    # (the other rules between settings: tests/test_config.py, through the same load).
    overrides = {"train.losses": [], "train.gaussian.enabled": True, "train.gaussian.weight": 0.0}
    result = run_stage(project, "joint", "--params", str(with_settings(project, "combination", **overrides)))
    line = one_line_exit_2(result)
    assert line == "error: invalid params: train.losses=[] switches every loss term off; allowed: a non-empty subset of nce, icnce, ictn"
    assert not (project / "data" / "models").exists()


# ----------------------------------------------------------------------------- the report's inputs (issue 43)

DETAILS = "reports/metrics/details/joint.json"
BOOTSTRAP = "reports/metrics/bootstrap/joint.json"


def committed_json(path: str) -> dict:
    """A report input as the pipeline wrote it (the committed one), to damage."""
    return json.loads(committed_text(path))


def report_project(root: Path, params: dict, files: dict[str, str]) -> None:
    """params.yaml, the committed tables.yaml and claims.yaml, and the given report inputs (path → text)."""
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    for name in ("tables.yaml", "claims.yaml"):
        (root / name).write_text((REPO_ROOT / name).read_text())
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def run_report(root: Path, monkeypatch, capsys, experiments: list | None = None) -> str:
    """The report stage in `root` (experiments: these runs instead of `dvc exp show`); its one error line."""
    import typer

    from stages.report import command

    monkeypatch.chdir(root)
    monkeypatch.setattr(reporting_runs, "search_experiments", lambda commits: reporting_runs.ExperimentSearch(experiments or []))
    with pytest.raises(typer.Exit) as caught:
        command(params=Path("params.yaml"), tables_file=Path("tables.yaml"), claims_file=Path("claims.yaml"), queue=None, run=False)
    assert caught.value.exit_code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert not (root / "reports" / "tables").exists() and not (root / "reports" / "REPRODUCTION.md").exists()  # nothing written
    return line


def test_a_report_over_a_truncated_bootstrap_file_exits_2_naming_it(tmp_path, monkeypatch, capsys, tiny_params_dict):
    """It read as "no bootstrap resamples", made the model's verdicts inconclusive and exited 0 (D9)."""
    files = {path: committed_text(path) for path in (DETAILS, "reports/metrics/details/uc.json", "reports/metrics/bootstrap/uc.json")}
    files[BOOTSTRAP] = committed_text(BOOTSTRAP)[:5000]
    report_project(tmp_path, tiny_params_dict, files)
    line = run_report(tmp_path, monkeypatch, capsys)
    assert line.startswith(f"error: {BOOTSTRAP} is corrupt (not valid JSON: ")
    assert line.endswith(f"rebuild it with `dvc repro evaluate@joint`, or `git checkout -- {BOOTSTRAP}` restores the committed one")


def test_a_nan_in_a_workspace_result_stops_the_report_instead_of_taking_another_runs(tmp_path, monkeypatch, capsys,
                                                                                     tiny_params_dict):
    """A NaN avg made tncse-uc-beats-twin take TNCSE from the committed commit, the table still
    saying "workspace" (D12): the workspace's file is corrupt, and that is what the report says."""
    committed = {path: committed_json(path) for path in (DETAILS, BOOTSTRAP)}
    damaged = committed_text(DETAILS).replace('"avg": 73.64', '"avg": NaN', 1)
    assert "NaN" in damaged
    report_project(tmp_path, tiny_params_dict, {DETAILS: damaged, BOOTSTRAP: committed_text(BOOTSTRAP)})
    line = run_report(tmp_path, monkeypatch, capsys, [reporting_runs.Run("commit 35ff6e0", tiny_params_dict, committed)])
    assert line.startswith(f"error: {DETAILS} is corrupt (it holds NaN, which is not a finite number)")


def edited(path: str, change) -> str:
    data = committed_json(path)
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("path, text, expected", [
    # D13: Infinity passed through ("+inf [−0.28, 0.17] holds")
    (DETAILS, lambda: committed_text(DETAILS).replace('"avg": 73.64', '"avg": Infinity', 1), "it holds Infinity"),
    (DETAILS, lambda: committed_text(DETAILS).replace('"avg": 73.64', '"avg": 1e999', 1), "avg is not a finite number"),
    (DETAILS, lambda: edited(DETAILS, lambda data: data.update(avg="73.64")), "avg is '73.64', not a number"),
    (DETAILS, lambda: edited(DETAILS, lambda data: data["STS12"].pop("all")), "STS12.all is null, not a number"),
    (DETAILS, lambda: edited(DETAILS, lambda data: data["intervals"]["avg"].update(low=80.0)),
     "intervals.avg: low 80.0 is above high"),
    # D11: null scores gave "[nan, nan] inconclusive"
    (BOOTSTRAP, lambda: edited(BOOTSTRAP, lambda data: data["scores"].update(avg=[None] * 1000)),
     "scores.avg[0] is null, not a finite number"),
    # D10: scores as strings, or 999 scores where 1000 are expected, were a ValueError traceback
    (BOOTSTRAP, lambda: edited(BOOTSTRAP, lambda data: data["scores"].update(STS13=[str(v) for v in data["scores"]["STS13"]])),
     "scores.STS13[0] is '"),
    (BOOTSTRAP, lambda: edited(BOOTSTRAP, lambda data: data["scores"]["STS12"].pop()),
     "scores.STS12 is 999 scores where 1000 are expected"),
    (BOOTSTRAP, lambda: edited(BOOTSTRAP, lambda data: data.update(resamples="1000")), "resamples is '1000', not a count"),
    (BOOTSTRAP, lambda: edited(BOOTSTRAP, lambda data: data.update(indices=None)), "indices is null"),
    (BOOTSTRAP, lambda: "[]", "the file is a list, not a mapping"),
    ("reports/metrics/joint.json", lambda: '{"STS12": NaN, "avg": 70.0}', "it holds NaN"),
    ("reports/analysis/joint.json", lambda: '{"gmacs": -Infinity}', "it holds -Infinity"),
    ("reports/mteb/joint.json", lambda: '{"suites": {"local-sts": {"avg": 1e400}}}', "suites.local-sts.avg is not a finite number"),
    ("reports/mteb/joint.json", lambda: '\udcff', "it is not UTF-8 text"),
])
def test_a_corrupt_report_input_is_one_line_naming_it(tmp_path, tiny_params_dict, path, text, expected):
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(text(), errors="surrogateescape")
    with pytest.raises(PipelineError) as caught:
        reporting_runs.workspace_run(tiny_params_dict, tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{path} is corrupt (") and expected in message and "\n" not in message


def test_details_and_bootstrap_files_of_two_runs_are_refused(tmp_path, tiny_params_dict):
    """The half-updated set of D17: new details beside an old bootstrap file (another resample count)."""
    def older(data: dict) -> None:
        data.update(resamples=40, indices="0" * 64, scores={task: scores[:40] for task, scores in data["scores"].items()})

    for path, text in ((DETAILS, committed_text(DETAILS)), (BOOTSTRAP, edited(BOOTSTRAP, older))):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    with pytest.raises(PipelineError, match=rf"^{BOOTSTRAP} is corrupt \(its 40 resamples are not the 1000 of {DETAILS} "
                                            r"\(other indices\): the two files come from different runs\); rebuild it"):
        reporting_runs.workspace_run(tiny_params_dict, tmp_path)


def test_absent_inputs_are_not_run_and_an_empty_bootstrap_file_is_no_resamples(tmp_path, tiny_params_dict):
    """Absent stays absent (a row missing, a claim not run); `eval.bootstrap: 0` writes an empty file that is valid."""
    (tmp_path / "reports" / "metrics" / "bootstrap").mkdir(parents=True)
    (tmp_path / "reports" / "metrics" / "bootstrap" / "uc.json").write_text(
        json.dumps({"resamples": 0, "seed": 42, "indices": None, "scores": {}}))
    run = reporting_runs.workspace_run(tiny_params_dict, tmp_path)
    assert run.resamples("joint") is None and run.resamples("uc")["resamples"] == 0 and run.value("joint", "avg") is None


def test_training_records_are_checked_when_read(tmp_path):
    from pipeline.writeup.report import write_training_figures

    details = tmp_path / "reports" / "training" / "details"
    details.mkdir(parents=True)
    (details / "joint.json").write_text('{"steps": 12, "environment": "cpu"}')
    with pytest.raises(PipelineError, match=r"^reports/training/details/joint.json is corrupt \(environment is 'cpu', not a mapping\)"):
        reporting_runs.recorded_environments(tmp_path)
    (details / "joint.json").write_text('{"steps": 12, "best_dev_stsb": NaN}')
    with pytest.raises(PipelineError, match="it holds NaN"):
        reporting_runs.recorded_environments(tmp_path)
    training = tmp_path / "reports" / "training"
    (training / "joint.csv").write_text("step,loss,dev_stsb\n1,0.5,\n2,0.4,80.1\n")
    write_training_figures(training, tmp_path / "figures")  # an empty cell is a step without a dev score
    (training / "joint.csv").write_text("step,loss\n1,0.5\n2,0.4\n3,0.3x\n")
    with pytest.raises(PipelineError, match=r"reports/training/joint.csv is corrupt \(column loss holds text, not numbers\)"):
        write_training_figures(training, tmp_path / "figures2")
    (training / "joint.csv").write_text("step,loss\n1,0.5\n,0.4\n")
    with pytest.raises(PipelineError, match="a row without its step"):
        write_training_figures(training, tmp_path / "figures2")
    (training / "joint.csv").write_text("step,loss\n1,0.5\n2,inf\n")
    with pytest.raises(PipelineError, match="a value that is not a finite number"):
        write_training_figures(training, tmp_path / "figures2")
    assert not (tmp_path / "figures2").exists()


def test_a_corrupt_file_of_an_experiments_commit_names_the_commit(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "reports" / "metrics" / "bootstrap").mkdir(parents=True)
    (tmp_path / BOOTSTRAP).write_text(committed_text(BOOTSTRAP)[:300])
    git("add", ".")
    git("commit", "-qm", "run")
    rev = git("rev-parse", "HEAD")
    with pytest.raises(PipelineError) as caught:
        reporting_runs.revision_files(rev, tmp_path)
    assert str(caught.value).startswith(f"{BOOTSTRAP} of revision {rev[:7]} is corrupt (not valid JSON")
    assert "dvc exp remove" in str(caught.value)
    listed = [{"rev": rev, "name": "main", "data": {"params": {"params.yaml": {"data": {"seed": 1}}},
                                                   "metrics": {"reports/metrics/joint.json": {"data": {"avg": float("nan")}}}}}]
    with pytest.raises(PipelineError, match=r"^reports/metrics/joint.json of commit .* is corrupt \(avg is not a finite number\)"):
        reporting_runs.experiment_runs(listed)


def test_checkpoints_results_are_checked_when_read(tmp_path):
    from pipeline.writeup.checkpoints_table import read_results

    results = json.loads(committed_text("reports/checkpoints.json"))
    key = next(key for key, entry in results["rows"].items() if entry["status"] == "scored")
    results["rows"][key]["scores"]["avg"] = "73.1"
    (tmp_path / "checkpoints.json").write_text(json.dumps(results))
    with pytest.raises(PipelineError, match=rf"checkpoints.json is corrupt \(rows.{key}: avg is '73.1', not a number\); rerun"):
        read_results(tmp_path / "checkpoints.json")


# ----------------------------------------------------------------------------- a stage's outputs as one set (D17)


def test_the_evaluate_stage_writes_all_its_outputs_or_none(project):
    """A reports/ that could not be written failed after the details and bootstrap files were
    already written, a half-updated set (D17): here a file in place of reports/mteb."""
    outputs = [project / "reports" / folder / "backbone.json" for folder in ("metrics/details", "metrics/bootstrap", "metrics")]
    before = {path: path.read_bytes() if path.is_file() else None for path in outputs}
    mteb = project / "reports" / "mteb"
    shutil.rmtree(mteb, ignore_errors=True)
    mteb.parent.mkdir(exist_ok=True)
    mteb.write_text("not a folder")
    try:
        settings = with_settings(project, "no-mteb", **{"eval.mteb.enabled": False, "eval.bootstrap": 40})
        line = one_line_exit_2(run_stage(project, "evaluate", "--name", "backbone", "--params", str(settings)))
    finally:
        mteb.unlink()
    assert line == "error: cannot create the folder reports/mteb: File exists"
    assert {path: path.read_bytes() if path.is_file() else None for path in outputs} == before


def test_a_set_whose_last_rename_fails_puts_the_first_ones_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    paths = [Path("reports") / name for name in ("a.json", "b.json", "c.json")]
    paths[0].parent.mkdir()
    paths[0].write_text("old a")
    paths[1].write_text("old b")
    replace = os.replace

    def refuse_c(source, destination):
        if Path(destination).name == "c.json":
            raise PermissionError(13, "Permission denied")
        return replace(source, destination)

    monkeypatch.setattr(atomic_io.os, "replace", refuse_c)
    with pytest.raises(PipelineError) as caught:
        atomic_io.write_json_files_atomic({path: {"new": 1} for path in paths})
    assert str(caught.value) == (
        "cannot write reports/c.json: Permission denied; none of the 3 files (a.json, b.json, c.json) was changed. "
        "Make reports writable and rerun"
    )
    assert paths[0].read_text() == "old a" and paths[1].read_text() == "old b" and not paths[2].exists()
    assert list((tmp_path / ".tmp").iterdir()) == []  # no temporary or backup left
    monkeypatch.setattr(atomic_io.os, "replace", replace)
    atomic_io.write_json_files_atomic({path: {"new": 1} for path in paths})
    assert all(json.loads(path.read_text()) == {"new": 1} for path in paths)
