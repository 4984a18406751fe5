"""Shared test fixtures: the repository root, the data mirror and the committed tiny params."""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import os
import textwrap
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
# The data mirror the suite reads: PIPELINE_DATA_MIRROR (as the download stage reads it), else the lab's.
# Each folder under tests/extensions is an extension as a newcomer writes it (its files at their repository paths,
# its own test among them): tests/test_extending.py lays it over a copy of the project and runs the tests there.
collect_ignore_glob = ["extensions/*"]
MIRROR = Path(os.environ.get("PIPELINE_DATA_MIRROR") or REPO_ROOT / ".." / "shared" / "data").resolve()
sys.path.insert(0, str(Path(__file__).parent))  # test helpers (hub_standin, ...)


@pytest.fixture(scope="session", autouse=True)
def own_gpu_lease_folder(tmp_path_factory) -> Path:
    """The suite never takes the real GPU lease of this machine (a running experiment's devices, or
    its wait for them): every test, and every process a test starts, leases in a folder of its own."""
    folder = tmp_path_factory.mktemp("gpu-leases")
    previous = os.environ.get("PIPELINE_LEASE_DIR")
    os.environ["PIPELINE_LEASE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("PIPELINE_LEASE_DIR", None)
    else:
        os.environ["PIPELINE_LEASE_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def data_mirror_in_the_environment() -> Path:
    """Every download in the suite, and every stage a test starts, reads the mirror (`configured_mirror`);
    a test of the canonical path takes it out of the environment itself."""
    previous = os.environ.get("PIPELINE_DATA_MIRROR")
    if MIRROR.is_dir():  # a clone without one: the tests that need it are skipped (`pytest_collection_modifyitems`)
        os.environ["PIPELINE_DATA_MIRROR"] = str(MIRROR)
    yield MIRROR
    if previous is None:
        os.environ.pop("PIPELINE_DATA_MIRROR", None)
    else:
        os.environ["PIPELINE_DATA_MIRROR"] = previous


@pytest.fixture(scope="session")
def mirror() -> Path:
    return MIRROR  # present: a test that asks for it is skipped without it (`pytest_collection_modifyitems`)


@functools.cache
def _composed_tiny_preset() -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        return OmegaConf.to_container(compose(config_name="config"), resolve=True)


def tiny_preset() -> dict:
    """A fresh copy of the tiny preset composed from conf/ (what the committed params.yaml holds).

    Never the workspace's params.yaml: `dvc exp run -S ...` rewrites that file (and reports/), and
    the tests must pass in such a workspace as in a fresh clone."""
    return copy.deepcopy(_composed_tiny_preset())


def committed_text(path: str) -> str:
    """A file as committed (git's HEAD), not as the workspace's last run left it; the file itself
    outside a git checkout (an unpacked release)."""
    shown = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=REPO_ROOT, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else (REPO_ROOT / path).read_text()


@pytest.fixture
def tiny_params_dict() -> dict:
    """A fresh copy of the tiny preset (`tiny_preset`)."""
    return tiny_preset()


# ---- what a stranger's clone lacks: the lab's data mirror and the papers' texts ----------------------------
# A clone without ../shared/ (and PIPELINE_DATA_MIRROR unset) runs every test that does not read them; a test
# that does is skipped with one line naming what is missing and how to provide it. CI has both and runs all.
PAPERS = REPO_ROOT.parent / "shared" / "seeds"
NEEDS = (
    (("MIRROR",), MIRROR,
     f"needs the lab's data mirror, missing at {MIRROR}: set PIPELINE_DATA_MIRROR to a data mirror folder "
     "(docs/reproducing.md, \"Where the data comes from\")"),
    (("SEEDS", "PAPERS"), PAPERS,
     f"needs the papers' texts, missing at {PAPERS}: put them there (the lab's ../shared/seeds)"),
)


@functools.cache
def _names_reading(path: str, roots: tuple[str, ...]) -> frozenset[str]:
    """The module-level names of a test module that read one of `roots`, directly or through another such
    name (a constant `WIKI = MIRROR / ...`, a helper whose default is `MIRROR`): a fixed point over its
    assignments and functions."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    definitions: dict[str, set[str]] = {}
    for node in tree.body:
        targets = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                   else [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)])
        used = {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}
        for target in targets:
            definitions.setdefault(target, set()).update(used)
    reading = set(roots)
    while True:
        more = {name for name, used in definitions.items() if used & reading} - reading
        if not more:
            return frozenset(reading)
        reading |= more


def _needs(item, roots: tuple[str, ...]) -> bool:
    """Whether the test, or a fixture of its module it uses, reads one of `roots` (see `_names_reading`)."""
    reading = _names_reading(str(item.fspath), roots)
    functions = [item.obj, *(definition.func for definitions in item._fixtureinfo.name2fixturedefs.values()
                             for definition in definitions if definition.func.__module__ != __name__)]
    for function in functions:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
        except (OSError, TypeError):  # a builtin fixture
            continue
        if {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & reading:
            return True
    return False


def pytest_collection_modifyitems(config, items) -> None:
    missing = [(names, reason) for names, folder, reason in NEEDS if not folder.is_dir()]
    for item in items if missing else []:
        for names, reason in missing:
            if _needs(item, names) or (names[0] == "MIRROR" and "mirror" in item.fixturenames):
                item.add_marker(pytest.mark.skip(reason=reason))
                break
