"""NCCL's Tree all-reduce: a chain inside each node below a double binary tree across nodes.

Latency (NCCL's tuning.cc): the reduction climbs the chain and the tree and the result comes back down,
2 · ((ppn − 1) · intra hop + log2(nodes) · inter hop). Bandwidth: the whole buffer streams up
(reduce) and down (broadcast) at once; every rank of the chain sends S up and S down (2S through its
port). Across nodes each of the two trees carries half the buffer, and a node sends S/2 per tree
edge it has (to its parent, and to each child on the way down): ``dtree_load`` counts, with NCCL's
own tree construction (src/graph/trees.cc: a binary tree and its mirror or shifted copy), the most
edges any node has in both trees. A large tree's interior nodes have 3 + 1 edges, so the busiest
NIC carries 2S; on 2 nodes each node is a root with one child in one tree and a leaf in the other,
2 edges: S per direction, which is why a 2-node tree beats the ring's NIC ceiling (NCCL's own model
doubles its 2-node NVLSTree bandwidth for the same reason, tuning.cc); 3 nodes carry 1.5S.
Unlike a ring there is no (n−1)/n saving, which is why a ring wins for large all-reduce on one node.
Across nodes NCCL runs each channel's tree through a different NIC on a switched fabric, as for rings.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import levels, log2ceil, mesh_link_gbps
from dynamiccl.simulator.phases import Cost, single, transfer
from dynamiccl.system.nccl import Algorithm, Collective
from dynamiccl.system.topology import Topology


def dtree_load(nodes: int) -> float:
    """The busiest node's share of S per direction in NCCL's double binary tree (module docstring),
    in closed form: any system size costs the same, where counting every node's edges took 29 s
    for 10^8 nodes.

    In NCCL's binary tree (src/graph/trees.cc) rank 0 has one child, an odd rank is a leaf (its
    parent only) and an even rank r > 0 has its parent and a child below, plus one above while
    r + 1 < n: 3 edges, or 2 for the last rank. The second tree pairs each rank with one of the
    other parity (mirrored for even n, shifted by one for odd n), so the busiest node holds
    3 + 1 = 4 edges once n >= 4, hence 2 S; 3 nodes peak at 2 + 1 (1.5 S), 2 nodes at 1 + 1 (S).
    ``tests/test_simulator_real_systems.py`` checks this against NCCL's construction node by node.
    """
    if nodes < 2:
        return 0.0
    return {2: 1.0, 3: 1.5}.get(nodes, 2.0)


def tree_allreduce(topology: Topology, collective: Collective, proto: np.ndarray,
                   channels: np.ndarray) -> Cost:
    eff = P.PROTO_EFFICIENCY[proto]
    rate = np.minimum(channels * P.tree_per_channel_gbps(topology, proto), P.ll_cap(topology, proto))
    lat = np.zeros(proto.shape)
    coef = np.zeros(proto.shape)
    for level in levels(topology):
        hop = P.hop_latency_us(level.link, level.latency_us, Algorithm.TREE, proto)
        if level.block == 1:  # the intra-node chain
            lat = lat + 2 * (level.size - 1) * hop
            link, load = mesh_link_gbps(level, channels), 2.0
        else:                 # a double binary tree over this level's groups
            lat = lat + 2 * log2ceil(level.size) * hop
            link = (np.minimum(channels, level.ports) if level.switched else 1) * level.bw
            load = dtree_load(level.size)
        coef = np.maximum(coef, transfer(load, np.minimum(rate, link * eff)))
    if not levels(topology):
        coef = transfer(2.0, rate)
    return single(lat, coef, P.base_latency_us(Algorithm.TREE, proto))
