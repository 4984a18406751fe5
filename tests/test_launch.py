"""A training stage across processes (issue 29): `PIPELINE_NPROC=2 python -m stages …` launches two
gloo ranks with torch's launcher, as `dvc repro` runs the stage's command. The runs match one
process, rank 0 alone writes, and a rank that dies fails the stage in one line; the rerun resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from conftest import MIRROR, REPO_ROOT, tiny_preset
from tiny_models import save_tiny_bert

STAGE_TIMEOUT = 600  # a rendezvous that never completes must fail the test, not hang it
WEIGHTS = {"pretrain": ["data/models/pretrain/I/model.safetensors"],
           "joint": ["data/models/joint/I/model.safetensors", "data/models/joint/II/model.safetensors"]}

# Loaded into every Python process of a run through PYTHONPATH; acts only in the ranks. Rank 1
# records every write it makes under the project (it must make none), and with KILL_AT_STEP it
# kills itself with SIGKILL just before that optimizer step: after its backward, so rank 0 has
# finished every checkpoint of the steps before (the all-reduce of that step waited for it).
SITECUSTOMIZE = """
import os, sys
if os.environ.get("RANK") == "1":
    project, log = os.path.realpath(os.getcwd()), os.environ["WRITES_LOG"]
    with open(log + ".watched", "w") as file:  # proof that rank 1 ran under this hook
        file.write(project)
    WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def _inside(path):
        try:
            return os.path.realpath(os.fsdecode(path)).startswith(project + os.sep)
        except (TypeError, ValueError):
            return False

    def _audit(event, args):
        written = None
        if event == "open" and args[0] is not None and not isinstance(args[0], int):
            mode, flags = args[1] or "", args[2] or 0
            if any(c in mode for c in "wax+") or flags & WRITING:
                written = args[0]
        elif event in ("os.rename", "os.remove", "os.rmdir", "shutil.rmtree", "shutil.copytree", "shutil.move"):
            written = args[0]
        if written is not None and _inside(written):
            with open(log, "a") as file:  # outside the project
                file.write(f"{event} {os.fsdecode(written)}\\n")

    sys.addaudithook(_audit)
    if os.environ.get("KILL_AT_STEP"):
        import signal
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        steps = [0]

        def _die(optimizer, args, kwargs):
            steps[0] += 1
            if steps[0] == int(os.environ["KILL_AT_STEP"]):
                os.kill(os.getpid(), signal.SIGKILL)

        register_optimizer_step_pre_hook(_die)
"""


def make_project(root: Path) -> Path:
    """A project with a tiny backbone, two tiny pretrained towers (joint's input), 64 corpus lines,
    their round trips, STS-B dev, and params for a few steps, dropout on, with checkpoints every 2."""
    save_tiny_bert(root / "data" / "backbone", seed=5)
    for tower, seed in (("I", 6), ("II", 7)):
        save_tiny_bert(root / "data" / "models" / "pretrain" / tower, seed=seed)
    (root / "data" / "raw").mkdir(parents=True, exist_ok=True)
    (root / "data" / "raw" / "senteval").symlink_to(MIRROR / "senteval")
    lines = (MIRROR / "wiki1m" / "wiki1m_for_simcse.head.txt").read_text(encoding="utf-8").splitlines()[:64]
    (root / "data" / "raw" / "corpus.txt").write_text("\n".join(lines) + "\n")
    (root / "data" / "rtt").mkdir(parents=True)
    (root / "data" / "rtt" / "I.txt").write_text("\n".join(lines) + "\n")
    raw = tiny_preset()
    raw.update(device="cpu", threads=1)
    # dropout on (SimCSE's augmentation): every rank draws the global batch's masks, as one process does
    # one dev evaluation, at the last step: a tiny random model's dev scores at steps 3 and 6 are a near
    # tie (0.04 apart) that float rounding between one and two processes breaks either way
    steps = dict(batch_size=8, max_steps=6, eval_every=6, save_every=2, dropout=0.1)
    # pretrain: sentences up to 128 characters, so the ranks' rows pad to unequal widths (with the old
    # per-rank masks their generators then drifted apart, and a resume gave rank 1 rank 0's: issue 43 D1)
    raw["pretrain"].update(steps, max_length=128)
    raw["train"].update(steps, jtcse_dropout=0.1, lr=1e-3)  # a rate that moves the towers in 6 steps
    raw["eval"].update(max_pairs=100, batch_size=64, max_length=32)
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    (root.parent / f"{root.name}-hooks").mkdir()
    (root.parent / f"{root.name}-hooks" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return root


def run_stage(root: Path, stage: list[str], nproc: int, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root.parent / (root.name + '-hooks')}{os.pathsep}{REPO_ROOT}", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "PIPELINE_NPROC": str(nproc), "WRITES_LOG": str(root.parent / f"{root.name}-rank1-writes.log"), **extra}
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PIPELINE_LEASED_GPUS"):
        env.pop(variable, None)
    return subprocess.run([sys.executable, "-m", "stages", *stage], cwd=root, capture_output=True, text=True,
                          timeout=STAGE_TIMEOUT, env=env)


def losses(root: Path, name: str) -> list[float]:
    rows = (root / "reports" / "training" / f"{name}.csv").read_text().splitlines()
    column = rows[0].split(",").index("loss")
    return [float(row.split(",")[column]) for row in rows[1:] if row.split(",")[column]]


def assert_same_weights(got: Path, expected: Path) -> None:
    """The same weights to 1e-5 relative: ‖Δ‖ / ‖w‖ over the whole model. (Per tensor that bound is
    too tight for AdamW: a tensor that starts at zero, like a LayerNorm bias, moves by about lr per
    step whatever its gradient's size, so float rounding in tiny gradients shows in its direction.)"""
    a, b = load_file(got), load_file(expected)
    assert a.keys() == b.keys()
    difference = sum(torch.sum((a[name].double() - b[name].double()) ** 2) for name in a) ** 0.5
    size = sum(torch.sum(b[name].double() ** 2) for name in a) ** 0.5
    assert difference <= 1e-5 * size, f"relative difference {difference / size:.2e}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """pretrain and joint, each in one process and in two."""
    projects = {}
    for nproc in (1, 2):
        root = make_project(tmp_path_factory.mktemp(f"nproc{nproc}"))
        for stage in (["joint"], ["pretrain", "--tower", "I"]):  # joint first: from the tiny towers
            done = run_stage(root, stage, nproc)
            assert done.returncode == 0, done.stderr[-3000:]
            if nproc == 2:
                assert "2 processes (torch.distributed)" in done.stderr
        projects[f"nproc{nproc}"] = root
    return projects


@pytest.mark.parametrize(("stage", "name"), [("pretrain", "pretrain-I"), ("joint", "joint")])
def test_two_processes_give_the_losses_and_weights_of_one(runs, stage, name):
    one, two = runs["nproc1"], runs["nproc2"]
    single, double = losses(one, name), losses(two, name)
    assert len(single) == len(double) == 6
    # the curve's numbers are printed to 6 significant digits: 1e-5 plus that rounding
    assert double == pytest.approx(single, abs=1e-5 + 1e-5 * max(map(abs, single)))
    details = [json.loads((root / "reports" / "training" / "details" / f"{name}.json").read_text()) for root in (one, two)]
    assert details[1]["final_loss"] == pytest.approx(details[0]["final_loss"], abs=1e-5)
    assert details[1]["best_step"] == details[0]["best_step"]
    for weights in WEIGHTS[stage]:
        assert_same_weights(two / weights, one / weights)


@pytest.mark.parametrize(("name", "world", "per_device"), [("pretrain-I", 2, 4), ("joint", 2, 4)])
def test_the_training_record_holds_the_world_size_and_per_device_batch(runs, name, world, per_device):
    for root, expected in ((runs["nproc1"], (1, 8)), (runs["nproc2"], (world, per_device))):
        record = json.loads((root / "reports" / "training" / "details" / f"{name}.json").read_text())["environment"]
        assert (record["world_size"], record["per_device_batch"]) == expected


def test_only_rank_0_wrote_files(runs):
    root = runs["nproc2"]
    assert (root / "data" / "models" / "joint" / "I" / "model.safetensors").is_file()
    writes = root.parent / f"{root.name}-rank1-writes.log"
    assert Path(f"{writes}.watched").read_text() == str(root.resolve())  # rank 1 ran, and was watched
    assert not writes.exists(), writes.read_text()


def test_a_killed_rank_fails_the_stage_in_one_line_and_the_rerun_resumes(runs, tmp_path):
    root = make_project(tmp_path / "project")
    # the outputs of an earlier run, which the failed run must leave as they were
    earlier = {path: (runs["nproc1"] / path) for path in (
        "data/models/pretrain/I/model.safetensors", "reports/training/pretrain-I.json", "reports/training/pretrain-I.csv",
        "reports/training/details/pretrain-I.json")}
    for path, source in earlier.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / path)

    killed = run_stage(root, ["pretrain", "--tower", "I"], 2, KILL_AT_STEP="5")
    assert killed.returncode == 2, killed.stderr[-3000:]
    errors = [line for line in killed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rank 1 was killed by SIGKILL" in errors[0] and "rerun" in errors[0]
    assert "Traceback" not in killed.stderr and killed.stderr.rstrip().splitlines()[-1] == errors[0]
    for path, source in earlier.items():
        assert (root / path).read_bytes() == source.read_bytes(), path
    assert (root / "data" / "checkpoints" / "pretrain-I" / "step-4").is_dir()

    rerun = run_stage(root, ["pretrain", "--tower", "I"], 2)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resumed at step 4" in rerun.stdout
    # issue 43 D1: the resumed run is the uninterrupted one byte for byte, as a resumed single process is
    for path in ("data/models/pretrain/I/model.safetensors", "reports/training/pretrain-I.csv"):
        assert (root / path).read_bytes() == (runs["nproc2"] / path).read_bytes(), path


def test_a_one_line_error_of_the_ranks_is_the_stage_s_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_preset()))  # no corpus here
    done = run_stage(tmp_path, ["joint"], 2)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    # both ranks fail alike; which one the launcher saw first (the other may get its SIGTERM) varies
    assert len(errors) == 1 and "corpus.txt does not exist" in errors[0], done.stderr[-2000:]
    assert errors[0].startswith("error: joint: rank ")
    assert "Traceback" not in done.stderr


def _children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]


def _alive(pid: int) -> bool:
    """Running: not gone and not a zombie (a dead process its new parent has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_ranks_die_with_a_killed_launcher(tmp_path):
    """Issue 43 D2: SIGKILL of the process PIPELINE_NPROC=2 started left its ranks training, re-parented."""
    root = make_project(tmp_path / "project")
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["pretrain"].update(max_steps=100_000, epochs=100_000)  # far longer than the test waits
    (root / "params.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PIPELINE_NPROC": "2"}
    for variable in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PIPELINE_LEASED_GPUS"):
        env.pop(variable, None)
    tower = root / "data" / "models" / "pretrain" / "I" / "model.safetensors"  # joint's input; the run's output
    before = tower.read_bytes()
    launcher = subprocess.Popen([sys.executable, "-m", "stages", "pretrain", "--tower", "I"], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + STAGE_TIMEOUT
        while not (root / "data" / "checkpoints" / "pretrain-I" / "step-2" / "state.json").is_file():  # the ranks train
            assert launcher.poll() is None and time.monotonic() < deadline, "the run did not reach step 2"
            time.sleep(0.2)
        ranks = _children(launcher.pid)
        assert len(ranks) == 2
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 60
        while any(_alive(rank) for rank in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(rank) for rank in ranks), "the ranks outlived their launcher"
        assert tower.read_bytes() == before
    finally:
        for pid in [launcher.pid, *ranks]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_batch_that_does_not_split_over_the_processes_is_one_line_before_any_rank(tmp_path):
    """Issue 43 D3: PIPELINE_NPROC=3 with a batch of 8 (16 in the probe) used to kill the ranks in a gloo size mismatch."""
    root = make_project(tmp_path / "project")
    done = run_stage(root, ["pretrain", "--tower", "I"], 3)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pretrain.batch_size=8" in errors[0] and "3 processes" in errors[0], done.stderr[-2000:]
    assert "processes (torch.distributed)" not in done.stderr and "Traceback" not in done.stderr  # no rank started
