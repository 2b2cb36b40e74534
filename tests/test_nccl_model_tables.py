"""NCCL's per-communicator tables (NCCL 2.30.7 src/graph/tuning.cc) against values computed by hand.

Graph inputs used below (derived in test_nccl_model_graph.py):
  dgx_h100, 1 node:  ring/tree 12 ch x 30 GB/s, NVLS 8 heads (bwIntra 40, bwInter 60), NVLINK.
  dgx_h100, 8 nodes: ring/tree 8 ch x 48 GB/s, NVLS 8 heads (40, 48).
  dgx_h100, 2 nodes: same graphs, scale index 1.
  dgx_h100, 4 nodes x 1 GPU: tree 2 ch (bwIntra 48, bwInter 24), "tree" pattern; PAT enabled.
  dgx_a100, 4 nodes: ring 8 x 24, tree 8 ch (bwIntra 30, bwInter 24).
  pcie_cluster (sm75, 8 nodes x 4): ring/tree 1 ch x 12 GB/s over PCI; LL128 off.
Indices: coll B0 R1 AG2 RS3 AR4; algo Tree0 Ring1 CND2 CNC3 NVLS4 NVLST5 PAT6; proto LL0 LL128 1 S2.
"""

from __future__ import annotations

import pytest

from dynamiccl.nccl_model import NcclModel
from dynamiccl.system import nccl
from dynamiccl.system.topology import load_topology, topology_from_dict

B, R, AG, RS, AR = range(5)
TREE, RING, CND, CNC, NVLS, NVLST, PAT = range(7)
LL, LL128, S = range(3)


@pytest.fixture(scope="module")
def h2() -> NcclModel:
    return NcclModel(load_topology("dgx_h100", nodes=2))


@pytest.fixture(scope="module")
def h4x1() -> NcclModel:
    return NcclModel(load_topology("dgx_h100", nodes=4, gpus_per_node=1))


@pytest.fixture(scope="module")
def a4() -> NcclModel:
    return NcclModel(load_topology("dgx_a100", nodes=4))


@pytest.fixture(scope="module")
def pcie() -> NcclModel:
    return NcclModel(load_topology("pcie_cluster"))


def _collnet_h100(fabric: str = "switch") -> NcclModel:
    return NcclModel(topology_from_dict({
        "name": "sharp", "gpu": {"arch": "sm90"}, "features": {"nvls": True, "collnet": True},
        "tiers": [{"size": 8, "fabric": fabric, "bandwidth_GBps": 450, "latency_us": 0.6,
                   "link": "nvlink"},
                  {"size": 8, "fabric": "switch", "bandwidth_GBps": 50, "latency_us": 3}],
    }))


@pytest.mark.parametrize(("table", "index", "value"), [
    (nccl.BASE_LATENCY_US, (TREE, LL), 6.8), (nccl.BASE_LATENCY_US, (RING, LL128), 14.0),
    (nccl.BASE_LATENCY_US, (RING, S), 8.4), (nccl.BASE_LATENCY_US, (PAT, S), 8.0),
    (nccl.BASE_LATENCY_US, (NVLS, S), 0.0),
    (nccl.HW_LATENCY_US, (0, TREE, LL128), 1.25), (nccl.HW_LATENCY_US, (0, RING, S), 3.4),
    (nccl.HW_LATENCY_US, (0, NVLS, S), 25.0), (nccl.HW_LATENCY_US, (1, RING, S), 5.7),
    (nccl.HW_LATENCY_US, (1, TREE, LL128), 1.9), (nccl.HW_LATENCY_US, (2, TREE, S), 14.0),
    (nccl.HW_LATENCY_US, (2, NVLST, S), 20.9), (nccl.HW_LATENCY_US, (2, CND, S), 31.0),
    (nccl.LL_MAX_BW, (2, 0), 141.0), (nccl.LL_MAX_BW, (0, 2), 20.4), (nccl.LL_MAX_BW, (3, 0), 282.0),
    (nccl.PER_CH_MAX_TREE_LL128_BW, (3, 1), 31.67), (nccl.PER_CH_MAX_TREE_BW, (2, 1), 41.4),
    (nccl.PER_CH_MAX_NVLS_TREE_BW, (2, 2), 45.5), (nccl.PER_CH_MAX_RING_LL128_BW, (2, 0), 36.7),
])
def test_default_constants(table: object, index: tuple[int, ...], value: float) -> None:
    # ncclTunerConstantsDefaults, as NCCL 2.30.7 ships them (the † cells are the 2.30.7 values, not 2.32.3's).
    assert table[index] == value  # type: ignore[index]


# (fixture, coll, algo, proto, expected µs, hand computation)
LATENCIES = [
    ("h1", AR, RING, LL, 15.0, "6.6 + 14 steps x 0.6"),
    ("h1", AR, RING, LL128, 40.6, "14 + 14 x 1.9"),
    ("h1", AR, RING, S, 56.0, "8.4 + 14 x 3.4"),
    ("h1", AR, TREE, LL, 15.2, "6.8 + 2 x (7 x 0.6 + log2(1) x 5)"),
    ("h1", AR, TREE, LL128, 31.5, "14 + 2 x 7 x 1.25"),
    ("h1", AR, TREE, S, 64.4, "8.4 + 2 x 7 x 4.0"),
    ("h1", AR, NVLS, S, 25.0, "intraLat only, base discarded"),
    ("h1", AG, RING, LL, 10.8, "6.6 + 7 x 0.6"),
    ("h1", AG, RING, S, 32.2, "8.4 + 7 x 3.4"),
    ("h1", B, RING, LL, 7.2, "6.6 + one NVLINK ring hop (all channels alike)"),
    ("h1", R, RING, S, 11.8, "8.4 + 3.4"),
    ("h8", AR, RING, LL, 156.4, "6.6 + 112 x max(0.6, netOverhead 1.0) + 14 x 2.7"),
    ("h8", AR, RING, LL128, 282.8, "14 + 112 x max(1.9, 1.0) + 14 x 4.0"),
    ("h8", AR, RING, S, 585.2, "8.4 + 112 x max(3.4, 3 x 1.0) + 14 x 14"),
    ("h8", AR, TREE, LL, 45.2, "6.8 + 2 x (7 x 0.6 + 3 x 5.0)"),
    ("h8", AR, TREE, LL128, 82.5, "14 + 2 x (7 x 1.25 + 3 x 8.5)"),
    ("h8", AR, TREE, S, 148.4, "8.4 + 2 x (7 x 4 + 3 x 14)"),
    ("h8", AR, NVLST, S, 150.4, "0 + 25 + 2 x 3 x 20.9"),
    ("h8", AG, RING, LL, 81.5, "6.6 + 56 x 1.0 + 7 x 2.7"),
    ("h8", B, RING, LL, 9.3, "6.6 + one NET ring hop 2.7"),
    ("h2", AR, TREE, LL, 25.2, "6.8 + 2 x (7 x 0.6 + 1 x 5.0)"),
    ("h4x1", AR, TREE, LL, 26.8, "6.8 + 2 x (0 x 1.0 + 2 x NET Tree LL 5.0)"),
    ("h4x1", AR, RING, LL, 36.6, "6.6 + 6 inter steps x NET *Tree* LL 5.0 (ppn 1)"),
    ("h4x1", AG, PAT, S, 27.2, "8 + log2(4) x 14 / 3.5 + 2.8 x 4"),
]


@pytest.mark.parametrize(("model", "coll", "algo", "proto", "expected", "why"), LATENCIES)
def test_latency_table(request: pytest.FixtureRequest, model: str, coll: int, algo: int,
                       proto: int, expected: float, why: str) -> None:
    m = request.getfixturevalue(model)
    assert m.tables.latency[coll, algo, proto] == pytest.approx(expected, rel=1e-6), why


# Algorithm bandwidths, GB/s (fixture, coll, algo, proto, expected, hand computation).
BANDWIDTHS = [
    ("h1", AR, RING, LL, 141 * 8 / 14, "min(llMaxBw 141, 0.5 x 12 x 30) x n/nsteps"),
    ("h1", AR, RING, LL128, 0.92 * 360 * 8 / 14, "min(0.92 x 360, 12 x 36.7) x 8/14"),
    ("h1", AR, RING, S, 360 * 8 / 14, "12 x 30 x 8/14"),
    ("h1", AR, TREE, S, 0.92 * 360 * 0.5, "min(0.92 x 360, 12 x 38.7) x 0.5"),
    ("h1", AR, TREE, LL, 0.92 * 360 / 3.8 * 0.5, "min(331.2 / 3.8, 141) x 0.5"),
    ("h1", AR, TREE, LL128, 0.92 * 360 * 7 / 9 * 0.5, "min(331.2 x 7/9, 12 x 36.7) x 0.5"),
    ("h1", AR, NVLS, S, 8 * (40 * 0.85 * 7 / 8 * 2) * 8 / 14,
     "8 x min(40 x 0.85 x 7/8 x 2 = 59.5, bwInter 60) x 8/14"),
    ("h1", AG, NVLS, S, 8 * (40 * 0.85 * 7 / 8 * 7 / 8),
     "8 x min(40 x 0.85 x 7/8 x (ppn-1)/ppn, 60); AG keeps bus bandwidth"),
    ("h1", AG, RING, S, 360 * 8 / 7, "bus x n/(n-1)"),
    ("h1", B, RING, S, 360.0, "Broadcast: bus = alg"),
    ("h8", AR, RING, LL, 20.4 * 64 / 126, "min(llMaxBw Intel >=3 nodes 20.4, 0.5 x 384)"),
    ("h8", AR, RING, LL128, 8 * 36.7 * 64 / 126, "min(0.92 x 384 = 353.3, 8 x 36.7 = 293.6)"),
    ("h8", AR, RING, S, 384 * 64 / 126, "8 x 48 (bwInter, > 2 nodes) x 64/126"),
    ("h8", AR, TREE, S, 288 * 0.5, "min(0.92 x 384, 8 x 36.0 = 288) x 0.5"),
    ("h8", AR, TREE, LL, 20.4 * 0.5, "min(288 / 3.8 = 75.8, 20.4) x 0.5"),
    ("h8", AR, TREE, LL128, 8 * 29.0 * 0.5, "min(288 x 120/128 = 270, 8 x 29 = 232) x 0.5"),
    ("h8", AR, NVLST, S, 8 * 45.5 * 64 / 126, "8 x min(59.5, 48, perChMaxNVLSTreeBw 45.5)"),
    ("h2", AR, RING, LL, 39.0 * 16 / 30, "min(llMaxBw Intel 2 nodes 39, 192) x 16/30"),
    ("h2", AR, TREE, LL128, 8 * 36.7 * 0.5, "min(min(353.3, 8 x 41.4) x 120/128, 8 x 36.7)"),
    ("h2", AR, NVLST, S, 8 * 57.7 * 16 / 30, "8 x min(59.5, 2 x 48, 57.7) x 16/30"),
    ("h4x1", AR, TREE, S, 0.92 * 48 * 0.85 * 0.5,
     "min(0.92 x 2 x 24, 2 x 36) x 0.85 (tree pattern) x 0.5"),
    ("h4x1", AG, PAT, S, 2 * 24 * 0.75, "2 x bwInter 24 x 0.75, no bus->alg conversion"),
    ("a4", AR, TREE, LL128, 8 * 17.8 * 120 / 128 * 0.5,
     "min(min(0.92 x 8 x 24, 8 x 17.8) x 120/128 = 133.5, 8 x 20) x 0.5"),
    ("a4", AR, RING, S, 192 * 32 / 62, "8 x 24 x 32/62"),
    ("pcie", AR, RING, LL, 0.5 * 12 * 32 / 62, "min(llMaxBw 20.4, 0.5 x 1 x 12) x 32/62"),
    ("pcie", AR, TREE, S, 10.0 * 0.5, "min(0.92 x 12, 1 x perChMaxTreeBw Volta 10.0) x 0.5"),
    ("pcie", AR, TREE, LL, 10.0 / 3.8 * 0.5, "min(10 / 3.8, 20.4) x 0.5"),
]


@pytest.mark.parametrize(("model", "coll", "algo", "proto", "expected", "why"), BANDWIDTHS)
def test_bandwidth_table(request: pytest.FixtureRequest, model: str, coll: int, algo: int,
                         proto: int, expected: float, why: str) -> None:
    m = request.getfixturevalue(model)
    assert m.tables.bandwidth[coll, algo, proto] == pytest.approx(expected, rel=1e-6), why


@pytest.mark.parametrize(("model", "coll", "algo", "proto", "why"), [
    ("h1", B, TREE, S, "Broadcast/Reduce run only Ring"),
    ("h1", AG, TREE, LL, "AllGather has no Tree"),
    ("h1", AR, PAT, S, "AllReduce has no PAT"),
    ("h1", AR, NVLS, LL, "NVLS is Simple-only"),
    ("h1", AR, NVLST, S, "NVLSTree needs more than one node"),
    ("h1", AR, CND, S, "CollNet disabled"),
    ("h8", AR, NVLS, S, "multi-node NVLS needs CollNet (NVLS+SHARP)"),
    ("h8", AG, PAT, S, "PAT auto-enables only with one GPU per node"),
    ("h4x1", AG, PAT, LL, "PAT is Simple-only"),
])
def test_unusable_combinations_have_no_bandwidth(request: pytest.FixtureRequest, model: str,
                                                 coll: int, algo: int, proto: int,
                                                 why: str) -> None:
    assert request.getfixturevalue(model).tables.bandwidth[coll, algo, proto] == 0.0, why


def test_ll128_default_rule_follows_the_topology() -> None:
    pcie = NcclModel(load_topology("pcie_cluster"))  # PCIe intra path: LL128 off (tuning.cc)
    assert not pcie.tables.bandwidth[:, :, LL128].any()
    assert pcie.tables.bandwidth[AR, RING, LL] > 0


def test_collnet_tables() -> None:
    m = _collnet_h100()
    # CollNetDirect graph: 8 heads x 48 (one per NIC). AR: bw = bwIntra (CollNet) 48 x 8 = 384;
    # f = ppn/nCh = 1 -> 1 - 0 = 1; x 0.85 (Hopper) x 0.5 = 163.2.
    assert m.tables.bandwidth[AR, CND, S] == pytest.approx(384 * 0.85 * 0.5)
    # AG: ppn x min(bwIntra 48, 0.9 x 48) = 8 x 43.2, bus kept.
    assert m.tables.bandwidth[AG, CND, S] == pytest.approx(8 * 43.2)
    # CollNetChain: tree graph 8 x 48, x 0.5.
    assert m.tables.bandwidth[AR, CNC, S] == pytest.approx(192.0)
    assert m.tables.bandwidth[AR, CND, LL] == 0.0  # CollNet is Simple-only
    # Multi-node NVLS is on with CollNet: 8 x min(59.5, 48) x 64/126; latency 25 + 18.
    assert m.tables.bandwidth[AR, NVLS, S] == pytest.approx(384 * 64 / 126)
    assert m.tables.latency[AR, NVLS, S] == pytest.approx(43.0)
    # Latencies: Direct 2 x (min(1, 7) x 3.7 + 0.4 x 7) + 31 = 44; Chain 2 x 7 x 2.8 + 30 = 69.2.
    assert m.tables.latency[AR, CND, S] == pytest.approx(44.0)
    assert m.tables.latency[AR, CNC, S] == pytest.approx(69.2)
    # CollNetDirect needs an NVSwitch node; CollNetChain does not.
    ring_node = _collnet_h100(fabric="ring")
    assert ring_node.tables.bandwidth[AR, CND, S] == 0.0
    assert ring_node.tables.bandwidth[AR, CNC, S] > 0.0
