"""Atomic writes on a shared machine (issue 47): the sweep of a killed run's leftovers removes the
pipeline's temporaries alone, and a run from outside the project makes no scratch folder there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline import io as atomic_io


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
