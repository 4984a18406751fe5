"""The shapes each mode measures (the papers' on CUDA, tiny ones in the CPU mode), the machine record, and
the inputs: the data mirror, its corpus, and the stand-in backbones built from it."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("gpu_check")

SKIPPED_NO_CUDA = "skipped: no CUDA"
# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from NVIDIA's data sheets, by a substring of
# torch.cuda.get_device_name; the first that matches wins (NVL before the plain names).
BF16_PEAK_TFLOPS = (("H200 NVL", 835.0), ("H200", 989.4), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.4))
# The targets, on an H100 (an H200 is compared against the same figures, and says so)
TARGETS = {"pretrain_bert_64x32": ("steps_per_s", 70.0), "tncse_bert_64x64": ("steps_per_s", 35.0),
           "evaluator_bert_seven_benchmarks": ("sentences_per_s", 30_000.0)}
# The CPU mode's architecture: BERT's and RoBERTa's own configurations made small (6 layers: 6 CAELs fit)
CPU_SHRINK = {"hidden_size": 32, "num_hidden_layers": 6, "num_attention_heads": 2, "intermediate_size": 64}
ROBERTA_CPU_VOCAB = 2_000  # the corpus BPE of the CPU mode's RoBERTa (the paper's 50,265 takes long to train)


@dataclass(frozen=True)
class Mode:
    """The shapes of one mode: the papers' (CUDA) or tiny ones (the CPU mode)."""

    name: str
    shrink: dict | None
    steps: int  # timed optimizer steps per item
    warmup: int  # untimed steps first (the compile happens in the first)
    profile_steps: int
    eval_max_pairs: int | None
    eval_repeats: int
    corpus_lines: int
    # item -> (stage kind, backbone, batch, length, activation checkpointing)
    items: dict[str, tuple[str, str, int, int, bool]]


def _items(scale: Callable[[int], int]) -> dict[str, tuple[str, str, int, int, bool]]:
    return {
        "pretrain_bert_64x32": ("pretrain", "bert", scale(64), scale(32), False),
        "tncse_bert_64x64": ("tncse", "bert", scale(64), scale(64), False),
        "jtcse6_bert_64x64": ("jtcse-6", "bert", scale(64), scale(64), False),
        "distill_bert_64x32": ("distill", "bert", scale(64), scale(32), False),
        "tncse_roberta_256x64_checkpointed": ("tncse", "roberta", scale(256), scale(64), True),
        "tncse_roberta_256x64": ("tncse", "roberta", scale(256), scale(64), False),
    }


MODES = {
    "cuda": Mode("paper shapes", None, steps=20, warmup=3, profile_steps=5, eval_max_pairs=None, eval_repeats=3,
                 corpus_lines=20_000, items=_items(lambda size: size)),
    "cpu": Mode("CPU mode: tiny shapes, not the papers'", CPU_SHRINK, steps=2, warmup=1, profile_steps=1, eval_max_pairs=12,
                eval_repeats=1, corpus_lines=400, items=_items(lambda size: size // 8)),
}
EVALUATOR_ITEM = "evaluator_bert_seven_benchmarks"


# ---- the machine -----------------------------------------------------------------------------------


def bf16_peak(device_name: str | None) -> tuple[float | None, str]:
    if device_name is None:
        return None, "no GPU: no bf16 peak"
    for fragment, peak in BF16_PEAK_TFLOPS:
        if fragment in device_name:
            return peak, f"dense bf16 peak of the {fragment} (NVIDIA data sheet)"
    return None, f"no bf16 peak known for {device_name!r}: add it to BF16_PEAK_TFLOPS"


def machine_record(device: torch.device) -> dict:
    from pipeline.execution.environment import cpu_record, gpu_record, package_versions

    # the CPU record holds the logical CPU count (cpu.logical_cpus)
    record = {"device": device.type, "gpu": gpu_record(device), "cpu": cpu_record(), "versions": package_versions()}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    record["bf16_peak_tflops"], record["bf16_peak_note"] = bf16_peak(name)
    if device.type == "cuda":
        record["gpu_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return record


# ---- inputs ------------------------------------------------------------------------------------------


GPU_BUNDLE_DATA = Path(".gpu/data")  # the data the GPU bundle carries (its prepare.sh)


def mirror_folder() -> Path:
    """The data mirror PIPELINE_DATA_MIRROR names, else the GPU bundle's copy of it."""
    from pipeline.data.sources import MIRROR_VARIABLE, configured_mirror

    mirror = configured_mirror()
    folder = mirror.root if mirror is not None else GPU_BUNDLE_DATA.resolve()
    if not (folder / "senteval").is_dir():
        raise PipelineError(f"data mirror {folder} has no senteval/: set {MIRROR_VARIABLE} to a data mirror, or bring "
                            f"the GPU bundle's {GPU_BUNDLE_DATA} (`. .gpu/setup.sh` first)")
    return folder


def corpus_file(mirror: Path) -> Path:
    return mirror / "wiki1m" / "wiki1m_for_simcse.head.txt"


def build_backbones(scratch: Path, mirror: Path, mode: Mode) -> dict[str, Path]:
    """BERT-base and RoBERTa-base stand-ins (random weights; `mode.shrink` makes them small)."""
    from pipeline.data.standin_models import build_standin
    from tools.gpu_hours import paper_backbones

    folders = {}
    for backbone in paper_backbones():
        source = paper_settings(backbone).backbone.source  # the hub id conf/backbone/<name>.yaml names
        shrink = mode.shrink
        if shrink is not None and backbone == "roberta":
            shrink = {**shrink, "vocab_size": ROBERTA_CPU_VOCAB}
        folders[backbone] = scratch / backbone
        build_standin(source, folders[backbone], corpus_file(mirror), seed=0, shrink=shrink)
    return folders


@functools.cache
def paper_settings(backbone: str):
    from pipeline.params_file import parse_params
    from tools.gpu_hours import compose_paper_params

    return parse_params(compose_paper_params(backbone, conf=ROOT / "conf"))
