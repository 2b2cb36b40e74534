"""Where the runtime's collective times come from: NCCL's profiler when it is loaded, else its own.

With the plugin loaded as NCCL's profiler in this process (``NCCL_PROFILER_PLUGIN`` and
``DYNAMICCL_PROFILE`` set, :mod:`dynamiccl.plugin.profile_ring`), every all-reduce NCCL runs is in this
process's rings with its GPU time (first channel's start to the last channel's stop) and its launch
time on the host's realtime clock. :class:`ProfiledTimes` reads them: the online tuner's trials take
the GPU time of each call of the bin (no synchronous all-reduce, no CUDA events, no bucket timing
from the host), and straggler detection takes each rank's GPU time of a step's first all-reduce,
matched across ranks by NCCL's sequence number (:func:`arrivals`): a punctual rank's kernel starts
when its rank launched it and waits inside for the late peer's data, the late rank's starts when the
data is nearly all there, so the difference of the GPU times is the lateness, on no clock the ranks
must share (hosts' realtime clocks differ by more than a collective takes). Without the profiler
(:func:`profiled_times` returns None) the runtime times as before.

Either way a trial's number is :func:`trimmed_mean` of its calls: one stray call (a page fault, a
preempted proxy thread) moves a mean but not a trimmed one.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dynamiccl.plugin.profile_ring import (
    FILE_PREFIX,
    FILE_SUFFIX,
    FLAG_TIMED,
    PROFILE_ENV,
    RECORD_DTYPE,
    RingFormatError,
    RingView,
)
from dynamiccl.system.nccl import Collective
from dynamiccl.system.nccl_profiler import PROFILER_PLUGIN_ENV

#: Share of a trial's calls dropped at each end before averaging.
TRIM = 0.2
#: Records kept for the lookups (a few steps of a large model's buckets).
KEEP = 8192
#: How long a trial's boundary waits for the proxy thread to report the GPU's last calls.
WAIT_S = 0.2


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    """The mean of ``values`` without the ``trim`` share at each end (0 for none; the median for
    fewer than three)."""
    v = np.sort(np.asarray([x for x in values if math.isfinite(x)], dtype=float))
    if len(v) == 0:
        return 0.0
    if len(v) < 3:
        return float(np.median(v))
    cut = int(len(v) * trim)
    return float(v[cut:len(v) - cut].mean())


class ProfiledTimes:
    """This process's all-reduces as NCCL's profiler recorded them (its rings in ``folder``)."""

    def __init__(self, folder: str | Path, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.pid = os.getpid() if pid is None else pid
        self._views: dict[Path, RingView] = {}
        self._cursor: dict[Path, int] = {}
        self._given_up: set[Path] = set()
        self._records = np.zeros(0, RECORD_DTYPE)
        self._taken = 0  # records before this index were consumed by a trial

    def _poll(self) -> None:
        for path in sorted(self.folder.glob(f"{FILE_PREFIX}{self.pid}-*{FILE_SUFFIX}")):
            if path in self._given_up:
                continue
            if path not in self._views:
                try:
                    self._views[path] = RingView(path)
                except RingFormatError:
                    continue
                self._cursor[path] = 0
            try:
                read = self._views[path].read(self._cursor[path])
            except RingFormatError:  # cut short or rewritten by something else: its times are gone
                self._views.pop(path).close()
                self._given_up.add(path)
                continue
            self._cursor[path] = read.next
            mine = read.records[read.records["coll"] == Collective.ALLREDUCE]
            if len(mine):
                self._records = np.concatenate([self._records, mine])
        if len(self._records) > KEEP:
            drop = len(self._records) - KEEP
            self._records, self._taken = self._records[drop:], max(self._taken - drop, 0)

    @property
    def recording(self) -> bool:
        """NCCL's profiler has written a ring for this process (it is loaded and profiling)."""
        if not self._views:
            self._poll()
        return bool(self._views)

    def take(self, contains: Callable[[int], bool], calls: int, wait_s: float = WAIT_S) -> list[float]:
        """GPU times (µs) of the all-reduces whose size ``contains`` accepts, among those not taken
        before; waits up to ``wait_s`` for ``calls`` of them (the GPU may still run the last)."""
        deadline = time.monotonic() + wait_s
        while True:
            self._poll()
            fresh = self._records[self._taken:]
            match = np.array([contains(int(n)) for n in fresh["bytes"]], dtype=bool)
            found = fresh[match & ((fresh["flags"] & FLAG_TIMED) != 0)]
            if len(found) >= calls or time.monotonic() >= deadline:
                self._taken = len(self._records)
                return ((found["gpu_stop_ns"] - found["gpu_start_ns"]) / 1e3).tolist()
            time.sleep(0.005)

    def first_call(self, since_ns: int, before_ns: int) -> tuple[int, float] | None:
        """(NCCL's seq, GPU time in µs) of this process's first all-reduce launched in
        [since_ns, before_ns) on this host's realtime clock; None if the profiler has none."""
        self._poll()
        r = self._records
        inside = r[(r["host_start_ns"] >= since_ns) & (r["host_start_ns"] < before_ns)
                   & ((r["flags"] & FLAG_TIMED) != 0)]
        if len(inside) == 0:
            return None
        first = inside[np.argmin(inside["host_start_ns"])]
        return int(first["seq"]), float(first["gpu_stop_ns"] - first["gpu_start_ns"]) / 1e3

    def close(self) -> None:
        for view in self._views.values():
            view.close()
        self._views.clear()


def profiled_times() -> ProfiledTimes | None:
    """This process's profiler rings when NCCL is told to load the plugin as its profiler and
    record; None otherwise (the runtime then times collectives itself)."""
    folder = os.environ.get(PROFILE_ENV, "")
    if not folder or not os.environ.get(PROFILER_PLUGIN_ENV) or not os.path.isdir(folder):
        return None
    return ProfiledTimes(folder)


def arrivals(fallback_us: Sequence[float], seqs: Sequence[float],
             gpu_us: Sequence[float]) -> list[float]:
    """Every rank's lateness (µs) at a step: the longest GPU time of the step's first all-reduce
    less the rank's own, when every rank's profiler timed the same call (NCCL's seq); else
    ``fallback_us``, the runtime's own timing."""
    if len(set(seqs)) == 1 and seqs[0] >= 0 and all(t > 0 for t in gpu_us):
        longest = max(gpu_us)
        return [longest - t for t in gpu_us]
    return list(fallback_us)
