"""NCCL's per-communicator bandwidth and latency tables (``ncclTopoTuneModel``, nccl_abi.md §3.4-3.5).

Built once per communicator from the search graphs (``graph.py``), exactly like NCCL does at init:
``bandwidth[coll][algo][proto]`` is the *algorithm* bandwidth in GB/s (0 = unusable) and
``latency[coll][algo][proto]`` the fixed cost in µs. Both are stored as float32, NCCL's ``float``.
The per-call work (size-dependent corrections, filtering, selection) lives in ``select.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamiccl import nccl
from dynamiccl.nccl import CAPABILITIES, Algorithm, Collective, Link, Protocol
from dynamiccl.nccl_model import constants as K
from dynamiccl.nccl_model.graph import NcclSystem

_AG_RS = (Collective.ALLGATHER, Collective.REDUCESCATTER)


@dataclass(frozen=True)
class Tables:
    bandwidth: np.ndarray  # float32 [5, 7, 3], GB/s of algorithm bandwidth; 0 = unusable
    latency: np.ndarray  # float32 [5, 7, 3], µs
    #: Static part of the per-call filter (§3.6): False where NCCL never offers the entry.
    offered: np.ndarray  # bool [5, 7, 3]
    max_threads: np.ndarray  # int [7, 3]
    thread_threshold: np.ndarray  # int [7, 3], bytes per thread


def nsteps(coll: int, nranks: int) -> int:
    """Ring steps (§3.4): 2(n-1) for AllReduce, n-1 for AllGather/ReduceScatter, n otherwise."""
    if coll == Collective.ALLREDUCE:
        return 2 * (nranks - 1)
    return nranks - 1 if coll in _AG_RS else nranks


def log2i(n: int) -> int:
    """NCCL's integer log2 (floor); the reference writes log2(nNodes), equal for powers of two."""
    return n.bit_length() - 1


def _combination_exists(coll: int, algo: int, proto: int, system: NcclSystem) -> bool:
    """§3.4: combinations NCCL skips entirely (their table entries stay unusable)."""
    capability = CAPABILITIES[Algorithm(algo)]
    if coll not in capability.collectives or proto not in capability.protocols:
        return False
    return algo != Algorithm.PAT or system.pat_enabled


def _bus_bandwidth(coll: int, algo: int, proto: int, system: NcclSystem) -> float:
    """Bus bandwidth of one combination, with every §3.4 refinement (steps 1-3)."""
    g = system.graphs[algo]
    nnodes, ppn, cc = system.nnodes, system.ppn, system.compcap
    scale = min(nnodes, 3) - 1
    collnet = algo in (Algorithm.COLLNET_DIRECT, Algorithm.COLLNET_CHAIN)
    bw = g.bw_intra if nnodes <= 2 or collnet else g.bw_inter
    if algo in (Algorithm.NVLS, Algorithm.NVLS_TREE):
        if g.n_channels < 2:
            return 0.0
        intra = g.bw_intra * nccl.NVLS_EFFICIENCY[cc] * (g.n_channels - 1) / g.n_channels
        intra *= 2.0 if coll == Collective.ALLREDUCE else (ppn - 1) / ppn
        inter = g.bw_inter * (2.0 if algo == Algorithm.NVLS_TREE and nnodes <= 2 else 1.0)
        cap = nccl.PER_CH_MAX_NVLS_TREE_BW[cc, scale] if algo == Algorithm.NVLS_TREE else math.inf
        bw = min(intra, inter, cap)
    bus = g.n_channels * bw
    nch = g.n_channels
    ll_max = nccl.LL_MAX_BW[cc if nnodes == 1 else (1 if system.cpu == "amd" else 0), scale]
    if algo == Algorithm.RING and proto == Protocol.LL:
        bus = min(ll_max, K.RING_LL_BUS_FRACTION * bus)
    elif algo == Algorithm.RING and proto == Protocol.LL128:
        bus = min(K.LL128_BUS_FRACTION * bus, nch * nccl.PER_CH_MAX_RING_LL128_BW[cc, scale])
    if algo == Algorithm.TREE and coll == Collective.ALLREDUCE:
        bus = min(K.LL128_BUS_FRACTION * bus, nch * nccl.PER_CH_MAX_TREE_BW[cc, scale])
        if proto == Protocol.LL:
            bus = min(bus / K.TREE_LL_DIVISOR, ll_max)
        elif proto == Protocol.LL128:
            frac = K.TREE_LL128_FRACTION_1NODE if nnodes == 1 else K.TREE_LL128_FRACTION_MULTI
            bus = min(bus * frac, nch * nccl.PER_CH_MAX_TREE_LL128_BW[cc, scale])
        if g.tree_pattern:
            bus *= K.TREE_PATTERN_FACTOR
    if algo == Algorithm.PAT:
        bus *= nccl.PAT_FACTOR
    if algo == Algorithm.COLLNET_DIRECT:
        if coll in _AG_RS:
            bus = ppn * min(g.bw_intra, K.COLLNET_DIRECT_INTER_FACTOR * g.bw_inter)
        else:
            f = ppn / nch
            f -= (f - 1) / 2
            bus /= f
            if system.sm >= 90:
                bus *= nccl.COLLNET_DIRECT_HOPPER_FACTOR
    if algo in (Algorithm.NVLS, Algorithm.COLLNET_DIRECT) and coll in _AG_RS and nnodes > 1:
        # Needs a CollNet plugin with iallgather/ireducescatter (assumed present with CollNet)
        # and at most collNetHeadsNum local ranks.
        if not system.collnet_support or ppn > system.collnet_heads:
            return 0.0
    return bus


def _algorithm_bandwidth(coll: int, algo: int, bus: float, nranks: int) -> float:
    """§3.4 step 4: bus -> algorithm bandwidth (kept as bus for non-ring AllGather/ReduceScatter)."""
    if algo != Algorithm.RING and coll in _AG_RS:
        return bus
    if algo in (Algorithm.RING, Algorithm.NVLS, Algorithm.NVLS_TREE):
        return bus * nranks / nsteps(coll, nranks)
    return bus * K.TREE_ALG_FACTOR


def _enabled(coll: int, algo: int, proto: int, system: NcclSystem) -> bool:
    """§3.4 step 5 / §3.7: protocol and algorithm enable rules (without NCCL_ALGO/NCCL_PROTO)."""
    if proto == Protocol.LL128 and not system.ll128_enabled:
        return False
    if algo == Algorithm.NVLS_TREE and system.nnodes == 1:
        return False
    if not system.collnet_support and (
        algo in (Algorithm.COLLNET_DIRECT, Algorithm.COLLNET_CHAIN)
        or (algo == Algorithm.NVLS and system.nnodes > 1)
    ):
        return False
    return not (algo == Algorithm.COLLNET_DIRECT and not system.collnet_direct_nvswitch)


def _latency(coll: int, algo: int, proto: int, system: NcclSystem) -> float:
    """§3.5, one combination."""
    g = system.graphs[algo]
    nranks, nnodes, ppn = system.nranks, system.nnodes, system.ppn
    hw = nccl.HW_LATENCY_US
    intra_link = Link.NVLINK if g.nvlink_intra else Link.PCI
    hw_link = intra_link if nnodes == 1 else Link.NET
    lat = float(nccl.BASE_LATENCY_US[algo, proto])
    intra_lat = float(hw[intra_link, algo, proto])
    inter_lat = float(hw[Link.NET, Algorithm.TREE if ppn == 1 else algo, proto])
    inter_lat += system.latency_inter_us * (2 if proto == Protocol.SIMPLE else 1)
    steps = nsteps(coll, nranks)
    if algo == Algorithm.RING and coll in (Collective.BROADCAST, Collective.REDUCE):
        if system.same_channels:
            return lat + float(hw[hw_link, Algorithm.RING, proto])
        per_step = hw[hw_link, Algorithm.TREE if proto == Protocol.SIMPLE else Algorithm.RING, proto]
        return lat + steps * float(per_step)
    if algo == Algorithm.RING:
        overhead = 0.0
        if nnodes > 1:
            overhead = K.NET_OVERHEAD_US[system.cpu]
            overhead *= K.NET_OVERHEAD_SIMPLE_FACTOR if proto == Protocol.SIMPLE else 1.0
        intra_lat = max(intra_lat, overhead)
        inter_steps = 0 if nnodes == 1 else (2 * (nnodes - 1) if coll == Collective.ALLREDUCE else nnodes - 1)
        return lat + (steps - inter_steps) * intra_lat + inter_steps * inter_lat
    per_node = nranks // nnodes
    if algo == Algorithm.TREE:
        return lat + 2 * ((per_node - 1) * intra_lat + log2i(nnodes) * inter_lat)
    if algo == Algorithm.COLLNET_DIRECT:
        arity = K.COLLNET_DIRECT_ARITY_LATENCY_US * (per_node - 1)
        return lat + 2 * (min(1, per_node - 1) * intra_lat + arity) + inter_lat
    if algo == Algorithm.COLLNET_CHAIN:
        return lat + 2 * (per_node - 1) * intra_lat + inter_lat
    if algo == Algorithm.NVLS:
        return intra_lat + (inter_lat if nnodes > 1 else 0.0)
    if algo == Algorithm.NVLS_TREE:
        return lat + intra_lat + 2 * log2i(nnodes) * inter_lat
    # PAT
    return (lat + log2i(nnodes) * inter_lat / K.PAT_LATENCY_INTER_DIVISOR
            + K.PAT_LATENCY_PER_RANK_US * nranks)


def _offered(coll: int, algo: int, system: NcclSystem) -> bool:
    """§3.6 for a float32 Sum (supported by NVLS and CollNet; PAT's excluded ops never occur)."""
    if algo in (Algorithm.COLLNET_DIRECT, Algorithm.COLLNET_CHAIN) and not system.collnet_support:
        return False
    if algo == Algorithm.COLLNET_DIRECT and system.ppn > K.COLLNET_DIRECT_MAX_HEADS:
        return False
    if algo in (Algorithm.NVLS, Algorithm.NVLS_TREE):
        if not system.nvls_support and coll != Collective.ALLGATHER:
            return False
        if coll != Collective.ALLREDUCE and system.ppn > K.NVLS_MAX_ARITY:
            return False
    return not (algo == Algorithm.NVLS and system.nnodes > 1 and not system.collnet_support)


def _thread_tables(system: NcclSystem) -> tuple[np.ndarray, np.ndarray]:
    """§3.8: maxThreads (Ring/Simple slows to 256 threads on a ring of <= 12 GB/s in total)."""
    threads = K.MAX_THREADS.copy()
    ring = system.graphs[Algorithm.RING]
    if ring.bw_intra * ring.n_channels <= K.PCI_BW:
        threads[Algorithm.RING, Protocol.SIMPLE] = K.RING_SIMPLE_THREADS_SLOW
    thresholds = K.THREAD_THRESHOLD.copy()
    thresholds[Algorithm.RING, Protocol.LL] *= system.nranks
    return threads, thresholds


def build_tables(system: NcclSystem) -> Tables:
    """NCCL's ``ncclTopoTuneModel`` for one communicator."""
    shape = (nccl.N_COLLECTIVES, nccl.N_ALGORITHMS, nccl.N_PROTOCOLS)
    bandwidth = np.zeros(shape)
    latency = np.zeros(shape)
    offered = np.zeros(shape, dtype=bool)
    if system.nranks > 1:
        for c in range(nccl.N_COLLECTIVES):
            for a in range(nccl.N_ALGORITHMS):
                for p in range(nccl.N_PROTOCOLS):
                    if not _combination_exists(c, a, p, system):
                        continue
                    offered[c, a, p] = _offered(c, a, system)
                    latency[c, a, p] = _latency(c, a, p, system)
                    if _enabled(c, a, p, system):
                        bus = _bus_bandwidth(c, a, p, system)
                        bandwidth[c, a, p] = _algorithm_bandwidth(c, a, bus, system.nranks)
    threads, thresholds = _thread_tables(system)
    return Tables(bandwidth.astype(np.float32), latency.astype(np.float32), offered, threads,
                  thresholds)
