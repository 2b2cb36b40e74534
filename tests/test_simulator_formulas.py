"""Every algorithm's formula against values derived by hand from its docstring and protocols.py."""

from __future__ import annotations

import pytest

from dynamiccl.simulator import simulate
from dynamiccl.simulator.protocols import LINK_EFFICIENCY
from dynamiccl.system.knobs import Config, ConfigBatch, Hierarchy, Schedule
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology, topology_from_dict

S = 8e6
SIMPLE, LL, LL128 = Protocol.SIMPLE, Protocol.LL, Protocol.LL128


def _topo(tiers: list[dict], arch: str = "sm90", **features: bool):
    """A hand-made system whose tiers carry exactly the given *payload* bandwidth.

    Topology files state nominal link rates; the simulator moves LINK_EFFICIENCY of them. Scaling
    the nominal rate here keeps the hand arithmetic below in round numbers.
    """
    nominal = [{**t, "bandwidth_GBps": t["bandwidth_GBps"] / LINK_EFFICIENCY[t.get("link", "net")]}
               for t in tiers]
    return topology_from_dict({"name": "hand", "gpu": {"arch": arch, "sms": 132},
                               "features": dict(features), "tiers": nominal})


ONE_NODE = _topo([{"size": 8, "fabric": "switch", "bandwidth_GBps": 100, "latency_us": 1.0,
                   "link": "nvlink"}])
TWO_TIER = _topo([{"size": 4, "fabric": "switch", "bandwidth_GBps": 100, "latency_us": 1.0,
                   "link": "nvlink"},
                  {"size": 2, "fabric": "switch", "bandwidth_GBps": 10, "latency_us": 5.0,
                   "link": "net"}])


def _time(topo, collective: Collective, config: Config, nbytes: float = S, **kw) -> float:
    res = simulate(topo, int(collective), nbytes, ConfigBatch.from_configs([config]), **kw)
    return float(res.time_us[0, 0])


def test_flat_ring_allreduce_one_node() -> None:
    # 2(n-1) hops of (1.0 wire + 3.4 NVLink Simple), base 8.4, bytes 2(n-1)/n S at min(100, 16x60)
    expected = 8.4 + 14 * 4.4 + 1.75 * S / 100e3
    got = _time(ONE_NODE, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 16))
    assert got == pytest.approx(expected)


def test_flat_ring_protocols_and_channel_caps() -> None:
    # LL: half the link (50) but capped by llMaxBws[Hopper][1 node] = 141 and 1 channel = 30 GB/s
    ll1 = 6.6 + 14 * (1.0 + 0.6) + 1.75 * S / 30e3
    assert _time(ONE_NODE, Collective.ALLREDUCE, Config(Algorithm.RING, LL, 1)) == pytest.approx(ll1)
    ll16 = 6.6 + 14 * 1.6 + 1.75 * S / 50e3
    assert _time(ONE_NODE, Collective.ALLREDUCE, Config(Algorithm.RING, LL, 16)) == pytest.approx(ll16)
    # LL128: 120/128 of the link, 36.7 GB/s per channel on Hopper
    ll128_2 = 14.0 + 14 * (1.0 + 1.9) + 1.75 * S / 73.4e3
    assert _time(ONE_NODE, Collective.ALLREDUCE, Config(Algorithm.RING, LL128, 2)) == pytest.approx(ll128_2)


def test_flat_ring_allgather_and_broadcast() -> None:
    ag = 8.4 + 7 * 4.4 + 7 / 8 * S / 100e3
    assert _time(ONE_NODE, Collective.ALLGATHER, Config(Algorithm.RING, SIMPLE, 16)) == pytest.approx(ag)
    bcast = 8.4 + 7 * 4.4 + S / 100e3  # pipelined chain: n-1 hops, the buffer once
    assert _time(ONE_NODE, Collective.BROADCAST, Config(Algorithm.RING, SIMPLE, 16)) == pytest.approx(bcast)


def test_flat_ring_two_tiers_is_paced_by_the_slow_hop() -> None:
    # per pass: 8 - 2 = 6 intra hops, 1 inter hop (5 wire + 14 NET Simple + 5 flush);
    # 1 channel crosses the node boundary on one NIC at 10 GB/s
    lat = 2 * (6 * 4.4 + 1 * 24.0)
    expected = 8.4 + lat + 2 * 7 / 8 * S / 10e3
    assert _time(TWO_TIER, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 1)) == pytest.approx(expected)
    # on a switched tier 4 channels use the node's 4 NICs: the slow hop becomes 40 GB/s
    expected4 = 8.4 + lat + 2 * 7 / 8 * S / 40e3
    got4 = _time(TWO_TIER, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 4))
    assert got4 == pytest.approx(expected4)


def test_flat_ring_on_a_direct_connect_tier_uses_one_cable() -> None:
    direct = _topo([{"size": 4, "fabric": "ring", "bandwidth_GBps": 100, "latency_us": 1.0,
                     "link": "nvlink"},
                    {"size": 2, "fabric": "ring", "bandwidth_GBps": 10, "latency_us": 5.0,
                     "link": "net"}])
    t1 = _time(direct, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 1))
    t4 = _time(direct, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 4))
    assert t4 == pytest.approx(t1)


def test_tree_allreduce() -> None:
    # chain of 8: 2·7 hops of (1.0 + 4.0 Tree Simple), 2S at min(100, 16 × 38.7), base 8.4
    expected = 8.4 + 14 * 5.0 + 2 * S / 100e3
    assert _time(ONE_NODE, Collective.ALLREDUCE, Config(Algorithm.TREE, SIMPLE, 16, Hierarchy.HIERARCHICAL)) \
        == pytest.approx(expected)
    # two tiers: chain of 4 plus log2(2) = 1 tree level (5 + 14 + 5); on 2 nodes each node is one
    # tree's root and the other's leaf, so its NICs (min(2, 4) of them) carry S, not 2S
    expected2 = 8.4 + 2 * (3 * 5.0 + 1 * 24.0) + S / 20e3
    assert _time(TWO_TIER, Collective.ALLREDUCE, Config(Algorithm.TREE, SIMPLE, 2, Hierarchy.HIERARCHICAL)) \
        == pytest.approx(expected2)


HIER = Hierarchy.HIERARCHICAL


@pytest.mark.parametrize("nbytes", [8e6, 8e8])
def test_hierarchical_ring_bw_aware_and_baseline(nbytes: float) -> None:
    intra_hop, inter_hop = 4.4, 24.0
    rs0 = 3 * intra_hop + 0.75 * nbytes / 100e3           # reduce-scatter in the node on S
    ar1 = 2 * inter_hop + 2 * 0.5 * (nbytes / 4) / 10e3     # all-reduce across on S/4, 10 GB/s NIC
    bw_aware = Config(Algorithm.RING, SIMPLE, 16, HIER, Schedule.BW_AWARE, 1)
    assert _time(TWO_TIER, Collective.ALLREDUCE, bw_aware, nbytes) == pytest.approx(8.4 + 2 * rs0 + ar1)
    ar0_full = 6 * intra_hop + 1.5 * nbytes / 100e3
    ar1_full = 2 * inter_hop + nbytes / 10e3               # the FULL buffer crosses the slow tier
    baseline = Config(Algorithm.RING, SIMPLE, 16, HIER, Schedule.BASELINE, 1)
    assert _time(TWO_TIER, Collective.ALLREDUCE, baseline, nbytes) == pytest.approx(8.4 + ar0_full + ar1_full)


def test_active_chunks_pipeline_through_the_busiest_resource() -> None:
    nbytes, c = 8e8, 4
    rs0 = 3 * 4.4 + 0.75 * nbytes / c / 100e3
    ar1 = 2 * 24.0 + (nbytes / 4) / c / 10e3
    # Σ phases + (c-1) × max(intra: RS + AG, inter: AR)
    expected = 8.4 + (2 * rs0 + ar1) + (c - 1) * max(2 * rs0, ar1)
    cfg = Config(Algorithm.RING, SIMPLE, 16, HIER, Schedule.BW_AWARE, c)
    assert _time(TWO_TIER, Collective.ALLREDUCE, cfg, nbytes) == pytest.approx(expected)


def test_hierarchical_allgather_moves_a_kth_across_with_bw_aware() -> None:
    base = Config(Algorithm.RING, SIMPLE, 16, HIER, Schedule.BASELINE, 1)
    bwa = Config(Algorithm.RING, SIMPLE, 16, HIER, Schedule.BW_AWARE, 1)
    ag_inter_full = 1 * 24.0 + 0.5 * S / 10e3
    ag_intra_block = 3 * 4.4 + 0.75 * (S / 2) / 100e3
    assert _time(TWO_TIER, Collective.ALLGATHER, base) == pytest.approx(8.4 + ag_intra_block + ag_inter_full)
    ag_inter_kth = 1 * 24.0 + 0.5 * (S / 4) / 10e3
    ag_intra_all = 3 * 4.4 + 0.75 * S / 100e3
    assert _time(TWO_TIER, Collective.ALLGATHER, bwa) == pytest.approx(8.4 + ag_inter_kth + ag_intra_all)


def test_nvls_single_node() -> None:
    topo = load_topology("dgx_h100")
    cfg = Config(Algorithm.NVLS, SIMPLE, 16)
    # NVLink payload 450 × 0.82, NVLS efficiency 0.85; all-reduce moves (1 + 1/8) S per direction,
    # all-gather 7/8 S; latency 0.6 wire + 25 NVLS
    rate = 450 * 0.82 * 0.85e3
    assert _time(topo, Collective.ALLREDUCE, cfg) == pytest.approx(25.6 + 9 / 8 * S / rate)
    assert _time(topo, Collective.ALLGATHER, cfg) == pytest.approx(25.6 + 7 / 8 * S / rate)


def test_pat_allgather_one_gpu_per_node() -> None:
    topo = _topo([{"size": 1, "fabric": "switch", "bandwidth_GBps": 100, "latency_us": 1.0},
                  {"size": 8, "fabric": "switch", "bandwidth_GBps": 25, "latency_us": 2.0,
                   "link": "net"}])
    # log2(8) = 3 rounds of (2 + 14 + 2 flush), base 8, 7/8 S at 25 × 0.75
    expected = 8.0 + 3 * 18.0 + 7 / 8 * S / (25 * 0.75e3)
    assert _time(topo, Collective.ALLGATHER, Config(Algorithm.PAT, SIMPLE, 8)) == pytest.approx(expected)


def test_collnet_sends_each_byte_across_once() -> None:
    topo = load_topology("dgx_h100", nodes=4)
    sharp = _topo([dict(t.__dict__, dims=list(t.dims)) for t in topo.tiers], collnet=True, nvls=True)
    direct = Config(Algorithm.COLLNET_DIRECT, SIMPLE, 16, HIER)
    nbytes = 1e9
    # intra: 2(ppn-1)/ppn S at min(450, 16 × 60); inter: S/ppn per NIC at 50; / 0.85 on Hopper
    bw_term = max(2 * 7 / 8 * nbytes / 450e3, nbytes / 8 / 50e3) / 0.85
    lat = 2 * (1 * (0.6 + 3.7) + 0.4 * 7) + (3.0 + 31 + 3.0)
    assert _time(sharp, Collective.ALLREDUCE, direct, nbytes) == pytest.approx(lat + bw_term)


def test_single_rank_is_a_local_copy() -> None:
    solo = _topo([{"size": 1, "fabric": "switch", "bandwidth_GBps": 100, "latency_us": 1.0}])
    got = _time(solo, Collective.ALLREDUCE, Config(Algorithm.RING, SIMPLE, 1))
    assert got == pytest.approx(8.4 + S / 100e3)


def test_every_algorithm_names_its_own_cost_model_and_is_timed_by_it():
    import numpy as np

    from dynamiccl.simulator.tables import COST_MODELS, _cost
    from dynamiccl.system.nccl import Algorithm, Collective
    from dynamiccl.system.topology import load_topology

    assert set(COST_MODELS) == set(Algorithm)
    assert len(set(COST_MODELS.values())) == len(COST_MODELS), "no algorithm is timed as another"
    topo = load_topology("dgx_h100", nodes=2)
    cols = {"protocol": np.array([2]), "channels": np.array([8]), "schedule": np.array([0]),
            "chunks": np.array([1])}
    for algo in Algorithm:
        assert _cost(topo, Collective.ALLREDUCE, algo, False, cols).phases
