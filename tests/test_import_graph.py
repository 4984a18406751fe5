"""The import graph of pipeline/ and stages/: no module imports, however indirectly, one that imports
it back — counting imports inside functions and under TYPE_CHECKING, which hide a cycle from the
interpreter but not from a reader."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project_modules() -> dict[str, Path]:
    """Dotted name → file of every module of pipeline/, tools/ and stages/ (a package by its __init__.py)."""
    modules = {}
    for file in [*ROOT.joinpath("pipeline").rglob("*.py"), *ROOT.joinpath("tools").rglob("*.py"), *ROOT.joinpath("stages").rglob("*.py")]:
        parts = file.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the project modules it imports anywhere in its file. `from a.b import c` imports
    a, a.b and, when c is a submodule, a.b.c. A module's own packages are left out: Python has them
    loaded before the module runs."""
    graph = {}
    for name, file in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for dotted in imported:
                parts = dotted.split(".")
                targets |= {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
        graph[name] = {target for target in targets & modules.keys() if target != name and not name.startswith(f"{target}.")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    done, path = set(), []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            if cycle := visit(target):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if cycle := visit(module):
            return cycle
    return None


def test_no_import_cycle():
    modules = project_modules()
    assert {"pipeline.config", "pipeline.evaluated_models", "tools.benchmark.released_code", "stages.common"} <= modules.keys()
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_cycle_finder_finds_a_deferred_import_cycle():
    """What the test above would say about the cycle config → models → config (under TYPE_CHECKING)."""
    graph = {"pipeline.config": {"pipeline.evaluated_models"}, "pipeline.evaluated_models": {"pipeline.config", "pipeline.paths"}, "pipeline.paths": set()}
    assert find_cycle(graph) == ["pipeline.config", "pipeline.evaluated_models", "pipeline.config"]
    del graph["pipeline.evaluated_models"]  # sanity: the graph is acyclic once the back edge is gone
    assert find_cycle({**graph, "pipeline.evaluated_models": {"pipeline.paths"}}) is None


def test_the_library_never_imports_a_tool():
    """The measuring tools call the library as a user would (issue 46); the library knows nothing of them."""
    graph = import_graph(project_modules())
    assert not {module: sorted(t for t in targets if t.startswith("tools")) for module, targets in graph.items()
                if module.startswith("pipeline") and any(t.startswith("tools") for t in targets)}


def test_no_module_name_twice_in_the_library_and_the_tools():
    """One name, one module: `models.py` or `bootstrap.py` in two rooms makes every import ambiguous to a reader."""
    names: dict[str, list[str]] = {}
    for folder in ("pipeline", "tools"):
        for file in ROOT.joinpath(folder).rglob("*.py"):
            name = file.parent.name if file.name == "__init__.py" else file.stem
            if file.name == "__init__.py" and file.parent.name == folder:
                continue
            names.setdefault(name, []).append(str(file.relative_to(ROOT)))
    assert {name: files for name, files in names.items() if len(files) > 1} == {}
