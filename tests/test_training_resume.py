"""pipeline/training/resume.py: the loop's resume states and the folder lock (the loop's use of
them — resuming, corrupt states, the best model they name — is in test_training_loop.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from pipeline.errors import PipelineError
from pipeline.training import resume


def test_the_lock_of_a_killed_run_is_released_by_the_kernel(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from pipeline.training.resume import hold_resume_folder\n"
        f"with hold_resume_folder(Path({str(tmp_path / 'ckpt')!r}), 'x'):\n print('held', flush=True); time.sleep(600)"
    )], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(PipelineError):
        with resume.hold_resume_folder(tmp_path / "ckpt", "second"):
            pass
    holder.kill()
    holder.wait()
    with resume.hold_resume_folder(tmp_path / "ckpt", "second"):
        pass
