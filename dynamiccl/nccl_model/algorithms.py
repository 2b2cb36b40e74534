"""NCCL's own cost model of each of its algorithms (NCCL 2.30.7: ``src/graph/tuning.cc``
``ncclTopoTuneModel`` for the per-communicator tables, ``src/enqueue.cc`` for the per-call refinements
and channel counts): bus and algorithm bandwidth, latency, thread rows, enable rules, per-call
refinements. Each algorithm's :class:`NcclTuning` is named by its entry of
:data:`dynamiccl.system.nccl.ALGORITHMS` (``nccl_cost_model``, ``module:name``), as its simulator cost
model is, and :func:`nccl_tuning` loads it; ``tables.py`` and ``select.py`` run them in NCCL's order.
The numbers are NCCL's; NCCL's constants shared by every algorithm are in ``constants.py``, those the
simulator reads too in :mod:`dynamiccl.system.nccl`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.system.nccl import (
    ALGORITHM_SPECS,
    COLLNET_DIRECT_HOPPER_FACTOR,
    COLLNET_DIRECT_MAX_HEADS,
    HW_LATENCY_US,
    LL_MAX_BW,
    NVLS_EFFICIENCY,
    NVLS_MAX_ARITY,
    PAT_FACTOR,
    PCI_BW,
    PER_CH_MAX_TREE_BW,
    PER_CH_MAX_TREE_LL128_BW,
    Algorithm,
    Collective,
    Protocol,
    log2i,
    nsteps,
    scale_index,
)

if TYPE_CHECKING:
    from dynamiccl.nccl_model.graph import Graph, NcclSystem

_AG_RS = frozenset({Collective.ALLGATHER, Collective.REDUCESCATTER})


def _always(*_: object) -> bool:
    return True

#: Bus -> algorithm bandwidth for Tree and CollNet (AllReduce: half the bus bandwidth).
TREE_ALG_FACTOR = 0.5
RING_LL_BUS_FRACTION = 0.5
LL128_BUS_FRACTION = 0.92  # Ring LL128 and Tree (all protocols) efficiency
TREE_LL_DIVISOR = 3.8
TREE_LL128_FRACTION_1NODE = 7.0 / 9.0
TREE_LL128_FRACTION_MULTI = 120.0 / 128.0
TREE_PATTERN_FACTOR = 0.85  # tree graph with all NIC traffic through one GPU
COLLNET_DIRECT_INTER_FACTOR = 0.9  # AllGather/ReduceScatter: ppn * min(bwIntra, 0.9 bwInter)
#: Per-step network overhead of inter-node rings, µs, by host CPU; x3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0, "other": 1.0}
NET_OVERHEAD_SIMPLE_FACTOR = 3.0
COLLNET_DIRECT_ARITY_LATENCY_US = 0.4  # per extra local rank
PAT_LATENCY_INTER_DIVISOR = 3.5
PAT_LATENCY_PER_RANK_US = 2.8
#: treeCorrectionFactor [proto][log2(nBytes/64)], index 0 = 64 B … 23 = 256 MiB.
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
     1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
     .9, 1.0, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
     .8, .9, .9, .9],
])
TREE_CORRECTION_MAX_INDEX = 22  # Tree AllReduce uses indices 0…22
NVLS_TREE_CORRECTION_MAX_INDEX = 23  # NVLSTree AllReduce on Blackwell + x86 uses 0…23
#: Ring/Simple multi-node AllReduce "plateau" latency factor: below sm80 / sm80 and up, where
#: nBytes/(nChannels*nRanks) >= 64.
RING_PLATEAU_FACTOR_PRE_AMPERE = 1.9
RING_PLATEAU_FACTOR = 1.4
RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK = 64
#: Ring/Simple slows to this many threads on a ring of at most PCI_BW in total.
RING_SIMPLE_THREADS_SLOW = 256
#: CollNetDirect's stepped channel reduction starts from this many channels per step.
COLLNET_DIRECT_NC_SWITCH = 16


@dataclass(frozen=True)
class LatencyTerms:
    """What NCCL's latency formula of every algorithm starts from, for one (collective, protocol)."""

    collective: int
    protocol: int
    #: baseLatencies[algo][proto], the intra-node hop (hwLatencies of the graph's link class) and the
    #: inter-node hop (hwLatencies[NET], plus the net's own latency per round trip), µs.
    base: float
    intra: float
    inter: float
    #: The link class of a ring step: the intra one on a single node, NET otherwise.
    hw_link: int
    steps: int
    per_node: int


@dataclass(frozen=True)
class Calls:
    """A batch of calls as NCCL's per-call refinements read them (arrays of one length)."""

    collectives: np.ndarray
    nbytes: np.ndarray
    #: floor(log2(nBytes >> 6)), -1 below 64 B: the treeCorrectionFactor index.
    size_index: np.ndarray
    #: The communicator's channel count (or the one NCCL_MIN/MAX_NCHANNELS pin).
    comm_channels: int


@dataclass(frozen=True)
class NcclTuning:
    """How NCCL 2.30.7's default selection treats one algorithm (``dynamiccl.nccl_model`` runs it).

    ``system`` is NCCL's view of the communicator (``nccl_model.graph.NcclSystem``), ``graph`` the
    algorithm's search graph (``Graph``: channels, bwIntra, bwInter).
    """

    #: (system, graph, collective, protocol) -> bus bandwidth, GB/s (0: unusable).
    bus_bandwidth: Callable[[NcclSystem, Graph, int, int], float]
    #: (collective, bus bandwidth, nRanks) -> the algorithm bandwidth the cost table divides by.
    algorithm_bandwidth: Callable[[int, float, int], float]
    #: (system, LatencyTerms) -> the fixed cost, µs.
    latency: Callable[[NcclSystem, LatencyTerms], float]
    #: maxThreads and the bytes-per-thread threshold per protocol (LL, LL128, Simple); 0 threads =
    #: the combination never runs.
    max_threads: tuple[int, ...]
    thread_threshold: tuple[int, ...]
    #: (system) -> whether NCCL builds its table entries at all (beyond collectives and protocols).
    available: Callable[[NcclSystem], bool] = _always
    #: (system) -> whether NCCL enables it by default (NCCL_ALGO unset).
    enabled: Callable[[NcclSystem], bool] = _always
    #: (system, collective) -> whether updateCollCostTable offers it for a float Sum call.
    offered: Callable[[NcclSystem, int], bool] = _always
    #: (system, calls, bw [B, proto], lat [B, proto]): per-call refinements, in place (None: the
    #: table's times stand).
    refine: Callable[[NcclSystem, Calls, np.ndarray, np.ndarray], None] | None = None
    #: Its latency counts once per operation (Ring), not once per batch of eight.
    latency_per_operation: bool = False
    #: (system, threads [proto], thresholds [proto]): the communicator's changes, in place (None:
    #: the rows stand).
    adjust_threads: Callable[[NcclSystem, np.ndarray, np.ndarray], None] | None = None
    #: (system, comm channels, nBytes [B], threads [B], thresholds [B]) -> channels [B]; None: the
    #: per-size rule (drop channels while nBytes < nc * nThreads * threshold).
    channels: Callable[[NcclSystem, int, np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None


def _ll_max(system: NcclSystem) -> float:
    row = system.compcap if system.nnodes == 1 else (1 if system.cpu == "amd" else 0)
    return LL_MAX_BW[row, scale_index(system.nnodes)]


def _flat_bandwidth(system: NcclSystem, graph: Graph) -> float:
    """Channels x the per-channel speed: bwIntra up to two nodes, bwInter beyond."""
    return graph.n_channels * (graph.bw_intra if system.nnodes <= 2 else graph.bw_inter)


def _ring_algbw(coll: int, bus: float, nranks: int) -> float:
    return bus * nranks / nsteps(coll, nranks)


def _nvls_algbw(coll: int, bus: float, nranks: int) -> float:
    return bus if coll in _AG_RS else _ring_algbw(coll, bus, nranks)


def _tree_algbw(coll: int, bus: float, nranks: int) -> float:
    return bus if coll in _AG_RS else bus * TREE_ALG_FACTOR


def _correct_by_size(calls: Calls, bw: np.ndarray, max_index: int) -> None:
    """AllReduce bandwidth x treeCorrectionFactor where the size index is 0..max_index."""
    index = calls.size_index
    rows = (calls.collectives == Collective.ALLREDUCE) & (index >= 0) & (index <= max_index)
    factors = TREE_CORRECTION[:, np.clip(index, 0, max_index)].T.astype(np.float32)  # [B, 3]
    bw[rows] *= factors[rows]


def _collnet_multi_node_ag_rs(system: NcclSystem, coll: int) -> bool:
    """AllGather/ReduceScatter across nodes needs a CollNet plugin with iallgather/ireducescatter
    (assumed present with CollNet) and at most collNetHeadsNum local ranks."""
    return not (coll in _AG_RS and system.nnodes > 1
                and (not system.collnet_support or system.ppn > system.collnet_heads))


# Ring -------------------------------------------------------------------------------------------

def _ring_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    bus = _flat_bandwidth(system, graph)
    if proto == Protocol.LL:
        return min(_ll_max(system), RING_LL_BUS_FRACTION * bus)
    if proto == Protocol.LL128:
        cap = system.release.ring_ll128_bw(system.compcap, scale_index(system.nnodes))
        return min(LL128_BUS_FRACTION * bus, graph.n_channels * cap)
    return bus


def _ring_latency(system: NcclSystem, t: LatencyTerms) -> float:
    if t.collective in (Collective.BROADCAST, Collective.REDUCE):
        if system.same_channels:
            return t.base + float(HW_LATENCY_US[t.hw_link, Algorithm.RING, t.protocol])
        per_step = HW_LATENCY_US[t.hw_link, Algorithm.TREE if t.protocol == Protocol.SIMPLE
                                 else Algorithm.RING, t.protocol]
        return t.base + t.steps * float(per_step)
    overhead = 0.0
    if system.nnodes > 1:
        overhead = NET_OVERHEAD_US[system.cpu]
        overhead *= NET_OVERHEAD_SIMPLE_FACTOR if t.protocol == Protocol.SIMPLE else 1.0
    intra = max(t.intra, overhead)
    nnodes = system.nnodes
    inter_steps = 0 if nnodes == 1 else (2 * (nnodes - 1) if t.collective == Collective.ALLREDUCE
                                         else nnodes - 1)
    return t.base + (t.steps - inter_steps) * intra + inter_steps * t.inter


def _ring_plateau(system: NcclSystem, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    """Multi-node Ring/Simple AllReduce latency x 1.4 (x 1.9 before sm80) once every channel and
    rank moves at least 64 bytes."""
    if system.nnodes > 1:
        per = calls.nbytes // (calls.comm_channels * system.nranks)
        plateau = ((calls.collectives == Collective.ALLREDUCE)
                   & (per >= RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK))
        factor = RING_PLATEAU_FACTOR if system.sm >= 80 else RING_PLATEAU_FACTOR_PRE_AMPERE
        lat[plateau, Protocol.SIMPLE] *= np.float32(factor)


def _ring_threads(system: NcclSystem, threads: np.ndarray, thresholds: np.ndarray) -> None:
    """Ring/Simple slows to 256 threads on a ring of at most PCI_BW in total; Ring/LL's threshold
    scales with the ranks."""
    ring = system.graphs[Algorithm.RING]
    if ring.bw_intra * ring.n_channels <= PCI_BW:
        threads[Protocol.SIMPLE] = RING_SIMPLE_THREADS_SLOW
    thresholds[Protocol.LL] *= system.nranks


# Tree -------------------------------------------------------------------------------------------

def _tree_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    bus = _flat_bandwidth(system, graph)
    if coll != Collective.ALLREDUCE:
        return bus
    cc, scale, nch = system.compcap, scale_index(system.nnodes), graph.n_channels
    bus = min(LL128_BUS_FRACTION * bus, nch * PER_CH_MAX_TREE_BW[cc, scale])
    if proto == Protocol.LL:
        bus = min(bus / TREE_LL_DIVISOR, _ll_max(system))
    elif proto == Protocol.LL128:
        frac = TREE_LL128_FRACTION_1NODE if system.nnodes == 1 else TREE_LL128_FRACTION_MULTI
        bus = min(bus * frac, nch * PER_CH_MAX_TREE_LL128_BW[cc, scale])
    if graph.tree_pattern:
        bus *= TREE_PATTERN_FACTOR
    return bus


def _tree_latency(system: NcclSystem, t: LatencyTerms) -> float:
    return t.base + 2 * ((t.per_node - 1) * t.intra + log2i(system.nnodes) * t.inter)


def _tree_correction(system: NcclSystem, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    _correct_by_size(calls, bw, TREE_CORRECTION_MAX_INDEX)


# CollNet ----------------------------------------------------------------------------------------

def _collnet_direct_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    if coll in _AG_RS:
        bus = system.ppn * min(graph.bw_intra, COLLNET_DIRECT_INTER_FACTOR * graph.bw_inter)
    else:
        bus = graph.n_channels * graph.bw_intra
        f = system.ppn / graph.n_channels
        f -= (f - 1) / 2
        bus /= f
        if system.sm >= 90:
            bus *= COLLNET_DIRECT_HOPPER_FACTOR
    return bus if _collnet_multi_node_ag_rs(system, coll) else 0.0


def _collnet_direct_latency(system: NcclSystem, t: LatencyTerms) -> float:
    arity = COLLNET_DIRECT_ARITY_LATENCY_US * (t.per_node - 1)
    return t.base + 2 * (min(1, t.per_node - 1) * t.intra + arity) + t.inter


def _collnet_direct_channels(system: NcclSystem, comm: int, nbytes: np.ndarray, threads: np.ndarray,
                             thresholds: np.ndarray) -> np.ndarray:
    """CollNetDirect's stepped reduction (src/enqueue.cc @2.30.7, restated): in steps of 16, 8, 4,
    2, 1 channels, drop one channel at a time while the size is below nc x threads x heads x
    threshold, halving the threshold when passing 1.5 steps above the step size."""
    out = np.empty(len(nbytes), dtype=np.int64)
    for i, (size, nthreads, threshold) in enumerate(zip(nbytes, threads, thresholds, strict=True)):
        nc, threshold, step, too_small = comm, int(threshold), COLLNET_DIRECT_NC_SWITCH, True
        while step >= 1 and too_small:
            while True:
                too_small = int(size) < nc * int(nthreads) * system.collnet_heads * threshold
                if not (too_small and nc > step):
                    break
                if nc == step + step // 2:
                    threshold //= 2
                nc -= 1
            step //= 2
        out[i] = nc
    return out


def _collnet_chain_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    return graph.n_channels * graph.bw_intra


def _collnet_chain_latency(system: NcclSystem, t: LatencyTerms) -> float:
    return t.base + 2 * (t.per_node - 1) * t.intra + t.inter


# NVLS -------------------------------------------------------------------------------------------

def _nvls_bus(system: NcclSystem, graph: Graph, coll: int, tree: bool) -> float:
    nch, cc = graph.n_channels, system.compcap
    if nch < 2:
        return 0.0
    intra = graph.bw_intra * NVLS_EFFICIENCY[cc] * (nch - 1) / nch
    intra *= 2.0 if coll == Collective.ALLREDUCE else (system.ppn - 1) / system.ppn
    inter = graph.bw_inter * (2.0 if tree and system.nnodes <= 2 else 1.0)
    cap = system.release.nvls_tree_bw(cc, scale_index(system.nnodes)) if tree else math.inf
    return nch * min(intra, inter, cap)


def _nvls_only_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    return _nvls_bus(system, graph, coll, tree=False) if _collnet_multi_node_ag_rs(system, coll) else 0.0


def _nvls_tree_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    return _nvls_bus(system, graph, coll, tree=True)


def _nvls_offered(system: NcclSystem, coll: int) -> bool:
    """NVLS support (or AllGather), and AllReduce or at most 32 local ranks."""
    return ((system.nvls_support or coll == Collective.ALLGATHER)
            and (coll == Collective.ALLREDUCE or system.ppn <= NVLS_MAX_ARITY))


def _nvls_channels(system: NcclSystem, comm: int, nbytes: np.ndarray, threads: np.ndarray,
                   thresholds: np.ndarray) -> np.ndarray:
    nvls = system.nvls_channels
    return np.full(len(nbytes), min(nvls, comm) if system.nnodes > 1 else nvls, dtype=np.int64)


def _nvls_tree_channels(system: NcclSystem, comm: int, nbytes: np.ndarray, threads: np.ndarray,
                        thresholds: np.ndarray) -> np.ndarray:
    return np.full(len(nbytes), system.nvls_channels, dtype=np.int64)


def _nvls_tree_correction(system: NcclSystem, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    """On Blackwell with an x86 host NVLSTree AllReduce takes treeCorrectionFactor too."""
    if system.sm >= 100 and system.cpu in ("intel", "amd") and system.release.nvls_tree_correction_blackwell:
        _correct_by_size(calls, bw, NVLS_TREE_CORRECTION_MAX_INDEX)


# PAT --------------------------------------------------------------------------------------------

def _pat_bus(system: NcclSystem, graph: Graph, coll: int, proto: int) -> float:
    return _flat_bandwidth(system, graph) * PAT_FACTOR


def _pat_latency(system: NcclSystem, t: LatencyTerms) -> float:
    return (t.base + log2i(system.nnodes) * t.inter / PAT_LATENCY_INTER_DIVISOR
            + PAT_LATENCY_PER_RANK_US * system.nranks)


# ---------------------------------------------------------------------------------------------
# Each algorithm's entry, named by its ``nccl_cost_model`` in dynamiccl.system.nccl.ALGORITHMS
# ---------------------------------------------------------------------------------------------

TREE = NcclTuning(
    bus_bandwidth=_tree_bus, algorithm_bandwidth=_tree_algbw,
    latency=_tree_latency, max_threads=(512, 640, 512), thread_threshold=(8, 8, 64),
    refine=_tree_correction)

RING = NcclTuning(
    bus_bandwidth=_ring_bus, algorithm_bandwidth=_ring_algbw,
    latency=_ring_latency, max_threads=(512, 640, 512), thread_threshold=(8, 8, 64),
    refine=_ring_plateau, latency_per_operation=True, adjust_threads=_ring_threads)

COLLNET_DIRECT = NcclTuning(
    bus_bandwidth=_collnet_direct_bus,
    algorithm_bandwidth=_tree_algbw, latency=_collnet_direct_latency,
    max_threads=(0, 0, 640), thread_threshold=(8, 8, 512),
    enabled=lambda s: s.collnet_support and s.collnet_direct_nvswitch,
    offered=lambda s, coll: s.collnet_support and s.ppn <= COLLNET_DIRECT_MAX_HEADS,
    channels=_collnet_direct_channels)

COLLNET_CHAIN = NcclTuning(
    bus_bandwidth=_collnet_chain_bus,
    algorithm_bandwidth=_tree_algbw, latency=_collnet_chain_latency,
    max_threads=(0, 0, 640), thread_threshold=(8, 8, 512),
    enabled=lambda s: s.collnet_support, offered=lambda s, coll: s.collnet_support)

NVLS = NcclTuning(
    bus_bandwidth=_nvls_only_bus, algorithm_bandwidth=_nvls_algbw,
    latency=lambda s, t: t.intra + (t.inter if s.nnodes > 1 else 0.0),
    max_threads=(0, 0, 640), thread_threshold=(8, 8, 64),
    enabled=lambda s: s.collnet_support or s.nnodes == 1,  # NVLS+SHARP across nodes
    offered=lambda s, coll: _nvls_offered(s, coll) and (s.nnodes == 1 or s.collnet_support),
    channels=_nvls_channels)

NVLS_TREE = NcclTuning(
    bus_bandwidth=_nvls_tree_bus, algorithm_bandwidth=_nvls_algbw,
    latency=lambda s, t: t.base + t.intra + 2 * log2i(s.nnodes) * t.inter,
    max_threads=(0, 0, 640), thread_threshold=(8, 8, 64),
    enabled=lambda s: s.nnodes > 1, offered=_nvls_offered, refine=_nvls_tree_correction,
    channels=_nvls_tree_channels)

# PAT/Simple's threads are not in NCCL's table: NCCL sizes it like the other non-ring Simple
# kernels (NCCL_NTHREADS default 512).
PAT = NcclTuning(
    bus_bandwidth=_pat_bus, algorithm_bandwidth=_tree_algbw,
    latency=_pat_latency, max_threads=(0, 0, 512), thread_threshold=(8, 8, 64),
    available=lambda s: s.pat_enabled)


@cache
def nccl_tuning(algorithm: int) -> NcclTuning:
    """NCCL's own cost model of one of its algorithms (by id, as NCCL's tables index them): the
    :class:`NcclTuning` its table entry names."""
    spec = ALGORITHM_SPECS[Algorithm(algorithm)]
    if spec.nccl_cost_model is None:
        raise ValueError(f"NCCL has no {Algorithm(algorithm).name.lower()}: only the simulator does")
    module, _, name = spec.nccl_cost_model.partition(":")
    return getattr(importlib.import_module(module), name)
