"""Timing and memory: repeated wall-clock timings in interleaved rounds, and the peak memory of a call.

Timings are wall-clock around the call (with `torch.cuda.synchronize()` on CUDA). Peak memory is
the peak RSS of the process on CPU (Linux: freed heap given back and the high-water mark reset
before the call; elsewhere the peak since the process started, `getrusage`) — it includes every model the process holds — and
`torch.cuda.max_memory_allocated` on CUDA.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext

import numpy as np
import torch

from pipeline.errors import PipelineError
from pipeline.execution.runtime import peak_rss_mb

PUBLIC_TIMING_KEYS = ("median", "min", "max", "iqr", "repeats", "cpu_median")


def summarize(seconds: Sequence[float]) -> dict:
    """Median, min, max and interquartile range of repeated timings (seconds)."""
    values = np.asarray(seconds, dtype=float)
    q1, q3 = np.percentile(values, [25, 75])
    return {
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "iqr": float(q3 - q1),
        "repeats": len(values),
    }


def _read_high_water_mark_kb() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_high_water_mark() -> bool:
    """Linux: writing 5 to /proc/self/clear_refs resets the peak RSS (VmHWM) to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return _read_high_water_mark_kb() is not None


def _release_free_memory() -> None:
    """Give freed heap back to the OS (glibc `malloc_trim`), so that RSS counts live memory only."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """Peak memory while the block runs: CUDA max allocated, else the process's peak RSS
    (after freed heap is given back to the OS, so that memory a previous measurement freed does
    not count). `peak_mb` after the block; `measure` says which number it is.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = float("nan")
        self.measure = ""
        self._reset = False

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            _release_free_memory()
            self._reset = _reset_high_water_mark()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.measure = "torch.cuda.max_memory_allocated"
        elif self._reset:
            self.peak_mb = _read_high_water_mark_kb() / 1024
            self.measure = "peak RSS of the process (VmHWM, reset before the measurement)"
        else:  # no resettable high-water mark (not Linux): the peak since the process started
            self.peak_mb = peak_rss_mb()
            self.measure = "peak RSS of the process since it started (getrusage ru_maxrss; no reset possible)"


def synchronizer(device: torch.device) -> Callable[[], None] | None:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _timed_call(function: Callable[[], object], synchronize: Callable[[], None] | None,
                monitor: PeakMemory | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call, inside `monitor` when given."""
    with monitor if monitor is not None else nullcontext():
        if synchronize is not None:
            synchronize()
        started, started_cpu = time.perf_counter(), time.process_time()
        function()
        if synchronize is not None:
            synchronize()
        return time.perf_counter() - started, time.process_time() - started_cpu


def time_interleaved(
    functions: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    synchronize: Callable[[], None] | None = None,
    device: torch.device | None = None,
) -> dict[str, dict]:
    """Time each function `repeats` times after `warmup` untimed calls, in rounds (A B A B …),
    so that a change of background load affects every function alike.

    Returns per name the `summarize` of the wall-clock seconds, `cpu_median` (median CPU seconds
    of this process, all threads: less sensitive to other load than wall-clock on a shared
    machine), `seconds` (the raw list) and, with
    `device`, `peak_memory_mb` and `memory_measure`. Memory is measured on the warm-up calls
    (on the timed ones without warm-up), so that measuring it does not disturb the timings.
    """
    if repeats < 1 or warmup < 0:
        raise PipelineError(f"repeats={repeats}, warmup={warmup}: allowed repeats >= 1 and warmup >= 0")
    seconds: dict[str, list[float]] = {name: [] for name in functions}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in functions}
    peaks: dict[str, list[float]] = {name: [] for name in functions}
    measure = ""
    for round_index in range(warmup + repeats):
        timed = round_index >= warmup
        for name, function in functions.items():
            monitor = PeakMemory(device) if device is not None and (not timed or warmup == 0) else None
            elapsed, elapsed_cpu = _timed_call(function, synchronize, monitor)
            if timed:
                seconds[name].append(elapsed)
                cpu_seconds[name].append(elapsed_cpu)
            if monitor is not None:
                peaks[name].append(monitor.peak_mb)
                measure = monitor.measure
    results = {}
    for name in functions:
        results[name] = {**summarize(seconds[name]), "cpu_median": float(np.median(cpu_seconds[name])),
                         "seconds": seconds[name]}
        if device is not None:
            results[name]["peak_memory_mb"] = max(peaks[name])
            results[name]["memory_measure"] = measure
    return results


def time_repeats(
    fn: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    synchronize: Callable[[], None] | None = None,
    device: torch.device | None = None,
) -> dict:
    """{median, min, max, iqr, repeats, cpu_median, seconds} of `repeats` timed calls after `warmup` untimed ones."""
    return time_interleaved({"fn": fn}, repeats, warmup, synchronize, device)["fn"]


def public(timing: Mapping) -> dict:
    """A timing as it goes into the JSON: the summary of the seconds, rounded; no raw list."""
    return {key: (round(value, 5) if isinstance(value, float) else value)
            for key, value in timing.items() if key in PUBLIC_TIMING_KEYS}
