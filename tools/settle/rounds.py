"""The seeds of a settling, where their numbers come from, and the rounds that add more.

A seed's observation is the pair (better, worse) of the claim's column in one run at that training
seed: from the committed seed record (`reports/seed_noise.json`, when it holds the workspace's
settings) or from a finished DVC experiment of that seed at the workspace's settings (the seed
record's `seed-<N>` runs, or settling's own `settle-<claim>-<N>`, which reran the two models only).
Their order is fixed before any number is seen: the record's seeds, then new seeds ascending, so the
looks are the ones the plan made. A round queues only seeds with neither a finished nor a pending
experiment, so a settling killed at any point resumes from what finished and never runs a seed twice.
"""

from __future__ import annotations

import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from pipeline.errors import PipelineError
from pipeline.reporting.queue import parse_queue_status
from pipeline.reporting.runs import run_queue_command, search_experiments
from pipeline.reporting.seed_record import SeedRecord, settings_digest
from tools.settle.target import SettleTarget

Observation = tuple[float, float]  # (better, worse) of the claim's column, one run
EXPERIMENT_COMMITS = 50  # a settling resumed after commits (its experiments stay on the commit they ran from)


def experiment_name(target: SettleTarget, seed: int) -> str:
    return f"settle-{target.claim_id}-{seed}"


def seed_order(recorded: list[int], more: int, exclude: list[int] | tuple[int, ...] = ()) -> list[int]:
    """The record's seeds, then `more` new seeds: the smallest integers not used (nor in `exclude`), ascending."""
    new, candidate = [], 0
    while len(new) < more:
        if candidate not in recorded and candidate not in exclude:
            new.append(candidate)
        candidate += 1
    return list(recorded) + new


class SeedSource(ABC):
    """Where a settling's seeds come from and how more are run (DVC here; a fake in the tests)."""

    @abstractmethod
    def observed(self) -> dict[int, Observation]:
        """Every seed with a finished run: its (better, worse)."""

    @abstractmethod
    def pending(self) -> set[int]:
        """Seeds queued or running now."""

    @abstractmethod
    def queue(self, seeds: list[int]) -> None:
        """Queue a run of each seed."""

    @abstractmethod
    def wait(self, seeds: list[int]) -> None:
        """Return when none of `seeds` is queued or running; a failed one is an error naming its log."""


def record_observations(record: SeedRecord | None, target: SettleTarget, params: dict) -> dict[int, Observation]:
    """The committed record's (better, worse) per seed, when it holds the workspace's settings and both models."""
    if record is None or not record.matches(params):
        return {}
    better, worse = record.arm(target.better, target.column), record.arm(target.worse, target.column)
    if better is None or worse is None:
        return {}
    return {seed: (float(b), float(w)) for seed, b, w in zip(record.seeds, better, worse)}


class DvcSeeds(SeedSource):
    """Seeds as DVC experiments of the workspace: `dvc exp run --queue -n settle-<claim>-<seed> -S seed=<seed>
    evaluate@<better> evaluate@<worse>`, run by `dvc queue start` one at a time (the GPU lease of each stage
    applies as in any queued experiment)."""

    def __init__(self, target: SettleTarget, params: dict, record: SeedRecord | None, poll_seconds: float = 10.0,
                 run: Callable[[list[str]], subprocess.CompletedProcess] | None = None):
        self.target, self.params, self.record, self.poll_seconds = target, params, record, poll_seconds
        self.run = run or (lambda command: subprocess.run(command, capture_output=True, text=True, timeout=120))

    def _seed_of(self, name: str) -> int | None:
        """The seed of one of this claim's settling experiments, from its name; None for any other."""
        prefix = experiment_name(self.target, 0)[:-1]
        suffix = name.removeprefix(prefix)
        return int(suffix) if name.startswith(prefix) and suffix.isdigit() else None

    def observed(self) -> dict[int, Observation]:
        found = record_observations(self.record, self.target, self.params)
        search = search_experiments(EXPERIMENT_COMMITS)
        if search.problem:
            raise PipelineError(search.problem)
        wanted = settings_digest(self.params)
        for run in search.runs:  # newest first: the newest finished run of a seed
            seed = run.params.get("seed")
            ours = run.name in (f"exp {experiment_name(self.target, seed)}", f"exp seed-{seed}")
            if not ours or seed in found or settings_digest(run.params) != wanted:
                continue
            better, worse = run.value(self.target.better, self.target.column), run.value(self.target.worse, self.target.column)
            if better is not None and worse is not None:
                found[seed] = (better, worse)
        return found

    def _tasks(self):
        status = self.run(["dvc", "queue", "status"])
        if status.returncode:
            raise PipelineError(f"`dvc queue status` failed: {status.stderr.strip().splitlines()[-1:] or status.returncode}")
        return parse_queue_status(status.stdout)

    def _superseded(self, task, tasks) -> bool:
        """A failed task of a seed queued again since: not this round's outcome."""
        return task.status == "Failed" and any(other.name == task.name and other.status != "Failed" for other in tasks)

    def pending(self) -> set[int]:
        return {self._seed_of(task.name) for task in self._tasks()
                if self._seed_of(task.name) is not None and task.status in ("Queued", "Running")}

    def queue(self, seeds: list[int]) -> None:
        for task in self._tasks():  # an earlier try's failed task of a seed would be read as this round's
            if task.status == "Failed" and self._seed_of(task.name) in seeds:
                self.run(["dvc", "queue", "remove", task.task])
        for seed in seeds:
            run_queue_command(f"dvc exp run --queue -n {experiment_name(self.target, seed)} -S seed={seed} "
                              + " ".join(self.target.stages))
        # the worker it starts outlives it and would hold a captured pipe open: no pipes
        started = subprocess.run(["dvc", "queue", "start", "-j", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 timeout=120)
        if started.returncode:
            raise PipelineError("`dvc queue start -j 1` failed; run it by hand to see why, then settle again (it resumes)")

    def wait(self, seeds: list[int]) -> None:
        names = {experiment_name(self.target, seed) for seed in seeds}
        while True:
            listed = self._tasks()
            tasks = [task for task in listed if task.name in names and not self._superseded(task, listed)]
            failed = [task for task in tasks if task.status == "Failed"]
            if failed:
                raise PipelineError(f"the run of {failed[0].name} failed: `dvc queue logs {failed[0].task}` says why; "
                                    f"`dvc queue remove {failed[0].task}` and settle again to rerun it")
            if not any(task.status in ("Queued", "Running") for task in tasks):
                return
            time.sleep(self.poll_seconds)
