"""The benchmark's `pipeline` section: what a newcomer waits for, the `dvc repro` of a fresh clone,
stage by stage.

`bench_pipeline` clones the repository at HEAD (committed work only) into `clone_dir`, which is
kept afterwards (to look at, or to rerun a stage), lists the stages of dvc.yaml in the order plain
`dvc repro` runs them (DVC's planner), and runs `dvc repro --single-item <stage>` one at a time in
the clone, each timed: wall seconds and CPU seconds (user + system of the whole process tree, from
`resource.getrusage(RUSAGE_CHILDREN)`). The clone runs with this interpreter's environment (the
current virtual environment first on PATH): setup — creating the environment, installing packages,
fetching the data — is excluded; the clone reads the data mirror this environment names
(PIPELINE_DATA_MIRROR), as any `dvc repro` does.

Not part of the default benchmark run (it runs the whole pipeline): `python -m stages bench
--section pipeline --clone-dir DIR`.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from pipeline.errors import PipelineError

SETUP_NOTE = ("setup excluded: the clone runs with the benchmark's Python environment and data mirror; "
              "the figures are the stages' own wall and CPU seconds, each `dvc repro --single-item <stage>` in graph order")


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def _environment() -> dict[str, str]:
    """This process's environment with its interpreter's folder first on PATH: a stage's `python`
    (and `dvc`) is the benchmark's."""
    folder = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([folder, os.environ.get("PATH", "")])}


def _run(command: list[str], cwd: Path, what: str) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=_environment())
    if done.returncode != 0:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        raise PipelineError(f"bench pipeline: {what} failed in {cwd} (exit {done.returncode}): {last}")
    return done.stdout


def clone_at_head(repo: Path, clone_dir: Path) -> str:
    """`git clone` of `repo` into `clone_dir` (new or empty); the commit it checked out."""
    if clone_dir.exists() and (not clone_dir.is_dir() or any(clone_dir.iterdir())):
        raise PipelineError(f"--clone-dir {clone_dir} exists and is not an empty folder; give a new folder (the clone is kept there)")
    _run(["git", "clone", "--quiet", str(repo.resolve()), str(clone_dir.resolve())], repo, "git clone")
    return _run(["git", "rev-parse", "HEAD"], clone_dir, "git rev-parse").strip()


# The order plain `dvc repro` runs ./dvc.yaml in, from the installed DVC's own planner (the
# environment is locked, so its internals are the ones this was written against).
ORDER = """
from dvc.repo import Repo
from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro
repo = Repo(".")
steps = plan_repro(get_active_graph(repo.index.graph), collect_stages(repo, ["dvc.yaml"]))
print("\\n".join(stage.addressing for stage in steps))
"""


def stage_order(clone_dir: Path) -> list[str]:
    """The stages of the clone's dvc.yaml in the order plain `dvc repro` runs them."""
    stages = _run([sys.executable, "-c", ORDER], clone_dir, "listing the DVC stages").split()
    if not stages:
        raise PipelineError(f"bench pipeline: {clone_dir} has no DVC stage")
    return stages


def time_stage(clone_dir: Path, stage: str) -> dict[str, float]:
    """Wall and CPU seconds of `dvc repro --single-item <stage>` (DVC's own overhead included)."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    _run([sys.executable, "-m", "dvc", "repro", "--single-item", stage], clone_dir, f"dvc repro {stage}")
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def bench_pipeline(clone_dir: Path, repo: Path | None = None) -> dict:
    """The `pipeline` section: the fresh clone's `dvc repro`, stage by stage (see the module doc)."""
    repo, clone_dir = (repo or _root()), Path(clone_dir)
    commit = clone_at_head(repo, clone_dir)
    stages = {}
    for stage in stage_order(clone_dir):
        stages[stage] = time_stage(clone_dir, stage)
    return {
        "clone_dir": str(clone_dir), "commit": commit, "stages": stages,
        "total_wall_s": round(sum(stage["wall_s"] for stage in stages.values()), 2),
        "total_cpu_s": round(sum(stage["cpu_s"] for stage in stages.values()), 2),
        "note": SETUP_NOTE,
    }


def with_pipeline_section(results: dict, previous: dict, clone_dir: Path | None) -> dict:
    """`results` with the `pipeline` section measured now (`clone_dir` given) or kept from the
    previous benchmark file: a run of the other sections does not drop it."""
    if clone_dir is not None:
        return {**results, "pipeline": bench_pipeline(clone_dir)}
    if "pipeline" in previous:
        return {**results, "pipeline": previous["pipeline"]}
    return results


def pipeline_line(pipeline: dict) -> str:
    slowest = max(pipeline["stages"].items(), key=lambda item: item[1]["wall_s"])
    return (f"dvc repro of a fresh clone: {pipeline['total_wall_s']:.0f} s wall, {pipeline['total_cpu_s']:.0f} CPU-s over "
            f"{len(pipeline['stages'])} stages (slowest {slowest[0]} {slowest[1]['wall_s']:.0f} s)")
