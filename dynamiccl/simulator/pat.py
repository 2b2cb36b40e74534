"""PAT (Parallel Aggregated Trees) all-gather / reduce-scatter, one GPU per node (NCCL 2.30.7 src/init.cc).

A Bruck-like schedule: log2(n) rounds of latency instead of the ring's n−1, the same (n−1)/n · S of
traffic per rank, at 75 % of the link's bandwidth (NCCL's own PAT factor, src/graph/tuning.cc).
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import levels, log2ceil
from dynamiccl.simulator.phases import Cost, single, transfer
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Collective
from dynamiccl.system.topology import Topology


def pat(topology: Topology, collective: Collective, proto: np.ndarray, channels: np.ndarray) -> Cost:
    n = topology.nranks
    rate = channels * P.per_channel_gbps(topology, proto)
    lat = np.zeros(proto.shape)
    for level in levels(topology):
        bw = level.bw if level.block == 1 else level.port_bw
        rate = np.minimum(rate, bw * P.PROTO_EFFICIENCY[proto])
        lat = lat + log2ceil(level.size) * P.hop_latency_us(level.link, level.latency_us,
                                                            Algorithm.PAT, proto)
    return single(lat, transfer((n - 1) / n, rate * nccl.PAT_FACTOR), P.base_latency_us(Algorithm.PAT, proto))
