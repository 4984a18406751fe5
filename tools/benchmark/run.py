"""A whole benchmark run: the machine's facts, the inputs every section shares, each section timed."""

from __future__ import annotations

import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import torch
from tqdm.auto import tqdm

from tools.benchmark.released_code import bench_joint_padding
from tools.benchmark.bootstrap_timing import bench_bootstrap
from tools.benchmark.evaluator_timing import bench_evaluation
from tools.benchmark.timing_inputs import BenchInputs, read_sentences, resolve_backbone
from tools.benchmark.startup import bench_startup
from tools.benchmark.scales import SCALES, SECTIONS, BenchScale, check_sections, count_jobs
from tools.benchmark.summary import NOTES, headline
from tools.benchmark.training_grid import bench_training
from tools.benchmark.translation import bench_translation
from pipeline.config import Params
from pipeline.execution.environment import cpu_record
from pipeline.errors import PipelineError
from pipeline.execution.runtime import run_context, with_precision

SECTION_RUNNERS = {
    "training": bench_training,
    "joint_padding": bench_joint_padding,
    "evaluation": bench_evaluation,
    "bootstrap": bench_bootstrap,
    "translation": bench_translation,
    "startup": bench_startup,
}


def load_average() -> list[float] | None:
    return [round(load, 2) for load in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine_facts() -> dict:
    """CPUs, memory, GPU, library versions and the load average: what the numbers depend on."""
    import transformers

    facts = {
        "cpu_model": cpu_record()["model"] or platform.machine(),
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "load_average": load_average(),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        facts.update(gpu=properties.name, gpu_count=torch.cuda.device_count(),
                     gpu_memory_gb=round(properties.total_memory / 2**30, 1))
    return facts


def _program() -> str:
    """How this process was started: `python -m stages` rather than `__main__.py`."""
    path = Path(sys.argv[0])
    return f"python -m {path.parent.name}" if path.name == "__main__.py" else path.name


def _corpus_sentences(corpus: Path | Sequence[str] | None, scale: BenchScale, sections: Sequence[str]) -> list[str]:
    if {"training", "joint_padding", "translation"} & set(sections) and corpus is None:
        raise PipelineError("benchmarks of training or translation need a corpus")
    if isinstance(corpus, (str, Path)):
        return read_sentences(Path(corpus), scale.corpus_sentences)
    return list(corpus or [])[: scale.corpus_sentences]


def _settings_record(inputs: BenchInputs) -> dict:
    scale, train = inputs.scale, inputs.params.train
    return {
        "batch_sizes": list(scale.batch_sizes), "max_lengths": list(scale.max_lengths),
        "repeats": scale.repeats, "warmup": scale.warmup, "corpus_sentences": len(inputs.sentences),
        "twin_dropout": train.dropout, "cross_mode": train.cross_mode, "cross_outputs": train.cross_outputs,
    }


def _run_sections(inputs: BenchInputs, sections: Sequence[str]) -> tuple[dict, dict[str, float]]:
    """Each requested section in the order of SECTIONS: ({section: result}, {section: seconds})."""
    results, seconds = {}, {}
    for section in SECTIONS:
        if section in sections:
            started = time.perf_counter()
            results[section] = SECTION_RUNNERS[section](inputs)
            seconds[section] = round(time.perf_counter() - started, 1)
    return results, seconds


def run_benchmarks(
    scale: str | BenchScale,
    params: Params,
    device: str = "auto",
    backbone_dir: Path | None = None,
    corpus: Path | Sequence[str] | None = None,
    senteval: Path | None = None,
    sections: Sequence[str] = SECTIONS,
    apertium_pivot: str | None = "es",
    show_progress: bool = True,
) -> dict:
    """Every benchmark of `sections` at `scale` (a name of `SCALES` or a `BenchScale`); the results
    as one JSON-ready dict. `params` supplies the stages' settings (dropout, losses, CAELs,
    evaluation and translation settings); `corpus` is a file or the sentences; `senteval` the
    SentEval-layout folder of the STS tasks. `device="cuda"` without a GPU raises a one-line PipelineError."""
    started = time.perf_counter()
    scale = SCALES.get(scale) if isinstance(scale, str) else scale
    if scale is None:
        raise PipelineError(f"unknown benchmark scale; allowed: {', '.join(SCALES)}")
    check_sections(sections)
    context = run_context(device)
    # bf16 autocast on CUDA, the documented fast precision (the stages' `precision` setting), as before it was one
    context = with_precision(context, "bf16" if context.device.type == "cuda" else "fp32", "bench precision")
    results: dict = {
        "scale": scale.name, "device": str(context.device),
        "precision": "bf16 autocast" if context.autocast_dtype is not None else "float32",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([_program(), *sys.argv[1:]]), "machine": machine_facts(),
    }
    sentences = _corpus_sentences(corpus, scale, sections)
    progress = tqdm(total=count_jobs(scale, sections), desc="bench", unit="job", disable=not show_progress)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        from transformers import AutoTokenizer

        backbone, results["backbone"] = resolve_backbone(scale.name.split("-")[0], backbone_dir, Path(scratch))
        inputs = BenchInputs(scale, context, params, backbone, AutoTokenizer.from_pretrained(backbone), sentences,
                             Path(senteval) if senteval is not None else None, apertium_pivot, progress)
        results["settings"] = _settings_record(inputs)
        measured, seconds = _run_sections(inputs, sections)
    progress.close()
    results.update(measured)
    results["section_seconds"] = seconds
    results["summary"] = headline(results)
    results["machine"]["load_average_end"] = load_average()
    results["wall_seconds"] = round(time.perf_counter() - started, 1)
    results["notes"] = NOTES
    return results
