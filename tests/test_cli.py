"""The `python -m stages` command itself (stages/cli.py): its help costs no torch import, and reads unwrapped."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT


def test_help_imports_no_torch():
    """`python -m stages --help` lists every stage without importing torch (it is imported where a stage runs)."""
    shown = subprocess.run([sys.executable, "-X", "importtime", "-m", "stages", "--help"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "settle" in shown.stdout
    imported = [line.split("|")[-1].strip() for line in shown.stderr.splitlines() if line.startswith("import time:")]
    assert imported and not [name for name in imported if name == "torch" or name.startswith("torch.")]


def test_every_commands_help_is_its_docstring_unwrapped():
    from stages.cli import app, unwrapped

    assert unwrapped("one line\n    broken here.\n\n    A second paragraph\n    too.") == "one line broken here.\n\nA second paragraph too."
    for registered in app.registered_commands:
        assert registered.help and all("\n" not in paragraph for paragraph in registered.help.split("\n\n")), registered.name
