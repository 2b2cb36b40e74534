"""StragglAR's cost (seed 004): an all-reduce that hides a persistent straggler's delay.

Precondition: the n−1 punctual ranks reduce-scatter among themselves (a ring over n−1 ranks,
(n−2)/(n−1) · S per rank) while the straggler is late — this overlaps the delay d. Then
R(n) = n + log2 n − 2 rounds (seed 004 Theorem 1, power-of-two n), each round a matching in which
every rank exchanges one chunk of S/(n−1) with its partner. On an any-to-any fabric a round ends
when the slowest pair is done, so a round costs the slowest tier's hop latency and S/(n−1) at the
per-rank share of the slowest tier (every rank may cross it in the same round).

time from the first arrival = max(d, T_precondition) + R(n) · (α + S/(n−1) · β)
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import levels
from dynamiccl.simulator.phases import Cost, Phase, single, transfer
from dynamiccl.simulator.ring import channel_caps, flat_ring_latency, flat_ring_rate
from dynamiccl.simulator.stragglar_schedule import rounds
from dynamiccl.system.nccl import Algorithm, Collective
from dynamiccl.system.topology import Topology


def stragglar(topology: Topology, collective: Collective, proto: np.ndarray,
              channels: np.ndarray) -> Cost:
    n = topology.nranks
    base = P.base_latency_us(Algorithm.STRAGGLAR, proto)
    rate = channel_caps(topology, proto, channels)
    alpha = np.zeros(proto.shape)
    for level in levels(topology):
        bw = level.bw if level.block == 1 else level.port_bw
        rate = np.minimum(rate, bw * P.PROTO_EFFICIENCY[proto])
        alpha = np.maximum(alpha, P.hop_latency_us(level.link, level.latency_us, Algorithm.RING, proto))
    r = rounds(max(n, 2))
    cost = single(r * alpha, transfer(r / max(n - 1, 1), rate), base)
    pre_lat = base + flat_ring_latency(topology, proto, 1.0) * (n - 2) / max(n - 1, 1)
    pre_coef = transfer((n - 2) / max(n - 1, 1), flat_ring_rate(topology, proto, channels))
    cost.pre = Phase(pre_lat, pre_coef)
    return cost
