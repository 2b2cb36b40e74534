"""NCCL's vocabulary, written once, and every algorithm and protocol as one entry of one table.

Every layer speaks about NCCL: the knob space and its validity rules, the simulator, NCCL's own cost
model, the profiler (which sets ``NCCL_ALGO``), the CLI help, the plots, the environment's
docstring, the policy file and, through a generated header, the C plugin and its tests. When each
kept its own copy the copies drifted apart, and adding one algorithm meant editing about fifteen
files. So every fact about NCCL that more than one module needs lives here, and only here:

* :data:`PROTOCOLS` and :data:`ALGORITHMS`, the tables: per protocol and per algorithm NCCL's
  integer id (``NCCL_PROTO_*`` / ``NCCL_ALGO_*`` in NCCL 2.30.7 ``src/include/nccl_common.h``,
  which the policy file and the C plugin must use exactly), NCCL's spelling, and for an algorithm
  what it implements and needs, its rows of NCCL's latency and thread tables, how NCCL's own cost
  model treats it (:class:`NcclTuning`), where its physics is and its colour in every figure.
  The enums :class:`Protocol` and :class:`Algorithm` are made from them; adding an algorithm is
  one entry here, its cost model in ``dynamiccl/simulator/`` and a test (README, Architecture);
* the other ids and spellings: collectives, link classes, compute-capability rows, the
  ``NCCL_ALGO`` / ``NCCL_PROTO`` variables, the tokens rule lines of a policy file use;
* the default tuning constants of NCCL that both the simulator and NCCL's model read
  (``ncclTunerConstantsDefaults``, NCCL 2.30.7 ``src/graph/tuning.cc``);
* nccl-tests' bus-bandwidth factor, so the simulator and the profiler report the same busbw.

This module imports nothing from the project, so every layer may import it. The callables of an
entry read a communicator as NCCL sees it (``dynamiccl.nccl_model.graph.NcclSystem`` and its
search ``Graph``), typed loosely here for that reason.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Ids (NCCL 2.30.7 src/include/nccl_common.h; algorithms and protocols: their tables below)
# ---------------------------------------------------------------------------------------------


class Collective(enum.IntEnum):
    """NCCL's ``ncclFunc_t`` values for the five collectives the tuner is asked about."""

    BROADCAST = 0
    REDUCE = 1
    ALLGATHER = 2
    REDUCESCATTER = 3
    ALLREDUCE = 4


class Link(enum.IntEnum):
    """NCCL's hardware link classes (the first index of ``hwLatencies``)."""

    NVLINK = 0
    PCI = 1
    NET = 2


class ComputeCapability(enum.IntEnum):
    """NCCL's compute-capability rows of its per-architecture tables (src/graph/tuning.cc)."""

    VOLTA = 0
    AMPERE = 1
    HOPPER = 2
    BLACKWELL = 3


N_COLLECTIVES = len(Collective)  # NCCL_NUM_FUNCTIONS
MAX_CHANNELS = 64  # MAXCHANNELS: the most channels a collective runs on (also NCCL_MAX_NCHANNELS' default)

#: How a topology file names each link class (``tiers[].link``).
LINK_NAMES: dict[Link, str] = {Link.NVLINK: "nvlink", Link.PCI: "pcie", Link.NET: "net"}
LINK_BY_NAME: dict[str, Link] = {name: link for link, name in LINK_NAMES.items()}

_AR = frozenset({Collective.ALLREDUCE})
_AG_RS = frozenset({Collective.ALLGATHER, Collective.REDUCESCATTER})


def compcap_index(sm: int) -> ComputeCapability:
    """NCCL's row for a GPU generation: >=100 Blackwell, >=90 Hopper, >=80 Ampere, else Volta."""
    if sm >= 100:
        return ComputeCapability.BLACKWELL
    if sm >= 90:
        return ComputeCapability.HOPPER
    return ComputeCapability.AMPERE if sm >= 80 else ComputeCapability.VOLTA


def scale_index(nodes: int) -> int:
    """NCCL's tuning scale: 1 node, 2 nodes, 3 or more."""
    return min(nodes, 3) - 1


def nsteps(coll: int, nranks: int) -> int:
    """Ring steps: 2(n-1) for AllReduce, n-1 for AllGather/ReduceScatter, n otherwise."""
    if coll == Collective.ALLREDUCE:
        return 2 * (nranks - 1)
    return nranks - 1 if coll in _AG_RS else nranks


def log2i(n: int) -> int:
    """NCCL's integer log2 (floor), as its tree latencies use it."""
    return n.bit_length() - 1


def _always(*_: Any) -> bool:
    return True


# ---------------------------------------------------------------------------------------------
# Protocols: the table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProtocolSpec:
    """One protocol: NCCL's id and name, and how the project treats it."""

    #: The enum member's name; lower-cased, the policy-file token and the CLI's spelling.
    name: str
    #: ``NCCL_PROTO_*``: the column of every per-protocol table NCCL keeps.
    nccl_id: int
    #: NCCL's spelling (an NCCL_PROTO token, what its logs print).
    nccl_name: str
    #: Network round trips per hop: Simple also flushes what it received (NCCL 2.30.7
    #: src/graph/tuning.cc adds the network latency twice for it).
    network_round_trips: int
    #: Its marker and how light its shade of an algorithm's colour is, in every figure.
    marker: str
    shade: float
    #: (system) -> whether NCCL enables it by default (NCCL_PROTO unset).
    enabled: Callable[[Any], bool] = _always


PROTOCOLS: tuple[ProtocolSpec, ...] = (
    ProtocolSpec("LL", 0, "LL", 1, "o", 0.55),
    ProtocolSpec("LL128", 1, "LL128", 1, "s", 0.3, enabled=lambda system: system.ll128_enabled),
    ProtocolSpec("SIMPLE", 2, "Simple", 2, "^", 0.0),
)

Protocol = enum.IntEnum("Protocol", [(p.name, p.nccl_id) for p in PROTOCOLS], module=__name__)
Protocol.__doc__ = "NCCL's protocol indices, made from :data:`PROTOCOLS`."
PROTOCOL_SPECS: dict[Protocol, ProtocolSpec] = {Protocol(p.nccl_id): p for p in PROTOCOLS}
N_PROTOCOLS = len(Protocol)  # NCCL_NUM_PROTOCOLS
_ALL_PROTOCOLS = frozenset(Protocol)
_SIMPLE = frozenset({Protocol.SIMPLE})

# ---------------------------------------------------------------------------------------------
# NCCL's default tuning constants both the simulator and NCCL's model read (ncclTunerConstants-
# Defaults, NCCL 2.30.7 src/graph/tuning.cc; the 2.31.2 binary holds the same). Indexed like
# NCCL's: [compcap row][scale]. The per-algorithm rows (baseLatencies, hwLatencies, maxThreads)
# are in each algorithm's entry.
# ---------------------------------------------------------------------------------------------

#: llMaxBws [row][scale], GB/s (single node: the compcap row; multi-node: the CPU row, 0 Intel, 1
#: AMD). Blackwell single node is 282.0 in 2.30.7 (282.4 only in 2.32.3).
LL_MAX_BW = np.array([
    [39.0, 39.0, 20.4],
    [87.7, 22.5, 19.0],
    [141.0, 45.0, 35.0],
    [282.0, 90.0, 70.0],
])
#: perChMaxRingLL128Bws [compcap][scale], GB/s per channel.
PER_CH_MAX_RING_LL128_BW = np.array([
    [20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 36.7], [40.0, 40.0, 40.0],
])
#: perChMaxTreeLL128Bws [compcap][scale] (Blackwell 2-node is 31.67 in 2.30.7).
PER_CH_MAX_TREE_LL128_BW = np.array([
    [20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0],
])
#: perChMaxTreeBws [compcap][scale].
PER_CH_MAX_TREE_BW = np.array([
    [26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0],
])
#: perChMaxNVLSTreeBws [compcap][scale] (0 = not used on one node).
PER_CH_MAX_NVLS_TREE_BW = np.array([
    [26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0],
])
#: nvlsEfficiency per compcap: the share of NVLink bandwidth NVLS multicast achieves.
NVLS_EFFICIENCY = np.array([0.0, 0.0, 0.85, 0.74])
#: PAT's bandwidth factor (x 0.75).
PAT_FACTOR = 0.75
#: CollNetDirect on Hopper+ (x 0.85).
COLLNET_DIRECT_HOPPER_FACTOR = 0.85
#: PCI Gen3 x16, GB/s (src/graph/topo.h): the Ring/Simple thread rule's threshold.
PCI_BW = 12.0
#: The most heads a CollNetDirect graph has, and the most local ranks NVLS serves for AllGather /
#: ReduceScatter (src/init.cc, src/enqueue.cc @2.30.7).
COLLNET_DIRECT_MAX_HEADS = 8
NVLS_MAX_ARITY = 32

# ---------------------------------------------------------------------------------------------
# System requirements: what an algorithm needs, and the sentence a user whose system lacks it reads
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One system feature an algorithm needs, and the sentence a user whose system lacks it reads.

    ``met`` reads a :class:`dynamiccl.system.topology.Topology`; it is typed loosely because this module
    sits below every other one and imports none of them.
    """

    met: Callable[[Any], bool]
    missing: str

    def met_by(self, topology: Any) -> bool:
        return bool(self.met(topology))


NVLS_MULTICAST = Requirement(lambda t: t.features.nvls and t.gpu.sm >= 90,
                             "NVLS needs NVSwitch multicast (features.nvls) on an sm90+ GPU")
NVLS_GPUS = Requirement(lambda t: t.gpus_per_node >= 2, "NVLS needs at least 2 GPUs per node")
NVLS_MULTI_NODE_SHARP = Requirement(
    lambda t: t.nodes == 1 or t.features.collnet,
    "multi-node NVLS needs in-network reduction (features.collnet, NVLS+SHARP)")
NVLS_TREE_NODES = Requirement(lambda t: t.nodes >= 2, "NVLSTree needs more than one node")
COLLNET_SUPPORT = Requirement(lambda t: t.features.collnet,
                              "CollNet needs in-network reduction (features.collnet, e.g. SHARP)")
COLLNET_NODES = Requirement(lambda t: t.nodes >= 2, "CollNet needs more than one node")
COLLNET_DIRECT_NODE = Requirement(lambda t: t.tiers[0].fabric == "switch" and t.gpus_per_node <= 8,
                                  "CollNetDirect needs an NVSwitch node with at most 8 GPUs")
PAT_ONE_GPU_PER_NODE = Requirement(lambda t: t.gpus_per_node == 1, "PAT runs only with one GPU per node")
STRAGGLAR_EVEN_RANKS = Requirement(lambda t: t.nranks % 2 == 0, "StragglAR needs an even number of ranks")
STRAGGLAR_ANY_TO_ANY = Requirement(
    lambda t: t.any_to_any,
    "StragglAR needs an any-to-any fabric (switch or fully_connected) at every tier")

# ---------------------------------------------------------------------------------------------
# NCCL's own cost model of one algorithm (NCCL 2.30.7: src/graph/tuning.cc ncclTopoTuneModel for
# the per-communicator tables, src/enqueue.cc for the per-call refinements and channel counts).
# dynamiccl.nccl_model runs these for every entry; the numbers below are NCCL's.
# ---------------------------------------------------------------------------------------------

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

    #: The topology-search graph it runs on: tree, ring, collnet_direct, collnet_chain or nvls.
    graph: str
    #: (system, graph, collective, protocol) -> bus bandwidth, GB/s (0: unusable).
    bus_bandwidth: Callable[[Any, Any, int, int], float]
    #: (collective, bus bandwidth, nRanks) -> the algorithm bandwidth the cost table divides by.
    algorithm_bandwidth: Callable[[int, float, int], float]
    #: (system, LatencyTerms) -> the fixed cost, µs.
    latency: Callable[[Any, LatencyTerms], float]
    #: maxThreads and the bytes-per-thread threshold per protocol (LL, LL128, Simple); 0 threads =
    #: the combination never runs.
    max_threads: tuple[int, ...]
    thread_threshold: tuple[int, ...]
    #: (system) -> whether NCCL builds its table entries at all (beyond collectives and protocols).
    available: Callable[[Any], bool] = _always
    #: (system) -> whether NCCL enables it by default (NCCL_ALGO unset).
    enabled: Callable[[Any], bool] = _always
    #: (system, collective) -> whether updateCollCostTable offers it for a float Sum call.
    offered: Callable[[Any, int], bool] = _always
    #: (system, calls, bw [B, proto], lat [B, proto]): per-call refinements, in place (None: the
    #: table's times stand).
    refine: Callable[[Any, Calls, np.ndarray, np.ndarray], None] | None = None
    #: Its latency counts once per operation (Ring), not once per batch of eight.
    latency_per_operation: bool = False
    #: (system, threads [proto], thresholds [proto]): the communicator's changes, in place (None:
    #: the rows stand).
    adjust_threads: Callable[[Any, np.ndarray, np.ndarray], None] | None = None
    #: (system, comm channels, nBytes [B], threads [B], thresholds [B]) -> channels [B]; None: the
    #: per-size rule (drop channels while nBytes < nc * nThreads * threshold).
    channels: Callable[[Any, int, np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None


def _ll_max(system: Any) -> float:
    row = system.compcap if system.nnodes == 1 else (1 if system.cpu == "amd" else 0)
    return LL_MAX_BW[row, scale_index(system.nnodes)]


def _flat_bandwidth(system: Any, graph: Any) -> float:
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


def _collnet_multi_node_ag_rs(system: Any, coll: int) -> bool:
    """AllGather/ReduceScatter across nodes needs a CollNet plugin with iallgather/ireducescatter
    (assumed present with CollNet) and at most collNetHeadsNum local ranks."""
    return not (coll in _AG_RS and system.nnodes > 1
                and (not system.collnet_support or system.ppn > system.collnet_heads))


# Ring -------------------------------------------------------------------------------------------

def _ring_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
    bus = _flat_bandwidth(system, graph)
    if proto == Protocol.LL:
        return min(_ll_max(system), RING_LL_BUS_FRACTION * bus)
    if proto == Protocol.LL128:
        cap = PER_CH_MAX_RING_LL128_BW[system.compcap, scale_index(system.nnodes)]
        return min(LL128_BUS_FRACTION * bus, graph.n_channels * cap)
    return bus


def _ring_latency(system: Any, t: LatencyTerms) -> float:
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


def _ring_plateau(system: Any, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    """Multi-node Ring/Simple AllReduce latency x 1.4 (x 1.9 before sm80) once every channel and
    rank moves at least 64 bytes."""
    if system.nnodes > 1:
        per = calls.nbytes // (calls.comm_channels * system.nranks)
        plateau = ((calls.collectives == Collective.ALLREDUCE)
                   & (per >= RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK))
        factor = RING_PLATEAU_FACTOR if system.sm >= 80 else RING_PLATEAU_FACTOR_PRE_AMPERE
        lat[plateau, Protocol.SIMPLE] *= np.float32(factor)


def _ring_threads(system: Any, threads: np.ndarray, thresholds: np.ndarray) -> None:
    """Ring/Simple slows to 256 threads on a ring of at most PCI_BW in total; Ring/LL's threshold
    scales with the ranks."""
    ring = system.graphs[Algorithm.RING]
    if ring.bw_intra * ring.n_channels <= PCI_BW:
        threads[Protocol.SIMPLE] = RING_SIMPLE_THREADS_SLOW
    thresholds[Protocol.LL] *= system.nranks


# Tree -------------------------------------------------------------------------------------------

def _tree_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
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


def _tree_latency(system: Any, t: LatencyTerms) -> float:
    return t.base + 2 * ((t.per_node - 1) * t.intra + log2i(system.nnodes) * t.inter)


def _tree_correction(system: Any, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    _correct_by_size(calls, bw, TREE_CORRECTION_MAX_INDEX)


# CollNet ----------------------------------------------------------------------------------------

def _collnet_direct_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
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


def _collnet_direct_latency(system: Any, t: LatencyTerms) -> float:
    arity = COLLNET_DIRECT_ARITY_LATENCY_US * (t.per_node - 1)
    return t.base + 2 * (min(1, t.per_node - 1) * t.intra + arity) + t.inter


def _collnet_direct_channels(system: Any, comm: int, nbytes: np.ndarray, threads: np.ndarray,
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


def _collnet_chain_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
    return graph.n_channels * graph.bw_intra


def _collnet_chain_latency(system: Any, t: LatencyTerms) -> float:
    return t.base + 2 * (t.per_node - 1) * t.intra + t.inter


# NVLS -------------------------------------------------------------------------------------------

def _nvls_bus(system: Any, graph: Any, coll: int, tree: bool) -> float:
    nch, cc = graph.n_channels, system.compcap
    if nch < 2:
        return 0.0
    intra = graph.bw_intra * NVLS_EFFICIENCY[cc] * (nch - 1) / nch
    intra *= 2.0 if coll == Collective.ALLREDUCE else (system.ppn - 1) / system.ppn
    inter = graph.bw_inter * (2.0 if tree and system.nnodes <= 2 else 1.0)
    cap = PER_CH_MAX_NVLS_TREE_BW[cc, scale_index(system.nnodes)] if tree else math.inf
    return nch * min(intra, inter, cap)


def _nvls_only_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
    return _nvls_bus(system, graph, coll, tree=False) if _collnet_multi_node_ag_rs(system, coll) else 0.0


def _nvls_tree_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
    return _nvls_bus(system, graph, coll, tree=True)


def _nvls_offered(system: Any, coll: int) -> bool:
    """NVLS support (or AllGather), and AllReduce or at most 32 local ranks."""
    return ((system.nvls_support or coll == Collective.ALLGATHER)
            and (coll == Collective.ALLREDUCE or system.ppn <= NVLS_MAX_ARITY))


def _nvls_channels(system: Any, comm: int, nbytes: np.ndarray, threads: np.ndarray,
                   thresholds: np.ndarray) -> np.ndarray:
    nvls = system.nvls_channels
    return np.full(len(nbytes), min(nvls, comm) if system.nnodes > 1 else nvls, dtype=np.int64)


def _nvls_tree_channels(system: Any, comm: int, nbytes: np.ndarray, threads: np.ndarray,
                        thresholds: np.ndarray) -> np.ndarray:
    return np.full(len(nbytes), system.nvls_channels, dtype=np.int64)


def _nvls_tree_correction(system: Any, calls: Calls, bw: np.ndarray, lat: np.ndarray) -> None:
    """On Blackwell with an x86 host NVLSTree AllReduce takes treeCorrectionFactor too."""
    if system.sm >= 100 and system.cpu in ("intel", "amd"):
        _correct_by_size(calls, bw, NVLS_TREE_CORRECTION_MAX_INDEX)


# PAT --------------------------------------------------------------------------------------------

def _pat_bus(system: Any, graph: Any, coll: int, proto: int) -> float:
    return _flat_bandwidth(system, graph) * PAT_FACTOR


def _pat_latency(system: Any, t: LatencyTerms) -> float:
    return (t.base + log2i(system.nnodes) * t.inter / PAT_LATENCY_INTER_DIVISOR
            + PAT_LATENCY_PER_RANK_US * system.nranks)


# ---------------------------------------------------------------------------------------------
# Algorithms: the table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm: everything the project says about it, in one entry."""

    #: The enum member's name; lower-cased, the policy-file token and the CLI's spelling.
    name: str
    #: ``NCCL_ALGO_*``: its row of NCCL's per-algorithm tables (the cost table a tuner plugin edits,
    #: the policy file). None for an algorithm only the simulator has: those are numbered after
    #: NCCL's, in table order, since NCCL's tables hold exactly NCCL's ids 0..N-1.
    nccl_id: int | None
    #: NCCL's spelling (an NCCL_ALGO token, what its logs print); None for a simulator-only one.
    nccl_name: str | None
    collectives: frozenset[Collective]
    protocols: frozenset[Protocol]
    #: Intrinsically hierarchical: a stage inside the node below a stage across nodes (Tree's
    #: intra-node chain under an inter-node double binary tree, NVLSTree, CollNet).
    hierarchical: bool
    #: Checked in order; the first one a system misses is the reason the algorithm cannot run.
    requirements: tuple[Requirement, ...]
    #: baseLatencies row and hwLatencies rows (NVLink, PCI, NET), each (LL, LL128, Simple), µs: a
    #: collective's fixed cost and NVIDIA's measured per-hop protocol cost (flag polling, fences;
    #: on NET the proxy round trip).
    base_latency_us: tuple[float, ...]
    hw_latency_us: tuple[tuple[float, ...], ...]
    #: NCCL's own cost model of it; None when NCCL does not have it.
    nccl_tuning: NcclTuning | None
    #: Its physics, ``module:function`` of a simulator cost model (dynamiccl.simulator.phases.CostModel).
    cost_model: str
    #: Its colour in every figure (matplotlib's tab10 entries, colour-blind friendly order).
    colour: str
    #: A simulator-only algorithm's nearest NCCL relative: what NCCL_ALGO allows in its stead so
    #: that NCCL's protocol and channel picks still mean something.
    stand_in: str | None = None
    #: Its cost has a precondition phase that runs while a late rank is still late (``Cost.pre``).
    hides_straggler_delay: bool = False
    #: What NCCL 2.21's tuner ABI (v2, which checks nothing) may be told to run it for: the
    #: collectives, and the system feature (a policy file's ``features`` entry) it needs. Empty for
    #: an algorithm NCCL 2.21 lacks (dynamiccl.plugin.policy_format explains the rule).
    v2_collectives: frozenset[Collective] = frozenset()
    v2_feature: str | None = None


#: Ring's latency rows, which StragglAR's rounds share (they are ring-like point-to-point steps).
_RING_BASE_LATENCY_US = (6.6, 14.0, 8.4)
_RING_HW_LATENCY_US = ((0.6, 1.9, 3.4), (1.0, 2.5, 5.7), (2.7, 4.0, 14.0))

#: Every algorithm. NCCL's carry NCCL's ids; CollNet and NVLS are 0 in baseLatencies because their
#: hardware latencies already hold the whole fixed cost.
ALGORITHMS: tuple[AlgorithmSpec, ...] = (
    AlgorithmSpec(
        name="TREE", nccl_id=0, nccl_name="Tree", collectives=_AR, protocols=_ALL_PROTOCOLS,
        hierarchical=True, requirements=(),
        base_latency_us=(6.8, 14.0, 8.4),
        hw_latency_us=((0.6, 1.25, 4.0), (1.0, 1.9, 4.0), (5.0, 8.5, 14.0)),
        nccl_tuning=NcclTuning(
            graph="tree", bus_bandwidth=_tree_bus, algorithm_bandwidth=_tree_algbw,
            latency=_tree_latency, max_threads=(512, 640, 512), thread_threshold=(8, 8, 64),
            refine=_tree_correction),
        cost_model="dynamiccl.simulator.tree:tree_allreduce", colour="#2ca02c", v2_collectives=_AR),
    AlgorithmSpec(
        name="RING", nccl_id=1, nccl_name="Ring", collectives=frozenset(Collective),
        protocols=_ALL_PROTOCOLS, hierarchical=False, requirements=(),
        base_latency_us=_RING_BASE_LATENCY_US, hw_latency_us=_RING_HW_LATENCY_US,
        nccl_tuning=NcclTuning(
            graph="ring", bus_bandwidth=_ring_bus, algorithm_bandwidth=_ring_algbw,
            latency=_ring_latency, max_threads=(512, 640, 512), thread_threshold=(8, 8, 64),
            refine=_ring_plateau, latency_per_operation=True, adjust_threads=_ring_threads),
        cost_model="dynamiccl.simulator.ring:flat_ring", colour="#1f77b4",
        v2_collectives=frozenset(Collective)),
    AlgorithmSpec(
        name="COLLNET_DIRECT", nccl_id=2, nccl_name="CollNetDirect", collectives=_AR | _AG_RS,
        protocols=_SIMPLE, hierarchical=True,
        requirements=(COLLNET_SUPPORT, COLLNET_NODES, COLLNET_DIRECT_NODE),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 3.7), (0.0, 0.0, 3.7), (0.0, 0.0, 31.0)),
        nccl_tuning=NcclTuning(
            graph="collnet_direct", bus_bandwidth=_collnet_direct_bus,
            algorithm_bandwidth=_tree_algbw, latency=_collnet_direct_latency,
            max_threads=(0, 0, 640), thread_threshold=(8, 8, 512),
            enabled=lambda s: s.collnet_support and s.collnet_direct_nvswitch,
            offered=lambda s, coll: s.collnet_support and s.ppn <= COLLNET_DIRECT_MAX_HEADS,
            channels=_collnet_direct_channels),
        cost_model="dynamiccl.simulator.collnet:collnet_direct", colour="#9467bd",
        v2_collectives=_AR, v2_feature="collnet"),
    AlgorithmSpec(
        name="COLLNET_CHAIN", nccl_id=3, nccl_name="CollNetChain", collectives=_AR,
        protocols=_SIMPLE, hierarchical=True, requirements=(COLLNET_SUPPORT, COLLNET_NODES),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 2.8), (0.0, 0.0, 2.8), (0.0, 0.0, 30.0)),
        nccl_tuning=NcclTuning(
            graph="collnet_chain", bus_bandwidth=_collnet_chain_bus,
            algorithm_bandwidth=_tree_algbw, latency=_collnet_chain_latency,
            max_threads=(0, 0, 640), thread_threshold=(8, 8, 512),
            enabled=lambda s: s.collnet_support, offered=lambda s, coll: s.collnet_support),
        cost_model="dynamiccl.simulator.collnet:collnet_chain", colour="#8c564b",
        v2_collectives=_AR, v2_feature="collnet"),
    AlgorithmSpec(
        name="NVLS", nccl_id=4, nccl_name="NVLS", collectives=_AR | _AG_RS, protocols=_SIMPLE,
        hierarchical=False, requirements=(NVLS_MULTICAST, NVLS_GPUS, NVLS_MULTI_NODE_SHARP),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 25.0), (0.0, 0.0, 0.0), (0.0, 0.0, 18.0)),
        nccl_tuning=NcclTuning(
            graph="nvls", bus_bandwidth=_nvls_only_bus, algorithm_bandwidth=_nvls_algbw,
            latency=lambda s, t: t.intra + (t.inter if s.nnodes > 1 else 0.0),
            max_threads=(0, 0, 640), thread_threshold=(8, 8, 64),
            enabled=lambda s: s.collnet_support or s.nnodes == 1,  # NVLS+SHARP across nodes
            offered=lambda s, coll: _nvls_offered(s, coll) and (s.nnodes == 1 or s.collnet_support),
            channels=_nvls_channels),
        cost_model="dynamiccl.simulator.nvls:nvls", colour="#d62728",
        v2_collectives=_AR, v2_feature="nvls"),
    AlgorithmSpec(
        name="NVLS_TREE", nccl_id=5, nccl_name="NVLSTree", collectives=_AR, protocols=_SIMPLE,
        hierarchical=True, requirements=(NVLS_MULTICAST, NVLS_GPUS, NVLS_TREE_NODES),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 25.0), (0.0, 0.0, 0.0), (0.0, 0.0, 20.9)),
        nccl_tuning=NcclTuning(
            graph="nvls", bus_bandwidth=_nvls_tree_bus, algorithm_bandwidth=_nvls_algbw,
            latency=lambda s, t: t.base + t.intra + 2 * log2i(s.nnodes) * t.inter,
            max_threads=(0, 0, 640), thread_threshold=(8, 8, 64),
            enabled=lambda s: s.nnodes > 1, offered=_nvls_offered, refine=_nvls_tree_correction,
            channels=_nvls_tree_channels),
        cost_model="dynamiccl.simulator.nvls:nvls_tree", colour="#ff7f0e",
        v2_collectives=_AR, v2_feature="nvls"),
    AlgorithmSpec(
        name="PAT", nccl_id=6, nccl_name="PAT", collectives=_AG_RS, protocols=_SIMPLE,
        hierarchical=False, requirements=(PAT_ONE_GPU_PER_NODE,),
        base_latency_us=(8.0, 8.0, 8.0),
        hw_latency_us=((0.0, 0.0, 4.0), (0.0, 0.0, 4.0), (0.0, 0.0, 14.0)),
        # PAT/Simple's threads are not in NCCL's table: NCCL sizes it like the other non-ring
        # Simple kernels (NCCL_NTHREADS default 512).
        nccl_tuning=NcclTuning(
            graph="tree", bus_bandwidth=_pat_bus, algorithm_bandwidth=_tree_algbw,
            latency=_pat_latency, max_threads=(0, 0, 512), thread_threshold=(8, 8, 64),
            available=lambda s: s.pat_enabled),
        cost_model="dynamiccl.simulator.pat:pat", colour="#e377c2"),
    AlgorithmSpec(
        # StragglAR (Devraj et al., "Accelerating AllReduce with a Persistent Straggler"): the
        # punctual ranks reduce-scatter while one rank is late, then pairwise exchange rounds.
        name="STRAGGLAR", nccl_id=None, nccl_name=None, collectives=_AR, protocols=_SIMPLE,
        hierarchical=False, requirements=(STRAGGLAR_EVEN_RANKS, STRAGGLAR_ANY_TO_ANY),
        base_latency_us=_RING_BASE_LATENCY_US, hw_latency_us=_RING_HW_LATENCY_US, nccl_tuning=None,
        cost_model="dynamiccl.simulator.stragglar_time:stragglar", colour="#17becf",
        stand_in="RING", hides_straggler_delay=True),
)

#: NCCL's algorithms first, in NCCL's order, then the simulator's, in table order.
_NCCL_ENTRIES = sorted((a for a in ALGORITHMS if a.nccl_id is not None), key=lambda a: a.nccl_id or 0)
_IDS = {a.name: a.nccl_id for a in _NCCL_ENTRIES} | {
    a.name: len(_NCCL_ENTRIES) + i for i, a in enumerate(a for a in ALGORITHMS if a.nccl_id is None)}
assert sorted(a.nccl_id for a in _NCCL_ENTRIES) == list(range(len(_NCCL_ENTRIES))), \
    "NCCL's algorithm ids are 0..N-1: NCCL's tables are indexed by them"
assert all((a.nccl_id is None) == (a.nccl_name is None) == (a.nccl_tuning is None) for a in ALGORITHMS), \
    "an algorithm NCCL has carries its NCCL name and NCCL's cost model of it; a simulator-only one neither"

Algorithm = enum.IntEnum("Algorithm", sorted(_IDS.items(), key=lambda item: item[1]), module=__name__)
Algorithm.__doc__ = "NCCL's algorithm indices, then the simulator-only ones: made from :data:`ALGORITHMS`."
ALGORITHM_SPECS: dict[Algorithm, AlgorithmSpec] = {Algorithm[a.name]: a for a in ALGORITHMS}

#: The algorithms NCCL has, in NCCL's order.
NCCL_ALGORITHMS: tuple[Algorithm, ...] = tuple(a for a in Algorithm if ALGORITHM_SPECS[a].nccl_name)
#: NCCL_NUM_ALGORITHMS (7 since 2.23): the size of NCCL's per-algorithm tables.
N_ALGORITHMS = len(NCCL_ALGORITHMS)


def nccl_tuning(algorithm: int) -> NcclTuning:
    """NCCL's own cost model of one of its algorithms (by id, as NCCL's tables index them)."""
    tuning = ALGORITHM_SPECS[Algorithm(algorithm)].nccl_tuning
    if tuning is None:
        raise ValueError(f"NCCL has no {Algorithm(algorithm).name.lower()}: only the simulator does")
    return tuning


def nccl_stand_in(algorithm: Algorithm) -> Algorithm:
    """The NCCL algorithm that stands for ``algorithm`` (itself, for one NCCL has)."""
    stand_in = ALGORITHM_SPECS[algorithm].stand_in
    return Algorithm[stand_in] if stand_in else algorithm


#: baseLatencies [algo][proto] and hwLatencies [link][algo][proto], µs, of NCCL's algorithms.
BASE_LATENCY_US = np.array([ALGORITHM_SPECS[a].base_latency_us for a in NCCL_ALGORITHMS])
HW_LATENCY_US = np.array([ALGORITHM_SPECS[a].hw_latency_us for a in NCCL_ALGORITHMS]).transpose(1, 0, 2)

# ---------------------------------------------------------------------------------------------
# Spellings and policy-file tokens (the generated C header carries the same tables)
# ---------------------------------------------------------------------------------------------

#: The environment variables through which a user forces NCCL's choice.
ALGO_ENV = "NCCL_ALGO"
PROTO_ENV = "NCCL_PROTO"
MIN_CHANNELS_ENV = "NCCL_MIN_NCHANNELS"
MAX_CHANNELS_ENV = "NCCL_MAX_NCHANNELS"
#: The environment variable naming the tuner plugin NCCL loads (src/plugin/tuner.cc).
TUNER_PLUGIN_ENV = "NCCL_TUNER_PLUGIN"

#: NCCL's names (src/init.cc @2.30.7): the tokens of NCCL_ALGO / NCCL_PROTO and what its logs print.
ALGORITHM_NCCL_NAMES: dict[Algorithm, str] = {a: str(ALGORITHM_SPECS[a].nccl_name) for a in NCCL_ALGORITHMS}
PROTOCOL_NCCL_NAMES: dict[Protocol, str] = {p: PROTOCOL_SPECS[p].nccl_name for p in Protocol}
#: NCCL's names of the collectives, as its logs and ``func:`` prefixes of NCCL_ALGO spell them.
COLLECTIVE_NCCL_NAMES: dict[Collective, str] = {
    Collective.BROADCAST: "Broadcast", Collective.REDUCE: "Reduce", Collective.ALLGATHER: "AllGather",
    Collective.REDUCESCATTER: "ReduceScatter", Collective.ALLREDUCE: "AllReduce",
}

#: NCCL's spellings, upper-cased without separators, mapped to our enum member names (NCCL reads
#: its tokens case-insensitively, so ``nvlstree`` and ``CollNetDirect`` are names people write).
NCCL_ALIASES: dict[str, str] = {
    spelled.upper(): member.name
    for names in (COLLECTIVE_NCCL_NAMES, ALGORITHM_NCCL_NAMES, PROTOCOL_NCCL_NAMES)
    for member, spelled in names.items()
}



def forcing_env(algorithm: Algorithm | None, protocol: Protocol | None,
                channels: int | None) -> dict[str, str]:
    """The environment that makes NCCL run the knobs given (empty: NCCL's default): NCCL_ALGO and
    NCCL_PROTO in NCCL's spelling, a channel count as NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS (what
    nccl-tests runs, the runner's ranks and a plan's printed command lines all set)."""
    env: dict[str, str] = {}
    if algorithm is not None:
        env[ALGO_ENV] = ALGORITHM_NCCL_NAMES[algorithm]
    if protocol is not None:
        env[PROTO_ENV] = PROTOCOL_NCCL_NAMES[protocol]
    if channels is not None:
        env[MIN_CHANNELS_ENV] = env[MAX_CHANNELS_ENV] = str(int(channels))
    return env


COLLECTIVE_TOKENS: dict[Collective, str] = {c: c.name.lower() for c in Collective}
ALGORITHM_TOKENS: dict[Algorithm, str] = {a: a.name.lower() for a in NCCL_ALGORITHMS}
PROTOCOL_TOKENS: dict[Protocol, str] = {p: p.name.lower() for p in Protocol}

# ---------------------------------------------------------------------------------------------
# nccl-tests' bus bandwidth (nccl-tests src/*_perf.cu)
# ---------------------------------------------------------------------------------------------


def bus_factor(collective: int, nranks: int) -> float:
    """busbw / algbw as nccl-tests reports it: the share of the data each rank's link carries.

    AllReduce 2(n-1)/n, AllGather / ReduceScatter (n-1)/n, Broadcast / Reduce 1; on one rank the
    first three move nothing, so their factor is 0 there.
    """
    if collective == Collective.ALLREDUCE:
        return 2.0 * (nranks - 1) / nranks
    if collective in (Collective.ALLGATHER, Collective.REDUCESCATTER):
        return (nranks - 1) / nranks
    return 1.0


# ---------------------------------------------------------------------------------------------
# The profiler plugin's vocabulary (NCCL 2.28.9 src/include/plugin/nccl_profiler.h and
# src/collectives.cc; 2.29.7 for v6). The descriptor structs themselves are in
# csrc/nccl_profiler_abi.h, checked against NCCL's headers by tests/test_profiler_plugin.py.
# ---------------------------------------------------------------------------------------------

#: The environment variable naming the profiler plugin NCCL loads (src/plugin/profiler.cc).
PROFILER_PLUGIN_ENV = "NCCL_PROFILER_PLUGIN"


class ProfilerEvent(enum.IntFlag):
    """Event types, also the bits of the activation mask a profiler's init sets."""

    GROUP = 1 << 0
    COLL = 1 << 1
    P2P = 1 << 2
    PROXY_OP = 1 << 3
    PROXY_STEP = 1 << 4
    PROXY_CTRL = 1 << 5
    KERNEL_CH = 1 << 6
    NET_PLUGIN = 1 << 7
    GROUP_API = 1 << 8
    COLL_API = 1 << 9
    P2P_API = 1 << 10
    KERNEL_LAUNCH = 1 << 11


#: ``ncclProfilerKernelChStop``: the state NCCL records on a kernel-channel event with the
#: channel's stop time (``pTimer``) before it stops the event (src/plugin/profiler.cc).
PROFILER_STATE_KERNEL_CH_STOP = 22

#: Profiler ABI version -> the first NCCL release (version code) whose loader looks it up; the
#: loader tries the newest first (v6 from 2.29.2, v5 from 2.28.3, v4 from 2.27.3; v3 and older
#: carry no GPU timestamps).
PROFILER_ABI_FIRST_NCCL: dict[int, int] = {6: 22902, 5: 22803, 4: 22703}

#: How a coll event's descriptor spells the algorithm and protocol NCCL ran (``ncclAlgoToString``
#: and ``ncclProtoToString``: NCCL's enum names, ``RING``, ``NVLS_TREE``, ``SIMPLE``), and the
#: collective (``ncclFuncToString``: ``AllReduce``).
PROFILER_ALGORITHM_NAMES: dict[Algorithm, str] = {a: a.name for a in NCCL_ALGORITHMS}
PROFILER_PROTOCOL_NAMES: dict[Protocol, str] = {p: p.name for p in Protocol}
PROFILER_COLLECTIVE_NAMES: dict[Collective, str] = COLLECTIVE_NCCL_NAMES

#: ``ncclDataType_t`` in id order, as ``ncclDatatypeToString`` names them, with their sizes in
#: bytes (src/nccl.h.in; NCCL 2.28.9 names ncclUint8 "Unknown", so a uint8 collective's bytes are
#: unknown to a profiler there).
DATATYPES: tuple[tuple[str, int], ...] = (
    ("ncclInt8", 1), ("ncclUint8", 1), ("ncclInt32", 4), ("ncclUint32", 4), ("ncclInt64", 8),
    ("ncclUint64", 8), ("ncclFloat16", 2), ("ncclFloat32", 4), ("ncclFloat64", 8),
    ("ncclBfloat16", 2), ("ncclFloat8e4m3", 1), ("ncclFloat8e5m2", 1),
)
