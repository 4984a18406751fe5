"""Atomic writes (issue 47): the sweep of a killed run's leftovers removes the pipeline's temporaries
alone, a run from outside the project makes no scratch folder there, and a set of files killed
between two renames ends all new."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import io as atomic_io
from pipeline.errors import PipelineError

from conftest import REPO_ROOT


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_the_sweep_leaves_a_user_s_own_entries_in_the_scratch_folder_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    scratch = tmp_path / ".tmp"
    for name in ("30000-keep", "2024-backup"):  # `<digits>-…`: what the sweep took for a dead writer's
        (scratch / name).mkdir(parents=True)
        (scratch / name / "precious.txt").write_text("mine")
    (scratch / "1-not-ours.txt").write_text("mine")
    leftover = scratch / f"pipeline-tmp-{_dead_pid()}-0000abcd-t.md"  # a killed run's
    leftover.write_text("half")
    atomic_io.write_text_atomic(Path("reports") / "t.md", "x")
    assert (tmp_path / "reports" / "t.md").read_text() == "x"
    assert not leftover.exists()
    for name in ("30000-keep", "2024-backup"):
        assert (scratch / name / "precious.txt").read_text() == "mine"
    assert (scratch / "1-not-ours.txt").read_text() == "mine"


def test_a_run_from_outside_a_project_keeps_its_temporaries_beside_the_destination(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".tmp" / "30000-keep").mkdir(parents=True)
    monkeypatch.chdir(home)  # no dvc.yaml: the home folder, say, and an --output under it
    with atomic_io.atomic_path(home / "results" / "scores.json") as temporary:
        assert temporary.parent == home / "results" and temporary.name.startswith(".pipeline-tmp-")
        assert atomic_io.is_temporary(temporary)
        temporary.write_text("{}")
    with atomic_io.scratch_directory(home / "results") as folder:
        assert folder.parent == home / "results"
    assert (home / "results" / "scores.json").read_text() == "{}"
    assert [path.name for path in (home / ".tmp").iterdir()] == ["30000-keep"]
    assert [path.name for path in (home / "results").iterdir()] == ["scores.json"]


def test_a_project_s_temporaries_carry_the_prefix_and_are_temporary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    with atomic_io.atomic_path(Path("reports") / "t.md") as temporary:
        assert temporary.parent.resolve() == tmp_path / ".tmp" and temporary.name.startswith("pipeline-tmp-")
        assert atomic_io.is_temporary(temporary)
        temporary.write_text("x")


# ----------------------------------------------------------------------------- a set of files, killed mid-rename

# A writer of a set of three files killed (SIGKILL: no `finally`) right after its first rename.
KILLED_WRITER = """
import os, sys
from pathlib import Path
from pipeline import io
real_replace = os.replace
sets = {Path(name).absolute() for name in sys.argv[1:]}

def replace_then_die(source, destination):
    real_replace(source, destination)
    if Path(destination).absolute() in sets:
        os.kill(os.getpid(), 9)

io.os.replace = replace_then_die
io.write_json_files_atomic({Path(name): {"new": 1} for name in sys.argv[1:]})
"""
SET = ["reports/metrics/details/m.json", "reports/metrics/bootstrap/m.json", "reports/metrics/m.json"]


def _killed_mid_set(project: Path) -> list[Path]:
    paths = [project / name for name in SET]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"old": 1}')
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, *SET], cwd=project, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert killed.returncode == -9
    assert [json.loads(path.read_text()) for path in paths] == [{"new": 1}, {"old": 1}, {"old": 1}]  # half a set
    return paths


def test_a_set_killed_between_renames_is_completed_by_the_next_write(tmp_path, monkeypatch):
    (tmp_path / "dvc.yaml").touch()
    paths = _killed_mid_set(tmp_path)
    monkeypatch.chdir(tmp_path)
    atomic_io.write_text_atomic(Path("reports") / "other.txt", "x")  # any write in the project sweeps .tmp/
    assert [json.loads(path.read_text()) for path in paths] == [{"new": 1}] * 3
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_a_set_killed_between_renames_is_completed_before_a_stage_reads_it(tmp_path, monkeypatch):
    (tmp_path / "dvc.yaml").touch()
    paths = _killed_mid_set(tmp_path)
    monkeypatch.chdir(tmp_path)
    atomic_io.finish_interrupted_writes()  # what every stage runs first (stages.common.stage)
    assert [json.loads(path.read_text()) for path in paths] == [{"new": 1}] * 3


def test_a_set_killed_between_renames_outside_a_project_is_completed_by_its_next_write(tmp_path, monkeypatch):
    paths = _killed_mid_set(tmp_path)  # no dvc.yaml: the twins and the journal lie beside the files
    monkeypatch.chdir(tmp_path)
    atomic_io.write_json_files_atomic({Path(SET[0]): {"newer": 1}})
    assert [json.loads(path.read_text()) for path in paths] == [{"newer": 1}, {"new": 1}, {"new": 1}]


def test_a_live_writer_s_journal_is_left_alone(tmp_path):
    journal = tmp_path / f"pipeline-tmp-{os.getpid()}-0000abcd-m.json.journal"
    journal.write_text(json.dumps([[str(tmp_path / "twin"), str(tmp_path / "m.json"), "digest"]]))
    (tmp_path / "twin").write_text("in flight")
    atomic_io.finish_interrupted_sets(tmp_path)
    assert journal.exists() and (tmp_path / "twin").exists() and not (tmp_path / "m.json").exists()


def test_a_killed_set_restored_since_is_left_as_it_is(tmp_path, monkeypatch, caplog):
    """Half a set renamed in, then that half restored (`git checkout`): completing the set now would mix
    the restored files with the killed run's; it is left as restored and its leftovers removed."""
    (tmp_path / "dvc.yaml").touch()
    paths = _killed_mid_set(tmp_path)
    paths[0].write_text('{"old": 1}')  # the one file it had renamed in, restored
    monkeypatch.chdir(tmp_path)
    atomic_io.finish_interrupted_writes()
    assert [json.loads(path.read_text()) for path in paths] == [{"old": 1}] * 3
    assert [path.name for path in (tmp_path / ".tmp").iterdir() if not path.name.endswith(".old")] == []  # twins, journal gone
    assert "have changed since (restored?): left as they are" in caplog.text


# ----------------------------------------------------------------------------- a full disk

def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_in_a_set_is_one_line_and_leaves_the_set_as_it_was(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").touch()
    first, second = Path("reports/a.json"), Path("reports/b.json")
    first.parent.mkdir()
    first.write_text("old a")
    second.write_text("old b")
    real_write_text = Path.write_text

    def full_at_b(self, *args, **kwargs):
        if self.name.endswith("-b.json"):
            _no_space()
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_at_b)
    monkeypatch.delenv("DVC_STAGE", raising=False)  # run as a plain command, not by `dvc repro`
    with pytest.raises(PipelineError) as caught:
        atomic_io.write_json_files_atomic({first: {"new": 1}, second: {"new": 1}})
    assert str(caught.value) == ("no space left on the device while writing reports/b.json; the previous outputs are "
                                 "unchanged: free space on reports (df -h reports) or write elsewhere, and rerun")
    monkeypatch.setenv("DVC_STAGE", "evaluate@backbone")  # under `dvc repro`, DVC removed the outputs before the stage ran
    assert str(atomic_io.disk_full(second)) == (
        "no space left on the device while writing reports/b.json; DVC removed this stage's previous outputs before "
        "running it: `dvc checkout evaluate@backbone` restores the cached ones and `git checkout -- reports/` those in "
        "git: free space on reports (df -h reports) or write elsewhere, and rerun")
    assert first.read_text() == "old a" and second.read_text() == "old b"
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_a_full_disk_while_copying_a_folder_is_one_line_and_the_old_folder_stays(tmp_path):
    destination = tmp_path / "model"
    destination.mkdir()
    (destination / "weights").write_text("old")
    with pytest.raises(PipelineError, match=r"^no space left on the device while writing .*model; .*free space on"):
        with atomic_io.atomic_directory(destination) as folder:
            raise shutil.Error([(str(tmp_path / "src"), str(folder / "w"), "[Errno 28] No space left on device: 'w'")])
    assert [path.name for path in destination.iterdir()] == ["weights"] and (destination / "weights").read_text() == "old"


def test_a_full_disk_anywhere_in_a_stage_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    import typer

    from stages.common import one_line_errors

    monkeypatch.chdir(tmp_path)
    output = tmp_path / "metrics.json"
    output.write_text("previous")
    monkeypatch.setattr(atomic_io.os, "replace", _no_space)  # even the rename: outside the writers' own checks
    with pytest.raises(typer.Exit) as exited:
        with one_line_errors():
            atomic_io.write_json_atomic(output, {"new": 1})
    assert exited.value.exit_code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no space left on the device; the previous outputs are unchanged: free space on the disk "
                   "the stage writes to (df -h) and rerun"]
    assert output.read_text() == "previous"

    def no_space_in_checkpoint(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "data/checkpoints/joint/step-8/optimizer.pt")

    with pytest.raises(typer.Exit) as exited:
        with one_line_errors():
            no_space_in_checkpoint()
    assert exited.value.exit_code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: no space left on the device while writing data/checkpoints/joint/step-8/optimizer.pt; the previous "
        "outputs are unchanged: free space on data/checkpoints/joint/step-8 (df -h data/checkpoints/joint/step-8) or "
        "write elsewhere, and rerun"]
