"""What every stage shares: loading params, one-line errors with exit code 2, the summary line."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import resource
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator

import typer

from pipeline.config import Params
from pipeline.params_file import load_params, params_unchanged_while_running
from pipeline.urls import without_userinfo
from pipeline.errors import PipelineError
from pipeline.io import disk_full, finish_interrupted_writes, is_disk_full

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
    from pipeline.execution.runtime import apply_threads  # here: torch loads after MKL_CBWR above is set

    apply_threads(settings.threads)
    return settings


def stage(function: Callable) -> Callable:
    """Wrap a stage command, which takes its settings file as `params: Path = ParamsOption`: a
    PipelineError becomes one line on stderr and exit code 2, and so does a settings file that
    changed while the stage ran (`params_unchanged_while_running`); a finished stage prints its wall
    time, CPU seconds and peak memory (the rehearsal's per-stage record, docs/scaling.md)."""
    signature = inspect.signature(function)
    assert "params" in signature.parameters, f"stage command {function.__name__} takes no `params` file"

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        started = time.perf_counter()
        with one_line_errors(), params_unchanged_while_running(call.arguments["params"]):
            finish_interrupted_writes()  # a set of outputs a killed run left half renamed: all new before any read
            result = function(*args, **kwargs)
        from pipeline.execution.runtime import peak_rss_mb

        usage = resource.getrusage(resource.RUSAGE_SELF)  # CPU seconds: on a shared machine, wall time says little
        typer.echo(f"[{function.__module__.rsplit('.', 1)[-1]}] stage took {time.perf_counter() - started:.1f} s "
                   f"({usage.ru_utime + usage.ru_stime:.0f} CPU s), peak RSS {peak_rss_mb():.0f} MiB")
        return result

    return wrapper


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Log to stderr; a PipelineError inside becomes one line `error: …` on stderr and exit code 2, and
    so does a full disk (ENOSPC or a quota, also inside a `shutil.Error`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per HEAD/GET of every hub file
    try:
        yield
    except PipelineError as error:
        typer.echo(f"error: {without_userinfo(error)}", err=True)  # a URL's credentials never reach a terminal or log
        raise typer.Exit(EXIT_USER_ERROR) from None
    except OSError as error:  # a full disk outside the atomic writers (which name their file): one line too
        if not is_disk_full(error):
            raise
        typer.echo(f"error: {disk_full(getattr(error, 'filename', None))}", err=True)
        raise typer.Exit(EXIT_USER_ERROR) from None


def summary(stage_name: str, text: str) -> None:
    """The one line a stage prints when it is done."""
    typer.echo(f"[{stage_name}] {text}")


def _speed(steps_per_second: float) -> str:
    """Steps/s, or s/step below one step a second (a CPU at the paper's shapes printed "0.00 steps/s")."""
    if steps_per_second <= 0:
        return "no step timed"
    return f"{steps_per_second:.2f} steps/s" if steps_per_second >= 1 else f"{1 / steps_per_second:.1f} s/step"


def training_line(done) -> str:
    """The summary of a training stage (a `pipeline.training.jobs.Trained`): the method where the
    stage has several, steps, loss, dev score, speed and memory."""
    result = done.result
    resumed = f", resumed at step {result.resumed_from}" if result.resumed_from is not None else ""
    best = f"best STS-B dev {result.best_dev:.2f} at step {result.best_step}" if result.best_dev is not None else "no dev score"
    method = f"{done.method}: " if done.method else ""
    return (
        f"{method}{result.steps} steps on {done.examples} examples{resumed}, final loss {result.final_loss:.4f}, {best}, "
        f"{_speed(result.steps_per_second)}, peak memory {result.peak_memory_mb:.0f} MB"
    )
