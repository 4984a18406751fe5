"""A stage across a machine's devices: the glue between `PIPELINE_NPROC`, the GPU lease and torch's
launcher (docs/scaling.md, "Past one GPU").

`run_on_devices` is what the `python -m stages` entry runs around a model stage. Unless the process
is already a rank of a launch (LOCAL_RANK is set: started by this launcher or by `torchrun`), it

1. reads how many processes the stage asks for: `PIPELINE_NPROC` (default 1, the papers' one GPU;
   `all` = every visible GPU; on a CPU machine a number starts that many gloo processes);
2. leases that many GPUs and pins itself to them (`pipeline.execution.lease`; nothing without GPUs);
3. runs the stage here (one process), or starts N ranks of the same command with torch's elastic
   launcher (`torch.distributed.launcher.api.elastic_launch`, what `torchrun --standalone` runs).
   Each rank joins the process group in `pipeline.execution.runtime.run_context`; the training loop shards
   the configured (global) batch over them and rank 0 alone writes outputs, checkpoints and records.

Not a DVC param: the update equals one process's on the whole batch, dropout masks included
(`pipeline.modeling.distributed`), so the result does not depend on it (to float rounding). Rank 0's stdout (the stage's summary line) reaches the console; the ranks'
logs go to files in a folder the stage names. A rank that dies stops the others (the launcher
restarts nothing): the stage fails with one line naming the rank and the logs, outputs untouched
(every write is atomic), and the rerun resumes from the last checkpoint. A launcher that dies
takes its ranks with it (`die_with_launcher`). A process count the stage's batch does not split
into is refused before any rank starts.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.execution.lease import pin_leased_devices, visible_devices
from pipeline.execution.runtime import LOOPBACK, loopback_store

log = logging.getLogger(__name__)

NPROC_ENV = "PIPELINE_NPROC"
LAUNCHER_PID_ENV = "PIPELINE_LAUNCHER_PID"  # set for the ranks this launcher starts: whom they die with
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def requested_processes(setting: str | None, devices: Sequence[str]) -> int:
    """The number of processes `PIPELINE_NPROC` asks for: unset or empty → 1, `all` → every visible
    device (1 where there is none), else a positive integer."""
    if setting is None or setting.strip() == "":
        return 1
    if setting.strip() == "all":
        if not devices:
            log.info("%s=all: no GPU visible, one process", NPROC_ENV)
        return max(len(devices), 1)
    try:
        count = int(setting)
    except ValueError:
        count = 0
    if count < 1:
        raise PipelineError(f"{NPROC_ENV}={setting!r} is not a process count; set a positive integer or `all` (every GPU)")
    return count


def is_launched_rank() -> bool:
    """True in a rank that a launcher (this one or torchrun) started: it runs the stage itself."""
    return "LOCAL_RANK" in os.environ


def die_with_launcher() -> None:
    """In a rank this launcher started (Linux): the kernel sends it SIGKILL when the launcher dies,
    however it dies (SIGKILL included), so no rank trains on, re-parented, holding the checkpoint
    lock (`prctl(PR_SET_PDEATHSIG)`). A launcher already gone by then is caught by the parent check."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGKILL)


def run_on_devices(stage: str, run_here: Callable[[], None], stage_arguments: Sequence[str], spread: bool,
                   check_processes: Callable[[int], None] = lambda count: None) -> None:
    """Lease the stage's GPUs, then run it here or (`spread` and PIPELINE_NPROC > 1) as N ranks of
    `python -m stages <stage_arguments>`. `check_processes(count)` raises what the stage's settings
    make of that many processes (e.g. a batch that does not split), before any device or rank."""
    if is_launched_rank():
        die_with_launcher()
        run_here()
        return
    count = requested_processes(os.environ.get(NPROC_ENV), visible_devices()) if spread else 1
    if count > 1:
        check_processes(count)
    pin_leased_devices(count, stage)
    if count == 1:
        run_here()
        return
    launch_ranks(count, ["-m", "stages", *stage_arguments], stage)


def launch_ranks(count: int, arguments: Sequence[str], stage: str) -> None:
    """Run `python <arguments>` as `count` ranks on this machine (gloo on CPU, NCCL on GPUs, chosen
    by `run_context`); a failed rank is one PipelineError naming it and the logs."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logs = Path(tempfile.mkdtemp(prefix=f"pipeline-{stage}-ranks-"))
    # rank 0's stdout (the summary line) to the console; everything else of every rank to files
    redirects = {rank: Std.ALL for rank in range(1, count)} | {0: Std.ERR}
    rendezvous = loopback_store()  # held for the launch: its rendezvous reuses this server
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=count, run_id=f"{stage}-{os.getpid()}",
        **one_machine_rendezvous(rendezvous.port),
        max_restarts=0,  # a restart would start over from the last checkpoint by itself; the rerun does that
        logs_specs=DefaultLogsSpecs(log_dir=str(logs), redirects=redirects),
    )
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the ranks inherit it: they die with this process
    # no store the agent would host for the ranks on every interface: rank 0 hosts theirs on the
    # loopback (`pipeline.execution.runtime.process_group_store`)
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    log.info("%s: %d processes (torch.distributed); their logs in %s", stage, count, logs)
    logging.disable(logging.ERROR)  # the launcher's own failure logs: the one line below says it
    try:
        elastic_launch(config, sys.executable)(*arguments)
    except ChildFailedError as failed:
        ranks = "; ".join(
            f"rank {rank} {_how(failure.exitcode, failure.signal_name())}{_said(logs, failure.local_rank)}"
            for rank, failure in sorted(failed.failures.items())
        )
        raise PipelineError(
            f"{stage}: {ranks} (of {count} processes; logs in {logs}); the others were stopped, the stage's outputs "
            "are unchanged, and a rerun resumes from its last checkpoint"
        ) from None
    except SignalException as stopped:  # the stage itself was stopped (Ctrl-C, DVC, Slurm): the launcher stopped the ranks
        raise PipelineError(
            f"{stage}: stopped by {stopped.sigval.name} (logs in {logs}); the stage's outputs are unchanged, and a "
            "rerun resumes from its last checkpoint"
        ) from None
    finally:
        logging.disable(logging.NOTSET)
        del rendezvous


def one_machine_rendezvous(port: int) -> dict:
    """The launch settings of a run on this machine alone: the rendezvous on the loopback at `port`
    (hosted here), and the loopback as the ranks' MASTER_ADDR."""
    return {"rdzv_backend": "c10d", "rdzv_endpoint": f"{LOOPBACK}:{port}", "rdzv_configs": {"is_host": True},
            "local_addr": LOOPBACK}


def _how(exitcode: int, signal_name: str) -> str:
    return f"was killed by {signal_name}" if exitcode < 0 else f"exited with code {exitcode}"


def _said(logs: Path, local_rank: int) -> str:
    """The one-line error a rank printed (a PipelineError: `error: …`), from its stderr log."""
    for path in logs.glob(f"**/attempt_*/{local_rank}/stderr.log"):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith("error: ")]
        if lines:
            return f" ({lines[-1].removeprefix('error: ')})"
    return ""
