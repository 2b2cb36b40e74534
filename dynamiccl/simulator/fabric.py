"""The tiers a collective actually crosses, with what one rank can push into each.

A tier of size 1 is never crossed, so only *levels* (tiers of size > 1) matter. For every level the
simulator needs three bandwidths:

* ``bw``: what one rank gets into the tier when it crosses alone (``bandwidth_GBps`` times the
  link's payload efficiency, ``protocols.LINK_EFFICIENCY``);
* ``port_bw``: what each rank gets when every rank of its group crosses at once — ``link_share``
  ranks share one port (seed 003's four PCIe GPUs behind one NIC);
* ``ports``: how many distinct ports a group below this level owns (a DGX H100 node: 8 NICs).

How many of those ports one flat ring can use is a property of the fabric. On a *switched* tier
(``switch``/``fully_connected``, e.g. a rail-optimised InfiniBand fat-tree) NCCL builds each channel's
ring through a different NIC, so ``c`` channels cross the tier on ``min(c, ports)`` ports. On a
*direct-connect* tier (``ring``/``torus2d``: every port is a fixed cable to one peer, seed 000's
ASTRA-sim ``ring_ring``) a flat ring is the seed's single embedded ``oneRing``: it crosses each
boundary on one cable and its channels pipeline along that same path. Algorithms that put every
rank on the tier at once (the hierarchical ring's inter-node phase, NVLSTree, CollNetDirect,
StragglAR) use every port, each rank at ``port_bw``.

Two properties of a tier's *path* change a level's bandwidth and per-hop latency:

* a PCIe node whose GPUs sit on several CPU sockets (path SYS) sends every ring edge between sockets
  across the socket interconnect, at the speed NCCL itself assigns it (``SOCKET_LINK_GBPS``); and
  beyond one PCIe switch (paths PHB/SYS) NCCL's default P2P level (PXB, src/graph/paths.cc) stops
  GPU peer-to-peer and stages every message through host memory (its SHM transport), which costs
  ``SHM_HOP_US`` more per hop;
* a network tier's transport kind adds its per-message overhead to every hop
  (``dynamiccl.system.transports``), or the overhead a calibration measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dynamiccl.simulator.protocols import LINK_EFFICIENCY
from dynamiccl.system.nccl import Collective, bus_factor
from dynamiccl.system.topology import Tier, Topology
from dynamiccl.system.transports import TRANSPORTS

#: Extra µs per hop when NCCL stages a GPU-to-GPU message through host memory (SHM transport): the
#: sender's posted write to host memory and the receiver's read of it are two PCIe crossings
#: (a posted write ~0.5 µs, a read round trip ~1 µs: typical PCIe Gen3/4 latencies).
SHM_HOP_US = 1.5


@dataclass(frozen=True)
class Level:
    size: int
    #: Ranks inside one group at this level (product of the inner tier sizes; 1 for the node tier).
    block: int
    bw: float
    port_bw: float
    ports: int
    latency_us: float
    link: str
    switched: bool
    #: Direct peer links of a fully connected (mesh) tier without a switch: a ring hop uses one.
    peers: int = 1


def _level(topology: Topology, tier: Tier, size: int, block: int) -> Level:
    payload = LINK_EFFICIENCY[tier.link]
    bw = tier.bandwidth_GBps * payload
    port_bw = (tier.bandwidth_GBps if block == 1 else tier.port_bandwidth_GBps) * payload
    if tier.path == "SYS":
        bw = min(bw, tier.pcie.socket_link_GBps)
        port_bw = min(port_bw, tier.pcie.socket_link_GBps)
    peers = size - 1 if tier.fabric == "fully_connected" and tier.link != "net" else 1
    return Level(size, block, bw, port_bw, max(1, block // tier.link_share),
                 hop_wire_latency_us(topology, tier), tier.link,
                 tier.fabric in ("switch", "fully_connected"), peers)


@lru_cache(maxsize=1024)
def levels(topology: Topology) -> tuple[Level, ...]:
    """The crossed tiers, innermost first."""
    out: list[Level] = []
    block = 1
    for tier in topology.tiers:
        if tier.size > 1:
            out.append(_level(topology, tier, tier.size, block))
        block *= tier.size
    return tuple(out)


def hop_wire_latency_us(topology: Topology, tier: Tier) -> float:
    """The tier's own latency plus what its path or transport adds per hop (module docstring)."""
    extra = SHM_HOP_US if tier.path in ("PHB", "SYS") else 0.0
    if tier.link == "net":
        cal = topology.calibration
        fitted = cal.transport_overhead_us if cal is not None else None
        extra += fitted.value if fitted is not None else TRANSPORTS[tier.transport].message_overhead_us
    return tier.latency_us + extra


def mesh_link_gbps(level: Level, channels: np.ndarray) -> np.ndarray | float:
    """What ``channels`` one-peer-per-hop channels get on a level: on a mesh each hop rides one
    direct peer link (1/peers of the GPU's links), and channels spread over at most ``peers`` of
    them; through a switch a single channel may use the whole port."""
    if level.peers == 1:
        return level.bw
    return np.minimum(channels, level.peers) * (level.bw / level.peers)


@lru_cache(maxsize=1024)
def ring_levels(topology: Topology) -> tuple[Level, ...]:
    """The levels a ring-over-ring runs along: :func:`levels` with every 2-D torus split into its
    two dimensions (``Topology.ring_dimensions``).

    A torus rank owns a pair of cables per dimension, each at the tier's per-link bandwidth, and a
    neighbour along a dimension is one cable away; so a ring along x and a ring along y each drive
    their own links, one link latency per hop, and can work at the same time (separate resources
    for the pipelined schedules). This is what lets a torus run a collective dimension by dimension
    in 2(a-1) + 2(b-1) steps instead of a flat ring's 2(ab-1).
    """
    out: list[Level] = []
    block = 1
    for tier in topology.tiers:
        parts = tier.dims if tier.fabric == "torus2d" and tier.dims else (tier.size,)
        for part in parts:
            if part > 1:
                out.append(_level(topology, tier, part, block))
            block *= part
    return tuple(out)


def node_levels(topology: Topology) -> tuple[tuple[Level, ...], tuple[Level, ...]]:
    """(levels inside a node, levels between nodes): the node is the innermost tier. With one
    GPU per node nothing is inside, and the first crossed level (block 1) is already the network."""
    lv = levels(topology)
    if topology.gpus_per_node == 1:
        return (), lv
    inner = tuple(lv_ for lv_ in lv if lv_.block == 1)
    return inner, tuple(lv_ for lv_ in lv if lv_.block > 1)


def _level_factor(collective: int, groups: int) -> float:
    """Fraction of S a group must move across its level's boundary, per rank-equivalent."""
    if collective in (Collective.BROADCAST, Collective.REDUCE):
        return 1.0
    return bus_factor(collective, groups)


@lru_cache(maxsize=4096)
def busbw_bound_gbps(topology: Topology, collective: int) -> float:
    """The most bus bandwidth any point-to-point algorithm can reach on this system.

    Two physical limits: a rank cannot move its bus traffic faster than all its ports together
    (its NVLink and its NIC may work at once, e.g. the pipelined phases of a hierarchical ring); and
    at an outer level with m groups, each group must push its share of the m-group collective
    through all its ports: busbw ≤ ports · bw · factor(n) / factor(m). For a single-path algorithm
    (a flat ring on one node) this is the bottleneck link's bandwidth. Tests check every action.
    """
    lv = ring_levels(topology)  # a torus rank's x and y links are separate ports
    if not lv:
        return topology.tiers[0].bandwidth_GBps
    n = topology.nranks
    bound = sum(level.bw for level in lv)
    for level in lv:
        if level.block > 1:
            factor = _level_factor(collective, n // level.block)
            bound = min(bound, level.ports * level.bw * bus_factor(collective, n) / factor)
    return bound


@lru_cache(maxsize=4096)
def in_network_algbw_bound_gbps(topology: Topology, collective: int) -> float:
    """Algorithm-bandwidth bound with in-network reduction (NVLS, NVLSTree, CollNet): the switch
    reduces, so each group sends its buffer across a level once and receives the result once;
    all-gather/reduce-scatter still move (m−1)/m of it."""
    n = topology.nranks
    bound = math.inf
    for level in levels(topology):
        groups = n // level.block
        aggregate = level.bw if level.block == 1 else level.ports * level.bw
        if collective == Collective.ALLREDUCE:
            bound = min(bound, aggregate)
        else:
            bound = min(bound, aggregate * groups / max(groups - 1, 1))
    return bound


def log2ceil(x: int) -> int:
    return max(0, math.ceil(math.log2(x))) if x > 1 else 0
