"""The stage graph in dvc.yaml: what DVC must be able to restore in a queued experiment's copy."""

from pathlib import Path

import yaml

from pipeline.code_deps import project_files

ROOT = Path(__file__).resolve().parents[1]


def stage_outputs(dvc_file: Path):
    """(stage, path, options) of every out, metric and plot of every stage, foreach templates included."""
    stages = yaml.safe_load(dvc_file.read_text())["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        for section in ("outs", "metrics", "plots"):
            for entry in body.get(section) or []:
                path, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
                yield name, path, options or {}


def test_every_uncached_output_lives_in_git():
    """An uncached output that git ignores is missing in the temporary copy of a queued
    `dvc exp run`, so its stage and everything downstream would run again there (the
    translations and both towers' pretraining for a change of train.cael)."""
    for dvc_file in (ROOT / "dvc.yaml", ROOT / "bench" / "dvc.yaml"):
        for stage, path, options in stage_outputs(dvc_file):
            if options.get("cache") is False:
                assert path.startswith("reports/"), f"{dvc_file.name}:{stage}: {path} is uncached and not in git"
            assert not options.get("persist"), f"{dvc_file.name}:{stage}: {path} is persisted; keep resume state undeclared"


def test_resume_state_is_not_a_stage_output():
    paths = [path for _, path, _ in stage_outputs(ROOT / "dvc.yaml")]
    assert paths, "no outputs read from dvc.yaml"
    assert not [path for path in paths if path.startswith(("data/cache", "data/checkpoints"))]


# ---- code dependencies ----------------------------------------------------------------------


def import_closure(start: Path) -> set[Path]:
    """The project files running `start` runs (pipeline/code_deps.py: lazy and transitive imports too)."""
    return {ROOT / relative for relative in project_files(start.relative_to(ROOT).as_posix())}


def stage_code_deps(dvc_file: Path):
    """(stage, the stage module's file, its declared deps as absolute paths) for every
    `python -m stages <name>` stage."""
    stages = yaml.safe_load(dvc_file.read_text())["stages"]
    for name, stage in stages.items():
        body = stage.get("do", stage)
        words = body["cmd"].split()
        workdir = dvc_file.parent / stage.get("wdir", ".")
        if words[:3] == ["python", "-m", "stages"]:
            yield name, ROOT / "stages" / f"{words[3]}.py", [(workdir / str(dep)).resolve() for dep in body.get("deps") or []]


def is_code(path: Path) -> bool:
    """A Python file or a folder holding Python files (a dep on data or settings is not code)."""
    return path.suffix == ".py" or (path.is_dir() and any(path.rglob("*.py")))


def code_dep_problems(dvc_file: Path) -> list[str]:
    """Where a stage's code deps differ from the code it runs, both ways: a file it imports
    (directly, lazily or transitively) that no dep covers, so `dvc repro` would not rerun it after a
    change; a declared .py file or Python folder it never imports, which would rerun it (and
    everything after it) for a change it cannot see."""
    problems = []
    where = dvc_file.relative_to(ROOT) if ROOT in dvc_file.parents else dvc_file.name
    for stage, module, declared in stage_code_deps(dvc_file):
        runs = import_closure(module)
        for file in sorted(runs):
            if file.name == "__init__.py" and file.parent in (ROOT / "pipeline", ROOT / "stages", ROOT / "tools"):
                continue  # the top-level package markers hold no code
            if not any(file == dep or dep in file.parents for dep in declared):
                problems.append(f"{where}:{stage} runs {file.relative_to(ROOT)} but does not list it in deps")
        for dep in declared:
            if is_code(dep) and not any(file == dep or dep in file.parents for file in runs):
                problems.append(f"{where}:{stage} lists {dep.relative_to(ROOT)} in deps but never imports it")
    return problems


def test_every_stage_depends_on_exactly_the_code_it_runs():
    checked = set()
    for dvc_file in (ROOT / "dvc.yaml", ROOT / "bench" / "dvc.yaml"):
        assert code_dep_problems(dvc_file) == []
        checked |= {module.name for _, module, _ in stage_code_deps(dvc_file)}
    modules = {path.name for path in (ROOT / "stages").glob("*.py")} - {"__init__.py", "__main__.py", "cli.py", "common.py"}
    assert checked == modules, "every stage module runs as a stage of dvc.yaml or bench/dvc.yaml"


def test_the_deps_check_finds_a_missing_and_a_surplus_code_dep(tmp_path):
    download = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["download"]
    deps = [dep for dep in download["deps"] if dep != "pipeline/io.py"] + ["pipeline/training"]
    dvc_file = tmp_path / "dvc.yaml"
    dvc_file.write_text(yaml.safe_dump({"stages": {"download": {**download, "wdir": str(ROOT), "deps": deps}}}))
    assert code_dep_problems(dvc_file) == [
        "dvc.yaml:download runs pipeline/io.py but does not list it in deps",
        "dvc.yaml:download lists pipeline/training in deps but never imports it",
    ]


def test_the_jtcse_stage_reads_every_train_setting_but_the_cael_it_replaces():
    """A sweep of train.cael (the `joint` stage's experiments) must not retrain the committed JTCSE twin: the
    jtcse stage lists train's keys one by one, all but cael, plus jtcse and the layer count its null reads."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["jtcse"]
    train = yaml.safe_load((ROOT / "params.yaml").read_text())["train"]
    listed = [param for param in stage["params"] if isinstance(param, str)]
    assert [param for param in listed if param.startswith("train")] == [f"train.{key}" for key in train if key != "cael"]
    assert {"jtcse", "backbone.num_layers"} <= set(listed)
