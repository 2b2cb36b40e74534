"""CollNet (in-network reduction, e.g. SHARP): the network switch reduces, so each byte of a node's
buffer crosses the network once each way instead of the ring's 2(n−1)/n.

CollNetDirect (NVSwitch node, ≤ 8 GPUs): the GPUs reduce-scatter inside the node, each sends its
1/ppn shard through its own NIC to the switch and receives the reduced shard, then all-gather
inside; the phases pipeline, so T_bw = max(intra, inter). NCCL measured it 15 % below that on Hopper
(× 0.85, NCCL 2.30.7 src/graph/tuning.cc). CollNetChain: a chain inside the node (every GPU sends S
up and S down) whose head sends the whole buffer to the switch; NCCL spreads the channels' heads
over the NICs. Latency formulas: tuning.cc (Direct 2·(intra + 0.4 µs·(ppn−1)) + inter; Chain
2(ppn−1)·intra + inter). Bound checked: algbw ≤ min(NVLink bw, node's NIC aggregate), since data
crosses each once.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import node_levels
from dynamiccl.simulator.phases import Cost, single, transfer
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Collective, compcap_index
from dynamiccl.system.topology import Topology


def _intra(topology: Topology, algo: Algorithm, proto: np.ndarray, channels: np.ndarray):
    inner, _ = node_levels(topology)
    bw = inner[0].bw if inner else topology.tiers[0].bandwidth_GBps
    lat = inner[0].latency_us if inner else 0.0
    link = inner[0].link if inner else "nvlink"
    rate = np.minimum(bw * P.PROTO_EFFICIENCY[proto], channels * P.per_channel_gbps(topology, proto))
    return rate, P.hop_latency_us(link, lat, algo, proto)


def collnet_direct(topology: Topology, collective: Collective, proto: np.ndarray,
                   channels: np.ndarray) -> Cost:
    ppn, nodes = topology.gpus_per_node, topology.nodes
    rate, hop = _intra(topology, Algorithm.COLLNET_DIRECT, proto, channels)
    if collective == Collective.ALLREDUCE:
        coef, inter = transfer(2.0 * (ppn - 1) / ppn, rate), 1.0 / ppn
    else:
        coef, inter = transfer((ppn - 1) / ppn, rate), (nodes - 1) / (nodes * ppn)
    lat = 2 * (min(1, ppn - 1) * hop + 0.4 * (ppn - 1))
    _, outer = node_levels(topology)
    for level in outer:
        coef = np.maximum(coef, transfer(inter, np.full(proto.shape, level.port_bw)))
        lat = lat + P.hop_latency_us(level.link, level.latency_us, Algorithm.COLLNET_DIRECT, proto)
    if compcap_index(topology.gpu.sm) >= 2:
        coef = coef / nccl.COLLNET_DIRECT_HOPPER_FACTOR
    return single(lat, coef, P.base_latency_us(Algorithm.COLLNET_DIRECT, proto))


def collnet_chain(topology: Topology, collective: Collective, proto: np.ndarray,
                  channels: np.ndarray) -> Cost:
    ppn = topology.gpus_per_node
    rate, hop = _intra(topology, Algorithm.COLLNET_CHAIN, proto, channels)
    coef = transfer(2.0, rate)
    lat = 2 * (ppn - 1) * hop
    _, outer = node_levels(topology)
    for level in outer:
        ports = np.minimum(channels, level.ports) if level.switched else np.ones(proto.shape)
        coef = np.maximum(coef, transfer(1.0, ports * level.bw))
        lat = lat + P.hop_latency_us(level.link, level.latency_us, Algorithm.COLLNET_CHAIN, proto)
    return single(lat, coef, P.base_latency_us(Algorithm.COLLNET_CHAIN, proto))
