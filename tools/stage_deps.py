"""The copies DVC needs of what conf/ and the code state, written from them: `python -m tools.stage_deps --write`.

- Each stage's code deps in dvc.yaml. DVC cannot share a list between stages (it interpolates no lists), so
  each stage states its own copy: the project files its module (`python -m stages <name>` runs
  stages/<name>.py) runs and reads (`pipeline.code_deps.dvc_code_deps`).
- params.yaml, conf/ composed as `dvc exp run` composes it (DVC's own Hydra composition), for `dvc repro`.
- The jtcse stage's `train.*` params: every train setting but the cael it replaces, one by one (DVC lists
  no "all but"), so a setting added to conf's train section (a loss term's weight) is a param of it too.

The command rewrites those entries in place, keeping data deps and comments; without `--write` it says what
differs and exits 1. tests/test_stage_deps.py, tests/test_config.py and tests/test_dvc_graph.py check them.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import yaml

from pipeline.code_deps import PROJECT_PACKAGES, REPO_ROOT, dvc_code_deps

DVC_FILE = REPO_ROOT / "dvc.yaml"
PARAMS_FILE = REPO_ROOT / "params.yaml"
CONF_DIR = REPO_ROOT / "conf"
JTCSE_STAGE, JTCSE_REPLACES = "jtcse", "cael"  # the jtcse stage sets its own CAEL count (params `jtcse`)
_COMMAND = re.compile(r"python -m stages ([a-z_]+)")
_CODE_ENTRY = re.compile(rf"^(\s*)- ({'|'.join(PROJECT_PACKAGES)})/\S*(\s+#.*)?$")


def stage_module(command: str) -> str:
    return f"stages/{_COMMAND.search(command).group(1)}.py"


def stated_and_expected(dvc_file: Path = DVC_FILE) -> dict[str, tuple[list[str], list[str]]]:
    """Each stage's code deps as dvc.yaml states them and as its module's imports give them."""
    stages = yaml.safe_load(dvc_file.read_text(encoding="utf-8"))["stages"]
    found = {}
    for name, stage in stages.items():
        body = stage.get("do", stage)
        stated = [dep for dep in body.get("deps", []) if isinstance(dep, str) and dep.split("/")[0] in PROJECT_PACKAGES]
        found[name] = (stated, dvc_code_deps(stage_module(body["cmd"])))
    return found


def rewritten(text: str, expected: dict[str, list[str]]) -> str:
    """dvc.yaml with each stage's code entries replaced by `expected`, where its first code entry was."""
    lines, out, stage, written = text.splitlines(), [], None, set()
    for line in lines:
        header = re.match(r"^  ([a-z][a-z0-9_-]*):", line)
        if header:
            stage = header.group(1)
        entry = _CODE_ENTRY.match(line)
        if entry and stage in expected:
            if stage not in written:
                out.extend(f"{entry.group(1)}- {dep}" for dep in expected[stage])
                written.add(stage)
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def composed_params() -> str:
    """params.yaml's text as `dvc exp run` composes conf/ with no override."""
    from dvc.utils.hydra import compose_and_dump

    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "params.yaml"
        compose_and_dump(output, str(CONF_DIR), None, "config", str(REPO_ROOT / ".dvc" / "hydra"), [])
        return output.read_text(encoding="utf-8")


def jtcse_train_params(params_text: str) -> list[str]:
    """The jtcse stage's train params: every key of the train section but cael, in params.yaml's order."""
    return [f"train.{key}" for key in yaml.safe_load(params_text)["train"] if key != JTCSE_REPLACES]


def with_jtcse_train_params(text: str, params: list[str]) -> str:
    """dvc.yaml with the jtcse stage's `train.*` param entries replaced by `params`, where its first one was."""
    out, stage, written = [], None, False
    for line in text.splitlines():
        header = re.match(r"^  ([a-z][a-z0-9_-]*):", line)
        stage = header.group(1) if header else stage
        entry = re.match(r"^(\s*)- train\.\w+(\s+#.*)?$", line)
        if entry and stage == JTCSE_STAGE:
            if not written:
                out.extend(f"{entry.group(1)}- {param}" for param in params)
                written = True
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    found = stated_and_expected()
    differing = {name: expected for name, (stated, expected) in found.items() if stated != expected}
    params_text = composed_params()
    dvc_text = DVC_FILE.read_text(encoding="utf-8")
    with_code_deps = rewritten(dvc_text, differing)
    expected_dvc = with_jtcse_train_params(with_code_deps, jtcse_train_params(params_text))
    stale_params = PARAMS_FILE.read_text(encoding="utf-8") != params_text
    if "--write" in argv:
        DVC_FILE.write_text(expected_dvc, encoding="utf-8")
        PARAMS_FILE.write_text(params_text, encoding="utf-8")
        print(f"[stage_deps] rewrote the code deps of {len(differing)} stages and the jtcse stage's train params in "
              f"{DVC_FILE.name}, and {PARAMS_FILE.name} from conf/ ({'changed' if stale_params else 'unchanged'})")
        return 0
    for name, expected in differing.items():
        stated = found[name][0]
        print(f"{name}: missing {sorted(set(expected) - set(stated))}, stale {sorted(set(stated) - set(expected))}")
    stale = [*differing, *(["jtcse params"] if expected_dvc != with_code_deps else []),
             *(["params.yaml"] if stale_params else [])]
    if stale:
        print(f"stale: {', '.join(stale)}; fix: python -m tools.stage_deps --write")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
