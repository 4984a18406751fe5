"""docs/extending.md, performed: each extension under tests/extensions laid over a copy of the project as a newcomer
would add it, its files counted against the doc's "It takes" line, the doc's command run, and the tests run there.

An extension folder holds its new files at their repository paths (its own test among them); a file named
`<path>.append` holds lines appended to `<path>` (a claim in claims.yaml), and any other edit of an existing file (a
setting in conf/config.yaml) is one of the case's edits. The copy is a git
repository, so what the extension touched is what `git status` says; no existing test may be among it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import MIRROR, REPO_ROOT

EXTENSIONS = Path(__file__).parent / "extensions"
DOC = REPO_ROOT / "docs" / "extending.md"
GIT = ["git", "-c", "user.email=test@example.org", "-c", "user.name=test"]


def _insert_after(relative: str, anchor: str, text: str) -> Callable[[Path], None]:
    """An edit: `text` inserted after the first line of `relative` that starts with `anchor`."""
    def edit(copy: Path) -> None:
        lines = (copy / relative).read_text(encoding="utf-8").splitlines(keepends=True)
        at = next(index for index, line in enumerate(lines) if line.startswith(anchor))
        (copy / relative).write_text("".join([*lines[:at + 1], text, *lines[at + 1:]]), encoding="utf-8")
    return edit


def _replace(relative: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(copy: Path) -> None:
        text = (copy / relative).read_text(encoding="utf-8")
        assert old in text, f"{relative} no longer holds {old!r}: update the extension's edit"
        (copy / relative).write_text(text.replace(old, new, 1), encoding="utf-8")
    return edit


# extension → (its section's heading in docs/extending.md, its edits of existing files, the tests run in the copy)
EXTENSION_CASES = {
    "loss_term": ("A term of the twin objective", [
        _insert_after("conf/config.yaml", "  norm_input:",
                      "  distance_weight: 1.0   # the tower-distance term's weight (pipeline/objective_terms/tower_distance.py)\n"),
    ], ["tests/test_tower_distance_term.py", "tests/test_loss_terms.py", "tests/test_config.py", "tests/test_dvc_graph.py"]),
    "sts_task": ("An STS task", [
        _replace("conf/config.yaml", "SICKRelatedness]\n", "SICKRelatedness, STSBenchmarkDev]\n"),
    ], ["tests/test_sts_benchmark_dev_task.py", "tests/test_sts_tasks.py", "tests/test_config.py"]),
    "family": ("A backbone family", [], ["tests/test_families.py", "tests/test_architecture.py"]),
    "claim_kind": ("A claim kind", [], ["tests/test_at_least_claim.py", "tests/test_claim_kinds.py", "tests/test_claims.py"]),
}
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4}


def stated(heading: str) -> tuple[int, list[str]]:
    """(files, commands) of a section's "**It takes N files** ... and `command`" paragraph in docs/extending.md."""
    section = DOC.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    line = re.search(r"\*\*It takes (\w+) files?\*\*(.*?)(?:\n\n|$)", section, re.S)
    assert line, f"docs/extending.md, '{heading}': no '**It takes N files**' line"
    count = WORDS.get(line.group(1)) or int(line.group(1))
    return count, re.findall(r"`(python -m [^`]+)`", line.group(2))


def _run(command: list[str], copy: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(copy), "PIPELINE_DATA_MIRROR": str(MIRROR)}
    return subprocess.run(command, cwd=copy, env=environment, capture_output=True, text=True)


def project_copy(tmp_path: Path) -> Path:
    """The project's files (tracked and not ignored), copied into a fresh git repository with one commit."""
    copy = tmp_path / "project"
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        if (REPO_ROOT / relative).is_file() and not relative.startswith("tests/extensions/"):
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / relative, copy / relative)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "the project"], cwd=copy, check=True)
    return copy


def touched(copy: Path) -> dict[str, str]:
    """Each path git sees changed or added in the copy → its status ("??" new, " M" modified)."""
    shown = subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=copy, capture_output=True, text=True,
                           check=True).stdout
    return {line[3:]: line[:2] for line in shown.splitlines()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXTENSION_CASES))
def test_an_extension_takes_what_the_doc_says_and_the_tests_pass_with_it(tmp_path, name, mirror):
    heading, edits, tests = EXTENSION_CASES[name]
    copy = project_copy(tmp_path)
    for source in sorted(path for path in (EXTENSIONS / name).rglob("*") if path.is_file() and "__pycache__" not in path.parts):
        target = copy / source.relative_to(EXTENSIONS / name)
        if target.suffix == ".append":
            with target.with_suffix("").open("a", encoding="utf-8") as existing:
                existing.write(source.read_text(encoding="utf-8"))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for edit in edits:
        edit(copy)
    written = touched(copy)
    files, commands = stated(heading)
    assert len(written) == files, f"{name} touched {sorted(written)}; docs/extending.md says {files} files"
    assert not [path for path, status in written.items() if path.startswith("tests/test_") and status != "??"]
    for command in commands:
        done = _run([sys.executable, "-m", *command.split()[2:]], copy)
        assert done.returncode == 0, f"`{command}` failed:\n{done.stdout}{done.stderr}"
    assert not [path for path in touched(copy) if path.startswith("tests/") and path not in written]
    subprocess.run([*GIT, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", f"the {name} extension"], cwd=copy, check=True)
    checked = _run([sys.executable, "-m", "tools.stage_deps"], copy)
    assert checked.returncode == 0, f"dvc.yaml or params.yaml is stale after the doc's steps:\n{checked.stdout}"
    done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests], copy)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
