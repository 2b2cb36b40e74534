"""NCCL's Ring (flat) and the simulator's ring-over-ring (hierarchical × scheduling × chunks).

Flat ring (NCCL Ring; seed 004 Table 1): all-reduce = reduce-scatter + all-gather around one ring,
2(n−1) steps, each moving S/n per rank; all-gather/reduce-scatter n−1 steps; broadcast/reduce a
pipelined chain (n−1 hops, the buffer streamed once). Bandwidth: a ring is a pipeline, paced by its
slowest hop — every step every rank sends S/n and the step ends when the slowest hop (usually the
inter-node one) is done, so the bytes term is 2(n−1)/n · S / B_bottleneck. This is the physical point
of "Seed 000, corrected": seed 000's ASTRA-sim charged the *intra*-node bandwidth on every flat-ring
hop. Latency: a chunk's dependency chain goes around the ring, so the hop latencies of the tiers it
crosses add up (NCCL's own ring latency has the same structure, NCCL 2.30.7 src/graph/tuning.cc).

Ring-over-ring: one ring per tier (per dimension of a 2-D torus, ``fabric.ring_levels``: the
torus's dimension-wise collectives); every hop is charged at the bandwidth and latency of the tier it
crosses, and every rank takes part in its tier's ring at once (so an outer tier is driven through
all its ports, each rank at its share ``port_bw``).
"""

from __future__ import annotations

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.fabric import Level, levels, mesh_link_gbps, ring_levels
from dynamiccl.simulator.phases import Cost, Phase, single, transfer
from dynamiccl.system.knobs import Schedule
from dynamiccl.system.nccl import Algorithm, Collective
from dynamiccl.system.topology import Topology

AR, RS, AG = "allreduce", "reducescatter", "allgather"


def pass_hops(topology: Topology) -> list[tuple[Level, int]]:
    """Hops one pass around a flat ring (n−1 hops) makes at each level.

    A level with groups of ``block`` ranks, ``size`` of them per parent group, owns
    n/block − n/(block·size) of the ring's edges (a chain through each parent group); the top level
    also owns the wrap-around edge, which a pass of n−1 hops does not use. For two tiers this is
    NCCL's split: n − nodes intra-node hops and nodes − 1 inter-node hops per pass (tuning.cc).
    """
    n = topology.nranks
    return [(level, n // level.block - n // (level.block * level.size)) for level in levels(topology)]


def channel_caps(topology: Topology, proto: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """The channels' own limit: each channel is one CTA (``per_channel_gbps``); LL also obeys
    NCCL's whole-collective ``llMaxBws``."""
    return np.minimum(channels * P.per_channel_gbps(topology, proto), P.ll_cap(topology, proto))


def flat_ring_rate(topology: Topology, proto: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Payload GB/s the slowest hop of a flat ring sustains (= the ring's bus bandwidth)."""
    eff = P.PROTO_EFFICIENCY[proto]
    rate = channel_caps(topology, proto, channels)
    for level in levels(topology):
        if level.block == 1:
            link = np.broadcast_to(mesh_link_gbps(level, channels), proto.shape)
        elif level.switched:
            link = np.minimum(channels, level.ports) * level.bw
        else:
            link = np.full(proto.shape, level.bw)
        rate = np.minimum(rate, link * eff)
    return rate


def flat_ring_latency(topology: Topology, proto: np.ndarray, passes: float) -> np.ndarray:
    lat = np.zeros(proto.shape)
    for level, hops in pass_hops(topology):
        lat = lat + hops * P.hop_latency_us(level.link, level.latency_us, Algorithm.RING, proto)
    return passes * lat


def flat_ring(topology: Topology, collective: Collective, proto: np.ndarray,
              channels: np.ndarray) -> Cost:
    n = topology.nranks
    base = P.base_latency_us(Algorithm.RING, proto)
    if n == 1:  # NCCL's local copy: one pass over the buffer at the GPU's own bandwidth
        local = topology.tiers[0]
        copy_gbps = local.bandwidth_GBps * P.LINK_EFFICIENCY[local.link]
        return single(np.zeros(proto.shape), transfer(1.0, copy_gbps), base)
    rate = flat_ring_rate(topology, proto, channels)
    if collective == Collective.ALLREDUCE:
        passes, factor = 2.0, 2.0 * (n - 1) / n
    elif collective in (Collective.ALLGATHER, Collective.REDUCESCATTER):
        passes, factor = 1.0, (n - 1) / n
    else:  # broadcast / reduce: pipelined chain, the whole buffer streams through every hop once
        passes, factor = 1.0, 1.0
    return single(flat_ring_latency(topology, proto, passes), transfer(factor, rate), base)


def _level_rate(topology: Topology, level: Level, proto: np.ndarray, channels: np.ndarray) -> np.ndarray:
    """Per-rank payload rate when every rank of the level runs its own ring at once."""
    bw = level.bw if level.block == 1 else level.port_bw
    return np.minimum(channel_caps(topology, proto, channels), bw * P.PROTO_EFFICIENCY[proto])


def _plan(collective: Collective, schedule: Schedule, sizes: list[int]) -> list[tuple[str, int, float]]:
    """(kind, level, data factor) per phase; data factor = the buffer the phase works on, as a
    fraction of S (for AG the buffer gathered, for RS the buffer scattered, for AR the buffer)."""
    top = len(sizes) - 1
    below = [int(np.prod(sizes[:lv])) for lv in range(top + 1)]      # ranks below each level
    above = [int(np.prod(sizes[lv + 1:])) for lv in range(top + 1)]  # groups above each level
    inward = list(range(top + 1))
    if collective == Collective.ALLREDUCE:
        if schedule == Schedule.BASELINE:  # a full all-reduce in every tier, one after the other
            return [(AR, lv, 1.0) for lv in inward]
        down = [(RS, lv, 1.0 / below[lv]) for lv in inward[:-1]]
        up = [(AG, lv, 1.0 / below[lv]) for lv in reversed(inward[:-1])]
        return down + [(AR, top, 1.0 / below[top])] + up
    if collective == Collective.ALLGATHER:
        if schedule == Schedule.BASELINE:  # inner tier first; then every rank gathers whole blocks
            return [(AG, lv, 1.0 / above[lv]) for lv in inward]
        return [(AG, lv, 1.0 / below[lv]) for lv in reversed(inward)]
    if schedule == Schedule.BASELINE:      # reduce-scatter: the mirror image of all-gather
        return [(RS, lv, 1.0 / above[lv]) for lv in reversed(inward)]
    return [(RS, lv, 1.0 / below[lv]) for lv in inward]


def hierarchical_ring(topology: Topology, collective: Collective, proto: np.ndarray,
                      channels: np.ndarray, schedule: np.ndarray, chunks: np.ndarray) -> Cost:
    """Ring-over-ring phases; BASELINE and BW_AWARE rows get different phase lists, so the two
    schedules are laid out as phase slots with zero cost where a schedule has fewer phases."""
    lv = ring_levels(topology)
    sizes = [level.size for level in lv]
    rates = [_level_rate(topology, level, proto, channels) for level in lv]
    hops = [P.hop_latency_us(level.link, level.latency_us, Algorithm.RING, proto) for level in lv]
    plans = {s: _plan(collective, s, sizes) for s in Schedule}
    n_slots = max(len(p) for p in plans.values())
    lat = np.zeros((n_slots, proto.size))
    coef = np.zeros((n_slots, proto.size))
    res = np.zeros((n_slots, proto.size), dtype=np.int64)
    for sched, plan in plans.items():
        rows = schedule == sched
        for slot, (kind, lv, data) in enumerate(plan):
            k = sizes[lv]
            steps = 2 * (k - 1) if kind == AR else k - 1
            factor = (2.0 if kind == AR else 1.0) * (k - 1) / k * data
            lat[slot, rows] = steps * hops[lv][rows]
            coef[slot, rows] = transfer(factor, rates[lv][rows])
            res[slot, rows] = lv
    phases = [Phase(lat[i], coef[i], res[i]) for i in range(n_slots)]
    return Cost(phases, P.base_latency_us(Algorithm.RING, proto), chunks=chunks.astype(np.float64))
