"""The knob space: one enumeration, NCCL's ids, validity rules and the exportable mark."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.system import knobs
from dynamiccl.system.knobs import (
    ACTIONS,
    Config,
    ConfigBatch,
    Hierarchy,
    Schedule,
    action_id,
    invalid_reason,
    nccl_config,
    parse_enum,
    valid_mask,
)
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology, preset_names


def test_nccl_integer_ids_match_the_reference() -> None:
    # NCCL 2.30.7 src/include/nccl_common.h: ncclFunc_t and the tuner's algorithm/protocol indices.
    assert [int(c) for c in (Collective.BROADCAST, Collective.REDUCE, Collective.ALLGATHER,
                             Collective.REDUCESCATTER, Collective.ALLREDUCE)] == [0, 1, 2, 3, 4]
    assert [int(a) for a in (Algorithm.TREE, Algorithm.RING, Algorithm.COLLNET_DIRECT,
                             Algorithm.COLLNET_CHAIN, Algorithm.NVLS, Algorithm.NVLS_TREE,
                             Algorithm.PAT)] == [0, 1, 2, 3, 4, 5, 6]
    assert [int(p) for p in Protocol] == [0, 1, 2]


def test_action_table_is_unique_and_round_trips() -> None:
    assert len(set(ACTIONS)) == len(ACTIONS) == knobs.N_ACTIONS
    for i, config in enumerate(ACTIONS):
        assert action_id(config) == i
    batch = ConfigBatch.all_actions()
    assert len(batch) == len(ACTIONS)
    assert ConfigBatch.from_configs(ACTIONS[:5]).channels.tolist() == [c.channels for c in ACTIONS[:5]]


def test_exportable_mark_follows_the_single_mapping() -> None:
    assert nccl_config(Algorithm.TREE, Protocol.LL, 4).exportable
    assert nccl_config(Algorithm.RING, Protocol.SIMPLE, 16).exportable
    hier_ring = Config(Algorithm.RING, Protocol.SIMPLE, 8, Hierarchy.HIERARCHICAL,
                       Schedule.BW_AWARE, 4)
    assert not hier_ring.exportable
    assert not Config(Algorithm.STRAGGLAR, Protocol.SIMPLE, 8).exportable
    exported = {(c.algorithm, c.hierarchy) for c in ACTIONS if c.exportable}
    assert exported == set(knobs.EXPORTABLE_ALGO_HIERARCHY)


@pytest.mark.parametrize("name", preset_names())
def test_valid_mask_agrees_with_the_reasons(name: str) -> None:
    topo = load_topology(name)
    for coll in Collective:
        mask = valid_mask(topo, coll)
        reasons = [invalid_reason(topo, coll, c) for c in ACTIONS]
        assert mask.tolist() == [r is None for r in reasons]
        assert mask.any(), f"{name}/{coll.name}: no valid action at all"
        deployable = valid_mask(topo, coll, deployable=True)
        assert not (deployable & ~mask).any()
        assert all(ACTIONS[i].exportable for i in np.flatnonzero(deployable))


def test_rules_follow_nccl() -> None:
    h100 = load_topology("dgx_h100")
    h100_4 = load_topology("dgx_h100", nodes=4)
    pcie = load_topology("pcie_cluster")
    ar, ag, bc = Collective.ALLREDUCE, Collective.ALLGATHER, Collective.BROADCAST
    assert "only implements" in invalid_reason(h100, ag, nccl_config(Algorithm.TREE, Protocol.LL, 8))
    assert "only implements" in invalid_reason(h100, bc, nccl_config(Algorithm.NVLS, Protocol.SIMPLE, 8))
    assert "simple" in invalid_reason(h100, ar, nccl_config(Algorithm.NVLS, Protocol.LL, 8))
    assert invalid_reason(h100, ar, nccl_config(Algorithm.NVLS, Protocol.SIMPLE, 16)) is None
    assert "SHARP" in invalid_reason(h100_4, ar, nccl_config(Algorithm.NVLS, Protocol.SIMPLE, 16))
    assert "LL128" in invalid_reason(pcie, ar, nccl_config(Algorithm.RING, Protocol.LL128, 8))
    assert "NVLS" in invalid_reason(pcie, ar, nccl_config(Algorithm.NVLS, Protocol.SIMPLE, 8))
    assert "one GPU per node" in invalid_reason(h100_4, ag, nccl_config(Algorithm.PAT, Protocol.SIMPLE, 8))
    one_per_node = load_topology("dgx_h100", nodes=4, gpus_per_node=1)
    assert invalid_reason(one_per_node, ag, nccl_config(Algorithm.PAT, Protocol.SIMPLE, 8)) is None
    assert "any-to-any" in invalid_reason(load_topology("ring_ring_4to1"), ar,
                                          Config(Algorithm.STRAGGLAR, Protocol.SIMPLE, 8))
    odd = load_topology("switch", gpus_per_node=7)
    assert "even" in invalid_reason(odd, ar, Config(Algorithm.STRAGGLAR, Protocol.SIMPLE, 8))
    single = load_topology("dgx_h100", gpus_per_node=1)
    assert invalid_reason(single, ar, nccl_config(Algorithm.RING, Protocol.SIMPLE, 1)) is None
    assert "single rank" in invalid_reason(single, ar, nccl_config(Algorithm.RING, Protocol.LL, 1))


def test_shape_rules_reject_impossible_knob_combinations() -> None:
    h100 = load_topology("dgx_h100", nodes=2)
    ar = Collective.ALLREDUCE
    assert "channels" in invalid_reason(h100, ar, nccl_config(Algorithm.RING, Protocol.SIMPLE, 65))
    bad = Config(Algorithm.TREE, Protocol.SIMPLE, 8, Hierarchy.HIERARCHICAL, Schedule.BW_AWARE)
    assert "scheduling" in invalid_reason(h100, ar, bad)
    assert "is not" in invalid_reason(h100, ar, Config(Algorithm.TREE, Protocol.SIMPLE, 8))
    with pytest.raises(ValueError, match="not in the knob space"):
        action_id(nccl_config(Algorithm.RING, Protocol.SIMPLE, 24))


def test_parse_enum_accepts_nccl_spellings_and_ids() -> None:
    assert parse_enum(Algorithm, "NVLSTree") == Algorithm.NVLS_TREE
    assert parse_enum(Algorithm, "collnet-direct") == Algorithm.COLLNET_DIRECT
    assert parse_enum(Collective, "all_reduce") == Collective.ALLREDUCE
    assert parse_enum(Protocol, "2") == Protocol.SIMPLE
    assert parse_enum(Schedule, "localBWAware") == Schedule.BW_AWARE
    with pytest.raises(ValueError, match="choose from"):
        parse_enum(Protocol, "LL256")


def test_the_simulators_validity_cache_answers_as_invalid_reason_on_random_systems():
    """Validity is cached by ``knobs.validity_key`` (what ``invalid_reason`` reads of a system): a
    key that missed something would hand one system another's answers."""
    from dynamiccl.envs.system_sampler import random_topology
    from dynamiccl.simulator.tables import valid_rows

    rng = np.random.default_rng(5)
    systems = [random_topology(rng, i) for i in range(40)] + [load_topology(p) for p in preset_names()]
    assert len({knobs.validity_key(t) for t in systems}) < len(systems)  # the cache is shared
    batch = knobs.ConfigBatch.from_configs(knobs.ACTIONS)
    for topology in systems:
        for collective in Collective:
            want = [knobs.invalid_reason(topology, collective, a) is None for a in knobs.ACTIONS]
            assert valid_rows(topology, int(collective), batch).tolist() == want, topology.name
