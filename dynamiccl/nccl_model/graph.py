"""What NCCL learns about a communicator at init: its topology-search graphs and channel counts.

NCCL's cost model (``tables.py``) never sees link bandwidths directly; it sees, per algorithm, the
graph its topology search found: a channel count and the per-channel speeds ``bwIntra``/ ``bwInter``
(NCCL 2.30.7 ``src/graph/tuning.cc``, ``src/graph/search.cc``). This module derives those from a
:class:`Topology` by emulating the search, so the model inherits NCCL's quantisation (speeds come
from fixed lists, channels are whole) instead of using the topology's raw bandwidth.

Mapping from our Topology to NCCL's inputs (each a documented choice):

* ``nNodes = topology.nodes``, ``nRanks = topology.nranks``, ``ppn = gpus_per_node`` (the same
  notion of "node" as the knob space's validity rules, so NCCL's pick is always a valid action).
* Compute capability row from ``gpu.arch``: sm70/75 Volta, sm80/86/89 Ampere, sm90 Hopper, sm100
  Blackwell (tuning.cc). The host CPU is Intel x86 (llMaxBws row 0, 1 µs net overhead, tuning.cc).
* The intra-node tier is ``tiers[0]``; NCCL's intra link class is NVLINK for ``link: nvlink`` and
  PCI otherwise (a network-linked innermost tier is no NVLink either).
* The NET tier is ``tiers[1]``, the first tier beyond the node, even in 3+-tier systems: NCCL
  reads its NIC's port speed and never sees the fabric beyond it (oversubscription included).
  NICs per node = ceil(ppn / link_share), each of ``bandwidth_GBps``.
* NCCL measures NVLink as (number of links) x (its per-link constant, src/graph/topo.h), not as the marketing
  total: an H100 with 18 links is 18 x 20.6 = 370.8 GB/s to NCCL (the ``totalBw 370.8`` NCCL
  prints on sm90 NVSwitch nodes), an A100 12 x 20 = 240. The link count is the tier bandwidth
  over the generation's physical lane rate. PCIe and NIC bandwidths are taken as given.
* A PCIe node's path type (``Tier.path``: PIX, PXB, PHB, SYS from its ``pcie`` tree) is what
  NCCL's topology detection finds; a path is as fast as its slowest link, so on SYS every GPU pair
  that crosses sockets gets the socket interconnect's bandwidth (NCCL's QPI/AMD/ARM constants,
  src/graph/topo.h) and the search lays out its channels at that speed. Whether NCCL then uses P2P or its
  host-memory SHM transport (P2P level PXB by default) does not enter its cost model.
* NVLS support = ``features.nvls`` and sm90+ and ppn >= 2; CollNet = ``features.collnet`` on more
  than one node; CollNetDirect additionally needs an NVSwitch node (``fabric: switch`` over
  NVLink); PAT auto-enable = one GPU per node (nNodes == nRanks, src/init.cc).
* LL128 default rule (tuning.cc) = ``Topology.ll128_enabled`` (sm70+, NVLink or one GPU per node,
  and across nodes the network tier's ``nic_path`` at most PXB: NCCL's ``typeInter``).
  ``latencyInter`` = 0 (the IB/socket net plugins report no latency property). Channels of a
  graph are all alike (``sameChannels``).

The search emulation (src/graph/search.cc @2.30.7, restated): a channel at speed ``s`` consumes
``s`` on every link it crosses, so a link (or NIC) of bandwidth B carries floor(B/s) channels.
Pass 1 starts at the highest listed speed the GPU's best path allows, keeps the solution with the most
bandwidth (channels x speed), stops when that is optimal (maximum channels, or channels x speed >=
the GPU's total NVLink/PCI bandwidth) and otherwise lowers the speed while the next one is above
0.49 x the best speed. Then fast graphs are duplicated (twice the channels at half the speed).
Pass 2 raises the speed at that channel count (rings), the inter speed (NVLS) or the intra speed
up to twice the inter speed (trees). The tree graph must have as many channels as the ring graph.
Multi-node searches use the inter speed list for both speeds. An NVLS channel (one head GPU)
costs ``s`` on every GPU's NVSwitch link and ``2s`` on its head's (heads are at most 32).

Communicator channels (src/graph/connect.cc @2.30.7): twice the
search channels, x1.5 with CollNet when the chain graph is faster inside than across, doubled on
Hopper+ multi-node when the ring's bwIntra > 45 and fewer than 16, then clamped to
[max(NCCL_MIN_NCHANNELS, minCTAs), min(NCCL_MAX_NCHANNELS, maxCTAs)] = [1, 64].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dynamiccl.nccl_model import constants as K
from dynamiccl.nccl_model.releases import DEFAULT as DEFAULT_RELEASE
from dynamiccl.nccl_model.releases import Release
from dynamiccl.system import nccl
from dynamiccl.system.nccl import (
    COLLNET_NODES,
    COLLNET_SUPPORT,
    NVLS_GPUS,
    NVLS_MULTICAST,
    PAT_ONE_GPU_PER_NODE,
    compcap_index,
)
from dynamiccl.system.topology import Topology

_UNLIMITED = 1 << 20
#: Link-count slack so that e.g. 240 GB/s carries exactly six 40 GB/s channels in float math.
_EPS = 1e-6

Capacity = Callable[[float, float], int]


@dataclass(frozen=True)
class Graph:
    """One algorithm's search result: the inputs ``ncclTopoTuneModel`` reads."""

    n_channels: int
    bw_intra: float
    bw_inter: float
    #: NCCL's ``typeIntra == NVLink`` test: picks the NVLINK or PCI latency row.
    nvlink_intra: bool = False
    #: "tree" pattern: all NIC traffic through one GPU (Tree bandwidth x0.85).
    tree_pattern: bool = False


NO_GRAPH = Graph(0, 0.0, 0.0)


@dataclass(frozen=True)
class NcclSystem:
    """Everything NCCL knows about the communicator when it builds its tables."""

    nranks: int
    nnodes: int
    ppn: int
    sm: int
    compcap: int
    #: Graphs indexed by NCCL algorithm id, the one each algorithm's entry names (NVLS and
    #: NVLSTree share one; PAT uses the tree's).
    graphs: tuple[Graph, ...]
    #: Channels a collective starts from before the per-size reduction (``collChannels``).
    comm_channels: int
    nvls_channels: int
    nvls_support: bool
    collnet_support: bool
    collnet_direct_nvswitch: bool
    pat_enabled: bool
    ll128_enabled: bool
    #: Heads of the CollNetDirect graph (its per-collective channel rule scales by them).
    collnet_heads: int
    cpu: str = "intel"
    latency_inter_us: float = 0.0
    same_channels: bool = True
    #: The NCCL release whose constants the tables use (:mod:`~dynamiccl.nccl_model.releases`).
    release: Release = DEFAULT_RELEASE


@dataclass(frozen=True)
class _Fabric:
    """The links NCCL's search spends bandwidth on, in NCCL's own units (GB/s)."""

    ppn: int
    multi_node: bool
    intra_ports: int
    intra_port_bw: float
    nics: int
    nic_bw: float

    @property
    def total_bw(self) -> float:
        """NCCL's ``totalBw``: a GPU's summed NVLink (or its PCI) bandwidth."""
        return self.intra_ports * self.intra_port_bw

    @property
    def max_bw(self) -> float:
        """NCCL's ``maxBw``: the best single path (GPU to GPU, or GPU to NIC across nodes)."""
        if self.multi_node:
            return self.nic_bw if self.ppn == 1 else min(self.nic_bw, self.intra_port_bw)
        return self.intra_port_bw

    def intra_cap(self, speed: float) -> int:
        """Channels the GPUs' intra-node links carry. A single-node ring closes (ppn hops per
        channel); a multi-node one enters and leaves through NICs (ppn-1 hops), and rotating the
        entry GPU over channels lets ppn channels share ppn-1 uses of each GPU's link."""
        if self.ppn == 1:
            return _UNLIMITED
        links = self.intra_ports * math.floor(self.intra_port_bw / speed + _EPS)
        return links + links // (self.ppn - 1) if self.multi_node else links

    def nic_cap(self, speed: float) -> int:
        if not self.multi_node:
            return _UNLIMITED
        return self.nics * math.floor(self.nic_bw / speed + _EPS)

    def chain_cap(self, s_intra: float, s_inter: float) -> int:
        """Rings and trees: every channel crosses each GPU's links and one NIC each way."""
        return min(self.intra_cap(s_intra), self.nic_cap(s_inter))

    def nvls_cap(self, s_intra: float, s_inter: float) -> int:
        """Heads n such that a head's NVSwitch link carries (n+1)·s (one NIC per head across)."""
        heads = math.floor(self.intra_port_bw / s_intra + _EPS) - 1
        return max(0, min(heads, self.ppn, nccl.NVLS_MAX_ARITY, self.nic_cap(s_inter)))

    def collnet_direct_cap(self, s_intra: float, s_inter: float) -> int:
        """Heads with their own NIC (approximation: the reference does not detail this search)."""
        return min(nccl.COLLNET_DIRECT_MAX_HEADS, self.ppn, self.nic_cap(s_inter),
                   self.intra_cap(s_intra))


def nvlink_link_bw(sm: int) -> float:
    """NCCL's per-link NVLink bandwidth for the minimum compute capability (src/graph/topo.h)."""
    if sm == 86:
        return K.NVLINK_BW[86]
    return K.NVLINK_BW[max(cc for cc in K.NVLINK_BW if cc != 86 and cc <= sm)]


def _intra_view(topology: Topology) -> tuple[int, float]:
    """(ports, bandwidth per port) of one GPU's intra-node links as NCCL counts them."""
    tier = topology.tiers[0]
    total = tier.bandwidth_GBps
    if tier.link == "nvlink":
        sm = topology.gpu.sm
        links = max(1, round(total / K.NVLINK_LANE_GBPS[sm]))
        total = links * nvlink_link_bw(sm)
    if tier.path == "SYS":  # NCCL's path bandwidth is its slowest link: the socket interconnect
        total = min(total, tier.pcie.socket_link_GBps)
    ppn = tier.size
    ports = {"switch": 1, "ring": 2 if ppn > 2 else 1, "torus2d": 4 if ppn > 4 else 2,
             "fully_connected": max(1, ppn - 1)}[tier.fabric]
    return ports, total / ports


def _fabric(topology: Topology) -> _Fabric:
    ppn, nodes = topology.gpus_per_node, topology.nodes
    ports, port_bw = _intra_view(topology)
    if topology.nranks == 1:
        return _Fabric(1, False, 1, K.LOC_BW, 0, 0.0)
    if nodes == 1:
        return _Fabric(ppn, False, ports, port_bw, 0, 0.0)
    net = topology.tiers[1]
    nics = -(-ppn // net.link_share)
    return _Fabric(ppn, True, ports, port_bw, nics, net.bandwidth_GBps)


def _speeds(sm: int, multi_node: bool, release: Release = DEFAULT_RELEASE) -> tuple[float, ...]:
    family = "sm100" if sm >= 100 else "sm90" if sm >= 90 else "default"
    return tuple(float(s) for s in release.search_speeds(family, "inter" if multi_node else "intra"))


@dataclass
class _Best:
    n: int = 0
    intra: float = 0.0
    inter: float = 0.0


def _better(kind: str, n: int, intra: float, inter: float, best: _Best, ngpus: int) -> bool:
    """NCCL's graph comparison: NVLS wants more heads, everything else more channels x bwIntra."""
    if kind == "nvls":
        return (best.n < n <= ngpus) or n * inter > best.n * best.inter
    return n * intra > best.n * best.intra


def search(
    kind: str,
    speeds: tuple[float, ...],
    capacity: Capacity,
    fabric: _Fabric,
    min_channels: int,
    max_channels: int,
    sm: int,
) -> Graph:
    """Emulates ``ncclTopoCompute`` for one pattern: ``kind`` is ring, tree or nvls."""
    last = len(speeds) - 1
    ngpus = fabric.ppn
    start_total = fabric.total_bw * (ngpus / (ngpus - 1) if ngpus > 1 and kind != "ring" else 1)
    i = 0
    while (speeds[i] > fabric.max_bw or speeds[i] * min_channels > start_total) and i < last:
        i += 1
    best = _Best()
    while True:  # pass 1: find a solution, lowering the speed
        s = speeds[i]
        n = min(max_channels, capacity(s, s))
        if n >= min_channels and _better(kind, n, s, s, best, ngpus):
            best = _Best(n, s, s)
        if best.n and (best.n == max_channels or best.n * best.inter >= fabric.total_bw):
            break
        if i < last and (best.n == 0 or speeds[i + 1] / best.inter > K.SEARCH_SPEED_RATIO):
            i += 1
            continue
        break
    if best.n == 0:
        return NO_GRAPH if kind == "nvls" else Graph(1, K.FALLBACK_BW, K.FALLBACK_BW)
    if kind != "nvls":
        best = _duplicate(best, max_channels, sm)
    return _raise_speed(kind, speeds, capacity, best, max_channels)


def _duplicate(best: _Best, max_channels: int, sm: int) -> _Best:
    """``ncclTopoDupChannels``: fast graphs get twice the channels at a fraction of the speed."""
    if best.intra < K.DUP_MIN_BW:
        return best
    if sm > 80 and best.intra < K.DUP_SLOW_BW and best.n > K.DUP_SLOW_MAX_CHANNELS:
        return best
    dup = min(2 * best.n, max_channels)
    factor = -(-dup // best.n)
    return _Best(dup, best.intra / factor, best.inter / factor)


def _raise_speed(
    kind: str, speeds: tuple[float, ...], capacity: Capacity, best: _Best, max_channels: int
) -> Graph:
    """Search pass 2: try faster speeds keeping at least the channels found."""
    i = 0
    while speeds[i] > best.inter and i < len(speeds) - 1:
        i += 1
    tmp_intra = tmp_inter = speeds[i]
    need = best.n
    while i > 0:
        if kind == "ring":
            i -= 1
            tmp_intra = tmp_inter = speeds[i]
        elif kind == "nvls" and tmp_inter == best.inter and tmp_inter < 2 * tmp_intra:
            i -= 1
            tmp_inter = speeds[i]
            max_channels = need
        elif kind == "tree" and tmp_intra == best.intra and tmp_intra < 2 * tmp_inter:
            i -= 1
            tmp_intra = speeds[i]
        else:
            break
        n = min(max_channels, capacity(tmp_intra, tmp_inter))
        if n >= need and _better(kind, n, tmp_intra, tmp_inter, best, _UNLIMITED):
            best = _Best(n, tmp_intra, tmp_inter)
    return Graph(best.n, best.intra, best.inter)


def _with(graph: Graph, nvlink: bool, tree_pattern: bool = False) -> Graph:
    return Graph(graph.n_channels, graph.bw_intra, graph.bw_inter, nvlink, tree_pattern)


def derive_system(topology: Topology, release: Release = DEFAULT_RELEASE) -> NcclSystem:
    """Runs NCCL's init-time decisions for ``topology`` (see the module docstring) as ``release``
    makes them."""
    sm, ppn, nodes, nranks = topology.gpu.sm, topology.gpus_per_node, topology.nodes, topology.nranks
    fabric = _fabric(topology)
    speeds = _speeds(sm, fabric.multi_node, release)
    nvlink = topology.tiers[0].link == "nvlink" and ppn > 1
    nvswitch = topology.tiers[0].link == "nvlink" and topology.tiers[0].fabric == "switch"
    nvls_support = NVLS_MULTICAST.met_by(topology) and NVLS_GPUS.met_by(topology)
    collnet = COLLNET_SUPPORT.met_by(topology) and COLLNET_NODES.met_by(topology)

    ring = search("ring", speeds, fabric.chain_cap, fabric, 1, K.RING_SEARCH_MAX_CHANNELS, sm)
    tree = search("tree", speeds, fabric.chain_cap, fabric, ring.n_channels, ring.n_channels, sm)
    tree = _with(tree, nvlink, tree_pattern=ppn == 1)
    nvls = NO_GRAPH
    if nvls_support:
        heads = min(ppn, nccl.NVLS_MAX_ARITY)
        nvls = search("nvls", speeds, fabric.nvls_cap, fabric, 1 if fabric.multi_node else heads,
                      heads, sm)
        nvls = _with(nvls, True)
    chain = direct = NO_GRAPH
    if collnet:
        chain = _with(tree, nvlink)
        direct = search("tree", speeds, fabric.collnet_direct_cap, fabric, 1,
                        min(nccl.COLLNET_DIRECT_MAX_HEADS, ppn), sm)
        direct = _with(direct, nvlink)
    by_kind = {"tree": tree, "ring": _with(ring, nvlink), "collnet_direct": direct,
               "collnet_chain": chain, "nvls": nvls}
    graphs = tuple(by_kind[nccl.ALGORITHM_SPECS[a].nccl_graph] for a in nccl.NCCL_ALGORITHMS)
    return NcclSystem(
        nranks=nranks, nnodes=nodes, ppn=ppn, sm=sm, compcap=compcap_index(sm), graphs=graphs,
        comm_channels=_comm_channels(ring, tree, chain, collnet, sm, nodes, ppn),
        nvls_channels=_nvls_channels(sm, nodes) if nvls.n_channels else 0,
        nvls_support=nvls.n_channels > 0, collnet_support=collnet,
        collnet_direct_nvswitch=nvswitch, pat_enabled=PAT_ONE_GPU_PER_NODE.met_by(topology) and nranks > 1,
        ll128_enabled=topology.ll128_enabled, collnet_heads=direct.n_channels, release=release,
    )


def _comm_channels(ring: Graph, tree: Graph, chain: Graph, collnet: bool, sm: int, nodes: int,
                   ppn: int) -> int:
    """``ncclTopoPostset`` (src/graph/connect.cc @2.30.7) with default channel limits."""
    nc = min(nccl.MAX_CHANNELS, 2 * min(ring.n_channels, tree.n_channels))
    if collnet and chain.bw_intra > chain.bw_inter and ppn > 1:
        nc = min(nccl.MAX_CHANNELS, nc + nc // 2)
    if (sm >= 90 and nodes > 1 and ring.bw_intra > K.HOPPER_DOUBLE_MIN_BW
            and nc < K.HOPPER_DOUBLE_BELOW_CHANNELS):
        nc = min(nccl.MAX_CHANNELS, 2 * nc)
    return max(K.DEFAULT_MIN_CHANNELS, min(nc, nccl.MAX_CHANNELS))


def _nvls_channels(sm: int, nodes: int) -> int:
    """NVLS channels (src/init.cc): 16 on SM90; 24 (one node) or 32 (multi-node) on SM100; clamped
    to [1, 64]."""
    if sm >= 100:
        nc = K.NVLS_CHANNELS_SM100_MULTI if nodes > 1 else K.NVLS_CHANNELS_SM100_1NODE
    else:
        nc = K.NVLS_CHANNELS_SM90
    return max(K.DEFAULT_MIN_CHANNELS, min(nc, nccl.MAX_CHANNELS))
