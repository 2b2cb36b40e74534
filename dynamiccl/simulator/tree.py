"""NCCL's Tree all-reduce: a chain inside each node below a double binary tree across nodes.

Latency (nccl_abi §3.5): the reduction climbs the chain and the tree and the result comes back down,
2 · ((ppn − 1) · intra hop + log2(nodes) · inter hop). Bandwidth: the whole buffer streams up
(reduce) and down (broadcast) at once; every rank of the chain sends S up and S down, and in a double
binary tree every node sends S/2 up each tree and S/2 to two children in the tree where it is
interior, so every rank's (and node's) egress carries 2S: T_bw = 2S / rate. Unlike a ring there is
no (n−1)/n saving, which is why a ring wins for large all-reduce on one node and the tree only wins
on latency (log2 instead of linear in the node count). Across nodes NCCL runs each channel's tree
through a different NIC on a switched fabric, as for rings.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.nccl import Algorithm
from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import levels, log2ceil
from dynamiccl.simulator.phases import Cost, single, transfer
from dynamiccl.topology import Topology


def tree_allreduce(topology: Topology, proto: np.ndarray, channels: np.ndarray) -> Cost:
    eff = P.PROTO_EFFICIENCY[proto]
    rate = np.minimum(channels * P.tree_per_channel_gbps(topology, proto), P.ll_cap(topology, proto))
    lat = np.zeros(proto.shape)
    for level in levels(topology):
        hop = P.hop_latency_us(level.link, level.latency_us, Algorithm.TREE, proto)
        if level.block == 1:  # the intra-node chain
            lat = lat + 2 * (level.size - 1) * hop
            link = level.bw
        else:                 # a binary tree over this level's groups
            lat = lat + 2 * log2ceil(level.size) * hop
            link = (np.minimum(channels, level.ports) if level.switched else 1) * level.bw
        rate = np.minimum(rate, link * eff)
    return single(lat, transfer(2.0, rate), P.base_latency_us(Algorithm.TREE, proto))
