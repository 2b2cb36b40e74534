"""NVLS and NVLSTree: NVSwitch multicast with in-switch reduction (Hopper+; NCCL 2.30.7 nvls.cc).

Inside a node the switch does the arithmetic: for all-reduce every GPU's data crosses its NVLink
about once towards the switch and the result once back, so T = (1 + 1/ppn) S / (NVLink payload bw ·
nvlsEfficiency) — about half a ring's traffic, which is why NVLS's *bus* bandwidth (nccl-tests'
ring-based 2(n−1)/n factor) can exceed the link bandwidth; the bound checked for NVLS is
algbw ≤ link bandwidth instead.
All-gather / reduce-scatter move (n−1)/n · S per GPU through the switch.

Across nodes: multi-node NVLS needs in-network reduction (NVLS+SHARP): each GPU sends its 1/ppn
shard through its own NIC once. NVLSTree reduces in the switch and runs a tree across nodes on each
GPU's 1/ppn shard, every GPU through its own NIC: a tree's load per NIC (``tree.dtree_load``: 2 for
large trees, 1 on 2 nodes, where each node is one tree's root and the other's leaf) times S/ppn.
Latency: NCCL's NVLS hardware latencies (25 µs NVLink, 18/20.9 µs network; NCCL 2.30.7 src/graph/tuning.cc).
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import log2ceil, node_levels
from dynamiccl.simulator.phases import Cost, single, transfer
from dynamiccl.simulator.tree import dtree_load
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Collective, compcap_index, scale_index
from dynamiccl.system.topology import Topology


def _switch_rate(topology: Topology, proto: np.ndarray, channels: np.ndarray) -> np.ndarray:
    inner, _ = node_levels(topology)
    bw = inner[0].bw if inner else topology.tiers[0].bandwidth_GBps
    eff = nccl.NVLS_EFFICIENCY[compcap_index(topology.gpu.sm)]
    return np.minimum(bw * eff, channels * P.per_channel_gbps(topology, proto))


def _intra_latency(topology: Topology, algo: Algorithm, proto: np.ndarray) -> np.ndarray:
    inner, _ = node_levels(topology)
    lat = inner[0].latency_us if inner else 0.0
    return P.hop_latency_us("nvlink", lat, algo, proto)


def nvls(topology: Topology, collective: Collective, proto: np.ndarray, channels: np.ndarray) -> Cost:
    n, ppn = topology.nranks, topology.gpus_per_node
    nodes = n // ppn
    rate = _switch_rate(topology, proto, channels)
    lat = _intra_latency(topology, Algorithm.NVLS, proto)
    _, outer = node_levels(topology)
    if collective == Collective.ALLREDUCE:
        # Each GPU serves its whole buffer to the switch's reducing loads (S out) and multicasts its
        # reduced 1/ppn shard (S/ppn out); it receives its reduced shard and everyone's multicast
        # (S/ppn + S in): 1 + 1/ppn of S per direction.
        coef = transfer(1.0 + 1.0 / ppn, rate)
        inter = 1.0 / ppn                      # each GPU's shard crosses its NIC once
    else:
        coef = transfer((n - 1) / n, rate)
        inter = (nodes - 1) / (nodes * ppn)    # a node fetches what it lacks over all its NICs
    for level in outer:
        coef = np.maximum(coef, transfer(inter, np.full(proto.shape, level.port_bw)))
        lat = lat + P.hop_latency_us(level.link, level.latency_us, Algorithm.NVLS, proto)
    return single(lat, coef, P.base_latency_us(Algorithm.NVLS, proto))


def nvls_tree(topology: Topology, collective: Collective, proto: np.ndarray,
              channels: np.ndarray) -> Cost:
    n, ppn = topology.nranks, topology.gpus_per_node
    cc, sc = compcap_index(topology.gpu.sm), scale_index(topology.nodes)
    rate = _switch_rate(topology, proto, channels)
    coef = transfer(1.0, rate)
    lat = _intra_latency(topology, Algorithm.NVLS_TREE, proto)
    _, outer = node_levels(topology)
    for level in outer:
        load = dtree_load(level.size) / ppn
        coef = np.maximum(coef, transfer(load, np.full(proto.shape, level.port_bw)))
        hop = P.hop_latency_us(level.link, level.latency_us, Algorithm.NVLS_TREE, proto)
        lat = lat + 2 * log2ceil(level.size) * hop
    # NCCL's per-channel NVLSTree limit applies to its bus bandwidth, 2(n−1)/n × algbw.
    cap = channels * nccl.PER_CH_MAX_NVLS_TREE_BW[cc, sc]
    with np.errstate(divide="ignore"):
        coef = np.maximum(coef, transfer(2.0 * (n - 1) / n, cap))
    return single(lat, coef, P.base_latency_us(Algorithm.NVLS_TREE, proto))
