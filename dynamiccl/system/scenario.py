"""A scenario: the state the tuner decides in (which collective, how big, on what system, under what
conditions). It is what the simulator, NCCL's default model, the environment and the profiler share."""

from __future__ import annotations

from dataclasses import dataclass

from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class Scenario:
    topology: Topology
    collective: Collective
    #: nccl-tests' size column: for allgather/reducescatter the whole gathered/scattered buffer
    #: (what NCCL's tuner also sees), for the others the per-rank buffer.
    nbytes: int
    #: Rank that arrives late at every collective (None: nobody is persistently late).
    straggler_rank: int | None = None
    straggler_delay_us: float = 0.0
    #: Compute-to-communication ratio of the overlapped compute (seed 003's C2C); 0 = no overlap.
    c2c: float = 0.0

    def __post_init__(self) -> None:
        if self.nbytes < 0:
            raise ValueError(f"nbytes must not be negative, got {self.nbytes}")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.topology.nranks:
            raise ValueError(
                f"straggler rank {self.straggler_rank} is outside 0..{self.topology.nranks - 1}"
            )
        if self.straggler_delay_us < 0 or self.c2c < 0:
            raise ValueError("straggler delay and c2c must not be negative")

    @property
    def has_straggler(self) -> bool:
        return self.straggler_rank is not None and self.straggler_delay_us > 0

    def __deepcopy__(self, memo: dict) -> Scenario:
        # Immutable all the way down; SB3's DummyVecEnv deep-copies every step's info dict.
        return self
