"""The benchmark figures of docs/benchmarks.md, rendered from the benchmark's JSON (never copied by hand).

That page holds the rendered block between `BEGIN` and `END`; after a benchmark run

    python -m tools.benchmark.readme [--bench reports/bench.json] [--readme docs/benchmarks.md] [--check]

rewrites it from the JSON (`--check` writes nothing and exits 1 when they differ), and a test
checks that the two agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from tools.benchmark.summary import grid_points, largest_point
from pipeline.io import write_text_atomic
from pipeline.errors import PipelineError

BEGIN = "<!-- bench figures: generated from reports/bench.json by python -m tools.benchmark.readme; do not edit -->"
END = "<!-- end of bench figures -->"
STAGE_LABELS = {"pretrain": "pretrain", "tncse": "TNCSE", "distill": "distill"}


def _label(stage: str) -> str:
    return STAGE_LABELS.get(stage, stage.upper())


def _intro(results: Mapping, source: str) -> str:
    machine, backbone, seconds = results["machine"], results["backbone"], results.get("section_seconds", {})
    where = machine["gpu"] or f"{machine['cpus_usable']} CPUs"
    load = machine.get("load_average") or ["?"]
    parts = ", ".join(f"{name.replace('_', ' ')} {value:.0f} s" for name, value in seconds.items())
    return (f"Latest figures (`{source}`, created {results['created']}: {results['scale']} scale, "
            f"{backbone['model_type']} with {backbone['layers']} layers, {results['device']}, {where}, "
            f"load average {load[0]} at the start); whole run {results['wall_seconds']:.0f} s ({parts}):")


def _joint_row(joint: Mapping) -> str:
    variants = joint["variants"]
    figure = (f"{variants['dynamic_vectorised']['steps_per_s']} vs {variants['padded_looped']['steps_per_s']} steps/s: "
              f"**{joint['speedup']:.2f}×**, same loss to {joint['loss']['abs_diff']:.1e}")
    if "speedup_from_vectorised_loss" in joint:
        figure += f"; the per-sample loss loop alone (dynamic_looped) {joint['speedup_from_vectorised_loss']:.2f}×"
    if "speedup_from_dynamic_padding" in joint:
        figure += f"; padding alone (padded_vectorised) {joint['speedup_from_dynamic_padding']:.2f}×"
    return (f"| joint step, batch {joint['batch_size']}, max length {joint['max_length']}: dynamic + vectorised "
            f"vs padded + looped | {figure} |")


def _training_row(training: Mapping) -> str | None:
    points = {stage: grid_points(grid) for stage, grid in training.items() if grid_points(grid)}
    if not points:
        return None
    key = largest_point(next(iter(points.values())))
    batch, length = (part[1:] for part in key.split("_"))
    figures = ", ".join(f"{_label(stage)} {grid[key]['steps_per_s']:.2f}" for stage, grid in points.items() if key in grid)
    return f"| training, batch {batch}, length {length} (steps/s, median) | {figures} |"


def _evaluation_row(evaluation: Mapping) -> str:
    pairs = evaluation.get("max_pairs")
    scope = f"{pairs} pairs of each of the {len(evaluation['tasks'])} tasks" if pairs else f"all pairs of the {len(evaluation['tasks'])} tasks"
    evaluator, naive = evaluation["evaluator"], evaluation["naive"]
    fixed = evaluation.get("evaluator_fixed_batches")
    budget = "" if fixed is None else (
        f". Token-budget batches (at most {evaluation['token_budget']:,} padded tokens, {evaluator['batches']:,} batches, "
        f"tokenized once) against the previous fixed batches of {evaluation['batch_size']} ({fixed['batches']:,}): "
        f"{evaluator['sentences_per_s']:.0f} vs {fixed['sentences_per_s']:.0f} sentences/s, "
        f"**{evaluation['speedup_vs_fixed_batches']:.2f}×**, same embeddings to "
        f"{evaluation['max_abs_embedding_diff_vs_fixed_batches']:.1e}")
    sorted_by = "sorted by token count" if fixed is None else "sorted by token count, token-budget batches"
    return (f"| STS evaluator vs naive loop ({scope}, {evaluation['sentences']:,} sentences) | "
            f"{evaluator['sentences_per_s']:.0f} vs {naive['sentences_per_s']:.0f} sentences/s: "
            f"**{evaluation['speedup']:.2f}×**, same embeddings to {evaluation['max_abs_embedding_diff']:.1e}. "
            f"Batching ({evaluator['unique_sentences']:,} unique sentences, {sorted_by}) gives "
            f"{evaluation['speedup_from_batching']:.2f}×: it feeds the model {evaluator['padded_tokens']:,} padded tokens "
            f"against {naive['padded_tokens']:,}. Running the last layer for [CLS] only gives "
            f"{evaluation['speedup_from_cls_only_last_layer']:.2f}× more{budget} |")


def _translation_row(translation: Mapping) -> str:
    parts = []
    if "cache_hits_per_s" in translation:
        parts.append(f"cache {translation['cache_hits_per_s']['median']:,.0f} hits/s")
    if "apertium_sentences_per_s" in translation:
        pivot = translation.get("apertium_pivot", "?")
        parts.append(f"Apertium en→{pivot}→en {translation['apertium_sentences_per_s']['median']:.0f} sentences/s")
    elif "apertium_skipped" in translation:
        parts.append(f"Apertium skipped ({translation['apertium_skipped']})")
    if "google_loopback_requests_per_s" in translation:
        parts.append("packed Google requests against the loopback stand-in "
                     f"{translation['google_loopback_requests_per_s']['median']:.0f}/s")
    return f"| translation (median of {translation['cache_hits_per_s']['repeats']} runs) | {'; '.join(parts)} |"


def _startup_row(startup: Mapping) -> str:
    cuda = f", CUDA context {startup['cuda_init_s']:.2f} s" if "cuda_init_s" in startup else ""
    return (f"| evaluate stage start-up (fresh processes, median of {startup['repeats']}) | imports {startup['import_s']:.2f} s"
            f"{cuda}, model load {startup['load_s']:.2f} s, first batch of {startup['probe_sentences']} "
            f"{startup['first_call_s']:.2f} s (steady {startup['steady_call_s']:.2f} s): **{startup['total_s']:.2f} s** "
            f"before the real work; the command line alone (`--help`) {startup['cli_help_s']:.2f} s, "
            f"the interpreter {startup['interpreter_s']:.2f} s |")


def _pipeline_rows(pipeline: Mapping) -> list[str]:
    stages = ", ".join(f"{name} {times['wall_s']:.0f} s" for name, times in pipeline["stages"].items())
    return [f"| `dvc repro` of a fresh clone (commit {pipeline['commit'][:8]}; setup excluded), stage by stage (wall) | "
            f"**{pipeline['total_wall_s'] / 60:.1f} min** wall, {pipeline['total_cpu_s'] / 60:.1f} CPU-min: {stages} |"]


def render_readme_section(results: Mapping, source: str = "reports/bench.json") -> str:
    """The benchmarks page's block (markers included) for a benchmark's results: one table row per section."""
    rows = ["| what | figure |", "|---|---|"]
    if results.get("joint_padding"):
        rows.append(_joint_row(results["joint_padding"]))
    training_row = _training_row(results.get("training", {}))
    if training_row:
        rows.append(training_row)
    if results.get("evaluation"):
        rows.append(_evaluation_row(results["evaluation"]))
    if results.get("translation"):
        rows.append(_translation_row(results["translation"]))
    if results.get("startup"):
        rows.append(_startup_row(results["startup"]))
    if results.get("pipeline"):
        rows += _pipeline_rows(results["pipeline"])
    return "\n".join([BEGIN, _intro(results, source), "", *rows, END])


def readme_block(readme: str) -> str:
    """The rendered block as it stands in the page's text (markers included)."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise PipelineError(f"the page has no benchmark block; put the lines {BEGIN!r} and {END!r} where it goes")
    return readme[start : end + len(END)]


def replace_readme_block(readme: str, section: str) -> str:
    """The page's text with its benchmark block replaced by `section`."""
    return readme.replace(readme_block(readme), section)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark.readme",
                                     description="Render the benchmark figures of docs/benchmarks.md from the benchmark's JSON.")
    parser.add_argument("--bench", type=Path, default=Path("reports/bench.json"))
    parser.add_argument("--readme", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page differs")
    args = parser.parse_args(argv)
    section = render_readme_section(json.loads(args.bench.read_text(encoding="utf-8")), source=args.bench.as_posix())
    readme = args.readme.read_text(encoding="utf-8")
    if args.check:
        current = readme_block(readme) == section
        print(f"{args.readme}: benchmark figures {'match' if current else 'differ from'} {args.bench}")
        return 0 if current else 1
    write_text_atomic(args.readme, replace_readme_block(readme, section))
    print(f"{args.readme}: benchmark figures rendered from {args.bench}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
