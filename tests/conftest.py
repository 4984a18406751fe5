"""Shared test fixtures: the repository root, the data mirror and the committed tiny params."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
MIRROR = (REPO_ROOT / ".." / "shared" / "data").resolve()
sys.path.insert(0, str(Path(__file__).parent))  # test helpers (hub_standin, ...)


@pytest.fixture(scope="session")
def mirror() -> Path:
    assert MIRROR.is_dir(), f"the data mirror must be at {MIRROR}"
    return MIRROR


@pytest.fixture
def tiny_params_dict() -> dict:
    """A fresh copy of the committed params.yaml (the tiny preset), mirror as an absolute path."""
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw = copy.deepcopy(raw)
    raw["data"]["mirror"] = str(MIRROR)
    return raw
