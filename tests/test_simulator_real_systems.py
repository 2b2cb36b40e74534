"""Physics that real systems showed was missing: launch mode, transports, small-node trees, PCIe
sockets, NVLink meshes, and a topology's calibration section feeding the simulator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dynamiccl.nccl_model import NcclModel
from dynamiccl.simulator import simulate
from dynamiccl.simulator.launch import HOST_LAUNCH_US
from dynamiccl.simulator.tree import dtree_load
from dynamiccl.system.calibration import AlgoProtoFit, Calibration, Fitted
from dynamiccl.system.knobs import Config, ConfigBatch, Hierarchy
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology, topology_from_dict
from dynamiccl.system.transports import TRANSPORTS

RING_SIMPLE = Config(Algorithm.RING, Protocol.SIMPLE, 16)
TREE_SIMPLE = Config(Algorithm.TREE, Protocol.SIMPLE, 16, Hierarchy.HIERARCHICAL)


def _time(topo, config: Config, nbytes: float, coll: Collective = Collective.ALLREDUCE) -> float:
    res = simulate(topo, int(coll), nbytes, ConfigBatch.from_configs([config]))
    return float(res.time_us[0, 0])


def test_one_thread_driving_every_gpu_sets_a_floor_per_gpu() -> None:
    node = load_topology("dgx_h100")
    per_gpu = _time(node, Config(Algorithm.RING, Protocol.LL, 1), 8)
    single = _time(replace(node, launch="single_process"), Config(Algorithm.RING, Protocol.LL, 1), 8)
    assert per_gpu < 8 * HOST_LAUNCH_US == single
    big = 2**30  # the floor never touches a bandwidth-bound call
    assert _time(replace(node, launch="single_process"), RING_SIMPLE, big) == _time(node, RING_SIMPLE, big)


def test_transport_kind_adds_its_per_message_overhead_per_network_hop() -> None:
    ib = load_topology("dgx_a100", nodes=2)
    efa = replace(ib, tiers=(ib.tiers[0], replace(ib.tiers[1], transport="efa")))
    extra = TRANSPORTS["efa"].message_overhead_us
    # ring/LL on 2 nodes: 2 passes x 1 network hop each
    ll = Config(Algorithm.RING, Protocol.LL, 1)
    assert _time(efa, ll, 8) - _time(ib, ll, 8) == pytest.approx(2 * extra)
    assert efa.fingerprint() != ib.fingerprint()


def _nccl_btree_edges(nranks: int, rank: int) -> int:
    """Edges (parent + children) of ``rank`` in NCCL's binary tree, built as src/graph/trees.cc
    builds it: rank 0 is the root with one child; a rank's parent flips its lowest set bit, its
    children are rank -/+ half of it (the upper one halved until it exists)."""
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return 1 if nranks > 1 else 0
    edges, low = 1, bit >> 1
    if low:
        edges += 1
        while low and rank + low >= nranks:
            low >>= 1
        edges += 1 if low else 0
    return edges


def _nccl_dtree_load(nodes: int) -> float:
    """The busiest node's edges in both trees (the second mirrored for even counts, shifted by one
    for odd ones), counted node by node."""
    if nodes < 2:
        return 0.0

    def twin(r: int) -> int:
        return (r - 1) % nodes if nodes % 2 else nodes - 1 - r

    return max(_nccl_btree_edges(nodes, r) + _nccl_btree_edges(nodes, twin(r)) for r in range(nodes)) / 2


def test_the_double_tree_load_in_closed_form_is_nccls_construction_counted_node_by_node() -> None:
    """The simulator's closed form (no loop over nodes, so 10^5 nodes cost what 2 do) against
    NCCL's tree construction counted edge by edge."""
    assert [dtree_load(n) for n in range(1, 3000)] == [_nccl_dtree_load(n) for n in range(1, 3000)]
    assert [dtree_load(2**k) for k in range(12, 18)] == [_nccl_dtree_load(2**k) for k in range(12, 18)]


def test_nccl_double_tree_loads_the_busiest_node_s_on_two_nodes_and_2s_beyond() -> None:
    assert [dtree_load(n) for n in (1, 2, 3, 4, 8, 64, 255)] == [0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.0]
    big = 2**30
    a100 = load_topology("dgx_a100")
    a100 = replace(a100, tiers=(a100.tiers[0], replace(a100.tiers[1], link_share=4)))
    two, four = (a100.resized(nodes=n) for n in (2, 4))
    # NIC-bound: 2 NICs x 25 GB/s x 0.95 payload, S on 2 nodes and 2S on 4 nodes
    nic_us = big * 1e-3 / (2 * 25 * 0.95)
    assert _time(two, TREE_SIMPLE, big) == pytest.approx(nic_us, rel=0.02)
    assert _time(four, TREE_SIMPLE, big) == pytest.approx(2 * nic_us, rel=0.02)


def test_a_two_socket_pcie_node_is_paced_by_the_socket_link_and_read_as_sys_by_nccl() -> None:
    doc = {"name": "pcie2s", "gpu": {"arch": "sm89", "sms": 142}, "tiers": [
        {"size": 4, "fabric": "switch", "bandwidth_GBps": 31.5, "latency_us": 1.0, "link": "pcie",
         "pcie": {"gpus_per_switch": 2, "socket_link": "skl"}}]}
    two_sockets = topology_from_dict(doc)
    one_switch = topology_from_dict({**doc, "tiers": [{**doc["tiers"][0], "pcie": None}]})
    assert (two_sockets.tiers[0].path, one_switch.tiers[0].path) == ("SYS", "PIX")
    assert two_sockets.tiers[0].pcie.sockets == 2
    big = 2**30
    ratio = _time(two_sockets, RING_SIMPLE, big) / _time(one_switch, RING_SIMPLE, big)
    assert ratio == pytest.approx(31.5 * 0.78 / 10.0, rel=0.02)  # Skylake UPI: NCCL's 10 GB/s
    assert NcclModel(two_sockets).system.graphs[Algorithm.RING].bw_intra <= 10.0
    assert NcclModel(one_switch).system.graphs[Algorithm.RING].bw_intra > 10.0


def test_an_nvlink_mesh_gives_one_channel_one_peer_link() -> None:
    doc = {"name": "mesh", "tiers": [{"size": 4, "fabric": "fully_connected", "bandwidth_GBps": 150,
                                      "latency_us": 0.6, "link": "nvlink"}]}
    mesh = topology_from_dict(doc)
    switch = topology_from_dict({**doc, "tiers": [{**doc["tiers"][0], "fabric": "switch"}]})
    big = 2**30
    one, three = (Config(Algorithm.RING, Protocol.SIMPLE, c) for c in (1, 3))
    # one channel rides one 50 GB/s peer link (41 payload) instead of the 60 GB/s an SM can move
    assert _time(mesh, one, big) / _time(switch, one, big) == pytest.approx(60 / (50 * 0.82), rel=0.01)
    # three channels spread over the three peer links: the GPU's whole NVLink, as on a switch
    assert _time(mesh, three, big) == pytest.approx(_time(switch, three, big))
    assert load_topology("gh200_quad").tiers[0].fabric == "fully_connected"


def test_a_calibration_section_changes_what_the_simulator_predicts() -> None:
    node = load_topology("dgx_h100")
    fit = AlgoProtoFit(Algorithm.RING, Protocol.SIMPLE, Fitted(0.5, 0.01), Fitted(20.0, 0.1))
    cal = replace(node, calibration=Calibration(10, algorithms=(fit,),
                                                launch_floor_us=Fitted(30.0, 0.05)))
    big = 2**30
    assert _time(cal, RING_SIMPLE, big) == pytest.approx(2 * _time(node, RING_SIMPLE, big), rel=0.01)
    assert _time(cal, RING_SIMPLE, 64) - _time(node, RING_SIMPLE, 64) == pytest.approx(20.0 - 8.4, abs=1e-3)
    ll = Config(Algorithm.RING, Protocol.LL, 1)
    assert _time(cal, ll, 8) == 30.0  # the measured floor
    assert cal.fingerprint() != node.fingerprint()
