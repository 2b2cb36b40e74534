"""NCCL's vocabulary, written once: ids, spellings, policy-file tokens, link types, capabilities.

Every layer speaks about NCCL: the knob space and its validity rules, the simulator, NCCL's own cost
model, the profiler (which sets ``NCCL_ALGO``), the CLI help, the policy file and, through a
generated header, the C plugin. When each kept its own copy the copies drifted apart, and adding one
algorithm meant editing about ten files. So every fact about NCCL that more than one module needs
lives here, and only here:

* the enums with NCCL's integer ids (``shared/reference/nccl_abi.md`` §1.2), which the policy file
  and the C plugin must use exactly;
* NCCL's spellings: the ``NCCL_ALGO`` / ``NCCL_PROTO`` variables and their value tokens (also the
  names NCCL's logs print), and the collective names NCCL's logs use;
* the tokens rule lines of a policy file use;
* link types and compute-capability rows, shared by the simulator and NCCL's model;
* the capability table: which collectives each algorithm implements, which protocols it allows and
  which system features it needs (:data:`CAPABILITIES`);
* the default tuning constants of NCCL that both the simulator and NCCL's model read (§3.2);
* nccl-tests' bus-bandwidth factor, so the simulator and the profiler report the same busbw.

This module imports nothing from the project, so every layer may import it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Ids (nccl_abi.md §1.2)
# ---------------------------------------------------------------------------------------------


class Collective(enum.IntEnum):
    """NCCL's ``ncclFunc_t`` values for the five collectives the tuner is asked about."""

    BROADCAST = 0
    REDUCE = 1
    ALLGATHER = 2
    REDUCESCATTER = 3
    ALLREDUCE = 4


class Algorithm(enum.IntEnum):
    """NCCL's algorithm indices, plus the simulator-only StragglAR (seed 004) after them."""

    TREE = 0
    RING = 1
    COLLNET_DIRECT = 2
    COLLNET_CHAIN = 3
    NVLS = 4
    NVLS_TREE = 5
    PAT = 6
    STRAGGLAR = 7


class Protocol(enum.IntEnum):
    """NCCL's protocol indices."""

    LL = 0
    LL128 = 1
    SIMPLE = 2


class Link(enum.IntEnum):
    """NCCL's hardware link classes (the first index of ``hwLatencies``)."""

    NVLINK = 0
    PCI = 1
    NET = 2


class ComputeCapability(enum.IntEnum):
    """NCCL's compute-capability rows of its per-architecture tables (§3.3)."""

    VOLTA = 0
    AMPERE = 1
    HOPPER = 2
    BLACKWELL = 3


N_COLLECTIVES = len(Collective)  # NCCL_NUM_FUNCTIONS
N_PROTOCOLS = len(Protocol)  # NCCL_NUM_PROTOCOLS
MAX_CHANNELS = 64  # MAXCHANNELS: the most channels a collective runs on (also NCCL_MAX_NCHANNELS' default)

#: How a topology file names each link class (``tiers[].link``).
LINK_NAMES: dict[Link, str] = {Link.NVLINK: "nvlink", Link.PCI: "pcie", Link.NET: "net"}
LINK_BY_NAME: dict[str, Link] = {name: link for link, name in LINK_NAMES.items()}


def compcap_index(sm: int) -> ComputeCapability:
    """NCCL's row for a GPU generation (§3.3): >=100 Blackwell, >=90 Hopper, >=80 Ampere, else Volta."""
    if sm >= 100:
        return ComputeCapability.BLACKWELL
    if sm >= 90:
        return ComputeCapability.HOPPER
    return ComputeCapability.AMPERE if sm >= 80 else ComputeCapability.VOLTA


def scale_index(nodes: int) -> int:
    """NCCL's tuning scale (§3.3): 1 node, 2 nodes, 3 or more."""
    return min(nodes, 3) - 1


# ---------------------------------------------------------------------------------------------
# Spellings
# ---------------------------------------------------------------------------------------------

#: The environment variables through which a user forces NCCL's choice (§3.7).
ALGO_ENV = "NCCL_ALGO"
PROTO_ENV = "NCCL_PROTO"
MIN_CHANNELS_ENV = "NCCL_MIN_NCHANNELS"
MAX_CHANNELS_ENV = "NCCL_MAX_NCHANNELS"

#: NCCL's names (src/init.cc @2.30.7): the tokens of NCCL_PROTO and what NCCL's logs print.
PROTOCOL_NCCL_NAMES: dict[Protocol, str] = {
    Protocol.LL: "LL", Protocol.LL128: "LL128", Protocol.SIMPLE: "Simple",
}
#: NCCL's names of the collectives, as its logs and ``func:`` prefixes of NCCL_ALGO spell them.
COLLECTIVE_NCCL_NAMES: dict[Collective, str] = {
    Collective.BROADCAST: "Broadcast", Collective.REDUCE: "Reduce", Collective.ALLGATHER: "AllGather",
    Collective.REDUCESCATTER: "ReduceScatter", Collective.ALLREDUCE: "AllReduce",
}

# ---------------------------------------------------------------------------------------------
# Capabilities: what each algorithm implements and what it needs from the system
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One system feature an algorithm needs, and the sentence a user whose system lacks it reads.

    ``met`` reads a :class:`dynamiccl.topology.Topology`; it is typed loosely because this module
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

_ALL = frozenset(Collective)
_AR = frozenset({Collective.ALLREDUCE})
_AG_RS = frozenset({Collective.ALLGATHER, Collective.REDUCESCATTER})
_SIMPLE = frozenset({Protocol.SIMPLE})


@dataclass(frozen=True)
class Capability:
    """What one algorithm can do (nccl_abi.md §3.4, §3.6, §3.7)."""

    #: NCCL's name (NCCL_ALGO token, log name); None for an algorithm only the simulator has.
    nccl_name: str | None
    collectives: frozenset[Collective]
    protocols: frozenset[Protocol]
    #: Intrinsically hierarchical: a stage inside the node below a stage across nodes (Tree's
    #: intra-node chain under an inter-node double binary tree, NVLSTree, CollNet).
    hierarchical: bool
    #: Checked in order; the first one a system misses is the reason the algorithm cannot run.
    requirements: tuple[Requirement, ...] = ()


CAPABILITIES: dict[Algorithm, Capability] = {
    Algorithm.TREE: Capability("Tree", _AR, frozenset(Protocol), True),
    Algorithm.RING: Capability("Ring", _ALL, frozenset(Protocol), False),
    Algorithm.COLLNET_DIRECT: Capability(
        "CollNetDirect", _AR | _AG_RS, _SIMPLE, True, (COLLNET_SUPPORT, COLLNET_NODES, COLLNET_DIRECT_NODE)),
    Algorithm.COLLNET_CHAIN: Capability("CollNetChain", _AR, _SIMPLE, True, (COLLNET_SUPPORT, COLLNET_NODES)),
    Algorithm.NVLS: Capability(
        "NVLS", _AR | _AG_RS, _SIMPLE, False, (NVLS_MULTICAST, NVLS_GPUS, NVLS_MULTI_NODE_SHARP)),
    Algorithm.NVLS_TREE: Capability(
        "NVLSTree", _AR, _SIMPLE, True, (NVLS_MULTICAST, NVLS_GPUS, NVLS_TREE_NODES)),
    Algorithm.PAT: Capability("PAT", _AG_RS, _SIMPLE, False, (PAT_ONE_GPU_PER_NODE,)),
    Algorithm.STRAGGLAR: Capability(
        None, _AR, _SIMPLE, False, (STRAGGLAR_EVEN_RANKS, STRAGGLAR_ANY_TO_ANY)),
}

#: The algorithms NCCL has, in NCCL's order.
NCCL_ALGORITHMS: tuple[Algorithm, ...] = tuple(a for a in Algorithm if CAPABILITIES[a].nccl_name)
#: NCCL_NUM_ALGORITHMS (7 since 2.23): the size of NCCL's per-algorithm tables, which index them by
#: id, so NCCL's algorithms must be ids 0..N-1 and a simulator-only one (StragglAR) comes after.
N_ALGORITHMS = len(NCCL_ALGORITHMS)
#: NCCL's names (src/init.cc @2.30.7): the tokens of NCCL_ALGO and what NCCL's logs print.
ALGORITHM_NCCL_NAMES: dict[Algorithm, str] = {a: str(CAPABILITIES[a].nccl_name) for a in NCCL_ALGORITHMS}

#: NCCL's spellings, upper-cased without separators, mapped to our enum member names (NCCL reads
#: its tokens case-insensitively, so ``nvlstree`` and ``CollNetDirect`` are names people write).
NCCL_ALIASES: dict[str, str] = {
    spelled.upper(): member.name
    for names in (COLLECTIVE_NCCL_NAMES, ALGORITHM_NCCL_NAMES, PROTOCOL_NCCL_NAMES)
    for member, spelled in names.items()
}

# ---------------------------------------------------------------------------------------------
# Policy-file tokens: the words rule lines use (the generated C header carries the same table)
# ---------------------------------------------------------------------------------------------

COLLECTIVE_TOKENS: dict[Collective, str] = {c: c.name.lower() for c in Collective}
ALGORITHM_TOKENS: dict[Algorithm, str] = {a: a.name.lower() for a in NCCL_ALGORITHMS}
PROTOCOL_TOKENS: dict[Protocol, str] = {p: p.name.lower() for p in Protocol}

# ---------------------------------------------------------------------------------------------
# nccl-tests' bus bandwidth (nccl_abi.md §3.9)
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
# NCCL's default tuning constants both the simulator and NCCL's model read
# (§3.2 ncclTunerConstantsDefaults, identical in 2.30.7 source and the 2.31.2 binary).
# Indexed like NCCL's: [algorithm][protocol], [link][algorithm][protocol], [compcap row][scale].
# ---------------------------------------------------------------------------------------------

#: baseLatencies [algo][proto], µs: a collective's fixed cost (launch, set-up). CollNet/NVLS are 0
#: because their hardware latencies already hold the whole fixed cost.
BASE_LATENCY_US = np.array([
    [6.8, 14.0, 8.4],   # Tree
    [6.6, 14.0, 8.4],   # Ring
    [0.0, 0.0, 0.0],    # CollNetDirect
    [0.0, 0.0, 0.0],    # CollNetChain
    [0.0, 0.0, 0.0],    # NVLS
    [0.0, 0.0, 0.0],    # NVLSTree
    [8.0, 8.0, 8.0],    # PAT
])

#: hwLatencies [link][algo][proto], µs: NVIDIA's measured per-hop protocol cost (flag polling,
#: fences; on NET the proxy round trip).
HW_LATENCY_US = np.array([
    [  # NVLINK
        [0.6, 1.25, 4.0], [0.6, 1.9, 3.4], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
        [0.0, 0.0, 25.0], [0.0, 0.0, 25.0], [0.0, 0.0, 4.0],
    ],
    [  # PCI
        [1.0, 1.9, 4.0], [1.0, 2.5, 5.7], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
        [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 4.0],
    ],
    [  # NET
        [5.0, 8.5, 14.0], [2.7, 4.0, 14.0], [0.0, 0.0, 31.0], [0.0, 0.0, 30.0],
        [0.0, 0.0, 18.0], [0.0, 0.0, 20.9], [0.0, 0.0, 14.0],
    ],
])

#: llMaxBws [row][scale], GB/s (row semantics §3.3: single node = compcap row, multi-node = CPU
#: row, 0 Intel / 1 AMD). Blackwell single node is 282.0 in 2.30.7 (282.4 only in 2.32.3).
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
#: PAT's bandwidth factor (§3.4: PAT x 0.75).
PAT_FACTOR = 0.75
#: CollNetDirect on Hopper+ (§3.4: x 0.85).
COLLNET_DIRECT_HOPPER_FACTOR = 0.85
