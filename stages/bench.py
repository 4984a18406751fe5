"""Benchmark throughput and memory of training, evaluation and translation on this machine.

Reads params.yaml (the stages' settings: dropout, losses, CAELs, eval and rtt settings), the
backbone (data/backbone; at tiny scale the MiniLM package's model if absent, at paper scale a
random BERT-base if no paper-scale checkpoint), the corpus (data/raw/corpus.txt, else the mirror's
Wiki1M sample) and the STS data (data/raw/senteval, else the mirror's). Writes --output
(reports/bench.json): steps/s, tokens/s and peak memory of every training stage over a grid of
batch sizes and lengths; the joint step with dynamic padding + vectorised losses against the
released code's padding to max length + per-sample loss loop (speed ratio and loss difference);
sentences/s of the STS evaluator against a naive loop; seconds of one model's bootstrap intervals on
the full benchmarks; translation cache hits/s, Apertium
sentences/s and packed requests/s against the loopback stand-in; the machine's facts.

Not part of the default `dvc repro`: its own pipeline in bench/dvc.yaml (`dvc repro bench/dvc.yaml`)."""

from pathlib import Path

import typer

from pipeline import paths
from pipeline.settings_rules import DEVICES
from stages.common import ParamsOption, stage, stage_params, summary

NAME = "bench"
DEFAULT_BACKBONE = paths.BACKBONE


def _with_mirror_fallback(path: Path, mirror: Path | None, relative: str) -> Path:
    """`path` when it exists, else the same data in the data mirror (when PIPELINE_DATA_MIRROR names one
    that has it; `configured_mirror` reads it as the download stage does)."""
    if path.exists() or mirror is None:
        return path
    fallback = mirror / relative
    return fallback if fallback.exists() else path


@stage
def command(
    scale: str | None = typer.Option(None, "--scale", help="tiny, small or paper (grid and sizes); default: params.yaml scale"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
    output: Path = typer.Option(paths.BENCH, "--output", help="where the JSON goes"),
    backbone: Path = typer.Option(DEFAULT_BACKBONE, "--backbone", help="model folder to time"),
    corpus: Path = typer.Option(paths.CORPUS, "--corpus", help="training sentences, one per line"),
    senteval: Path = typer.Option(paths.SENTEVAL, "--senteval", help="SentEval-layout STS data folder"),
    section: list[str] | None = typer.Option(None, "--section", help="a section to run, repeatable (training, joint_padding, "
                                             "evaluation, bootstrap, translation, startup); default all of these; "
                                             "pipeline (only when named): the dvc repro of a fresh clone"),
    clone_dir: Path | None = typer.Option(None, "--clone-dir", help="section pipeline: a new folder for the clone (kept)"),
    quick: bool = typer.Option(False, "--quick", hidden=True, help="a one-point grid, one repeat (tests)"),
    params: Path = ParamsOption,
) -> None:
    import json

    from tools.benchmark import SECTIONS, bench_scale, format_summary_table, run_benchmarks
    from tools.benchmark.repro import pipeline_line, with_pipeline_section
    from tools.benchmark.scales import OPT_IN_SECTIONS, check_sections
    from pipeline.io import write_text_atomic
    from pipeline.errors import PipelineError
    from pipeline.data.sources import configured_mirror

    settings = stage_params(params)
    if device not in DEVICES:
        raise PipelineError(f"--device {device} is not known; allowed: {', '.join(DEVICES)}")
    requested = scale or settings.scale
    grid = bench_scale(requested, quick)
    mirror = configured_mirror()
    mirror = mirror.root if mirror is not None else None
    # data/backbone holds the configured scale's weights; for the other scale (the paper grid with the tiny
    # preset's MiniLM) the library times that scale's model instead, unless --backbone names one.
    configured = backbone if requested == settings.scale or backbone != DEFAULT_BACKBONE else None
    sections = section or list(SECTIONS)
    check_sections(sections)
    if "pipeline" in sections and clone_dir is None:
        raise PipelineError("--section pipeline needs --clone-dir DIR: a new folder for the fresh clone (kept afterwards)")
    measured = [name for name in sections if name not in OPT_IN_SECTIONS]
    previous = json.loads(output.read_text(encoding="utf-8")) if output.is_file() else {}
    results = previous
    if measured:
        results = run_benchmarks(
            grid,
            settings,
            device=device,
            backbone_dir=configured,
            corpus=_with_mirror_fallback(corpus, mirror, "wiki1m/wiki1m_for_simcse.head.txt"),
            senteval=_with_mirror_fallback(senteval, mirror, "senteval"),
            sections=measured,
        )
    results = with_pipeline_section(results, previous, clone_dir if "pipeline" in sections else None)
    if not measured:
        write_text_atomic(output, json.dumps(results, indent=2) + "\n")
        summary(NAME, f"{pipeline_line(results['pipeline'])} -> {output}")
        return
    write_text_atomic(output, json.dumps(results, indent=2) + "\n")
    typer.echo(format_summary_table(results))
    summary(NAME, f"{headline_line(results)}; {results['wall_seconds']:.0f} s -> {output}")


def headline_line(results: dict) -> str:
    """The stage's summary: scale, device and the headline speed-ups the run measured."""
    facts, headline = results["machine"], results["summary"]
    where = facts["gpu"] or f"{facts['cpus_usable']} CPUs, {facts['torch_threads']} threads"
    figures = []
    if "joint_speedup_dynamic_vectorised_vs_padded_looped" in headline:
        figures.append(f"joint step {headline['joint_speedup_dynamic_vectorised_vs_padded_looped']:.2f}x faster with "
                       f"dynamic padding + vectorised losses (|Δloss| {headline['joint_loss_abs_diff']:.1e})")
    if "evaluator_speedup_vs_naive" in headline:
        figures.append(f"evaluator {headline['evaluator_speedup_vs_naive']:.2f}x the naive loop")
    if "bootstrap_seconds_per_model" in headline:
        figures.append(f"bootstrap {headline['bootstrap_seconds_per_model']:.2f} s per model")
    return f"{results['scale']} on {results['device']} ({where}): {', '.join(figures) or 'measured'}"
