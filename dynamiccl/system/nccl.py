"""NCCL's vocabulary, written once, and every algorithm and protocol as one entry of one table.

Every layer speaks about NCCL: the knob space and its validity rules, the simulator, NCCL's own cost
model, the profiler (which sets ``NCCL_ALGO``), the CLI help, the plots, the environment's
docstring, the policy file and, through a generated header, the C plugin and its tests. When each
kept its own copy the copies drifted apart, and adding one algorithm meant editing about fifteen
files. So every fact about NCCL that more than one module needs lives here, and only here:

* :data:`PROTOCOLS` and :data:`ALGORITHMS`, the tables: per protocol and per algorithm NCCL's
  integer id (``NCCL_PROTO_*`` / ``NCCL_ALGO_*`` in NCCL 2.30.7 ``src/include/nccl_common.h``,
  which the policy file and the C plugin must use exactly), NCCL's spelling, and for an algorithm
  what it implements and needs, its rows of NCCL's latency tables, the search graph NCCL runs it
  on, where NCCL's own cost model of it is (``dynamiccl/nccl_model/algorithms.py``) and where its
  physics is (``dynamiccl/simulator/``), both named ``module:name`` and loaded by the layer that
  runs them, and its colour in every figure. The enums :class:`Protocol` and :class:`Algorithm` are
  made from them; adding an algorithm is one entry here, its cost models and a test (dynamiccl/README.md);
* the other ids and spellings: collectives, link classes, compute-capability rows, the
  ``NCCL_ALGO`` / ``NCCL_PROTO`` variables, the tokens rule lines of a policy file use;
* the default tuning constants of NCCL that both the simulator and NCCL's model read
  (``ncclTunerConstantsDefaults``, NCCL 2.30.7 ``src/graph/tuning.cc``);
* nccl-tests' bus-bandwidth factor, so the simulator and the profiler report the same busbw.

This module imports nothing from the project, so every layer may import it; that is why an entry
names its cost models rather than holding them. A requirement reads a topology
(``dynamiccl.system.topology.Topology``), typed loosely here for the same reason.
"""

from __future__ import annotations

import enum
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
    #: NCCL's own cost model of it, ``module:name`` of a ``dynamiccl.nccl_model.algorithms.NcclTuning``
    #: (loaded by ``nccl_model.algorithms.nccl_tuning``); None when NCCL does not have it.
    nccl_cost_model: str | None
    #: The topology-search graph NCCL runs it on (tree, ring, collnet_direct, collnet_chain, nvls).
    nccl_graph: str | None
    #: How NCCL cuts it into chunks and its default chunk size, ``module:name`` of a
    #: ``dynamiccl.system.chunking.Chunking``; None when NCCL does not have it.
    chunking: str | None
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
        nccl_cost_model="dynamiccl.nccl_model.algorithms:TREE", nccl_graph="tree",
        chunking="dynamiccl.system.chunking:TREE",
        cost_model="dynamiccl.simulator.tree:tree_allreduce", colour="#2ca02c", v2_collectives=_AR),
    AlgorithmSpec(
        name="RING", nccl_id=1, nccl_name="Ring", collectives=frozenset(Collective),
        protocols=_ALL_PROTOCOLS, hierarchical=False, requirements=(),
        base_latency_us=_RING_BASE_LATENCY_US, hw_latency_us=_RING_HW_LATENCY_US,
        nccl_cost_model="dynamiccl.nccl_model.algorithms:RING", nccl_graph="ring",
        chunking="dynamiccl.system.chunking:RING",
        cost_model="dynamiccl.simulator.ring:flat_ring", colour="#1f77b4",
        v2_collectives=frozenset(Collective)),
    AlgorithmSpec(
        name="COLLNET_DIRECT", nccl_id=2, nccl_name="CollNetDirect", collectives=_AR | _AG_RS,
        protocols=_SIMPLE, hierarchical=True,
        requirements=(COLLNET_SUPPORT, COLLNET_NODES, COLLNET_DIRECT_NODE),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 3.7), (0.0, 0.0, 3.7), (0.0, 0.0, 31.0)),
        nccl_cost_model="dynamiccl.nccl_model.algorithms:COLLNET_DIRECT", nccl_graph="collnet_direct",
        chunking="dynamiccl.system.chunking:COLLNET_DIRECT",
        cost_model="dynamiccl.simulator.collnet:collnet_direct", colour="#9467bd",
        v2_collectives=_AR, v2_feature="collnet"),
    AlgorithmSpec(
        name="COLLNET_CHAIN", nccl_id=3, nccl_name="CollNetChain", collectives=_AR,
        protocols=_SIMPLE, hierarchical=True, requirements=(COLLNET_SUPPORT, COLLNET_NODES),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 2.8), (0.0, 0.0, 2.8), (0.0, 0.0, 30.0)),
        nccl_cost_model="dynamiccl.nccl_model.algorithms:COLLNET_CHAIN", nccl_graph="collnet_chain",
        chunking="dynamiccl.system.chunking:COLLNET_CHAIN",
        cost_model="dynamiccl.simulator.collnet:collnet_chain", colour="#8c564b",
        v2_collectives=_AR, v2_feature="collnet"),
    AlgorithmSpec(
        name="NVLS", nccl_id=4, nccl_name="NVLS", collectives=_AR | _AG_RS, protocols=_SIMPLE,
        hierarchical=False, requirements=(NVLS_MULTICAST, NVLS_GPUS, NVLS_MULTI_NODE_SHARP),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 25.0), (0.0, 0.0, 0.0), (0.0, 0.0, 18.0)),
        nccl_cost_model="dynamiccl.nccl_model.algorithms:NVLS", nccl_graph="nvls",
        chunking="dynamiccl.system.chunking:NVLS",
        cost_model="dynamiccl.simulator.nvls:nvls", colour="#d62728",
        v2_collectives=_AR, v2_feature="nvls"),
    AlgorithmSpec(
        name="NVLS_TREE", nccl_id=5, nccl_name="NVLSTree", collectives=_AR, protocols=_SIMPLE,
        hierarchical=True, requirements=(NVLS_MULTICAST, NVLS_GPUS, NVLS_TREE_NODES),
        base_latency_us=(0.0, 0.0, 0.0),
        hw_latency_us=((0.0, 0.0, 25.0), (0.0, 0.0, 0.0), (0.0, 0.0, 20.9)),
        nccl_cost_model="dynamiccl.nccl_model.algorithms:NVLS_TREE", nccl_graph="nvls",
        chunking="dynamiccl.system.chunking:NVLS_TREE",
        cost_model="dynamiccl.simulator.nvls:nvls_tree", colour="#ff7f0e",
        v2_collectives=_AR, v2_feature="nvls"),
    AlgorithmSpec(
        name="PAT", nccl_id=6, nccl_name="PAT", collectives=_AG_RS, protocols=_SIMPLE,
        hierarchical=False, requirements=(PAT_ONE_GPU_PER_NODE,),
        base_latency_us=(8.0, 8.0, 8.0),
        hw_latency_us=((0.0, 0.0, 4.0), (0.0, 0.0, 4.0), (0.0, 0.0, 14.0)),
        nccl_cost_model="dynamiccl.nccl_model.algorithms:PAT", nccl_graph="tree",
        chunking="dynamiccl.system.chunking:PAT",
        cost_model="dynamiccl.simulator.pat:pat", colour="#e377c2"),
    AlgorithmSpec(
        # StragglAR (Devraj et al., "Accelerating AllReduce with a Persistent Straggler"): the
        # punctual ranks reduce-scatter while one rank is late, then pairwise exchange rounds.
        name="STRAGGLAR", nccl_id=None, nccl_name=None, collectives=_AR, protocols=_SIMPLE,
        hierarchical=False, requirements=(STRAGGLAR_EVEN_RANKS, STRAGGLAR_ANY_TO_ANY),
        base_latency_us=_RING_BASE_LATENCY_US, hw_latency_us=_RING_HW_LATENCY_US,
        nccl_cost_model=None, nccl_graph=None, chunking=None,
        cost_model="dynamiccl.simulator.stragglar_time:stragglar", colour="#17becf",
        stand_in="RING", hides_straggler_delay=True),
)

#: NCCL's algorithms first, in NCCL's order, then the simulator's, in table order.
_NCCL_ENTRIES = sorted((a for a in ALGORITHMS if a.nccl_id is not None), key=lambda a: a.nccl_id or 0)
_IDS = {a.name: a.nccl_id for a in _NCCL_ENTRIES} | {
    a.name: len(_NCCL_ENTRIES) + i for i, a in enumerate(a for a in ALGORITHMS if a.nccl_id is None)}
assert sorted(a.nccl_id for a in _NCCL_ENTRIES) == list(range(len(_NCCL_ENTRIES))), \
    "NCCL's algorithm ids are 0..N-1: NCCL's tables are indexed by them"
assert all(len({a.nccl_id is None, a.nccl_name is None, a.nccl_cost_model is None, a.nccl_graph is None,
                a.chunking is None}) == 1 for a in ALGORITHMS), \
    "an algorithm NCCL has carries its NCCL name, graph, cost model and chunking; a simulator-only one none"

Algorithm = enum.IntEnum("Algorithm", sorted(_IDS.items(), key=lambda item: item[1]), module=__name__)
Algorithm.__doc__ = "NCCL's algorithm indices, then the simulator-only ones: made from :data:`ALGORITHMS`."
ALGORITHM_SPECS: dict[Algorithm, AlgorithmSpec] = {Algorithm[a.name]: a for a in ALGORITHMS}

#: The algorithms NCCL has, in NCCL's order.
NCCL_ALGORITHMS: tuple[Algorithm, ...] = tuple(a for a in Algorithm if ALGORITHM_SPECS[a].nccl_name)
#: NCCL_NUM_ALGORITHMS (7 since 2.23): the size of NCCL's per-algorithm tables.
N_ALGORITHMS = len(NCCL_ALGORITHMS)


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
#: The file of variables NCCL reads before /etc/nccl.conf: ``$NCCL_CONF_FILE`` (2.23 on), else
#: ``~/.nccl.conf``. NCCL sets a file's variable only where the environment has none (src/misc/
#: param.cc, initEnv and setEnvFile; NCCL's docs, "Environment Variables").
CONF_FILE_ENV, USER_CONF_FILE, SYSTEM_CONF_FILE = "NCCL_CONF_FILE", "~/.nccl.conf", "/etc/nccl.conf"
#: The file NCCL writes its debug lines (its release, the plugins' lines) to instead of stdout,
#: where the name is not empty (src/debug.cc).
DEBUG_FILE_ENV = "NCCL_DEBUG_FILE"
#: The environment variable naming the network plugin NCCL loads (src/plugin/net.cc); NCCL looks
#: for tuner symbols in that library when NCCL_TUNER_PLUGIN names none (aws-ofi-nccl ships one).
NET_PLUGIN_ENV = "NCCL_NET_PLUGIN"
#: NCCL's public ``ncclResult_t ncclGetVersion(int* version)`` (src/nccl.h.in): the running
#: library's version code, :func:`version_code` of its release.
GET_VERSION_SYMBOL = "ncclGetVersion"
#: NCCL_VERSION_CODE's weights (src/nccl.h.in, every release since 2.9): major, minor, patch.
VERSION_CODE_WEIGHTS = (10000, 100, 1)


def version_code(major: int, minor: int, patch: int) -> int:
    """NCCL's version code of a release (2.30.7 -> 23007), as ``ncclGetVersion`` reports it."""
    return sum(w * v for w, v in zip(VERSION_CODE_WEIGHTS, (major, minor, patch), strict=True))

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
