"""The backbones as the report knows them: the presets of conf/backbone/, never names typed in code.

A preset with a `title` is one of the papers' backbones (BERT-base, RoBERTa-base): tables and claims
name it as their backbone. A preset that `stands_in_for` one of them (MiniLM for BERT-base) is a
smaller scale's stand-in: a run on it judges the claims of the backbone it stands in for, and no
other backbone's (docs/method.md, "Claims and verdicts").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

# conf/backbone/ of this checkout, found from the package (the report may run in an experiment's copy)
BACKBONE_PRESETS = Path(__file__).resolve().parents[2] / "conf" / "backbone"
# Scales whose runs use the tables' own backbone (the papers' BERT-base / RoBERTa-base), not a stand-in
PAPER_SHAPED = ("paper", "rehearsal")


@dataclass(frozen=True)
class Backbone:
    name: str
    title: str | None  # as the papers name it; None: a stand-in
    stands_in_for: str | None


@lru_cache(maxsize=None)
def load_backbones(folder: Path = BACKBONE_PRESETS) -> dict[str, Backbone]:
    """Every preset of conf/backbone/ by name."""
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        preset = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("backbone") or {}
        name = preset.get("name", path.stem)
        found[name] = Backbone(name, preset.get("title"), preset.get("stands_in_for"))
    return found


def paper_backbones() -> list[str]:
    """The papers' backbones: the presets with a title."""
    return [name for name, backbone in load_backbones().items() if backbone.title]


def title(name: str) -> str:
    """How the papers name a backbone (BERT-base); a stand-in by its preset name."""
    backbone = load_backbones().get(name)
    return backbone.title if backbone and backbone.title else name


def judged_backbone(params: dict[str, Any]) -> str:
    """The papers' backbone whose claims a run below paper scale judges: its own, or the one it stands in for."""
    name = params["backbone"]["name"]
    backbone = load_backbones().get(name)
    return backbone.stands_in_for if backbone and backbone.stands_in_for else name


def other_backbone(claim_backbone: str, params: dict[str, Any], of_pretraining: bool = False) -> str | None:
    """Why a run cannot judge a claim (or a row) on `claim_backbone`, or None when it can. At a paper-shaped
    scale the claim reads that backbone's runs (experiments); below it, only the stand-in's backbone, and
    not a claim about what the backbone's pre-training gives (`of_pretraining`): a stand-in was pre-trained
    otherwise (all-MiniLM-L6-v2 is a supervised sentence encoder, not a masked language model)."""
    if params["scale"] in PAPER_SHAPED:
        return None
    judged = judged_backbone(params)
    run = params["backbone"]["name"]
    if judged == claim_backbone and not (of_pretraining and run != judged):
        return None
    if judged == claim_backbone:
        return (f"a claim about what {title(claim_backbone)}'s pre-training gives: {run} stands in for its shape, "
                "not its pre-training")
    stands = f" (it stands in for {title(judged)})" if run != judged else ""
    return f"{title(claim_backbone)} is not this run's backbone: it ran {run}{stands}"
