"""The bench stage's library: the released-code baseline equals the pipeline's losses, the whole
run returns finite numbers under the expected keys, its counts equal counts made independently
here, its ratios are the ratios of its timings, the figures of docs/benchmarks.md are rendered from the JSON,
and the stage writes its JSON. No assertions on speed: the numbers depend on the machine."""

import json
import math
from dataclasses import replace

import pytest
import torch
import typer
import yaml
from transformers import AutoConfig, AutoTokenizer
from typer.testing import CliRunner

from pipeline import losses
from tools.benchmark import (
    QUICK,
    SECTIONS,
    BENCH_TRAINING_ITEMS,
    format_summary_table,
    joint_loss_check,
    looped_ictn,
    looped_tensor_norm_loss,
    looped_twin_loss,
    pad_to_length,
    run_benchmarks,
    summarize,
    time_repeats,
    typical_batch,
)
from tools.benchmark.readme import readme_block, render_readme_section
from pipeline.config import TrainSettings
from pipeline.params_file import parse_params
from pipeline.evaluation.embedder import AUTO_TOKEN_BUDGET
from pipeline.evaluation.sts import load_tasks
from pipeline.errors import PipelineError
from pipeline.execution.runtime import RunContext
from pipeline.training.tasks import TwinTask
from stages import bench

from conftest import MIRROR, REPO_ROOT, committed_text, tiny_preset
from tiny_models import save_tiny_bert

CPU = RunContext(torch.device("cpu"), None)
WIKI = MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt"
SENTEVAL = MIRROR / "senteval"


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    with WIKI.open(encoding="utf-8") as lines:
        return [line.rstrip("\n") for _, line in zip(range(64), lines) if line.strip()]


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    # 6 layers, so that the default stages' 1 and 6 CAELs both divide the layer count
    return save_tiny_bert(tmp_path_factory.mktemp("bench") / "backbone", seed=5, layers=6)


def test_looped_tensor_norm_loss_equals_the_vectorised_ictn():
    generator = torch.Generator().manual_seed(0)
    last = torch.randn(2, 16, 8, generator=generator)
    pooled = torch.randn(2, 16, 8, generator=generator)
    last[1, 1] = -last[0, 0]  # a negative cosine: replaced by 1e-4 both ways
    for factor in (0.5, 1.0):
        torch.testing.assert_close(looped_ictn(last, pooled, factor), losses.ictn(last, pooled, factor), rtol=0, atol=1e-6)
    one_way = looped_tensor_norm_loss(last[0], last[1], pooled[0], pooled[1])
    torch.testing.assert_close(one_way, losses.tensor_norm_loss(last[0], last[1], pooled[0], pooled[1]), rtol=0, atol=1e-6)


def test_looped_loss_has_the_same_gradient():
    last = torch.randn(2, 8, 4, requires_grad=True)
    pooled = torch.randn(2, 8, 4, requires_grad=True)
    looped = torch.autograd.grad(looped_ictn(last, pooled), (last, pooled))
    vectorised = torch.autograd.grad(losses.ictn(last, pooled), (last, pooled))
    for a, b in zip(looped, vectorised):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_baseline_runs_the_looped_kernel_inside_the_tasks_own_loss(backbone, sentences, monkeypatch):
    from tools.benchmark import released_code as baseline

    calls = []
    looped = baseline.looped_tensor_norm_loss
    monkeypatch.setattr(baseline, "looped_tensor_norm_loss", lambda *args: calls.append(1) or looped(*args))
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    task = TwinTask((backbone, backbone), tokenizer, TrainSettings(dropout=0.0, batch_size=4, max_length=16), seed=1)
    batch = typical_batch(tokenizer, sentences, 4, 16, seed=1, device=torch.device("cpu"))
    with torch.no_grad():
        terms = looped_twin_loss(task, task.model, batch.padded(), 3)
        assert len(calls) == 2  # ICTN both ways, through TwinTask.loss's own wiring
        vectorised = task.loss(task.model, batch.dynamic(), 3)
    assert len(calls) == 2  # outside the baseline the vectorised kernel runs
    assert set(terms) == set(vectorised)
    torch.testing.assert_close(terms["loss"], vectorised["loss"], rtol=0, atol=1e-5)


def test_pad_to_length_pads_every_row_to_the_length():
    batch = pad_to_length([[2, 7, 3], [2, 3]], 0, torch.device("cpu"), 6)
    assert batch["input_ids"].tolist() == [[2, 7, 3, 0, 0, 0], [2, 3, 0, 0, 0, 0]]
    assert batch["attention_mask"].sum(1).tolist() == [3, 2]


@pytest.mark.parametrize("cael", [0, 2])
def test_padded_looped_joint_loss_equals_the_dynamic_vectorised_one(backbone, sentences, cael):
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    settings = TrainSettings(cael=cael, dropout=0.1, batch_size=8, max_length=256)
    task = TwinTask((backbone, backbone), tokenizer, settings, seed=1)
    batch = typical_batch(tokenizer, sentences, 8, 256, seed=1, device=torch.device("cpu"))
    assert batch.width < 256 and batch.padded()[0]["input_ids"].shape == (8, 256)  # dynamic padding pads less
    check = joint_loss_check(task, task.model, batch, CPU)
    assert math.isfinite(check["dynamic_vectorised"])
    assert check["abs_diff"] < 1e-5, check
    assert check["ictn_looped_vs_vectorised_abs_diff"] < 1e-6
    assert task.model.training  # the check restores the mode
    ictn = losses.ictn
    looped = looped_twin_loss(task, task.model.eval(), batch.padded(), 0)
    assert losses.ictn is ictn  # the looped kernel is swapped in only for the call
    assert set(looped) == set(task.loss(task.model, batch.dynamic(), 0))  # the task's own terms


def test_time_repeats_summarises_the_timed_calls():
    calls = []
    timing = time_repeats(lambda: calls.append(1), repeats=3, warmup=2, device=torch.device("cpu"))
    assert len(calls) == 5 and timing["repeats"] == 3 and len(timing["seconds"]) == 3
    assert timing["min"] <= timing["median"] <= timing["max"] and timing["iqr"] >= 0
    assert timing["peak_memory_mb"] > 0
    assert summarize([1.0, 2.0, 3.0, 4.0])["median"] == 2.5
    with pytest.raises(PipelineError):
        time_repeats(lambda: None, repeats=0)


def _finite_numbers(value, path="") -> list[str]:
    """Paths of numbers in `value` that are not finite."""
    if isinstance(value, dict):
        return [bad for key, item in value.items() for bad in _finite_numbers(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [bad for index, item in enumerate(value) for bad in _finite_numbers(item, f"{path}[{index}]")]
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    return []


TIMING_KEYS = {"median", "min", "max", "iqr", "repeats", "cpu_median"}
STEP_KEYS = {"steps_per_s", "tokens_per_s", "sentences_per_s", "step_seconds", "padded_width",
             "epoch_mean_padded_width", "real_tokens", "real_tokens_per_sentence", "peak_memory_mb"}
TOP_KEYS = {"scale", "device", "precision", "created", "command", "machine", "backbone", "settings", *SECTIONS,
            "section_seconds", "summary", "wall_seconds", "notes"}
EVAL_VARIANT_KEYS = {"sentences_per_s", "seconds", "batches", "padded_tokens", "peak_memory_mb"}


def _rounded(value: float, digits: int):
    """`value` as the JSON holds it: rounded to `digits` decimals, from timings rounded to 5 decimals. The two
    errors add up (a ratio of rounded timings, then rounded itself), so the tolerance is their sum."""
    return pytest.approx(value, rel=0, abs=0.5 * 10**-digits + 1e-3 * abs(value))


def _token_count(tokenizer, sentences, max_length: int) -> list[int]:
    return [len(tokenizer(sentence, truncation=True, max_length=max_length)["input_ids"]) for sentence in sentences]


def _padded_tokens(lengths: list[int], batch_size: int) -> tuple[int, int]:
    """(padded tokens, batches) of `lengths` cut into batches in this order, each padded to its longest."""
    batches = [lengths[start : start + batch_size] for start in range(0, len(lengths), batch_size)]
    return sum(max(batch) * len(batch) for batch in batches), len(batches)


@pytest.fixture(scope="module")
def quick_run(backbone, sentences):
    raw = tiny_preset()
    params = parse_params(raw)
    results = run_benchmarks(QUICK, params, device="cpu", backbone_dir=backbone, corpus=sentences, senteval=SENTEVAL,
                             show_progress=False)
    return params, results


def test_run_benchmarks_on_a_one_point_grid(quick_run):
    params, results = quick_run
    json.dumps(results)  # JSON-ready
    assert not _finite_numbers(results)
    assert set(results) == TOP_KEYS
    sections = results["section_seconds"]
    rounding = 0.05 * (len(sections) + 1)  # each section and the wall time are rounded to 0.1 s
    assert set(sections) == set(SECTIONS) and sum(sections.values()) <= results["wall_seconds"] + rounding
    assert {"torch", "transformers", "cpu_count_logical", "gpu", "load_average"} <= set(results["machine"])
    assert results["backbone"]["layers"] == 6
    assert set(results["training"]) == set(BENCH_TRAINING_ITEMS)
    for stage in BENCH_TRAINING_ITEMS:
        record = results["training"][stage]["b4_l16"]
        assert set(record) == STEP_KEYS and set(record["step_seconds"]) == TIMING_KEYS
        median = record["step_seconds"]["median"]
        assert record["steps_per_s"] == _rounded(1 / median, 4)
        assert record["tokens_per_s"] == _rounded(record["real_tokens"] / median, 1)
        assert record["peak_memory_mb"] > 0
    joint = results["joint_padding"]
    assert set(joint["variants"]) == {"dynamic_vectorised", "padded_looped", "dynamic_looped", "padded_vectorised"}
    medians = {name: record["step_seconds"]["median"] for name, record in joint["variants"].items()}
    assert joint["speedup"] == _rounded(medians["padded_looped"] / medians["dynamic_vectorised"], 3)
    assert joint["speedup_from_dynamic_padding"] == _rounded(medians["padded_vectorised"] / medians["dynamic_vectorised"], 3)
    assert joint["variants"]["padded_looped"]["padded_width"] == 16  # the released code pads to max_length
    assert joint["loss"]["abs_diff"] < 1e-5
    evaluation = results["evaluation"]
    assert evaluation["sentences"] == 2 * 4 * len(params.eval.tasks)
    variants = ("evaluator", "evaluator_fixed_batches", "evaluator_stock_forward", "naive")
    assert set(variants) <= set(evaluation) and params.eval.token_budget == "auto"
    assert evaluation["token_budget"] == AUTO_TOKEN_BUDGET["cpu"]
    seconds = {name: evaluation[name]["seconds"]["median"] for name in variants}
    assert evaluation["speedup"] == _rounded(seconds["naive"] / seconds["evaluator"], 3)
    assert evaluation["speedup_from_batching"] == _rounded(seconds["naive"] / seconds["evaluator_stock_forward"], 3)
    assert evaluation["speedup_vs_fixed_batches"] == _rounded(seconds["evaluator_fixed_batches"] / seconds["evaluator"], 3)
    assert evaluation["max_abs_embedding_diff"] < 1e-4  # same embeddings whichever way they are computed
    assert evaluation["max_abs_embedding_diff_vs_fixed_batches"] < 1e-5
    startup = results["startup"]
    parts = [startup[key] for key in ("import_s", "load_s", "first_call_s")]
    assert min(parts) > 0 and startup["total_s"] == pytest.approx(sum(parts), abs=2e-3)
    assert startup["cli_help_s"] > startup["interpreter_s"] > 0 and startup["repeats"] == QUICK.eval_repeats
    assert "torch" in [row["module"] for row in startup["import_top"]]
    translation = results["translation"]
    assert translation["sentences"] == QUICK.translation_sentences and translation["google_loopback_requests"] >= 1
    assert set(translation["cache_hits_per_s"]) == {"median", "min", "max", "iqr", "repeats"}
    summary = results["summary"]
    assert summary["joint_speedup_dynamic_vectorised_vs_padded_looped"] == joint["speedup"]
    assert summary["pretrain_steps_per_s_b4_l16"] == results["training"]["pretrain"]["b4_l16"]["steps_per_s"]


def test_training_counts_the_real_tokens_of_the_timed_batch(quick_run, backbone, sentences):
    params, results = quick_run
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    batch = typical_batch(tokenizer, sentences, 4, 16, params.seed, torch.device("cpu"))
    real = sum(_token_count(tokenizer, batch.sentences, 16))  # counted here, not by the benchmark
    assert batch.real_tokens == real == int(batch.padded()[0]["attention_mask"].sum())
    assert batch.width == max(_token_count(tokenizer, batch.sentences, 16))
    for stage in BENCH_TRAINING_ITEMS:
        record = results["training"][stage]["b4_l16"]
        assert record["real_tokens"] == real and record["padded_width"] == batch.width
        assert record["real_tokens_per_sentence"] == round(real / 4, 2)


def test_evaluation_counts_the_tokens_each_batching_feeds(quick_run, backbone):
    params, results = quick_run
    evaluation = results["evaluation"]
    tokenizer = AutoTokenizer.from_pretrained(backbone)
    sentences = [sentence for task in load_tasks(SENTEVAL, params.eval.tasks, QUICK.eval_max_pairs, seed=params.seed) for sentence in task.sentences]
    length = dict(zip(sentences, _token_count(tokenizer, sentences, params.eval.max_length)))
    unique = sorted(set(sentences), key=lambda sentence: (-length[sentence], sentence))  # the evaluator's order
    assert evaluation["evaluator"]["unique_sentences"] == len(unique)
    assert evaluation["real_tokens_unique"] == sum(length[sentence] for sentence in unique)
    batch_size = params.eval.batch_size
    padded, batches = _padded_tokens([length[sentence] for sentence in unique], batch_size)
    fixed = evaluation["evaluator_fixed_batches"]
    assert (fixed["padded_tokens"], fixed["batches"]) == (padded, batches)
    budgeted = [[]]  # greedy: longest first, a batch grows while (count + 1) × its first length fits the budget
    for sentence in unique:
        if budgeted[-1] and (len(budgeted[-1]) + 1) * length[budgeted[-1][0]] > evaluation["token_budget"]:
            budgeted.append([])
        budgeted[-1].append(sentence)
    padded = sum(len(batch) * length[batch[0]] for batch in budgeted)
    assert (evaluation["evaluator"]["padded_tokens"], evaluation["evaluator"]["batches"]) == (padded, len(budgeted))
    padded, batches = _padded_tokens([length[sentence] for sentence in sentences], batch_size)
    assert (evaluation["naive"]["padded_tokens"], evaluation["naive"]["batches"]) == (padded, batches)


def test_the_readme_figures_are_rendered_from_the_committed_json():
    results = json.loads(committed_text("reports/bench.json"))  # a later `dvc repro` may have rewritten the workspace's
    assert readme_block(committed_text("docs/benchmarks.md")) == render_readme_section(results)
    changed = json.loads(json.dumps(results))
    changed["joint_padding"]["speedup"] = 9.876
    assert "**9.88×**" in render_readme_section(changed) and "**9.88×**" not in render_readme_section(results)


def test_a_cael_above_the_layer_count_is_skipped(tmp_path, sentences, tiny_params_dict):
    params = parse_params(tiny_params_dict)
    two_layers = save_tiny_bert(tmp_path / "two", seed=1, layers=2)
    scale = replace(QUICK, stages=("jtcse-6", "jtcse-2-mean"))
    results = run_benchmarks(scale, params, device="cpu", backbone_dir=two_layers, corpus=sentences, sections=("training",),
                             show_progress=False)
    assert "is more than the 2 encoder layers" in results["training"]["jtcse-6"]["skipped"]
    assert results["training"]["jtcse-2-mean"]["cross_mode"] == "side"
    assert results["training"]["jtcse-2-mean"]["cross_outputs"] == "mean"
    assert results["training"]["jtcse-2-mean"]["b4_l16"]["steps_per_s"] > 0
    with pytest.raises(PipelineError, match="jtcse-x"):
        run_benchmarks(replace(QUICK, stages=("jtcse-x",)), params, device="cpu", backbone_dir=two_layers,
                       corpus=sentences, sections=("training",), show_progress=False)


def test_the_bootstrap_section_alone_times_the_evaluate_stages_bootstrap(backbone, tiny_params_dict):
    params = parse_params(tiny_params_dict)
    results = run_benchmarks(QUICK, params, device="cpu", backbone_dir=backbone, senteval=SENTEVAL, sections=("bootstrap",),
                             show_progress=False)
    assert set(results["section_seconds"]) == {"bootstrap"} and "training" not in results
    bootstrap = results["bootstrap"]
    assert bootstrap["resamples"] == params.eval.bootstrap
    assert bootstrap["pairs"] == {task: QUICK.bootstrap_max_pairs for task in params.eval.tasks}
    assert bootstrap["embedding_width"] == AutoConfig.from_pretrained(backbone).hidden_size
    medians = bootstrap["draw_seconds"]["median"] + bootstrap["score_seconds"]["median"]
    assert 0 < bootstrap["seconds"] == pytest.approx(medians, abs=1e-3)
    assert results["summary"]["bootstrap_seconds_per_model"] == bootstrap["seconds"]
    assert "bootstrap (" in format_summary_table(results)
    tiny_params_dict["eval"]["bootstrap"] = 0
    off = run_benchmarks(QUICK, parse_params(tiny_params_dict), device="cpu", backbone_dir=backbone, senteval=SENTEVAL,
                         sections=("bootstrap",), show_progress=False)
    assert off["bootstrap"] == {"skipped": "eval.bootstrap is 0"}


def test_the_stage_writes_the_json(tmp_path, monkeypatch, tiny_params_dict, sentences):
    project = tmp_path / "project"
    save_tiny_bert(project / "data" / "backbone", seed=2, layers=6)
    (project / "params.yaml").write_text(json.dumps(tiny_params_dict))  # JSON is YAML
    (project / "corpus.txt").write_text("".join(f"{line}\n" for line in sentences))
    monkeypatch.chdir(project)
    app = typer.Typer()
    app.command()(bench.command)
    result = CliRunner().invoke(app, ["--quick", "--device", "cpu", "--output", "out/bench.json",
                                      "--corpus", "corpus.txt", "--senteval", str(SENTEVAL)])
    assert result.exit_code == 0, result.output
    written = json.loads((project / "out" / "bench.json").read_text())
    assert written["scale"] == "tiny-quick" and written["backbone"]["path"] == "data/backbone"
    assert "[bench] tiny-quick on cpu" in result.output


def test_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path, monkeypatch, tiny_params_dict):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    (tmp_path / "params.yaml").write_text(json.dumps(tiny_params_dict))
    monkeypatch.chdir(tmp_path)
    app = typer.Typer()
    app.command()(bench.command)
    result = CliRunner().invoke(app, ["--quick", "--device", "cuda", "--output", "bench.json"])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cuda" in errors[0]
    assert not (tmp_path / "bench.json").exists()


def test_the_small_preset_benchmarks_the_paper_grid():
    from tools.benchmark.scales import SCALES, bench_scale

    small = bench_scale("small")
    assert small.name == "small"
    assert (small.batch_sizes, small.max_lengths, small.eval_max_pairs) == (
        SCALES["paper"].batch_sizes, SCALES["paper"].max_lengths, None)


def test_a_failing_start_up_probe_is_one_line(tmp_path):
    from tools.benchmark.startup import measure_startup

    with pytest.raises(PipelineError, match=r"start-up probe .* failed: .*model folder .*nowhere does not exist") as caught:
        measure_startup(str(tmp_path / "nowhere"), "cpu", "cls_before_pooler", 32, repeats=1)
    assert "\n" not in str(caught.value)


# ----------------------------------------------------------------------------- the pipeline section (issue 31)

FAKE_PIPELINE = {"stages": {
    "second": {"cmd": "python -c \"open('b.txt', 'w').write(open('a.txt').read() + 'b')\"", "deps": ["a.txt"], "outs": ["b.txt"]},
    "first": {"cmd": "python -c \"sum(range(2_000_000)); open('a.txt', 'w').write('a')\"", "outs": ["a.txt"]},
}}


@pytest.fixture
def fake_repo(tmp_path):
    """A git repository with a two-stage dvc.yaml (listed out of order) committed, and an uncommitted file."""
    import subprocess
    import sys

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text(yaml.safe_dump(FAKE_PIPELINE))
    git = ["git", "-c", "user.email=bench@example.org", "-c", "user.name=bench"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "pipeline"], cwd=repo, check=True)
    (repo / "uncommitted.txt").write_text("not in the clone")
    return repo


def test_the_pipeline_section_runs_a_fresh_clone_stage_by_stage(fake_repo, tmp_path):
    from tools.benchmark.repro import bench_pipeline

    clone = tmp_path / "clone"
    result = bench_pipeline(clone, fake_repo)
    assert list(result["stages"]) == ["first", "second"]  # graph order, not file order
    for times in result["stages"].values():
        assert times["wall_s"] > 0 and times["cpu_s"] > 0
    assert result["total_wall_s"] == pytest.approx(sum(times["wall_s"] for times in result["stages"].values()))
    assert (clone / "b.txt").read_text() == "ab" and not (clone / "uncommitted.txt").exists()  # HEAD, kept
    assert len(result["commit"]) == 40 and "setup excluded" in result["note"]
    with pytest.raises(PipelineError, match="--clone-dir .* is not an empty folder"):
        bench_pipeline(clone, fake_repo)


def test_the_stage_runs_the_pipeline_section_only_when_named_and_keeps_the_other_sections(
        fake_repo, tmp_path, monkeypatch, tiny_params_dict):
    from tools.benchmark import repro

    project = tmp_path / "project"
    project.mkdir()
    (project / "params.yaml").write_text(json.dumps(tiny_params_dict))
    (project / "bench.json").write_text(json.dumps({"scale": "tiny", "evaluation": {"kept": 1}}))
    monkeypatch.chdir(project)
    monkeypatch.setattr(repro, "_root", lambda: fake_repo)
    app = typer.Typer()
    app.command()(bench.command)
    refused = CliRunner().invoke(app, ["--section", "pipeline", "--output", "bench.json"])
    assert refused.exit_code == 2 and "--section pipeline needs --clone-dir" in refused.output
    result = CliRunner().invoke(app, ["--section", "pipeline", "--clone-dir", str(tmp_path / "clone"), "--output", "bench.json"])
    assert result.exit_code == 0, result.output
    written = json.loads((project / "bench.json").read_text())
    assert written["evaluation"] == {"kept": 1} and list(written["pipeline"]["stages"]) == ["first", "second"]
    assert "[bench] dvc repro of a fresh clone" in result.output
    rendered = render_readme_section({**json.loads(committed_text("reports/bench.json")), "pipeline": written["pipeline"]})
    assert "`dvc repro` of a fresh clone" in rendered and "first " in rendered


def test_the_evaluate_stage_starts_without_transformers_or_mteb():
    """What the evaluate command imports before its first work (every pipeline module it names):
    transformers loads only when a tower lacks sentences in the embedding store, mteb only for an
    MTEB task whose result is not cached."""
    from tools.benchmark.startup import stage_imports, stage_modules

    modules = stage_modules(REPO_ROOT / "stages" / "evaluate.py")
    assert {"pipeline.evaluation.pipeline_eval", "pipeline.evaluation.mteb_suites"} <= set(modules)
    evaluate = stage_imports(only=["evaluate"])["evaluate"]
    assert "transformers" not in evaluate["heavy"] and "mteb" not in evaluate["heavy"]
