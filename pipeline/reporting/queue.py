"""Queued experiments that failed, read from `dvc queue status` and `dvc queue logs`.

With several queue workers (`dvc queue start -j N`) DVC's task tracker can lose an experiment:
it is marked Failed with no output log at all (iterative/dvc issues 10673 and 10562; DVC 3.61+
prints "No output logs found … likely failed during setup"). Such an experiment never ran our
stages, so its row of a table stays missing: it is removed from the queue and queued again. A
failed experiment with a log failed in a stage: its log says why (`dvc queue logs <task>`).

`dvc queue status` prints a fixed-width table, `Task  Name  Created  Status` (the name column is
blank for unnamed experiments), then a line of worker counts; nothing else is read from it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError

HEADERS = ("Task", "Name", "Created", "Status")
DVC_TIMEOUT_SECONDS = 120
NO_LOG = "No output logs found"


@dataclass(frozen=True)
class QueueTask:
    task: str  # the first 7 hex digits of the queued revision
    name: str  # "" for an unnamed experiment
    status: str  # Queued, Running, Success, Failed


@dataclass(frozen=True)
class FailedTask:
    task: QueueTask
    has_log: bool

    @property
    def label(self) -> str:
        return f"{self.task.task} ({self.task.name})" if self.task.name else self.task.task

    def line(self) -> str:
        if self.has_log:
            return f"# {self.label} failed in a stage: see `dvc queue logs {self.task.task}`"
        return (f"# {self.label} failed without a log (DVC's queue lost it: iterative/dvc#10673, #10562); "
                f"`dvc queue remove {self.task.task}`, then queue its row again (the commands below)")


def parse_queue_status(text: str) -> list[QueueTask]:
    """The tasks of `dvc queue status`'s table, read by the header's column positions."""
    lines = text.splitlines()
    header = next((index for index, line in enumerate(lines) if line.split() == list(HEADERS)), None)
    if header is None:
        return []
    starts = [lines[header].index(word) for word in HEADERS]
    tasks = []
    for line in lines[header + 1:]:
        if not line.strip():
            break  # the blank line before the worker counts
        cells = [line[start:end].strip() for start, end in zip(starts, [*starts[1:], None])]
        if re.fullmatch(r"[0-9a-f]{7,}", cells[0]):
            tasks.append(QueueTask(cells[0], cells[1], cells[3]))
    return tasks


Run = Callable[[list[str]], subprocess.CompletedProcess]


def _run(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=DVC_TIMEOUT_SECONDS)
    except FileNotFoundError:
        raise PipelineError("dvc is not installed (scripts/setup.sh installs it)") from None
    except subprocess.TimeoutExpired:
        raise PipelineError(f"`{' '.join(command)}` took longer than {DVC_TIMEOUT_SECONDS} s") from None


def failed_experiments(run: Run = _run, project: Path = Path(".")) -> list[FailedTask]:
    """Every Failed task of the queue, and whether DVC kept its output log; none outside a DVC
    project (`project` has no .dvc folder), which has no queue."""
    if not (project / ".dvc").is_dir():
        return []
    status = run(["dvc", "queue", "status"])
    if status.returncode:
        reason = next((line for line in status.stderr.splitlines() if line.strip()), f"exit {status.returncode}")
        raise PipelineError(f"`dvc queue status` failed: {reason.strip()}")
    failed = []
    for task in parse_queue_status(status.stdout):
        if task.status != "Failed":
            continue
        logs = run(["dvc", "queue", "logs", task.task])
        lost = NO_LOG in logs.stderr or NO_LOG in logs.stdout or (logs.returncode == 0 and not logs.stdout.strip())
        failed.append(FailedTask(task, has_log=not lost))
    return failed
