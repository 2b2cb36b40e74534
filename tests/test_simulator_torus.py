"""Seed 001 (issue 14): dimension-wise collectives on a 2-D torus against a one-hop switch."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.config_loader import ConfigError
from dynamiccl.simulator import simulate
from dynamiccl.simulator.fabric import busbw_bound_gbps, ring_levels
from dynamiccl.simulator.protocols import LINK_EFFICIENCY, base_latency_us, hop_latency_us
from dynamiccl.system.knobs import (
    ACTIONS,
    Algorithm,
    Collective,
    Config,
    ConfigBatch,
    Hierarchy,
    Protocol,
    Schedule,
    invalid_reason,
)
from dynamiccl.system.topology import load_topology, topology_from_dict

ALL = ConfigBatch.all_actions()
GIB = 2**30
FLAT_RING = np.array([c.algorithm == Algorithm.RING and c.hierarchy == Hierarchy.FLAT for c in ACTIONS])
BULK = np.array([c.algorithm != Algorithm.STRAGGLAR for c in ACTIONS])
ONE_CHUNK = BULK & np.array([c.chunks == 1 for c in ACTIONS])
LINK_PAYLOAD = 50.0 * LINK_EFFICIENCY["net"]


def _fabrics(n: int):
    return load_topology("switch", gpus_per_node=n), load_topology("torus2d", gpus_per_node=n)


def _ratio(n: int, nbytes: float, family: np.ndarray = BULK,
           collective: Collective = Collective.ALLREDUCE) -> float:
    switch, torus = (np.where(family, simulate(t, int(collective), nbytes, ALL).time_us[0], np.inf).min()
                     for t in _fabrics(n))
    return float(switch / torus)


def _zero_size_us(topo, config: Config, collective: Collective = Collective.ALLREDUCE) -> float:
    return float(simulate(topo, int(collective), 0.0, ConfigBatch.from_configs([config])).time_us[0, 0])


def test_a_switch_hop_is_two_cables_and_a_torus_hop_one() -> None:
    switch, torus = _fabrics(64)
    assert switch.tiers[0].latency_us == pytest.approx(2 * 0.5)
    assert torus.tiers[0].latency_us == pytest.approx(0.5)


def test_a_tier_gives_exactly_one_kind_of_latency() -> None:
    tier = {"name": "t", "size": 4, "fabric": "switch", "bandwidth_GBps": 50}
    for extra in ({}, {"latency_us": 1.0, "link_latency_us": 0.5}):
        with pytest.raises(ConfigError, match="exactly one of latency_us"):
            topology_from_dict({"name": "x", "tiers": [{**tier, **extra}]})


def test_torus_splits_into_one_ring_level_per_dimension() -> None:
    torus = load_topology("torus2d", gpus_per_node=32)
    assert torus.tiers[0].dims == (4, 8)
    assert torus.ring_dimensions == (4, 8)
    lv = ring_levels(torus)
    assert [(level.size, level.block) for level in lv] == [(4, 1), (8, 4)]
    assert all(level.latency_us == 0.5 and level.port_bw == level.bw for level in lv)
    assert load_topology("switch").ring_dimensions == (64,)


def test_hierarchical_ring_runs_along_the_dimensions_of_a_single_torus_but_not_a_switch() -> None:
    switch, torus = _fabrics(64)
    hier = Config(Algorithm.RING, Protocol.LL, 1, Hierarchy.HIERARCHICAL, Schedule.BW_AWARE, 1)
    assert invalid_reason(torus, Collective.ALLREDUCE, hier) is None
    assert "two levels" in invalid_reason(switch, Collective.ALLREDUCE, hier)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_dimension_wise_allreduce_pays_2_sum_d_minus_1_one_cable_hops(schedule: Schedule) -> None:
    """8 x 8: a ring per dimension, 2·7 + 2·7 = 28 steps (the flat ring pays 2·63)."""
    torus = load_topology("torus2d")
    proto = np.array([Protocol.LL])
    hop = float(hop_latency_us("net", 0.5, Algorithm.RING, proto)[0])
    base = float(base_latency_us(Algorithm.RING, proto)[0])
    hier = Config(Algorithm.RING, Protocol.LL, 1, Hierarchy.HIERARCHICAL, schedule, 1)
    assert _zero_size_us(torus, hier) == pytest.approx(base + 28 * hop)
    flat = Config(Algorithm.RING, Protocol.LL, 1)
    assert _zero_size_us(torus, flat) == pytest.approx(base + 2 * 63 * hop)
    switch_hop = float(hop_latency_us("net", 1.0, Algorithm.RING, proto)[0])
    assert _zero_size_us(load_topology("switch"), flat) == pytest.approx(base + 2 * 63 * switch_hop)


def test_dimension_wise_allgather_pays_sum_d_minus_1_steps() -> None:
    torus = load_topology("torus2d", gpus_per_node=32)  # 4 x 8: 3 + 7 steps
    proto = np.array([Protocol.LL])
    hop = float(hop_latency_us("net", 0.5, Algorithm.RING, proto)[0])
    base = float(base_latency_us(Algorithm.RING, proto)[0])
    hier = Config(Algorithm.RING, Protocol.LL, 1, Hierarchy.HIERARCHICAL, Schedule.BASELINE, 1)
    assert _zero_size_us(torus, hier, Collective.ALLGATHER) == pytest.approx(base + 10 * hop)


def test_torus_advantage_grows_with_npus_when_latency_bound() -> None:
    ratios = [_ratio(n, 1024) for n in (4, 16, 64)]
    assert ratios[0] > 1.0
    assert ratios[0] < ratios[1] < ratios[2]
    assert ratios[2] > 3.0


@pytest.mark.parametrize("n", [16, 64])
def test_torus_advantage_vanishes_when_bandwidth_bound(n: int) -> None:
    """Same per-link bandwidth: one-chunk rings move the same bytes over one link on both fabrics;
    pipelined chunks can at most use the torus's second (y) link as well."""
    assert _ratio(n, GIB, ONE_CHUNK) == pytest.approx(1.0, abs=0.05)
    assert 1.0 <= _ratio(n, GIB) < 2.0
    assert _ratio(n, GIB) < _ratio(n, 1024)


def test_no_bus_bandwidth_above_the_bottleneck_link() -> None:
    switch, torus = _fabrics(64)
    sizes = np.array([1e3, 1e6, 1e9, 1e11])
    for collective in (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER):
        sw = simulate(switch, int(collective), sizes, ALL).busbw_GBps
        to = simulate(torus, int(collective), sizes, ALL).busbw_GBps
        assert sw.max() <= LINK_PAYLOAD * (1 + 1e-9)              # one cable into the switch
        assert to[:, FLAT_RING].max() <= LINK_PAYLOAD * (1 + 1e-9)  # a ring drives one cable
        assert to.max() <= 2 * LINK_PAYLOAD * (1 + 1e-9)            # x and y cables at once, at most
        assert busbw_bound_gbps(torus, int(collective)) == pytest.approx(2 * LINK_PAYLOAD)
