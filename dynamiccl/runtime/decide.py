"""What the job's measurements say: a persistent straggler, how late, and the compute/comm ratio.

Pure functions of gathered numbers, run on rank 0 only; the runtime broadcasts the result, so no rank
ever acts on a value it measured alone. Arrival skew needs no common clock: every rank times how long
it took from a moment common to all ranks — the completion of the previous step's last all-reduce,
which no rank sees before every rank has contributed — to its first gradient bucket of the step. The
last rank to arrive has the longest time; its lateness is the gap to the second-longest (seed 004's
conservative T_delay: the idle time of the next-latest rank).
A *persistent* straggler is the same rank late by more than the
threshold in most samples of the window (seed 004 §2: one GPU is last in 98 % of iterations).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dynamiccl.plugin.policy_file import context_buckets


@dataclass(frozen=True)
class JobState:
    """The job's measured state that every rank acts on: the persistent straggler (None: none),
    how late it is, and the compute/comm ratio."""

    straggler: int | None = None
    delay_us: float = 0.0
    c2c: float = 0.0

    @property
    def context(self) -> tuple[str, str]:
        """The policy slice for this state (``straggler=… c2c=…``), as export names them."""
        return context_buckets(self.delay_us if self.straggler is not None else 0.0, self.c2c)

    def encode(self) -> torch.Tensor:
        return torch.tensor([-1.0 if self.straggler is None else float(self.straggler),
                             self.delay_us, self.c2c], dtype=torch.float64)

    @classmethod
    def decode(cls, t: torch.Tensor) -> JobState:
        s, delay, c2c = (float(v) for v in t.tolist())
        return cls(None if s < 0 else int(s), delay, c2c)


@dataclass(frozen=True)
class Sample:
    """One measurement step: every rank's time from the common point to its first bucket (µs),
    and its c2c ratio."""

    arrival_us: tuple[float, ...]
    c2c: tuple[float, ...]

    def late(self, threshold_us: float) -> tuple[int, float] | None:
        """(rank, gap) when one rank arrived more than ``threshold_us`` after all the others."""
        if len(self.arrival_us) < 2:
            return None
        order = sorted(range(len(self.arrival_us)), key=lambda r: (-self.arrival_us[r], r))
        gap = self.arrival_us[order[0]] - self.arrival_us[order[1]]
        return (order[0], gap) if gap > threshold_us else None


class DecisionWindow:
    """The last ``window`` samples and the job state they support."""

    def __init__(self, window: int = 5, threshold_us: float = 1000.0, majority: float = 0.6) -> None:
        if window < 1 or threshold_us < 0 or not 0.5 <= majority <= 1.0:
            raise ValueError("window must be at least 1, threshold_us not negative and majority in "
                             f"[0.5, 1]; got {window}, {threshold_us}, {majority}")
        self.threshold_us, self.majority = threshold_us, majority
        self.samples: deque[Sample] = deque(maxlen=window)

    def add(self, arrival_us: Sequence[float], c2c: Sequence[float]) -> None:
        self.samples.append(Sample(tuple(map(float, arrival_us)), tuple(map(float, c2c))))

    def decide(self) -> JobState:
        if not self.samples:
            return JobState()
        c2c = _median([_median(s.c2c) for s in self.samples])
        needed = math.ceil(self.majority * self.samples.maxlen)
        late = [x for x in (s.late(self.threshold_us) for s in self.samples) if x is not None]
        for rank in sorted({r for r, _ in late}):
            gaps = [g for r, g in late if r == rank]
            if len(gaps) >= needed:
                return JobState(rank, _median(gaps), c2c)
        return JobState(None, 0.0, c2c)


def _median(values: Sequence[float]) -> float:
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return 0.0
    mid = len(finite) // 2
    return finite[mid] if len(finite) % 2 else 0.5 * (finite[mid - 1] + finite[mid])
