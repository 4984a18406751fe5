"""Reading `params.yaml`: the settings file loaded, validated against the schema (`pipeline.config`) and
described in one line when it is wrong; retired keys refused (or dropped from a past run's params); and
a stage refused that would record outputs under settings changed while it ran.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config import Params
from pipeline.declarations import loss_terms
from pipeline.errors import PipelineError

PARAMS_FILE = Path("params.yaml")


def describe_validation_error(error: ValidationError, source: str) -> str:
    """One line for the first problem: `key=value: what is allowed` (the value when it is a scalar)."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown setting '{key}' in {source}; remove it or check its spelling"
    message = first["msg"].removeprefix("Value error, ")
    if not key:  # a cross-field check already names its keys
        return message
    value = first.get("input")
    shown = "" if isinstance(value, (dict, list)) else f"={value!r}"
    return f"{key}{shown}: {message}".replace("\n", " ")


# Settings a past version had and this one no longer reads, with what replaced them: refused in the params a
# stage runs with (one line naming the replacement), dropped from a past run's (an experiment, a seed record).
RETIRED_SETTINGS = {
    "data.mirror": "where the data comes from is an environment choice now: set PIPELINE_DATA_MIRROR (docs/reproducing.md)",
}


def _without_retired(raw: dict[str, Any], of_a_past_run: bool) -> dict[str, Any]:
    kept = copy.deepcopy(raw)
    for key, replacement in RETIRED_SETTINGS.items():
        *parents, leaf = key.split(".")
        node = kept
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            if not of_a_past_run:
                raise PipelineError(f"invalid params: {key} is retired: {replacement}; remove it from params.yaml")
            del node[leaf]
    return kept


def parse_params(raw: dict[str, Any], of_a_past_run: bool = False) -> Params:
    """Validated settings; a PipelineError naming the first problem: a wrong key or value (pydantic's
    ValidationError, described in one line), a retired key (`RETIRED_SETTINGS`; dropped instead when the
    params are `of_a_past_run`, which may predate its retirement) or a broken rule (`pipeline.settings_rules`)."""
    raw = _without_retired(raw, of_a_past_run) if isinstance(raw, dict) else raw
    try:
        return Params.model_validate(raw)
    except ValidationError as error:
        raise PipelineError(f"invalid params: {describe_validation_error(error, 'params.yaml')}") from None
    except PipelineError as error:
        raise PipelineError(f"invalid params: {error}") from None


def read_yaml_file(path: Path | str, missing_hint: str) -> Any:
    """A YAML file's content; a one-line PipelineError if it is missing (with `missing_hint`) or not YAML."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path} not found; {missing_hint}")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise PipelineError(f"{path} is not valid YAML: {error}".replace("\n", " ")) from None


def load_params(path: Path | str = PARAMS_FILE) -> Params:
    raw = read_yaml_file(path, "run from the project root or compose it with `dvc exp run`")
    if not isinstance(raw, dict):
        raise PipelineError(f"{path} must hold a mapping of settings")
    return parse_params(raw)


def _text_or_none(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


@contextmanager
def params_unchanged_while_running(path: Path | str) -> Iterator[None]:
    """Refuse to finish a stage whose params file `path` changed while it ran: a second `dvc exp run`
    in the same workspace composes params.yaml before DVC's lock refuses it, and DVC would record this
    stage's outputs under the settings it never read. Exit 2 keeps the stage out of dvc.lock."""
    path = Path(path)
    before = _text_or_none(path)
    yield
    if _text_or_none(path) != before:
        raise PipelineError(
            f"{path.name} changed while this stage ran (another `dvc exp run` in this workspace?); its outputs "
            "follow the settings read at start, so it is not recorded: rerun it, and queue experiments "
            "(`dvc exp run --queue`, then `dvc queue start`) instead of starting two at once"
        )


def setting_default(key: str) -> tuple[bool, Any]:
    """(True, the schema's default) of a dotted setting (`train.drop_layernorm`), or (False, None) when
    the setting is required, inside a mapping, or unknown. A run recorded before a setting existed
    ran with its default (`pipeline.reporting.runs`)."""
    model: type[BaseModel] = Params
    *parents, leaf = key.split(".")
    if parents == ["train"] and leaf in loss_terms.term_settings():
        return True, loss_terms.term_settings()[leaf][1].default
    for part in parents:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False, None
        model = annotation
    field = model.model_fields.get(leaf)
    if field is None or field.is_required():
        return False, None
    default = field.get_default(call_default_factory=True)
    return True, default.model_dump() if isinstance(default, BaseModel) else default
