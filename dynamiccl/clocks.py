"""Marks on the timeline a rank's work runs on: the host's clock on CPU, CUDA events on a GPU.

Why two: a gloo collective runs on the host, so the moment its future's callback runs is the moment
it finished. An NCCL collective is only *queued* when its call returns, and PyTorch completes its
future right then (the callbacks run on a stream that waits for the work), so a host timestamp in
the callback says when the host queued the work, not when the GPU finished it. Only an event
recorded on the stream marks that. Both clocks have one interface: ``mark()`` now (on the host, or
where the current stream stands), ``settle(mark)`` to wait until a mark has been reached, and
``us(mark, origin)`` between two settled marks of the same clock.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class HostClock:
    """Marks on the host's monotonic clock."""

    def mark(self) -> Any:
        return time.perf_counter_ns()

    def us(self, mark: Any, origin: Any) -> float:
        return (mark - origin) / 1e3

    def settle(self, mark: Any) -> None:
        pass


class CudaClock:
    """Marks on the current CUDA stream: events, read once they have been reached."""

    def mark(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def us(self, mark: Any, origin: Any) -> float:
        return origin.elapsed_time(mark) * 1e3

    def settle(self, mark: Any) -> None:
        mark.synchronize()


Clock = HostClock | CudaClock


def clock_for(device: torch.device) -> Clock:
    """The clock of work on ``device``."""
    return CudaClock() if device.type == "cuda" else HostClock()
