"""Which rank is persistently last to a collective, and by how much.

Two views of the same event. With a shared clock (one host) arrival times compare directly: the
last rank is the latest arrival and its delay is the gap to the second latest. Across hosts clocks
do not agree, but each rank's own *execution time* (arrival → completion, measured on its own
clock) tells the same story without synchronisation: everyone leaves a blocking collective at about
the same moment, so the last to arrive spends the least time inside it, and the delay is the gap
between the shortest and second-shortest execution time (seed 004's T_rest − T_straggler).

A rank counts as a *persistent* straggler when it is last in most iterations (seed 004 saw 98 %)
and its median delay is large enough to matter next to the collective itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: A rank must be last in at least this fraction of iterations to be called persistent.
MIN_LAST_FRACTION = 0.75
#: Delays below this are noise on any backend (µs).
MIN_DELAY_US = 20.0
#: …and below this fraction of the collective's own time they do not matter for tuning.
MIN_RELATIVE_DELAY = 0.05


@dataclass(frozen=True)
class StragglerReport:
    #: The persistent straggler, or ``None`` when nobody is persistently and noticeably late.
    rank: int | None
    #: The rank most often last (reported even when it does not qualify).
    candidate: int
    last_fraction: float
    #: Median / spread of the candidate's delay over the iterations in which it was last (µs).
    delay_us: float
    delay_p10_us: float
    delay_p90_us: float
    delay_mean_us: float
    last_counts: tuple[int, ...]
    iterations: int

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["last_counts"] = list(self.last_counts)
        return d


def from_exec_times(
    exec_us: np.ndarray,
    min_fraction: float = MIN_LAST_FRACTION,
    min_delay_us: float = MIN_DELAY_US,
) -> StragglerReport:
    """``exec_us[iteration, rank]``: each rank's own arrival→completion time of each collective."""
    exec_us = _matrix(exec_us)
    order = np.sort(exec_us, axis=1)
    last = np.argmin(exec_us, axis=1)
    delay = order[:, 1] - order[:, 0]
    collective_us = float(np.median(order[:, 0]))
    return _report(last, delay, exec_us.shape[1], collective_us, min_fraction, min_delay_us)


def from_arrivals(
    arrival_us: np.ndarray,
    collective_us: float = 0.0,
    min_fraction: float = MIN_LAST_FRACTION,
    min_delay_us: float = MIN_DELAY_US,
) -> StragglerReport:
    """``arrival_us[iteration, rank]`` on one shared clock (ranks of one host)."""
    arrival_us = _matrix(arrival_us)
    order = np.sort(arrival_us, axis=1)
    last = np.argmax(arrival_us, axis=1)
    delay = order[:, -1] - order[:, -2]
    return _report(last, delay, arrival_us.shape[1], collective_us, min_fraction, min_delay_us)


def _matrix(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[1] < 2 or values.shape[0] < 1:
        raise ValueError("straggler detection needs a [iterations, ranks] array with >= 2 ranks, "
                         f"got shape {values.shape}")
    return values


def _report(last: np.ndarray, delay: np.ndarray, nranks: int, collective_us: float,
            min_fraction: float, min_delay_us: float) -> StragglerReport:
    counts = np.bincount(last, minlength=nranks)
    candidate = int(np.argmax(counts))
    fraction = float(counts[candidate] / len(last))
    own = delay[last == candidate]
    median = float(np.median(own))
    threshold = max(min_delay_us, MIN_RELATIVE_DELAY * collective_us)
    persistent = fraction >= min_fraction and median >= threshold
    return StragglerReport(
        rank=candidate if persistent else None, candidate=candidate, last_fraction=fraction,
        delay_us=median, delay_p10_us=float(np.percentile(own, 10)),
        delay_p90_us=float(np.percentile(own, 90)), delay_mean_us=float(np.mean(own)),
        last_counts=tuple(int(c) for c in counts), iterations=len(last))
