"""Stage start-up: what a stage spends before its real work, each part in fresh processes.

- `interpreter_s`: `python -c pass`, the floor of any process;
- `cli_help_s`: `python -m stages evaluate --help`, the command line alone (every stage module imported);
- in one fresh process (this file run with `--probe`, not importing the benchmark package), as the
  evaluate stage runs:
  `import_s` (the evaluator's modules: torch, transformers, scipy), `load_s` (tokenizer and weights
  into an `HFEmbedder` on the device), `first_call_s` (the first batch, kernel and allocator
  warm-up included) and `steady_call_s` (the same batch again); `warmup_s` is their difference.
  On CUDA `cuda_init_s` (the CUDA context) is timed apart, before the load.

Each figure is the median over `repeats` processes. `import_top` lists the modules whose import
takes longest (`python -X importtime`), so the next cut is visible in the file.

`stages`: per stage command, what it imports before its first useful work: in a fresh process the
command line (`stages.cli`) and every `pipeline` module the stage module imports (found in its
source, lazily imported ones included), timed, with the heavy packages that came along
(`HEAVY`). A package a stage does not use on its way to work is start-up waste (e.g. the evaluate
stage loads transformers only when a tower lacks sentences in the embedding store).
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pipeline.errors import PipelineError

PROBE_SENTENCES = 64


def probe_sentences() -> list[str]:
    """Ragged sentences (4 to 35 words) for the warm-up batch: the same in every probe."""
    words = "a man is playing the guitar while two dogs run across the green field near the old house".split()
    return [" ".join((words * 3)[index % 7 : index % 7 + 4 + (5 * index) % 32]) for index in range(PROBE_SENTENCES)]


def probe(model: str, device: str, pooler: str, max_length: int) -> dict[str, float]:
    """The evaluate stage's start-up phases in this (fresh) process, in seconds."""
    started = time.perf_counter()
    import torch

    from pipeline.evaluation import sts  # noqa: F401  (the evaluator's imports, as the stage loads them)
    from pipeline.evaluation.embedder import HFEmbedder

    imported = time.perf_counter()
    cuda = {}
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the context exists once a tensor does
        cuda = {"cuda_init_s": time.perf_counter() - imported}
        imported = time.perf_counter()
    embedder = HFEmbedder(model, pooler, max_length, device=device)
    loaded = time.perf_counter()
    sentences = probe_sentences()

    def call() -> float:
        begin = time.perf_counter()
        embedder(sentences)
        if embedder.device.type == "cuda":
            torch.cuda.synchronize(embedder.device)
        return time.perf_counter() - begin

    first, steady = call(), call()
    return {"import_s": imported - started - cuda.get("cuda_init_s", 0.0), **cuda, "load_s": loaded - imported,
            "first_call_s": first, "steady_call_s": steady, "warmup_s": first - steady}


def _run(command: list[str], label: str | None = None) -> str:
    """stdout of `command` run from the repository root; its failure is one line with its last error line."""
    done = subprocess.run(command, capture_output=True, text=True, cwd=_root())
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PipelineError(f"start-up probe `{label or ' '.join(command[1:])}` failed: {last}")
    return done.stdout


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    _run(command)
    return time.perf_counter() - started


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def import_top(count: int = 8) -> list[dict]:
    """The slowest imports (cumulative) of the evaluator's modules, from `python -X importtime`."""
    code = "import pipeline.evaluation.sts, pipeline.evaluation.embedder"
    stderr = subprocess.run([sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True,
                            text=True, cwd=_root()).stderr  # a failing import already failed in the probe
    rows = []
    for line in stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].strip()))
    top_level = [(micros, name) for micros, name in rows if "." not in name]
    return [{"module": name, "seconds": round(micros / 1e6, 3)} for micros, name in sorted(top_level, reverse=True)[:count]]


HEAVY = ("torch", "transformers", "mteb", "datasets", "scipy", "pandas", "matplotlib", "sklearn")


def stage_modules(stage_file: Path) -> list[str]:
    """The `pipeline` modules a stage module imports anywhere in its source (lazy imports included)."""
    modules = []
    for node in ast.walk(ast.parse(stage_file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipeline":
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names if alias.name.split(".")[0] == "pipeline"]
    return list(dict.fromkeys(modules))


STAGE_PROBE = """
import importlib, json, sys, time
started = time.perf_counter()
for module in ["stages.cli", *{modules!r}]:
    importlib.import_module(module)
print(json.dumps({{"seconds": time.perf_counter() - started,
                  "heavy": [name for name in {heavy!r} if name in sys.modules]}}))
"""


def stage_imports(repeats: int = 1, only: list[str] | None = None) -> dict[str, dict]:
    """{stage module: {"seconds": median import seconds, "heavy": heavy packages loaded, "modules"}}
    for every stage module (or those named in `only`)."""
    results = {}
    for stage_file in sorted((_root() / "stages").glob("*.py")):
        if stage_file.stem in ("__init__", "__main__", "cli", "common") or (only is not None and stage_file.stem not in only):
            continue
        modules = stage_modules(stage_file)
        code = STAGE_PROBE.format(modules=modules, heavy=HEAVY)
        runs = [json.loads(_run([sys.executable, "-c", code], f"imports of stages/{stage_file.name}").splitlines()[-1])
                for _ in range(repeats)]
        results[stage_file.stem] = {"seconds": round(statistics.median(run["seconds"] for run in runs), 3),
                                    "heavy": runs[0]["heavy"], "modules": modules}
    return results


def measure_startup(model: str, device: str, pooler: str, max_length: int, repeats: int = 3, stages: bool = True) -> dict:
    """Median seconds of each start-up part over `repeats` fresh processes (see the module doc)."""
    model = str(Path(model).resolve()) if Path(model).is_dir() else str(model)  # the probes run from the repository root
    arguments = ["--probe", "--model", model, "--device", device, "--pooler", pooler, "--max-length", str(max_length)]
    # this file run as a script: `-m tools.benchmark.startup` would first import the package (torch, transformers)
    code = f"import runpy, sys; sys.argv = {[__file__, *arguments]!r}; runpy.run_path({__file__!r}, run_name='__main__')"
    probe_command = [sys.executable, "-c", code]
    label = " ".join(["startup.py", *arguments])
    probes = [json.loads(_run(probe_command, label).splitlines()[-1]) for _ in range(repeats)]
    result = {
        "interpreter_s": statistics.median(_wall([sys.executable, "-c", "pass"]) for _ in range(repeats)),
        "cli_help_s": statistics.median(_wall([sys.executable, "-m", "stages", "evaluate", "--help"])
                                        for _ in range(repeats)),
        **{key: statistics.median(run[key] for run in probes) for key in probes[0]},
    }
    result = {key: round(value, 3) for key, value in result.items()}
    result["total_s"] = round(sum(result[key] for key in ("import_s", "cuda_init_s", "load_s", "first_call_s") if key in result), 3)
    record = {**result, "repeats": repeats, "probe_sentences": PROBE_SENTENCES, "import_top": import_top()}
    return {**record, "stages": stage_imports(repeats)} if stages else record


def bench_startup(inputs) -> dict:
    """The benchmark's `startup` section: the evaluate stage's start-up on the benchmark's model and device."""
    settings = inputs.params.eval
    inputs.advance("bench startup")
    result = measure_startup(str(inputs.backbone), inputs.context.device.type, settings.pooler, settings.max_length,
                             repeats=inputs.scale.eval_repeats, stages=inputs.scale.stage_imports)
    inputs.advance(done=1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help="measure this process's start-up (one JSON line)")
    parser.add_argument("--model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pooler", default="cls_before_pooler")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--stages", action="store_true", help="only the stages' imports (`stage_imports`)")
    args = parser.parse_args(argv)
    if args.stages:
        print(json.dumps(stage_imports(), indent=2))
    elif args.probe:
        print(json.dumps(probe(args.model, args.device, args.pooler, args.max_length)))
    else:
        print(json.dumps(measure_startup(args.model, args.device, args.pooler, args.max_length), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
