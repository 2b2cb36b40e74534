"""Compute overlap (seed 003's C2C) and the straggler: what happens around the algorithm.

Straggler: one rank arrives ``d`` µs after the others. Bulk-synchronous algorithms (everything NCCL
has) cannot start before the last rank arrives: time from the first arrival = d + T_alg. StragglAR
runs its precondition among the punctual ranks during d (seed 004): max(d, T_pre) + T_post.

Compute overlap: a compute phase of length T_comp = c2c · T_ref runs beside the collective, where
T_ref is a configuration-independent reference time of this collective on this system (its bus
bandwidth lower bound, ``reference_time_us``), so C2C means the same for every choice of knobs.
While they overlap:

* the compute loses the collective's SMs (one CTA per channel): it runs at (SMs − ch)/SMs of its
  speed, so it is stretched by SMs/(SMs − ch) and finishes ``overlap · ch/SMs`` later — time the
  collective *steals*;
* the collective competes for HBM bandwidth and L2 with the compute kernels and runs
  ``COLLECTIVE_SLOWDOWN`` times slower. AutoCCL (NSDI'25, published_points ``autoccl_micro``)
  measured up to 1.8× from tuning under such interference; our fixed 1.3× keeps the modelled gap
  below that bound (an assumption, not a fit).

The reported time is the collective's own time plus the compute time it steals, so many channels
pay off when C2C is low and cost when C2C is high: the best channel count depends on C2C.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator.fabric import busbw_bound_gbps
from dynamiccl.simulator.phases import US_PER_BYTE_PER_GBPS
from dynamiccl.system.nccl import bus_factor
from dynamiccl.system.topology import Topology

COLLECTIVE_SLOWDOWN = 1.3


def reference_time_us(topology: Topology, collective: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Bus-bandwidth lower bound of each state's collective: factor · S / B_bus."""
    n = topology.nranks
    per_byte = np.array([bus_factor(c, n) * US_PER_BYTE_PER_GBPS / busbw_bound_gbps(topology, c)
                         for c in range(5)])
    return per_byte[collective] * nbytes


def stolen_and_slowed_us(t_coll: np.ndarray, t_comp: np.ndarray, channels: np.ndarray,
                         sms: int) -> np.ndarray:
    """Time added to the collective when ``t_comp`` µs of compute overlap it.

    ``t_coll`` [B, A] (inf for invalid pairs), ``t_comp`` [B, 1], ``channels`` [A]. The overlap
    lasts until the first of the two ends: the stretched compute or the slowed collective. During
    it the collective progresses at 1/COLLECTIVE_SLOWDOWN (adding overlap · (1 − 1/slowdown)) and
    the compute loses ch/SMs of the GPU (stealing overlap · ch/SMs).
    """
    ch = np.minimum(channels, sms - 1).astype(np.float64)
    overlap = np.minimum(t_comp * (sms / (sms - ch)), t_coll * COLLECTIVE_SLOWDOWN)
    return overlap * ((1.0 - 1.0 / COLLECTIVE_SLOWDOWN) + ch / sms)


def with_straggler(t_alg: np.ndarray, delay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time from first arrival, time from last arrival) of a bulk-synchronous algorithm."""
    return t_alg + delay, t_alg


def stragglar_with_straggler(t_pre: np.ndarray, t_post: np.ndarray,
                             delay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    total = np.maximum(delay, t_pre) + t_post
    return total, total - delay
