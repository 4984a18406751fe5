"""Queued experiments DVC lost (issue 29): read from `dvc queue status` and `dvc queue logs`."""

from __future__ import annotations

import subprocess

import pytest

from pipeline.errors import PipelineError
from pipeline.reporting.queue import QueueTask, failed_experiments, parse_queue_status

# `dvc queue status` as DVC 3 prints it (dvc/commands/queue/status.py: a plain TabularData table);
# unnamed experiments leave the Name column blank.
STATUS = """Task     Name        Created    Status
3550d20  massy-fuss  05:10 PM   Running
1914655  cheek-oast  05:13 PM   Queued
b62df65              04:46 PM   Failed
1e7798f  gouty-loss  04:47 PM   Failed
9a02fb0  exp-342ce   04:48 PM   Success

Worker status: 1 active, 0 idle
"""
NO_LOG = ("ERROR: No output logs found for experiment 'b62df65'\nExperiment likely failed during setup. "
          "Check the celery logs for more details:\n    cat .dvc/tmp/exps/celery/dvc-exp-worker-1.out\n")


def fake_dvc(status: str, logs: dict[str, tuple[int, str, str]]):
    calls = []

    def run(command: list[str]) -> subprocess.CompletedProcess:
        calls.append(command)
        if command[:3] == ["dvc", "queue", "status"]:
            return subprocess.CompletedProcess(command, 0, status, "")
        code, out, err = logs[command[3]]
        return subprocess.CompletedProcess(command, code, out, err)

    return run, calls


@pytest.fixture
def project(tmp_path):
    (tmp_path / ".dvc").mkdir()
    return tmp_path


def test_outside_a_dvc_project_there_is_no_queue_and_dvc_is_not_asked(tmp_path):
    def run(command):
        raise AssertionError(f"ran {command}")

    assert failed_experiments(run, tmp_path) == []


def test_the_status_table_is_read_by_its_columns_blank_names_included():
    assert parse_queue_status(STATUS) == [
        QueueTask("3550d20", "massy-fuss", "Running"), QueueTask("1914655", "cheek-oast", "Queued"),
        QueueTask("b62df65", "", "Failed"), QueueTask("1e7798f", "gouty-loss", "Failed"),
        QueueTask("9a02fb0", "exp-342ce", "Success"),
    ]
    assert parse_queue_status("No experiment tasks in the queue.\n\nWorker status: 0 active, 0 idle\n") == []


def test_a_failed_experiment_without_a_log_is_named_with_the_command_that_removes_it(project):
    run, calls = fake_dvc(STATUS, {"b62df65": (255, "", NO_LOG), "1e7798f": (0, "error: pretrain-I: loss is nan\n", "")})
    failed = failed_experiments(run, project)
    assert [(item.task.task, item.has_log) for item in failed] == [("b62df65", False), ("1e7798f", True)]
    assert [command[3] for command in calls[1:]] == ["b62df65", "1e7798f"]  # only the failed ones' logs are read
    lost, with_log = (item.line() for item in failed)
    assert "without a log" in lost and "`dvc queue remove b62df65`" in lost and "10673" in lost
    assert "`dvc queue logs 1e7798f`" in with_log and "(gouty-loss)" in with_log


def test_an_empty_log_counts_as_no_log(project):
    run, _ = fake_dvc(STATUS, {"b62df65": (0, "  \n", ""), "1e7798f": (0, "", "")})
    assert [item.has_log for item in failed_experiments(run, project)] == [False, False]


def test_dvc_queue_status_failing_is_one_line(project):
    def run(command):
        return subprocess.CompletedProcess(command, 255, "", "ERROR: you are not inside of a DVC repository\n")

    with pytest.raises(PipelineError, match="`dvc queue status` failed: ERROR: you are not inside"):
        failed_experiments(run, project)
