"""What every stage shares: loading params, one-line errors with exit code 2, the summary line."""

from __future__ import annotations

import functools
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Callable

import typer

from pipeline.config import Params, load_params, params_unchanged_while_running
from pipeline.errors import PipelineError

EXIT_USER_ERROR = 2

# MKL (torch's CPU BLAS) picks kernels by memory alignment unless told otherwise, so one run in a
# few moved the last bits of a gradient (a 0.0075 metric drift in one of four tiny runs). Strict
# conditional numerical reproducibility makes reruns repeat; set before torch loads MKL.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

ParamsOption = typer.Option(Path("params.yaml"), "--params", help="the composed settings file")


def stage_params(path: Path) -> Params:
    """The stage's settings from params.yaml, with the process-wide ones applied first: the CPU
    thread count (`threads`), whatever OMP_NUM_THREADS says."""
    settings = load_params(path)
    from pipeline.runtime import apply_threads  # here: torch loads after MKL_CBWR above is set

    apply_threads(settings.threads)
    return settings


def stage(function: Callable) -> Callable:
    """Wrap a stage command: a PipelineError becomes one line on stderr and exit code 2; a finished
    stage prints its wall time and peak memory (the rehearsal's per-stage record, README)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per HEAD/GET of every hub file
        started = time.perf_counter()
        try:
            with params_unchanged_while_running():
                result = function(*args, **kwargs)
        except PipelineError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(EXIT_USER_ERROR) from None
        from pipeline.runtime import peak_rss_mb

        usage = resource.getrusage(resource.RUSAGE_SELF)  # CPU seconds: on a shared machine, wall time says little
        typer.echo(f"[{function.__module__.rsplit('.', 1)[-1]}] stage took {time.perf_counter() - started:.1f} s "
                   f"({usage.ru_utime + usage.ru_stime:.0f} CPU s), peak RSS {peak_rss_mb():.0f} MiB")
        return result

    return wrapper


def summary(stage_name: str, text: str) -> None:
    """The one line a stage prints when it is done."""
    typer.echo(f"[{stage_name}] {text}")


def tower_settings(params: Params, tower: str):
    """The settings of one tower; an unknown tower name is an error listing the towers."""
    if tower not in params.towers:
        raise PipelineError(f"--tower {tower} is not a tower of params.yaml; towers: {', '.join(params.towers)}")
    return params.towers[tower]


def _speed(steps_per_second: float) -> str:
    """Steps/s, or s/step below one step a second (a CPU at the paper's shapes printed "0.00 steps/s")."""
    if steps_per_second <= 0:
        return "no step timed"
    return f"{steps_per_second:.2f} steps/s" if steps_per_second >= 1 else f"{1 / steps_per_second:.1f} s/step"


def training_line(result, examples: int) -> str:
    """The summary of a training stage: steps, loss, dev score, speed and memory."""
    resumed = f", resumed at step {result.resumed_from}" if result.resumed_from is not None else ""
    best = f"best STS-B dev {result.best_dev:.2f} at step {result.best_step}" if result.best_dev is not None else "no dev score"
    return (
        f"{result.steps} steps on {examples} examples{resumed}, final loss {result.final_loss:.4f}, {best}, "
        f"{_speed(result.steps_per_second)}, peak memory {result.peak_memory_mb:.0f} MB"
    )
