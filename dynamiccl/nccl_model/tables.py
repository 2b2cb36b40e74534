"""NCCL's per-communicator bandwidth and latency tables (``ncclTopoTuneModel``, NCCL 2.30.7
``src/graph/tuning.cc``).

Built once per communicator from the search graphs (``graph.py``), exactly like NCCL does at init:
``bandwidth[coll][algo][proto]`` is the *algorithm* bandwidth in GB/s (0 = unusable) and
``latency[coll][algo][proto]`` the fixed cost in µs. Both are stored as float32, NCCL's ``float``.
What differs between algorithms (their bandwidth refinements, latency formulas, enable rules) is
each algorithm's :class:`~dynamiccl.nccl_model.algorithms.NcclTuning`, named by its entry of
:data:`dynamiccl.system.nccl.ALGORITHMS`; this module runs them in NCCL's order. The per-call work
(size-dependent corrections, filtering, selection) lives in ``select.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamiccl.nccl_model.algorithms import LatencyTerms, nccl_tuning
from dynamiccl.nccl_model.graph import NcclSystem
from dynamiccl.system import nccl
from dynamiccl.system.nccl import (
    ALGORITHM_SPECS,
    PROTOCOLS,
    Algorithm,
    Link,
    nsteps,
)


@dataclass(frozen=True)
class Tables:
    bandwidth: np.ndarray  # float32 [5, 7, 3], GB/s of algorithm bandwidth; 0 = unusable
    #: The same where NCCL_PROTO names the protocols: a protocol set explicitly skips its default
    #: enable rule (LL128's topology checks, :attr:`dynamiccl.system.nccl.ProtocolSpec.enabled`).
    named_bandwidth: np.ndarray  # float32 [5, 7, 3]
    latency: np.ndarray  # float32 [5, 7, 3], µs
    #: Static part of the per-call filter (updateCollCostTable): False where NCCL never offers it.
    offered: np.ndarray  # bool [5, 7, 3]
    max_threads: np.ndarray  # int [7, 3]
    thread_threshold: np.ndarray  # int [7, 3], bytes per thread


#: NCCL's algorithms by id: their entries and NCCL's cost model of each.
SPECS = [ALGORITHM_SPECS[a] for a in nccl.NCCL_ALGORITHMS]
TUNINGS = [nccl_tuning(a) for a in nccl.NCCL_ALGORITHMS]


def _latency(coll: int, algo: int, proto: int, system: NcclSystem) -> float:
    """The terms every algorithm's latency starts from, then its own formula."""
    g = system.graphs[algo]
    hw = system.release.hw_latency_us
    intra_link = Link.NVLINK if g.nvlink_intra else Link.PCI
    # one GPU per node: NCCL takes the network hop of Tree for every algorithm
    inter = hw(Link.NET, Algorithm.TREE if system.ppn == 1 else algo, proto)
    inter += system.latency_inter_us * PROTOCOLS[proto].network_round_trips
    terms = LatencyTerms(
        collective=coll, protocol=proto, base=float(nccl.BASE_LATENCY_US[algo, proto]),
        intra=hw(intra_link, algo, proto), inter=inter,
        hw_link=intra_link if system.nnodes == 1 else Link.NET,
        steps=nsteps(coll, system.nranks), per_node=system.nranks // system.nnodes)
    return TUNINGS[algo].latency(system, terms)


def _thread_tables(system: NcclSystem) -> tuple[np.ndarray, np.ndarray]:
    """maxThreads and the per-thread byte thresholds, with each algorithm's own changes."""
    threads = np.array([tuning.max_threads for tuning in TUNINGS])
    thresholds = np.array([tuning.thread_threshold for tuning in TUNINGS])
    for a, tuning in enumerate(TUNINGS):
        if tuning.adjust_threads is not None:
            tuning.adjust_threads(system, threads[a], thresholds[a])
    return threads, thresholds


def build_tables(system: NcclSystem) -> Tables:
    """NCCL's ``ncclTopoTuneModel`` for one communicator."""
    shape = (nccl.N_COLLECTIVES, nccl.N_ALGORITHMS, nccl.N_PROTOCOLS)
    bandwidth = np.zeros(shape)
    latency = np.zeros(shape)
    offered = np.zeros(shape, dtype=bool)
    proto_enabled = np.array([p.enabled(system) for p in PROTOCOLS])
    if system.nranks > 1:
        for a, (spec, tuning) in enumerate(zip(SPECS, TUNINGS, strict=True)):
            if not tuning.available(system):  # beyond its collectives and protocols: NCCL skips it
                continue
            enabled = tuning.enabled(system)
            for c in sorted(spec.collectives):
                for p in sorted(spec.protocols):
                    offered[c, a, p] = tuning.offered(system, c)
                    latency[c, a, p] = _latency(c, a, p, system)
                    if enabled:
                        bus = tuning.bus_bandwidth(system, system.graphs[a], c, p)
                        bandwidth[c, a, p] = tuning.algorithm_bandwidth(c, bus, system.nranks)
    threads, thresholds = _thread_tables(system)
    named = bandwidth.astype(np.float32)
    return Tables(np.where(proto_enabled, named, np.float32(0)), named, latency.astype(np.float32),
                  offered, threads, thresholds)
