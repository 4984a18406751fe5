"""A run of PIPELINE_NPROC ranks on one machine listens on the loopback alone (issue 47 item 4):
torch's rendezvous and process-group stores bind every interface, so any host that reaches this
one could connect to a run's coordination ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pipeline.execution.launch import one_machine_rendezvous
from pipeline.execution.runtime import LOOPBACK, loopback_store, process_group_store

from conftest import REPO_ROOT

# Rank 0 lists the listening TCP sockets of itself and of the launcher once the group is up.
RANK = """
import json, os, sys
import torch.distributed as dist
from pipeline.execution.runtime import run_context

def listening():
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[fields[9]] = fields[1]
    return found

def sockets_of(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes

context = run_context("cpu")
if context.rank == 0:
    table = listening()
    pids = [os.getpid(), int(os.environ["PIPELINE_LAUNCHER_PID"])]
    addresses = sorted(table[inode] for pid in pids for inode in sockets_of(pid) if inode in table)
    with open(sys.argv[1], "w") as out:
        json.dump({"master": os.environ["MASTER_ADDR"], "listening": addresses}, out)
dist.barrier()
dist.destroy_process_group()
"""
LAUNCHER = "import sys; from pipeline.execution.launch import launch_ranks; launch_ranks(2, ['-c', sys.argv[1], sys.argv[2]], 'probe')"


def _is_loopback(address: str) -> bool:
    """`/proc/net/tcp` hex: 0100007F:PORT is 127.0.0.1 (IPv4), ...0000000001000000:PORT ::1."""
    host = address.split(":")[0]
    return host == "0100007F" or host == "00000000000000000000000001000000"


def test_a_one_machine_launch_rendezvous_and_master_address_are_the_loopback():
    assert one_machine_rendezvous(1234) == {"rdzv_backend": "c10d", "rdzv_endpoint": "127.0.0.1:1234",
                                            "rdzv_configs": {"is_host": True}, "local_addr": "127.0.0.1"}


def test_the_stores_listen_on_the_loopback_only(monkeypatch):
    store = loopback_store()
    assert store.host == LOOPBACK
    store.set("k", "v")
    assert store.get("k") == b"v"
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.5")  # another machine's address: torch's own store, untouched
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("RANK", "0")
    assert process_group_store(2) is None


def test_two_ranks_on_one_machine_listen_on_the_loopback_alone(tmp_path):
    out = tmp_path / "listening.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", LAUNCHER, RANK, str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["master"] == LOOPBACK
    assert seen["listening"] and all(_is_loopback(address) for address in seen["listening"]), seen
