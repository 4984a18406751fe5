"""The project's own source files a module runs, read from the import statements (nothing is imported).

One answer, three users: the code deps of each stage in `dvc.yaml` (a test keeps them equal to what
the stage's module imports), the embedding store's key (the code that shapes the vectors:
`pipeline.evaluation.store`) and the checkpoints stage's cache key (its evaluator's code). Imports
inside functions count (a stage imports lazily what only some settings need); importing a module
runs its packages' `__init__.py` too, so those count as well. A module loaded by name rather than by an
import statement (a loss term's "module:attribute") counts for whoever runs its loader: the loader's
registry says which modules (`loaded_by_name`). A registry that imports every module of a plugin package
(`pipeline.plugins.load_plugins("<package>")`) imports them all, read from that call's literal.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from pipeline.plugins import plugin_modules

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("pipeline", "stages", "tools")


def _module_file(module: str, root: Path) -> Path | None:
    """The file of a dotted project module (its package's `__init__.py` for a package), None outside the project."""
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _with_packages(file: Path, root: Path) -> set[Path]:
    """The file and the `__init__.py` of every package above it (importing it runs them)."""
    files = {file}
    for folder in file.relative_to(root).parents:
        init = root / folder / "__init__.py"
        if folder != Path(".") and init.is_file():
            files.add(init)
    return files


def _imported_modules(file: Path, root: Path) -> set[str]:
    """The dotted names a file's import statements reach: `from a.b import c` reaches a.b and a.b.c; a
    `load_plugins("<package>")` call reaches every module of that package."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if (package := _plugin_package(node)) is not None:
            modules |= {package, *plugin_modules(root.joinpath(*package.split(".")), package)}
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _plugin_package(node: ast.AST) -> str | None:
    """The package a `load_plugins("<package>")` call names, None for any other node."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    return node.args[0].value if called == "load_plugins" and isinstance(node.args[0].value, str) else None


def loaded_by_name() -> dict[str, tuple[str, ...]]:
    """Each project file that loads project modules by name (`importlib`, no import statement) → the dotted
    modules it loads, as the registry it loads from declares them (tests/test_stage_deps.py finds every
    loader by name in the code and checks it is here or in `NOT_FOLLOWED`)."""
    from pipeline.declarations.loss_terms import implementation_modules

    return {"pipeline/losses.py": implementation_modules()}


# Project files that call importlib without loading project code that decides a result, and why.
NOT_FOLLOWED = {
    "pipeline/plugins.py": "imports the modules of the package its caller names; each `load_plugins(...)` call is read "
                           "as importing them (`_plugin_package`)",
    "pipeline/data/sources.py": "loads an installed package that ships a backbone (`package:<module>`), no project module",
    "tools/benchmark/startup.py": "times the import of stage modules in probe processes; bench/dvc.yaml reruns on any "
                                  "library change and `dvc repro -f` measures again",
}


@functools.cache
def project_files(relative: str, root: Path = REPO_ROOT) -> tuple[str, ...]:
    """Every project file that running `relative` (a path under `root`) runs, itself included, sorted,
    as paths relative to `root`: what it imports and what the loaders among them load by name."""
    loaded = loaded_by_name()
    found: set[Path] = set()
    todo = [root / relative]
    while todo:
        file = todo.pop()
        if file in found:
            continue
        found.add(file)
        for module in _imported_modules(file, root) | set(loaded.get(file.relative_to(root).as_posix(), ())):
            imported = _module_file(module, root)
            if imported is not None:
                todo.extend(_with_packages(imported, root) - found)
    return tuple(sorted(file.relative_to(root).as_posix() for file in found | _with_packages(root / relative, root)))


# Files a module reads at run time besides its imports, where they decide what it computes.
RUNTIME_READS = {"pipeline/data/pinned.py": ("pipeline/data/inputs.sha256",)}


def dvc_code_deps(relative: str, root: Path = REPO_ROOT) -> list[str]:
    """`dvc.yaml`'s code deps of a stage whose module is `relative`: the files it runs (`project_files`) and
    reads (`RUNTIME_READS`), a folder named instead of its files where it runs every module of it, so a
    new module there is a dep from the start."""
    files = set(project_files(relative, root))
    files |= {read for module in files for read in RUNTIME_READS.get(module, ())}
    deps: set[str] = set()
    for file in files:
        folder = Path(file).parent
        while folder != Path(".") and _runs_whole_folder(folder, files, root):
            file, folder = folder.as_posix(), folder.parent
        deps.add(file)
    return sorted(dep for dep in deps if not any(dep.startswith(f"{other}/") for other in deps))


def _runs_whole_folder(folder: Path, files: set[str], root: Path) -> bool:
    """Whether every source and data file under `folder` (a package below the top) is among `files`."""
    if folder.parent == Path("."):  # a top package (pipeline/, stages/) stays listed by its parts
        return False
    inside = [path.relative_to(root).as_posix() for path in (root / folder).rglob("*")
              if path.is_file() and "__pycache__" not in path.parts]
    return all(path in files for path in inside)
