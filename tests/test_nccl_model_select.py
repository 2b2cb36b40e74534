"""NCCL's per-call decision (NCCL 2.30.7 src/graph/tuning.cc, src/enqueue.cc): time, pick, channels.

Table values used (hand-derived in test_nccl_model_tables.py): dgx_h100 one node, AllReduce:
Ring LL 15.0 µs / 141 x 8/14 GB/s, Tree LL 15.2 µs / 43.58 GB/s, Tree Simple 64.4 µs / 165.6 GB/s,
NVLS 25 µs; dgx_h100 8 nodes: Ring Simple 585.2 µs / 384 x 64/126 GB/s, 16 comm channels.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.nccl_model import NcclModel
from dynamiccl.nccl_model.select import log2_size_index, pick
from dynamiccl.simulator import simulate
from dynamiccl.system.knobs import Config, ConfigBatch, Hierarchy, Schedule, invalid_reason
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology, topology_from_dict

REAL_RUNNER = Path(__file__).parent / "fixtures" / "real" / "runner"
AR, AG = Collective.ALLREDUCE, Collective.ALLGATHER
TREE, RING, NVLS, PAT = 0, 1, 4, 6
LL, LL128, S = 0, 1, 2


@pytest.mark.parametrize(("nbytes", "index"), [
    (0, -1), (63, -1), (64, 0), (127, 0), (128, 1), (1 << 20, 14), (256 << 20, 22),
    (512 << 20, 23), (1 << 30, 24),
])
def test_tree_correction_index(nbytes: int, index: int) -> None:
    # floor(log2(nBytes >> 6)); -1 (no correction) below 64 B (ncclTopoGetAlgoTime).
    assert log2_size_index(np.array([nbytes]))[0] == index


@pytest.mark.parametrize(("nbytes", "proto", "factor"), [
    (32, S, 1.0),          # below 64 B: no correction
    (64, S, 0.9),          # index 0
    (1 << 20, S, 0.5),     # index 14
    (1 << 20, LL, 0.5),    # LL row, index 14
    (1 << 20, LL128, 0.6), # LL128 row, index 14
    (256 << 20, S, 0.9),   # index 22: the last one Tree uses
    (512 << 20, S, 1.0),   # index 23: beyond Tree's range
])
def test_tree_time_applies_the_correction_factor(h1: NcclModel, nbytes: int, proto: int,
                                                 factor: float) -> None:
    lat = float(h1.tables.latency[AR, TREE, proto])
    bw = float(h1.tables.bandwidth[AR, TREE, proto]) * factor
    # e.g. 1 MiB Simple: 64.4 + 1048576 / (1000 x 165.6 x 0.5) = 77.064 µs
    assert h1.cost_table(AR, nbytes)[TREE, proto] == pytest.approx(lat + nbytes / (1000 * bw),
                                                                   rel=1e-5)


def test_ring_simple_plateau_latency(h8: NcclModel) -> None:
    # Multi-node AllReduce Ring/Simple: lat x 1.4 (sm80+) once nBytes/(16 ch x 64 ranks) >= 64,
    # i.e. from 65536 B. Below: 585.2 + 65535/(1000 x 195.05); at: 819.28 + 65536/(1000 x 195.05).
    bw = 384 * 64 / 126
    assert h8.cost_table(AR, 65535)[RING, S] == pytest.approx(585.2 + 65535 / (1000 * bw), rel=1e-5)
    assert h8.cost_table(AR, 65536)[RING, S] == pytest.approx(585.2 * 1.4 + 65536 / (1000 * bw),
                                                              rel=1e-5)
    # Not for AllGather, not on one node.
    assert h8.cost_table(AG, 1 << 20)[RING, S] == pytest.approx(
        float(h8.tables.latency[AG, RING, S]) + (1 << 20) / (1000 * float(
            h8.tables.bandwidth[AG, RING, S])), rel=1e-5)
    # Pinning 32 channels moves the threshold to 32 x 64 x 64 = 131072 B.
    assert h8.choose(AR, 65536, algorithms={Algorithm.RING}, protocols={Protocol.SIMPLE},
                     channels=32).nccl_model_us == pytest.approx(585.2 + 65536 / (1000 * bw),
                                                                 rel=1e-5)


def test_pre_ampere_plateau_factor() -> None:
    # pcie_cluster (sm75, 8 nodes x 4, 2 comm channels, ring 1 x 12 GB/s over PCI):
    # lat = 8.4 + (62-14) x max(5.7, 3.0) + 14 x 14 = 478.0, x 1.9 from 2 x 32 x 64 = 4096 B.
    m = NcclModel(load_topology("pcie_cluster"))
    assert m.tables.latency[AR, RING, S] == pytest.approx(478.0)
    bw = 12 * 32 / 62
    assert m.cost_table(AR, 4096)[RING, S] == pytest.approx(478.0 * 1.9 + 4096 / (1000 * bw),
                                                            rel=1e-5)


def test_num_pipe_ops_multiplies_latency(h1: NcclModel) -> None:
    # 9 pipelined ops: Ring latCount 9, others ceil(9/8) = 2 (ncclTopoGetAlgoTime).
    table = h1.cost_table(AR, 8, num_pipe_ops=9)
    assert table[RING, LL] == pytest.approx(15.0 * 9 + 8 / (1000 * 141 * 8 / 14), rel=1e-5)
    assert table[TREE, LL] == pytest.approx(15.2 * 2 + 8 / (1000 * 331.2 / 3.8 * 0.5), rel=1e-5)
    assert table[NVLS, S] == pytest.approx(25.0 * 2 + 8 / (1000 * 272.0), rel=1e-5)
    # Alone, Ring LL (15.0) beats Tree LL (15.2); batched, Tree LL (30.4) beats Ring LL (135).
    assert h1.choose(AR, 8).config.algorithm == Algorithm.RING
    assert h1.choose(AR, 8, num_pipe_ops=9).config.algorithm == Algorithm.TREE


def test_pick_takes_lowest_algorithm_then_protocol_on_ties() -> None:
    table = np.full((3, 7, 3), -1.0, dtype=np.float32)
    table[0, RING, LL] = table[0, TREE, S] = 5.0  # tie across algorithms -> Tree (0)
    table[1, RING, LL128] = table[1, RING, LL] = 5.0  # tie within Ring -> LL (0)
    table[1, NVLS, S] = 7.0
    table[2, PAT, S] = 0.0  # 0.0 is a valid time (a tuner's "force")
    algo, proto, time = pick(table)
    assert (algo.tolist(), proto.tolist(), time.tolist()) == ([TREE, RING, PAT], [S, LL, S],
                                                              [5.0, 5.0, 0.0])
    assert pick(np.full((1, 7, 3), -1.0, dtype=np.float32))[0][0] == -1


# Channel heuristic (src/enqueue.cc): nc drops while nBytes < nc x maxThreads x threshold.
CHANNELS = [
    ("h1", AR, 8, "ring/ll", 1, "8 B < 1 x 512 x (8 x 8 ranks)"),
    ("h1", AR, 65536, "ring/ll", 2, "65536 // (512 x 64) = 2"),
    ("h1", AR, 1 << 20, "ring/ll", 24, "32 capped at the 24 comm channels"),
    ("h1", AR, 16 << 20, "nvls/simple", 16, "NVLS always uses nvlsChannels (16 on sm90)"),
    ("h8", AR, 32768, "tree/ll", 8, "32768 // (512 x 8) = 8"),
    ("h8", AR, 65536, "tree/ll", 16, "16 = all comm channels"),
    ("h8", AG, 1 << 20, "ring/ll", 4, "(1 MiB) // (512 x 8 x 64 ranks) = 4"),
]


@pytest.mark.parametrize(("model", "coll", "nbytes", "label", "channels", "why"), CHANNELS)
def test_channel_heuristic(request: pytest.FixtureRequest, model: str, coll: Collective,
                           nbytes: int, label: str, channels: int, why: str) -> None:
    config = request.getfixturevalue(model).choose(coll, nbytes).config
    assert config.label() == f"{label}/{channels}ch", why


def test_channel_thresholds_by_protocol(h8: NcclModel) -> None:
    # Ring LL128: 640 threads x 8 B; Ring Simple: 512 x 64; Tree Simple 512 x 64.
    pin = {"algorithms": {Algorithm.RING}, "protocols": {Protocol.LL128}}
    assert h8.choose(AR, 5120 * 3, **pin).config.channels == 3
    pin = {"algorithms": {Algorithm.RING}, "protocols": {Protocol.SIMPLE}}
    assert h8.choose(AR, 32768 * 5 + 1, **pin).config.channels == 5
    pin = {"algorithms": {Algorithm.TREE}, "protocols": {Protocol.SIMPLE}}
    assert h8.choose(AR, 32768 * 7 - 1, **pin).config.channels == 6
    # Slow rings run 256 Ring/Simple threads: pcie_cluster's ring is 1 ch x 12 GB/s <= 12 GB/s,
    # so 2 x 256 x 64 B already fill both comm channels (512 threads would need twice that).
    pcie = NcclModel(load_topology("pcie_cluster"))
    assert pcie.tables.max_threads[RING, S] == 256 and h8.tables.max_threads[RING, S] == 512
    pin = {"algorithms": {Algorithm.RING}, "protocols": {Protocol.SIMPLE}}
    assert pcie.choose(AR, 2 * 256 * 64 - 1, **pin).config.channels == 1
    assert pcie.choose(AR, 2 * 256 * 64, **pin).config.channels == 2


def test_pat_enable_rule_and_channels() -> None:
    one_gpu = NcclModel(load_topology("dgx_h100", nodes=4, gpus_per_node=1))
    assert one_gpu.cost_table(AG, 1 << 20)[PAT, S] >= 0
    assert one_gpu.cost_table(AR, 1 << 20)[PAT, S] == -1  # AllGather/ReduceScatter only
    choice = one_gpu.choose(AG, 1 << 20, algorithms={Algorithm.PAT})
    assert choice.config.label() == "pat/simple/4ch"  # 1 MiB // (512 x 64) = 32 -> 4 comm ch
    assert NcclModel(load_topology("dgx_h100", nodes=4)).cost_table(AG, 1 << 20)[PAT, S] == -1


def test_nvls_and_collnet_enable_rules() -> None:
    h1 = NcclModel(load_topology("dgx_h100"))
    assert h1.cost_table(AR, 1 << 20)[NVLS, S] >= 0
    assert h1.cost_table(AR, 1 << 20)[5, S] == -1  # NVLSTree needs several nodes
    h4 = NcclModel(load_topology("dgx_h100", nodes=4))
    assert h4.cost_table(AR, 1 << 20)[NVLS, S] == -1  # multi-node NVLS needs CollNet
    assert h4.cost_table(AR, 1 << 20)[5, S] >= 0
    assert NcclModel(load_topology("dgx_a100")).cost_table(AR, 1 << 20)[NVLS, S] == -1  # sm80
    assert (h4.cost_table(AR, 1 << 20)[2:4] == -1).all()  # CollNet off without the feature
    sharp = NcclModel(topology_from_dict({
        "name": "sharp", "gpu": {"arch": "sm90"}, "features": {"nvls": True, "collnet": True},
        "tiers": [{"size": 8, "fabric": "switch", "bandwidth_GBps": 450, "latency_us": 0.6},
                  {"size": 4, "fabric": "switch", "bandwidth_GBps": 50, "latency_us": 3}],
    }))
    table = sharp.cost_table(AR, 1 << 20)
    assert (table[2:5, S] >= 0).all() and (table[2:4, :S] == -1).all()


def test_restrictions_and_the_error_when_nothing_remains(h1: NcclModel) -> None:
    ring = h1.choose(AR, 1 << 30, algorithms={Algorithm.RING})
    assert ring.config.label() == "ring/simple/24ch"
    assert (ring.table[[0, 2, 3, 4, 5, 6]] == -1).all()
    ll = h1.choose(AR, 1 << 30, protocols={Protocol.LL})
    assert ll.config.protocol == Protocol.LL and (ll.table[:, 1:] == -1).all()
    pinned = h1.choose(AR, 8, channels=5)
    assert pinned.config.channels == 5
    with pytest.raises(ValueError, match="No algorithm/protocol available.*NCCL_ALGO"):
        h1.choose(AR, 1 << 20, algorithms={Algorithm.PAT})
    with pytest.raises(ValueError, match="NCCL_ALGO/NCCL_PROTO.*ring/ll"):
        h1.choose(AR, 1 << 20, algorithms={Algorithm.NVLS}, protocols={Protocol.LL})
    with pytest.raises(ValueError, match="channels must be 1..64"):
        h1.choose(AR, 8, channels=0)
    with pytest.raises(ValueError, match="not modelled"):
        NcclModel(load_topology("dgx_h100"), version="2.19.3")


def test_a_protocol_named_in_nccl_proto_runs_where_its_default_rule_disables_it() -> None:
    """NCCL 2.28.9 and 2.30.7 ``src/graph/tuning.cc`` (``ncclTopoTuneModel``) check LL128's
    topology only while NCCL_PROTO leaves it at its default: over a socket LL128 is off for NCCL's
    own pick and for a tuner, yet ``NCCL_PROTO=LL128`` runs it (the forced LL128 launches of
    ``tests/fixtures/real/runner/h200_emulated4`` ran)."""
    sockets = load_topology(REAL_RUNNER / "h200_emulated4" / "topology.yaml")
    assert not sockets.ll128_enabled
    model = NcclModel(sockets)
    assert (model.cost_table(AR, 4096)[:, LL128] == -1).all()  # what a tuner plugin is handed
    assert model.choose(AR, 4096, algorithms={Algorithm.RING}).config.protocol != Protocol.LL128
    named = model.choose(AR, 4096, algorithms={Algorithm.RING}, protocols={Protocol.LL128})
    assert (named.config.algorithm, named.config.protocol) == (Algorithm.RING, Protocol.LL128)
    assert named.table[RING, LL128] > 0 and named.table[RING, S] == -1
    config = named.config
    assert "LL128 is off" in invalid_reason(sockets, AR, config)  # a policy never pins it there
    assert invalid_reason(sockets, AR, config, protocol_named=True) is None
    assert math.isfinite(simulate(sockets, int(AR), 4096.0, ConfigBatch.from_configs([config]),
                                  protocol_named=True).time_us[0, 0])


def test_cost_table_is_what_a_tuner_receives(h1: NcclModel) -> None:
    table = h1.cost_table(AR, 1 << 20)
    assert table.dtype == np.float32 and table.shape == (7, 3)
    usable = {(int(a), int(p)) for a, p in np.argwhere(table >= 0)}
    assert usable == {(TREE, LL), (TREE, LL128), (TREE, S), (RING, LL), (RING, LL128),
                      (RING, S), (NVLS, S)}
    assert set(np.unique(table[table < 0]).tolist()) == {-1.0}


def test_single_rank_only_copies() -> None:
    solo = NcclModel(load_topology("dgx_h100", gpus_per_node=1))
    table = solo.cost_table(AR, 1 << 20)
    assert table[RING, S] == 0.0 and (np.delete(table.ravel(), RING * 3 + S) == -1).all()
    assert solo.choose(AR, 1 << 20).config.label().startswith("ring/simple/")


def test_predicted_us(h1: NcclModel) -> None:
    ring = Config(Algorithm.RING, Protocol.SIMPLE, 24)
    assert h1.predicted_us(AR, 1 << 20, ring) == pytest.approx(
        56.0 + (1 << 20) / (1000 * 360 * 8 / 14), rel=1e-5)
    assert h1.predicted_us(AR, 1 << 20, Config(Algorithm.PAT, Protocol.SIMPLE, 8)) == math.inf
    assert math.isnan(h1.predicted_us(AR, 1 << 20, Config(Algorithm.STRAGGLAR, Protocol.SIMPLE,
                                                          8)))
    hier = Config(Algorithm.RING, Protocol.SIMPLE, 8, Hierarchy.HIERARCHICAL, Schedule.BW_AWARE)
    assert math.isnan(h1.predicted_us(AR, 1 << 20, hier))
    choice = h1.choose(AR, 1 << 20)
    assert h1.predicted_us(AR, 1 << 20, choice.config) == pytest.approx(choice.nccl_model_us)


def test_choose_many_matches_choose() -> None:
    rng = np.random.default_rng(0)
    for name, nodes in (("dgx_h100", 1), ("dgx_h100", 8), ("pcie_cluster", None),
                        ("dgx_h100", 4)):
        m = NcclModel(load_topology(name, nodes=nodes))
        colls = rng.integers(0, 5, 300)
        sizes = (2.0 ** rng.uniform(0, 32, 300)).astype(np.int64)
        algo, proto, nc, us = m.choose_many(colls, sizes)
        for i in range(len(colls)):
            one = m.choose(Collective(int(colls[i])), int(sizes[i]))
            got = (int(algo[i]), int(proto[i]), int(nc[i]))
            assert got == (one.config.algorithm, one.config.protocol, one.config.channels)
            assert us[i] == pytest.approx(one.nccl_model_us)


# Sanity: NCCL's well-known regimes come out of the model.
def test_single_node_protocol_regimes(h1: NcclModel) -> None:
    assert h1.choose(AR, 8).config.protocol in (Protocol.LL, Protocol.LL128)
    assert h1.choose(AR, 4096).config.protocol in (Protocol.LL, Protocol.LL128)
    assert h1.choose(AR, 1 << 30).config.protocol == Protocol.SIMPLE


def test_multi_node_small_allreduce_uses_tree(h8: NcclModel) -> None:
    for nbytes in (8, 1024, 32768):
        assert h8.choose(AR, nbytes).config.algorithm == Algorithm.TREE
    assert h8.choose(AR, 1 << 30).config.protocol == Protocol.SIMPLE
