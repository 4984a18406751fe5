"""The one way the pipeline runs git: the provenance record, the report's reading of committed runs and the
reproduction check all call `git`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline.errors import PipelineError

GIT_TIMEOUT_SECONDS = 600


def git(root: Path, *arguments: str, stdin: bytes | None = None) -> bytes:
    """git's stdout for `arguments` run in `root`; git missing, hanging or failing is one line naming the command."""
    try:
        done = subprocess.run(["git", *arguments], cwd=root, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PipelineError(f"`git {arguments[0]}` could not run: {error}") from None
    if done.returncode:
        reason = next((line.strip() for line in done.stderr.decode(errors="replace").splitlines() if line.strip()),
                      f"exit {done.returncode}")
        raise PipelineError(f"`git {' '.join(arguments[:3])}` failed: {reason}")
    return done.stdout


def git_text_or_none(root: Path, *arguments: str) -> str | None:
    """git's stdout as text, or None where there is no git or no repository (a result made outside a checkout)."""
    try:
        return git(root, *arguments).decode()
    except PipelineError:
        return None
