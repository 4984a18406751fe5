"""The lock files (requirements/cpu.txt, requirements/cuda.txt): every dependency of pyproject.toml
pinned exactly with hashes, the two builds the same but for torch's own, and the running environment
the locked one (what scripts/setup.sh installs: `pip freeze` equals the lock)."""

import site
import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO_ROOT

LOCKS = {build: REPO_ROOT / "requirements" / f"{build}.txt" for build in ("cpu", "cuda")}
NOT_LOCKED = {"pip", "tncse-repro"}  # the installer (setup.sh pins it) and the project itself (-e .)


def read_lock(path) -> dict[str, tuple[str, list[str]]]:
    """name → (exact version, sha256 hashes) of a pip-compile --generate-hashes file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = "\n".join(line.split("#", 1)[0].rstrip() for line in path.read_text().splitlines())
    for entry in filter(None, (part.strip() for part in text.replace("\\\n", " ").splitlines())):
        requirement, *options = entry.split(" --hash=")
        (specifier,) = Requirement(requirement).specifier
        assert specifier.operator == "==", f"{path.name}: {requirement} is not an exact pin"
        entries[canonicalize_name(Requirement(requirement).name)] = (specifier.version, [o.strip() for o in options])
    return entries


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = [requirement for group in project["optional-dependencies"].values() for requirement in group]
    return [Requirement(text) for text in project["dependencies"] + extras]


@pytest.mark.parametrize("build", LOCKS)
def test_the_lock_pins_every_dependency_of_pyproject_with_hashes(build):
    lock = read_lock(LOCKS[build])
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{LOCKS[build].name} has no {name}: refresh the lock (docs/reproducing.md)"
        assert requirement.specifier.contains(Version(lock[name][0]), prereleases=True), (
            f"{LOCKS[build].name} pins {name}=={lock[name][0]}, outside pyproject.toml's {requirement}"
        )
    unhashed = [name for name, (_, hashes) in lock.items() if not hashes]
    assert not unhashed and all(h.startswith("sha256:") for _, hashes in lock.values() for h in hashes)


def test_the_cpu_and_cuda_locks_differ_only_in_torchs_build():
    cpu, cuda = read_lock(LOCKS["cpu"]), read_lock(LOCKS["cuda"])
    assert Version(cpu["torch"][0]).local == "cpu" and Version(cuda["torch"][0]).local is None
    assert Version(cpu["torch"][0]).public == Version(cuda["torch"][0]).public
    assert not set(cpu["torch"][1]) & set(cuda["torch"][1]), "the CUDA lock lets the +cpu wheel in"
    shared = {name for name in cpu.keys() & cuda.keys() if name != "torch"}
    assert {name: cpu[name][0] for name in shared} == {name: cuda[name][0] for name in shared}
    assert cpu.keys() - cuda.keys() == set()  # the CUDA build only adds its runtime libraries
    assert all(name.startswith(("nvidia-", "triton", "cuda-")) for name in cuda.keys() - cpu.keys())


def test_the_installed_environment_is_the_locked_one():
    """What setup.sh makes: a fresh clone's .venv holds exactly the lock of its torch build."""
    # what is installed in site-packages, as `pip freeze` sees it: once imported, setuptools puts its
    # vendored packages (their own .dist-info) on sys.path, which a plain distributions() would list
    packages = metadata.distributions(path=site.getsitepackages())
    installed = {canonicalize_name(d.metadata["Name"]): str(Version(d.version)) for d in packages}
    build = "cpu" if Version(installed["torch"]).local == "cpu" else "cuda"
    locked = {name: str(Version(version)) for name, (version, _) in read_lock(LOCKS[build]).items()}
    different = {
        name: (installed.get(name), locked.get(name))
        for name in (installed.keys() | locked.keys()) - NOT_LOCKED
        if installed.get(name) != locked.get(name)
    }
    assert not different, (
        f"installed vs {LOCKS[build].name} (name: (installed, locked)): {different}; "
        "rm -rf .venv && bash scripts/setup.sh installs the locked environment"
    )
