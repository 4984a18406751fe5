"""The files a module runs, read from its imports (pipeline/code_deps.py), and the writer of each stage's code
deps in dvc.yaml (tools/stage_deps.py)."""

from pipeline.code_deps import dvc_code_deps, project_files
from tools.stage_deps import rewritten, stated_and_expected


def test_the_code_deps_of_each_stage_are_written_from_its_imports():
    """dvc.yaml states what the writer gives (tests/test_dvc_graph.py checks any stated deps against the imports)."""
    differing = [stage for stage, (stated, expected) in stated_and_expected().items() if stated != expected]
    assert not differing, f"{differing}: run `python -m tools.stage_deps --write`"


def test_the_imports_are_followed_through_packages_and_functions(tmp_path):
    (tmp_path / "pipeline" / "sub").mkdir(parents=True)
    (tmp_path / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "sub" / "a.py").write_text("import os\nfrom pipeline.sub import b\n")
    (tmp_path / "pipeline" / "sub" / "b.py").write_text("def later():\n    from pipeline import c\n")
    (tmp_path / "pipeline" / "c.py").write_text("import numpy\n")
    (tmp_path / "pipeline" / "unused.py").write_text("")
    assert project_files("pipeline/sub/a.py", tmp_path) == (
        "pipeline/__init__.py", "pipeline/c.py", "pipeline/sub/__init__.py", "pipeline/sub/a.py", "pipeline/sub/b.py")
    # a sub-package run whole is one folder dep; the top package is listed by its parts (unused.py is no dep)
    assert dvc_code_deps("pipeline/sub/a.py", tmp_path) == ["pipeline/__init__.py", "pipeline/c.py", "pipeline/sub"]


def test_the_rewrite_replaces_only_code_entries():
    text = ("stages:\n  s:\n    cmd: python -m stages s\n    deps:\n      - data/x  # kept\n      - pipeline/old.py  # dropped\n"
            "      - stages/s.py\n    outs:\n      - out\n")
    assert rewritten(text, {"s": ["pipeline/new.py", "stages/s.py"]}) == (
        "stages:\n  s:\n    cmd: python -m stages s\n    deps:\n      - data/x  # kept\n      - pipeline/new.py\n"
        "      - stages/s.py\n    outs:\n      - out\n")
