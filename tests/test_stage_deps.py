"""The files a module runs, read from its imports (pipeline/code_deps.py), and the writer of each stage's code
deps in dvc.yaml (tools/stage_deps.py)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO_ROOT
from pipeline.code_deps import NOT_FOLLOWED, PROJECT_PACKAGES, dvc_code_deps, loaded_by_name, project_files
from tools.stage_deps import rewritten, stated_and_expected


def test_the_code_deps_of_each_stage_are_written_from_its_imports():
    """dvc.yaml states what the writer gives (tests/test_dvc_graph.py checks any stated deps against the imports)."""
    differing = [stage for stage, (stated, expected) in stated_and_expected().items() if stated != expected]
    assert not differing, f"{differing}: run `python -m tools.stage_deps --write`"


def test_the_imports_are_followed_through_packages_and_functions(tmp_path):
    (tmp_path / "pipeline" / "sub").mkdir(parents=True)
    (tmp_path / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "sub" / "a.py").write_text("import os\nfrom pipeline.sub import b\n")
    (tmp_path / "pipeline" / "sub" / "b.py").write_text("def later():\n    from pipeline import c\n")
    (tmp_path / "pipeline" / "c.py").write_text("import numpy\n")
    (tmp_path / "pipeline" / "unused.py").write_text("")
    assert project_files("pipeline/sub/a.py", tmp_path) == (
        "pipeline/__init__.py", "pipeline/c.py", "pipeline/sub/__init__.py", "pipeline/sub/a.py", "pipeline/sub/b.py")
    # a sub-package run whole is one folder dep; the top package is listed by its parts (unused.py is no dep)
    assert dvc_code_deps("pipeline/sub/a.py", tmp_path) == ["pipeline/__init__.py", "pipeline/c.py", "pipeline/sub"]


def test_the_rewrite_replaces_only_code_entries():
    text = ("stages:\n  s:\n    cmd: python -m stages s\n    deps:\n      - data/x  # kept\n      - pipeline/old.py  # dropped\n"
            "      - stages/s.py\n    outs:\n      - out\n")
    assert rewritten(text, {"s": ["pipeline/new.py", "stages/s.py"]}) == (
        "stages:\n  s:\n    cmd: python -m stages s\n    deps:\n      - data/x  # kept\n      - pipeline/new.py\n"
        "      - stages/s.py\n    outs:\n      - out\n")


# ---- modules loaded by name (issue 64): a loss term in a file of its own --------------------------------

TERM_FILE = "pipeline/objective_terms/alignment.py"
TERM_SOURCE = '''"""A term of the twin objective in a module of its own, declaring itself."""
from pipeline.declarations.loss_terms import LossTerm, LossTermDeclaration, declare_loss_term


class _Alignment(LossTerm):
    def compute(self, inputs):
        return (inputs.out.last_cls[0] - inputs.out.last_cls[1]).pow(2).mean()


ALIGNMENT_TERM = _Alignment()
declare_loss_term(LossTermDeclaration("align", "the towers' squared distance", f"{__name__}:ALIGNMENT_TERM"))
'''


def repository_copy(tmp_path: Path) -> Path:
    """The repository's git-tracked files, copied (no data, no caches)."""
    copy = tmp_path / "repository"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for relative in filter(None, tracked.decode().split("\0")):
        if (REPO_ROOT / relative).is_file():
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / relative, copy / relative)
    return copy


def test_a_term_in_its_own_module_is_a_dep_of_every_stage_that_reads_the_settings(tmp_path):
    """The settings load every module of pipeline/objective_terms/ (no import statement names one): the folder is a dep
    of every stage that validates params.yaml, so a term added there needs no rewrite of dvc.yaml."""
    copy = repository_copy(tmp_path)
    (copy / TERM_FILE).write_text(TERM_SOURCE)
    reads_terms = set()
    for stage in sorted((copy / "stages").glob("*.py")):
        relative = stage.relative_to(copy).as_posix()
        files = project_files(relative, copy)
        assert (TERM_FILE in files) == ("pipeline/declarations/loss_terms.py" in files), relative
        assert (TERM_FILE in files) == ("pipeline/objective_terms" in dvc_code_deps(relative, copy)), relative
        reads_terms |= {stage.stem} if TERM_FILE in files else set()
    assert {"joint", "jtcse", "pretrain", "distill"} <= reads_terms


def _changed_deps(repository: Path, stage: str) -> dict[str, str]:
    shown = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", stage], cwd=repository,
                           capture_output=True, text=True, check=True).stdout
    changes = json.loads(shown).get(stage, [])
    return {path: how for change in changes if isinstance(change, dict) for path, how in change.get("changed deps", {}).items()}


def test_adding_or_editing_a_term_in_its_own_module_makes_dvc_rerun_joint(tmp_path):
    """The real `dvc status` in a copy of the repository, its dvc.lock as committed: the term's folder is already
    a dep of joint, so adding a module there, and editing it later, changes that dep."""
    copy = repository_copy(tmp_path)
    git = ["git", "-c", "user.email=test@example.org", "-c", "user.name=test"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "as committed"], cwd=copy, check=True)
    assert "pipeline/objective_terms" not in _changed_deps(copy, "joint")
    (copy / TERM_FILE).write_text(TERM_SOURCE)
    assert _changed_deps(copy, "joint").get("pipeline/objective_terms") == "modified"


def test_every_loader_by_name_is_followed_or_says_why_not():
    """A module that calls importlib is a loader by name: its registry is followed (`loaded_by_name`) or
    `NOT_FOLLOWED` says why what it loads decides no result."""
    loading = re.compile(r"\b(import_module|__import__|run_module)\(")  # in the text: a probe's code is a string
    loaders = {file.relative_to(REPO_ROOT).as_posix() for folder in PROJECT_PACKAGES
               for file in (REPO_ROOT / folder).rglob("*.py") if loading.search(file.read_text(encoding="utf-8"))}
    assert loaders == set(loaded_by_name()) | set(NOT_FOLLOWED)


def test_a_plugin_package_loaded_by_its_registry_is_a_dep_as_a_folder(tmp_path):
    """`load_plugins("<package>")` imports every module of the package: each counts as run, and the folder is one dep,
    so a module added there later is a dep without rewriting dvc.yaml."""
    (tmp_path / "pipeline" / "things").mkdir(parents=True)
    (tmp_path / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "registry.py").write_text(
        "from pipeline.plugins import load_plugins\n\ndef entries():\n    load_plugins('pipeline.things')\n")
    (tmp_path / "pipeline" / "plugins.py").write_text("")
    (tmp_path / "pipeline" / "things" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "things" / "one.py").write_text("")
    (tmp_path / "pipeline" / "things" / "_helper.py").write_text("")  # not an entry, not loaded
    assert project_files("pipeline/registry.py", tmp_path) == (
        "pipeline/__init__.py", "pipeline/plugins.py", "pipeline/registry.py", "pipeline/things/__init__.py",
        "pipeline/things/one.py")
    (tmp_path / "pipeline" / "things" / "_helper.py").unlink()
    assert dvc_code_deps("pipeline/registry.py", tmp_path) == [
        "pipeline/__init__.py", "pipeline/plugins.py", "pipeline/registry.py", "pipeline/things"]


def test_load_plugins_imports_each_module_of_the_package_in_name_order(tmp_path, monkeypatch):
    from pipeline.plugins import load_plugins

    package = tmp_path / "plugin_probe"
    package.mkdir()
    (package / "__init__.py").write_text("LOADED = []\n")
    for name in ("b_second", "a_first", "_private"):
        (package / f"{name}.py").write_text(f"from plugin_probe import LOADED\nLOADED.append({name!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_plugins("plugin_probe") == ("plugin_probe.a_first", "plugin_probe.b_second")
    assert sys.modules["plugin_probe"].LOADED == ["a_first", "b_second"]
    for name in [name for name in sys.modules if name.startswith("plugin_probe")]:
        monkeypatch.delitem(sys.modules, name)
