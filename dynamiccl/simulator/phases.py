"""The common shape of every algorithm's cost: a pipeline of affine phases.

Every algorithm is described per configuration as phases ``d_i(S) = lat_i + k_i · S`` (µs, with
``S`` the nccl-tests size in bytes), each running on one resource (a tier's links). A collective
split into ``c`` active chunks pipelines them: each chunk pays ``lat_i + k_i S / c`` per phase, and
the pipeline is bounded by its busiest resource:

    T = Σ_i d_i(S/c) + (c − 1) · max_r Σ_{i on r} d_i(S/c)

With one chunk this is the plain sum. Phases that share a resource (the reduce-scatter and the
all-gather of a hierarchical ring both use the node's links) are summed on it, so no link is ever
driven past its bandwidth — seed 000's "8× linear" active-chunk gain cannot appear.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dynamiccl.system.nccl import Collective
    from dynamiccl.system.topology import Topology

US_PER_BYTE_PER_GBPS = 1e-3  # 1 GB/s moves 1e3 bytes per µs


@dataclass
class Phase:
    lat_us: np.ndarray
    us_per_byte: np.ndarray
    resource: np.ndarray | int = 0


@dataclass
class Cost:
    """One algorithm's cost for a group of configurations (arrays of the group's length)."""

    phases: list[Phase]
    base_us: np.ndarray
    #: StragglAR's precondition among the non-straggler ranks (overlaps the straggler's delay).
    pre: Phase | None = None
    chunks: np.ndarray | None = field(default=None)


#: An algorithm's physics, as its entry in ``dynamiccl.system.nccl.ALGORITHMS`` names it (``cost_model``):
#: (topology, collective, protocol [A], channels [A]) -> its Cost for those configurations.
CostModel = Callable[["Topology", "Collective", np.ndarray, np.ndarray], Cost]


def transfer(nbytes_factor: np.ndarray | float, rate_gbps: np.ndarray) -> np.ndarray:
    """µs per byte of the nccl-tests size for moving ``nbytes_factor · S`` at ``rate_gbps``."""
    return np.asarray(nbytes_factor, dtype=np.float64) * US_PER_BYTE_PER_GBPS / rate_gbps


def single(lat_us: np.ndarray, us_per_byte: np.ndarray, base_us: np.ndarray) -> Cost:
    """An unpipelined algorithm: one affine phase."""
    return Cost([Phase(np.asarray(lat_us, float), np.asarray(us_per_byte, float))],
                np.asarray(base_us, float))
