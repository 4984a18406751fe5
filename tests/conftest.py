"""Shared test fixtures: the repository root, the data mirror and the committed tiny params."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
# The data mirror the suite reads: PIPELINE_DATA_MIRROR (as the download stage reads it), else the lab's.
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
    os.environ["PIPELINE_DATA_MIRROR"] = str(MIRROR)
    yield MIRROR
    if previous is None:
        del os.environ["PIPELINE_DATA_MIRROR"]
    else:
        os.environ["PIPELINE_DATA_MIRROR"] = previous


@pytest.fixture(scope="session")
def mirror() -> Path:
    assert MIRROR.is_dir(), f"the data mirror must be at {MIRROR}"
    return MIRROR


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
