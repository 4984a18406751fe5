"""Registries a module joins from its own file, as lm-evaluation-harness's do: every module of a plugin package is
imported when its registry is first read, and registers itself there. Adding an entry is adding a module; no list
in the project names it.

`pipeline.code_deps` reads each `load_plugins("<package>")` call (its argument a string literal) as an import of
every module of that package, so a stage that runs the registry depends on the whole folder and a module added
there is a dep from the start.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def plugin_modules(folder: Path, package: str) -> tuple[str, ...]:
    """The dotted names of the modules in `folder` (the package `package`), sorted: those named `_*` are helpers,
    not entries."""
    found = sorted(info.name for info in pkgutil.iter_modules([str(folder)]) if not info.name.startswith("_"))
    return tuple(f"{package}.{name}" for name in found)


def load_plugins(package: str) -> tuple[str, ...]:
    """Import every module of `package`, in name order (so entries register in the same order everywhere);
    a module already imported is not run again. Returns their names."""
    folder = Path(importlib.import_module(package).__file__).parent
    modules = plugin_modules(folder, package)
    for module in modules:
        importlib.import_module(module)
    return modules
