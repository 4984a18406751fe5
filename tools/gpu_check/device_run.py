"""One run of the GPU check: the correctness checks, the throughput items (reusing an earlier run's), the
targets and the cost, with the JSON rewritten (atomically) after each part."""

from __future__ import annotations

import datetime
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline.errors import PipelineError
from tools.gpu_check.checks import TinyTraining, correctness_checks
from tools.gpu_check.cost_table import COST_ITEMS, cost_record
from tools.gpu_check.launcher import run_launcher
from tools.gpu_check.modes import (
    CPU_SHRINK, EVALUATOR_ITEM, MODES, build_backbones, corpus_file, log, machine_record, mirror_folder, paper_settings,
)
from tools.gpu_check.throughput import target_record, throughput_item

def reusable_items(earlier_file: Path | None, gpu_name: str | None, precision: str) -> tuple[dict, dict | None]:
    """The throughput items an earlier report measured (neither skipped nor failed), when it was made on the
    same GPU model with the same step precision: a second run then measures only the rest. Another model or
    precision would mix two machines' seconds in one cost, so that is bad input."""
    if earlier_file is None:
        return {}, None
    if not earlier_file.is_file():
        raise PipelineError(f"--reuse {earlier_file}: no such file; give a report an earlier gpu check wrote")
    earlier = json.loads(earlier_file.read_text(encoding="utf-8"))
    earlier_gpu = (earlier.get("machine", {}).get("gpu") or {}).get("model")
    if earlier_gpu != gpu_name:
        raise PipelineError(f"--reuse {earlier_file}: measured on {earlier_gpu or 'no GPU'}, this run is on "
                            f"{gpu_name or 'no GPU'}; reuse only a report from the same GPU model")
    measured = {name: record for name, record in earlier.get("throughput", {}).items()
                if "error" not in record and "skipped" not in record}
    other = sorted(name for name, record in measured.items() if name != EVALUATOR_ITEM and record.get("precision") != precision)
    if precision != "preset" and other:
        raise PipelineError(f"--reuse {earlier_file}: {', '.join(other)} ran in another precision than --precision "
                            f"{precision}; rerun with that report's --precision")
    reused = {name: {**record, "reused_from": earlier["created"]} for name, record in measured.items()}
    return reused, {"file": earlier_file.name, "created": earlier["created"], "items": sorted(reused)}


def measure_item(name: str, records: dict, report: "Report", budget_s: float, measure: Callable[[], dict],
                 part: str | None = None) -> None:
    """One throughput item into `records`: measured, skipped past the time budget, or its error (the other
    items still run); the JSON rewritten after it."""
    if report.elapsed() > budget_s:
        records[name] = {"skipped": f"time budget: {budget_s:.0f} s spent before it started"}
        return
    log.info("gpu check: %s", name)
    try:
        records[name] = measure()
    except Exception as error:  # noqa: BLE001 - recorded in the JSON; the other items still run
        log.exception("gpu check %s raised", name)
        records[name] = {"error": f"{type(error).__name__}: {error}"}
    report.part_done(part or name)
    report.save()


class Report:
    """The JSON being written: each part's seconds, and the file rewritten (atomically) after each part."""

    def __init__(self, output: Path, results: dict):
        self.output, self.results = output, results
        self.started = self.part_started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def part_done(self, name: str) -> None:
        now = time.perf_counter()
        self.results["part_seconds"][name] = round(now - self.part_started, 1)
        self.part_started = now

    def save(self) -> None:
        from pipeline.io import write_json_atomic

        self.results["wall_seconds"] = round(self.elapsed(), 1)
        write_json_atomic(self.output, self.results)


def tiny_checks(scratch: Path, mirror: Path, sentences: list[str], device: torch.device, report: Report) -> list[dict]:
    """The correctness checks on a 2-layer stand-in BERT, the launcher's rank included (each part timed)."""
    from pipeline.data.standin_models import build_standin

    tiny = scratch / "tiny"
    build_standin(paper_settings("bert").backbone.source, tiny, corpus_file(mirror), seed=0,
                  shrink={**CPU_SHRINK, "num_hidden_layers": 2})
    sentences_file = scratch / "sentences.txt"
    sentences_file.write_text("\n".join(sentences[:64]) + "\n", encoding="utf-8")
    launched = run_launcher(device.type, tiny, sentences_file, scratch)
    report.part_done("launcher")
    return correctness_checks(TinyTraining(tiny, sentences, scratch / "runs"), device, launched)


def run(device_name: str, output: Path, budget_s: float, precision: str, reuse: Path | None = None) -> dict:
    from tools.benchmark.timing_inputs import read_sentences
    from pipeline.execution.runtime import apply_threads, run_context, seed_everything

    context = run_context(device_name)
    device = context.device
    mode = MODES[device.type]
    if device.type == "cpu":
        apply_threads(1)  # tiny tensors: a second thread only waits (and on a shared machine, spins)
        precision = "fp32"  # autocast is CUDA-only (the stages' rule)
    machine = machine_record(device)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    reused, reuse_record = reusable_items(reuse, gpu_name, precision)
    report = Report(output, {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python -m tools.gpu_check", *sys.argv[1:]]), "mode": mode.name, "machine": machine,
        "checks": [], "throughput": {}, "targets": {}, "cost": {}, "part_seconds": {},
        **({"reused": reuse_record} if reuse_record is not None else {}),
    })
    results, throughput = report.results, report.results["throughput"]
    mirror = mirror_folder()
    sentences = read_sentences(corpus_file(mirror), mode.corpus_lines)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch_name:
        scratch = Path(scratch_name)
        results["checks"] = tiny_checks(scratch, mirror, sentences, device, report)
        report.part_done("checks")
        report.save()

        backbones = build_backbones(scratch, mirror, mode)
        settings = {backbone: paper_settings(backbone) for backbone in backbones}
        report.part_done("stand-in backbones")
        # as every stage does: deterministic CUDA kernels only where the run asks for them (`deterministic`)
        seed_everything(settings["bert"].seed, deterministic=settings["bert"].train.deterministic)
        items = list(mode.items)
        for name in [*items[:2], EVALUATOR_ITEM, *items[2:]]:
            if name in reused:
                log.info("gpu check: %s reused from the run of %s", name, reused[name]["reused_from"])
                throughput[name] = reused[name]
                continue
            measure_item(name, throughput, report, budget_s, lambda: throughput_item(
                name, backbones, settings, sentences, mirror, context, mode, machine["bf16_peak_tflops"], precision))
        if precision == "bf16" and device.type == "cuda":  # the second cost: each stage in its paper preset's precision
            preset = results.setdefault("throughput_preset", {})
            for name in [name for name in COST_ITEMS if name in mode.items]:
                measure_item(name, preset, report, budget_s, lambda: throughput_item(
                    name, backbones, settings, sentences, mirror, context, mode, machine["bf16_peak_tflops"], "preset"),
                    part=f"{name} (preset precision)")
    results["targets"] = target_record(throughput, device, gpu_name)
    results["cost"] = cost_record(throughput, gpu_name or f"cpu ({mode.name})", precision)
    if "throughput_preset" in results:
        preset_cost = cost_record({**results["throughput_preset"], EVALUATOR_ITEM: throughput.get(EVALUATOR_ITEM, {})},
                                  gpu_name, "preset")
        incomplete = [name for name in COST_ITEMS if "step_seconds" not in results["throughput_preset"].get(name, {})]
        results["cost_preset"] = ({"skipped": f"not measured in the preset precision: {', '.join(incomplete)}"}
                                  if incomplete else preset_cost)
    report.part_done("cost")
    if device.type == "cpu":
        results["cost"]["note"] = "CPU mode: seconds of tiny shapes, scaled by tokens; not the papers' cost"
    report.save()
    return results


def summary_line(results: dict, output: Path) -> str:
    checks = results["checks"]
    passed = sum(1 for item in checks if item["passed"] is True)
    failed = [item["name"] for item in checks if item["passed"] is False]
    skipped_count = sum(1 for item in checks if item["passed"] is None)
    cost = results["cost"].get("gpu_hours_total")
    return (f"gpu check ({results['mode']}): checks {passed} passed, {len(failed)} failed{' ' + str(failed) if failed else ''}, "
            f"{skipped_count} skipped; papers' tables {cost} GPU hours; {results['wall_seconds']} s -> {output}")
