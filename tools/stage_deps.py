"""Each stage's code deps in dvc.yaml, written from the code: `python -m tools.stage_deps --write`.

DVC cannot share a list between stages (it interpolates no lists), so each stage states its own copy:
the project files its module (`python -m stages <name>` runs stages/<name>.py) runs and reads
(`pipeline.code_deps.dvc_code_deps`). This command rewrites those entries of every stage in place,
keeping its data deps and their comments; without `--write` it says which stages differ and exits 1.
tests/test_stage_deps.py runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from pipeline.code_deps import PROJECT_PACKAGES, REPO_ROOT, dvc_code_deps

DVC_FILE = REPO_ROOT / "dvc.yaml"
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


def main(argv: list[str]) -> int:
    found = stated_and_expected()
    differing = {name: expected for name, (stated, expected) in found.items() if stated != expected}
    if "--write" in argv:
        DVC_FILE.write_text(rewritten(DVC_FILE.read_text(encoding="utf-8"), differing), encoding="utf-8")
        print(f"[stage_deps] rewrote the code deps of {len(differing)} stages in {DVC_FILE.name}")
        return 0
    for name, expected in differing.items():
        stated = found[name][0]
        print(f"{name}: missing {sorted(set(expected) - set(stated))}, stale {sorted(set(stated) - set(expected))}")
    if differing:
        print("fix: python -m tools.stage_deps --write")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
