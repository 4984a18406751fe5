"""No function of the library, the stages or the scripts is longer than 60 lines (issue 46): a longer one
hides a second job that wants its own name."""

import ast

from conftest import REPO_ROOT

LIMIT = 60


def long_functions() -> list[str]:
    found = []
    for folder in ("pipeline", "stages", "scripts", "tools"):
        for file in sorted((REPO_ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT:
                    found.append(f"{file.relative_to(REPO_ROOT)}:{node.lineno} {node.name} {node.end_lineno - node.lineno + 1} lines")
    return found


def test_no_function_is_longer_than_sixty_lines():
    assert long_functions() == []
