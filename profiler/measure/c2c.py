"""Compute vs communication inside a training step, from timestamps the hook collects.

Seed 003 explains scaling through the ratio of communication to computation; the simulator's
``c2c`` knob is the inverse view, the compute that runs beside a collective measured in units of
that collective's ideal time (``dynamiccl.simulator.overlap``). Both come from the same three
measurements per step: the step's wall time, the intervals during which gradient buckets were being
communicated, and the moment the last bucket was handed over (backward is finished then; whatever
follows is communication the step waits for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class StepBreakdown:
    step_us: float
    #: Time during which at least one bucket was in flight (union of the intervals).
    comm_us: float
    #: Communication nobody computed beside: from the last bucket's hand-over to the last completion.
    exposed_comm_us: float
    #: Everything else: forward, backward, optimizer (and idle time the hook cannot see).
    compute_us: float
    comm_bytes: int

    @property
    def compute_to_comm(self) -> float:
        """Compute per unit of communication time (our C2C; ``inf`` when nothing communicated)."""
        return self.compute_us / self.comm_us if self.comm_us > 0 else float("inf")

    @property
    def comm_to_compute(self) -> float:
        """Seed 003's C2C (communication per unit of computation)."""
        return self.comm_us / self.compute_us if self.compute_us > 0 else float("inf")

    @property
    def overlap_fraction(self) -> float:
        """Share of the communication hidden behind compute (1 = fully overlapped)."""
        return 1.0 - self.exposed_comm_us / self.comm_us if self.comm_us > 0 else 1.0


def step_breakdown(step_start_us: float, step_end_us: float,
                   comm: Sequence[tuple[float, float, int]]) -> StepBreakdown:
    """``comm``: (handed over, completed, bytes) per bucket, on the same clock as the step."""
    step_us = max(0.0, step_end_us - step_start_us)
    if not comm:
        return StepBreakdown(step_us, 0.0, 0.0, step_us, 0)
    intervals = sorted((max(a, step_start_us), min(e, step_end_us)) for a, e, _ in comm)
    busy, cur_a, cur_e = 0.0, intervals[0][0], intervals[0][1]
    for a, e in intervals[1:]:
        if a > cur_e:
            busy += cur_e - cur_a
            cur_a, cur_e = a, e
        else:
            cur_e = max(cur_e, e)
    busy += max(0.0, cur_e - cur_a)
    last_handover = max(a for a, _, _ in comm)
    last_done = min(max(e for _, e, _ in comm), step_end_us)
    exposed = max(0.0, last_done - last_handover)
    return StepBreakdown(step_us, busy, exposed, max(0.0, step_us - exposed),
                         sum(b for _, _, b in comm))


def simulator_c2c(compute_us: float, topology: Topology, collective: Collective, nbytes: int) -> float:
    """The simulator's ``c2c`` for this much overlapping compute beside this collective.

    The simulator measures compute in units of the collective's bus-bandwidth lower bound on the
    topology (so C2C does not depend on the knobs); this converts a measured compute time to that.
    """
    import numpy as np

    from dynamiccl.simulator.overlap import reference_time_us

    ref = float(reference_time_us(topology, np.array([int(collective)]), np.array([float(nbytes)]))[0])
    return compute_us / ref if ref > 0 else 0.0
