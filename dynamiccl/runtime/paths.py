"""Which implementation each gradient bucket runs, predicted by the simulator for the job's topology.

Rank 0 builds a :class:`PathTable` at every decision: per power-of-two size bin of the buckets the
job has issued, the path the simulator predicts fastest for the job's topology at the agreed state —
NCCL's own pick (:func:`dynamiccl.decisions.nccl_default`), StragglAR at the measured straggler
delay, or the hierarchical ring with seed 000's bandwidth-aware schedule. A step's first bucket is the
one the straggler delays, so it is predicted with the straggler and the others without; both rows use
the agreed compute/comm ratio. The table travels in the decision broadcast, so every rank runs the
same path for the same bucket from the same step on. A bin no decision has seen yet runs NCCL's
all-reduce, which is always correct.

The agreed delay and c2c are rounded to two significant digits before they reach the simulator: the
model's choice does not hinge on the third digit, and a job whose state holds steady then asks the
simulator once per bin instead of at every decision (rank 0 computes while the others wait).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from dynamiccl.decisions import KnobConstraints, best, nccl_default
from dynamiccl.system.knobs import CHUNK_LEVELS, Hierarchy, Schedule
from dynamiccl.system.nccl import Algorithm, Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

#: The implementations a bucket can run; a table stores their index.
PATHS: tuple[str, ...] = ("nccl", "stragglar", "hierarchical")
#: Power-of-two size bins: bin ``b`` holds sizes whose ``bit_length()`` is ``b`` (``SizeBin.of``'s).
BINS = 64


def size_bin(nbytes: int) -> int:
    return min(int(nbytes).bit_length(), BINS - 1)


@dataclass(frozen=True)
class PathOptions:
    """What this job can run besides NCCL's all-reduce (rank 0's configuration decides)."""

    #: StragglAR is enabled and its schedule for this world size moves less than a ring.
    stragglar: bool
    #: Pipelined pieces of the hierarchical path; None: the job has no hierarchical path.
    hierarchical_chunks: int | None


@dataclass(frozen=True)
class PathTable:
    """Per size bin, the index into :data:`PATHS` for a step's first bucket and for the others."""

    first: tuple[int, ...] = (0,) * BINS
    later: tuple[int, ...] = (0,) * BINS

    def path(self, nbytes: int, first: bool) -> str:
        b = size_bin(nbytes)
        return PATHS[self.first[b] if first else self.later[b]]

    def encode(self) -> torch.Tensor:
        """Flag 1 (a table is in use), then both rows, as float64 for the decision broadcast."""
        return torch.tensor([1.0, *self.first, *self.later], dtype=torch.float64)

    @staticmethod
    def encode_none() -> torch.Tensor:
        """The same length with flag 0: rank 0 has no topology, every rank keeps the fixed rules."""
        return torch.zeros(1 + 2 * BINS, dtype=torch.float64)

    @classmethod
    def decode(cls, t: torch.Tensor) -> PathTable | None:
        values = [int(v) for v in t.tolist()]
        if not values[0]:
            return None
        return cls(tuple(values[1:1 + BINS]), tuple(values[1 + BINS:]))


def predict(topology: Topology, sizes: dict[int, int], straggler: bool, delay_us: float, c2c: float,
            options: PathOptions) -> PathTable:
    """The table for the bins in ``sizes`` (bin -> the largest bucket seen in it) at this state."""
    delay = _two_digits(delay_us) if straggler else 0.0
    c2c = _two_digits(c2c)
    first, later = [0] * BINS, [0] * BINS
    for b, nbytes in sizes.items():
        later[b] = fastest(topology, nbytes, 0.0, c2c, options)
        first[b] = fastest(topology, nbytes, delay, c2c, options) if delay > 0 else later[b]
    return PathTable(tuple(first), tuple(later))


def predicted_times(topology: Topology, nbytes: int, delay_us: float, c2c: float,
                    options: PathOptions) -> dict[str, float]:
    """Simulated µs from the first rank's arrival to completion of every path this job can run
    (a path the simulator cannot run on ``topology`` is left out)."""
    late = delay_us > 0
    scenario = Scenario(topology, Collective.ALLREDUCE, nbytes, topology.nranks - 1 if late else None,
                        delay_us, c2c)
    constraints = {"nccl": None}
    if options.stragglar and late:
        constraints["stragglar"] = KnobConstraints(algorithm=Algorithm.STRAGGLAR)
    if options.hierarchical_chunks is not None:
        chunks = min(CHUNK_LEVELS, key=lambda c: abs(c - options.hierarchical_chunks))
        constraints["hierarchical"] = KnobConstraints(hierarchy=Hierarchy.HIERARCHICAL,
                                                      schedule=Schedule.BW_AWARE, chunks=chunks)
    times = {}
    for path, pinned in constraints.items():
        try:
            times[path] = (nccl_default(scenario) if pinned is None else best(scenario, pinned)).time_us
        except ValueError:  # not on this topology (a hierarchical ring on one node, ...)
            continue
    return times


@lru_cache(maxsize=4096)
def fastest(topology: Topology, nbytes: int, delay_us: float, c2c: float, options: PathOptions) -> int:
    """Index into :data:`PATHS` of the predicted fastest path; NCCL's on ties or without a model."""
    times = predicted_times(topology, nbytes, delay_us, c2c, options)
    if not times:
        return 0
    fastest_path = min(PATHS, key=lambda p: times.get(p, math.inf))  # PATHS order breaks ties
    return PATHS.index(fastest_path)


def _two_digits(x: float) -> float:
    return float(f"{x:.2g}") if x > 0 and math.isfinite(x) else 0.0


def fit_topology(topology: Topology, world: int, ranks_per_node: int | None) -> Topology:
    """``topology`` sized to the job: ``world`` ranks in nodes of ``ranks_per_node`` (default: the
    topology's own node size, or all ranks in one node when the job is smaller than a node)."""
    if topology.nranks == world and ranks_per_node in (None, topology.gpus_per_node):
        return topology
    per_node = ranks_per_node or min(topology.gpus_per_node, world)
    if world % per_node:
        raise ValueError(f"the job's {world} ranks do not fill nodes of {per_node} ranks of "
                         f"{topology.name}; set RuntimeConfig.ranks_per_node to the ranks each node runs")
    return topology.resized(nodes=world // per_node, gpus_per_node=per_node)
