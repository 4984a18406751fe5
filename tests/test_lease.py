"""One GPU per stage process (issue 29): the machine-wide lease, tested on a fake device list."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.execution.launch import requested_processes
from pipeline.execution.lease import FAKE_GPUS_ENV, LEASE_DIR_ENV, lease_devices, try_lease, visible_devices

from conftest import REPO_ROOT

# A stage process as far as the lease goes: lease, say which device, hold it until told to stop.
HOLDER = """
import logging, os, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
from pipeline.execution.lease import pin_leased_devices
pin_leased_devices(1, sys.argv[1])
out = Path(sys.argv[2])
out.write_text(os.environ["CUDA_VISIBLE_DEVICES"] + " " + os.environ["PIPELINE_LEASED_GPUS"])
while not out.with_suffix(".stop").exists():
    time.sleep(0.05)
"""
DEADLINE_SECONDS = 120  # a lease that never comes must fail the test, not hang it


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {DEADLINE_SECONDS} s")
        time.sleep(0.05)


def _holder(name: str, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / f"{name}.device", tmp_path / f"{name}.err"
    env = {**os.environ, FAKE_GPUS_ENV: "gpu0,gpu1", LEASE_DIR_ENV: str(tmp_path / "leases"), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("PIPELINE_LEASED_GPUS", None)
    process = subprocess.Popen([sys.executable, "-c", HOLDER, name, str(out)], env=env, cwd=REPO_ROOT,
                               stderr=err.open("w"))
    return process, out, err


def test_three_processes_on_two_devices_never_share_and_a_killed_holder_frees_its_device(tmp_path):
    first, first_out, _ = _holder("first", tmp_path)
    second, second_out, _ = _holder("second", tmp_path)
    _wait_for(lambda: first_out.is_file() and second_out.is_file(), "two leases")
    leased = {first_out.read_text().split()[0], second_out.read_text().split()[0]}
    assert leased == {"gpu0", "gpu1"}  # each pinned (CUDA_VISIBLE_DEVICES) to its own device
    for out in (first_out, second_out):
        pinned, recorded = out.read_text().split()
        assert pinned == recorded

    third, third_out, third_err = _holder("third", tmp_path)
    _wait_for(lambda: "waiting for 1 free GPU" in third_err.read_text(), "the third process waiting")
    assert not third_out.exists() and third.poll() is None  # it waits: both devices are held
    assert "first" in third_err.read_text() and "second" in third_err.read_text()  # the waiting line names the holders

    first.send_signal(signal.SIGKILL)  # a holder that dies: the kernel drops its lock
    first.wait()
    _wait_for(third_out.is_file, "the third lease after the first holder was killed")
    assert third_out.read_text().split()[0] == first_out.read_text().split()[0]
    assert third_out.read_text().split()[0] != second_out.read_text().split()[0]

    for out in (second_out, third_out):
        out.with_suffix(".stop").touch()
    assert second.wait(timeout=DEADLINE_SECONDS) == 0 and third.wait(timeout=DEADLINE_SECONDS) == 0


def test_a_lease_of_several_devices_is_all_or_nothing(tmp_path):
    held = try_lease(1, ["a", "b"], tmp_path, "test")
    assert held is not None and held.devices == ("a",)
    assert try_lease(2, ["a", "b"], tmp_path, "test") is None
    other = try_lease(1, ["a", "b"], tmp_path, "test")  # the failed pair left "b" free
    assert other is not None and other.devices == ("b",)
    held.release()
    both_waits = []
    other.release()
    pair = lease_devices(2, ["a", "b"], tmp_path, "test", wait=both_waits.append)
    assert pair.devices == ("a", "b") and both_waits == []
    pair.release()


def test_more_devices_than_visible_is_one_line(tmp_path):
    with pytest.raises(PipelineError, match="3 GPUs asked for .* 2 visible"):
        lease_devices(3, ["a", "b"], tmp_path, "test")


def test_visible_devices_come_from_the_fake_list_then_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv(FAKE_GPUS_ENV, "x, y")
    assert visible_devices() == ["x", "y"]
    monkeypatch.delenv(FAKE_GPUS_ENV)
    assert visible_devices() == ["3", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_devices() == []


@pytest.mark.parametrize(("setting", "devices", "expected"), [
    (None, ["0", "1"], 1), ("", [], 1), ("2", [], 2), ("all", ["0", "1", "2"], 3), ("all", [], 1),
])
def test_the_process_count_pipeline_nproc_asks_for(setting, devices, expected):
    assert requested_processes(setting, devices) == expected


@pytest.mark.parametrize("setting", ["0", "-2", "two"])
def test_a_bad_process_count_is_one_line(setting):
    with pytest.raises(PipelineError, match="PIPELINE_NPROC"):
        requested_processes(setting, [])


def test_the_provenance_record_names_the_leased_devices(monkeypatch, tmp_path):
    from pipeline.execution.environment import provenance_record

    monkeypatch.delenv("PIPELINE_LEASED_GPUS", raising=False)
    assert provenance_record("joint", tmp_path)["gpu_lease"] is None
    monkeypatch.setenv("PIPELINE_LEASED_GPUS", "GPU-1234,GPU-5678")
    assert provenance_record("joint", tmp_path)["gpu_lease"] == ["GPU-1234", "GPU-5678"]


def test_a_process_pins_itself_to_its_lease_and_its_ranks_do_not_lease_again(monkeypatch, tmp_path):
    from pipeline.execution import lease

    monkeypatch.setenv(FAKE_GPUS_ENV, "g0,g1")
    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("PIPELINE_LEASED_GPUS", raising=False)  # monkeypatch removes both again afterwards
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(lease, "_HELD", [])
    assert lease.pin_leased_devices(2, "joint") == ("g0", "g1")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "g0,g1" and os.environ["PIPELINE_LEASED_GPUS"] == "g0,g1"
    assert lease.pin_leased_devices(1, "joint") == ()  # a launched rank inherits the lease
    lease._HELD[0].release()
    monkeypatch.setenv(LEASE_DIR_ENV, "off")
    monkeypatch.delenv("PIPELINE_LEASED_GPUS")
    assert lease.pin_leased_devices(1, "joint") == ()


@pytest.mark.parametrize("variable", [FAKE_GPUS_ENV, "CUDA_VISIBLE_DEVICES"])
def test_a_device_named_twice_is_one_line(monkeypatch, variable):
    """Issue 43 D5: PIPELINE_FAKE_GPUS=a,a with PIPELINE_NPROC=2 waited forever on its own lease."""
    monkeypatch.delenv(FAKE_GPUS_ENV, raising=False)
    monkeypatch.setenv(variable, "a, b,a")
    with pytest.raises(PipelineError, match=f"{variable}=a, b,a names a more than once") as refused:
        visible_devices()
    assert "\n" not in str(refused.value)


def _file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("not a folder")
    return tmp_path / "file"


@pytest.mark.parametrize("folder", [
    _file,  # a file
    lambda tmp_path: _file(tmp_path) / "leases",  # under a file
    lambda tmp_path: Path("/proc/leases"),  # cannot be made
], ids=["a file", "under a file", "cannot be made"])
def test_a_lease_folder_that_cannot_hold_the_locks_is_one_line(monkeypatch, tmp_path, folder):
    """Issue 43 D4: FileExistsError, NotADirectoryError or FileNotFoundError from the lease."""
    from pipeline.execution import lease

    monkeypatch.setenv(FAKE_GPUS_ENV, "g0")
    monkeypatch.setenv(LEASE_DIR_ENV, str(folder(tmp_path)))
    monkeypatch.delenv("PIPELINE_LEASED_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(lease, "_HELD", [])
    with pytest.raises(PipelineError, match=f"{LEASE_DIR_ENV}=.* cannot hold the GPU lease files") as refused:
        lease.pin_leased_devices(1, "joint")
    assert "\n" not in str(refused.value) and "CUDA_VISIBLE_DEVICES" not in os.environ


# ----------------------------------------------------------------------------- a lease safe on a shared host (issue 47)


def _pin_one(monkeypatch, folder: Path):
    from pipeline.execution import lease

    monkeypatch.setenv(FAKE_GPUS_ENV, "GPU-1")
    monkeypatch.setenv(LEASE_DIR_ENV, str(folder))
    monkeypatch.delenv("PIPELINE_LEASED_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(lease, "_HELD", [])
    return lease.pin_leased_devices(1, "joint")


def _refused(monkeypatch, folder: Path, match: str) -> str:
    with pytest.raises(PipelineError, match=match) as refused:
        _pin_one(monkeypatch, folder)
    assert "\n" not in str(refused.value) and "CUDA_VISIBLE_DEVICES" not in os.environ
    return str(refused.value)


def test_a_symlinked_lock_file_is_left_intact_and_its_target_unchanged(monkeypatch, tmp_path):
    """Another user's link in place of the lock file made the stage truncate and write the victim's file."""
    folder, precious = tmp_path / "leases", tmp_path / "precious.txt"
    folder.mkdir(mode=0o700)
    precious.write_text("the victim's thesis")
    (folder / "gpu-GPU-1.lock").symlink_to(precious)
    _refused(monkeypatch, folder, r"gpu-GPU-1\.lock is a symbolic link.*left as it is; remove it")
    assert precious.read_text() == "the victim's thesis"
    assert os.readlink(folder / "gpu-GPU-1.lock") == str(precious)


def test_a_dangling_symlinked_lock_file_does_not_create_its_target(monkeypatch, tmp_path):
    folder, target = tmp_path / "leases", tmp_path / "planted"
    folder.mkdir(mode=0o700)
    (folder / "gpu-GPU-1.lock").symlink_to(target)
    _refused(monkeypatch, folder, r"is a symbolic link")
    assert not target.exists() and not target.is_symlink()


def test_the_holder_is_noted_beside_the_lock_never_in_it(monkeypatch, tmp_path):
    folder = tmp_path / "leases"
    assert _pin_one(monkeypatch, folder) == ("GPU-1",)
    from pipeline.execution import lease

    try:
        assert (folder / "gpu-GPU-1.lock").read_bytes() == b""
        assert "joint" in (folder / "gpu-GPU-1.holder").read_text()
        assert stat_mode(folder) == 0o700  # made here: the user's alone
        assert sorted(path.name for path in folder.iterdir()) == ["gpu-GPU-1.holder", "gpu-GPU-1.lock"]
    finally:
        lease._HELD[0].release()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_a_symlinked_lease_folder_is_refused(monkeypatch, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "leases").symlink_to(real)
    _refused(monkeypatch, tmp_path / "leases", r"lease folder .*leases is a symbolic link")
    assert list(real.iterdir()) == []


def test_a_lease_folder_of_another_user_is_refused(monkeypatch, tmp_path):
    from pipeline.execution import lease

    folder = tmp_path / "leases"
    folder.mkdir(mode=0o700)
    real_lstat = os.lstat

    def someone_else_s(path, *args, **kwargs):  # the tests run as one user: the folder's owner as another's
        info = real_lstat(path, *args, **kwargs)
        if Path(path) != folder:
            return info
        fields = list(info[:10])
        fields[4] = 4242  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(lease.os, "lstat", someone_else_s)
    _refused(monkeypatch, folder, r"belongs to another user .*use a folder you own")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("mode", "refused"), [
    (0o770, "writable by its group without the sticky bit"),
    (0o1777, "writable by every user"),  # /tmp itself
    (0o757, "writable by every user"),
    (0o1770, None),  # a folder a group shares on purpose
    (0o700, None),
    (0o755, None),
])
def test_the_lease_folder_s_mode(monkeypatch, tmp_path, mode, refused):
    folder = tmp_path / "leases"
    folder.mkdir()
    folder.chmod(mode)
    if refused:
        _refused(monkeypatch, folder, refused)
        assert list(folder.iterdir()) == []
    else:
        from pipeline.execution import lease

        assert _pin_one(monkeypatch, folder) == ("GPU-1",)
        lease._HELD[0].release()


def test_the_default_lease_folder_is_the_user_s_own(monkeypatch, tmp_path):
    import socket

    from pipeline.execution import lease

    monkeypatch.delenv(LEASE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    expected = tmp_path / "cache" / "pipeline" / "gpu-leases" / socket.gethostname()
    assert lease.lease_dir() == expected
    monkeypatch.setattr(lease, "_HELD", [])
    monkeypatch.setenv(FAKE_GPUS_ENV, "GPU-1")
    monkeypatch.delenv("PIPELINE_LEASED_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert lease.pin_leased_devices(1, "joint") == ("GPU-1",)
    lease._HELD[0].release()
    assert stat_mode(expected) == 0o700 and (expected / "gpu-GPU-1.lock").is_file()


def test_the_suite_never_takes_the_real_lease():
    from pipeline.execution.lease import default_lease_dir, lease_dir

    assert os.environ.get(LEASE_DIR_ENV) and lease_dir() != default_lease_dir()
