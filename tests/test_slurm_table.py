"""scripts/slurm_table.sbatch on a shared node (issue 47 item 6): its work folder is its own, made by
`mktemp -d`, and the queued commands it runs are read as words, never `eval`ed as shell code.
Run with stand-ins for git, python's stage entry and dvc (no cluster, no network)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "slurm_table.sbatch"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

# `git clone <remote> <folder>` makes a checkout with a no-op setup; the stage entry prints the queue.
GIT = """#!/usr/bin/env bash
if [ "$1" = clone ]; then
  folder=$4
  stat -c '%a' "$folder" > "$LOG_DIR/clone-mode" 2>/dev/null || echo missing > "$LOG_DIR/clone-mode"
  echo "$folder" > "$LOG_DIR/clone-folder"
  mkdir -p "$folder/scripts" "$folder/.venv/bin"
  printf '#!/bin/sh\\n' > "$folder/scripts/setup.sh"; chmod +x "$folder/scripts/setup.sh"
  : > "$folder/.venv/bin/activate"
fi
"""
PYTHON = """#!/usr/bin/env bash
if [ "$1" = -m ]; then
  echo "dvc exp run --queue -S 'seed=1' -S 'note=two words'"
  echo "dvc exp run --queue -S seed=2; touch $LOG_DIR/pwned"
  exit 0
fi
exec {python} "$@"
"""
DVC = """#!/usr/bin/env bash
printf '%s|' "$@" >> "$LOG_DIR/dvc.log"; echo >> "$LOG_DIR/dvc.log"
"""


def test_the_script_makes_its_work_folder_with_mktemp_and_evals_nothing():
    code = [line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert any("mktemp -d" in line for line in code)
    assert not any(re.search(r"\beval\b", line) for line in code)


def test_queued_lines_run_as_words_in_a_fresh_private_folder(tmp_path):
    bin_dir, logs, scratch = tmp_path / "bin", tmp_path / "logs", tmp_path / "scratch"
    for folder in (bin_dir, logs, scratch):
        folder.mkdir()
    for name, text in {"git": GIT, "python": PYTHON.format(python=sys.executable), "dvc": DVC}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    squatted = scratch / "pipeline-7-0"  # the old predictable name, made first by someone else
    squatted.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG_DIR": str(logs), "GIT_REMOTE": "remote",
           "TABLE": "t", "REVISION": "abc", "SLURM_TMPDIR": str(scratch), "SLURM_ARRAY_JOB_ID": "7",
           "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "1"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    work = Path((logs / "clone-folder").read_text().strip())
    assert work.parent == scratch and work != squatted and list(squatted.iterdir()) == []
    assert (logs / "clone-mode").read_text().strip() == "700"  # ours alone, made by mktemp before the clone
    assert not (logs / "pwned").exists()  # a line is data: its `; touch` never ran
    runs = [line for line in (logs / "dvc.log").read_text().splitlines() if line.startswith("exp|run|")]
    assert runs == ["exp|run|-n|t-0-0|-S|seed=1|-S|note=two words|",
                    f"exp|run|-n|t-0-1|-S|seed=2;|touch|{logs}/pwned|"]
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
