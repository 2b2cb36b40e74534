"""Workload traces, scenario distributions and suites: episodes follow real iteration traces, the
straggler moves during an episode, and the held-out split is really held out."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.config_loader import ConfigError
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.observation import encode
from dynamiccl.envs.workloads import (
    distribution_from_dict,
    load_scenario_distribution,
    load_suite,
    load_workload,
)
from dynamiccl.system.nccl import Collective
from dynamiccl.system.units import parse_size

AR, AG, RS = Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER


def _dist(**overrides) -> dict:
    base = {"name": "t", "systems": [{"topology": "dgx_h100", "nodes": [2]}],
            "workloads": ["ddp_gpt2_medium"]}
    return {**base, **overrides}


def test_ddp_trace_is_the_bucketed_gradient():
    w = load_workload("ddp_llama2_7b")
    sizes = [n for _, n in w]
    assert {c for c, _ in w} == {AR}
    assert sum(sizes) == 6_738_415_616 * 2  # every bf16 gradient byte, once
    assert sizes[0] == parse_size("1MiB") and set(sizes[1:-1]) == {parse_size("25MiB")}
    assert 0 < sizes[-1] <= parse_size("25MiB")


def test_fsdp_trace_gathers_forward_then_gathers_and_scatters_backward():
    w = load_workload("fsdp_llama2_7b")
    layer = 202_383_360 * 2
    assert len(w) == 33 * 3
    assert [c for c, _ in w.calls[:33]] == [AG] * 33
    assert w.calls[33:35] == ((AG, layer), (RS, layer))  # last layer first in backward
    assert w.calls[-1] == (RS, 262_148_096 * 2)  # the root unit (embeddings) is last


def test_tensor_parallel_trace_is_activation_sized_and_node_local():
    w = load_workload("tp_llama2_7b")
    assert w.group == "node"
    assert w.calls == ((AR, 1 * 4096 * 4096 * 2),) * (4 * 32)


@pytest.mark.parametrize("doc, match", [
    ({"name": "x", "kind": "ddp", "params": 10, "bucket_size": "1MB"}, "bucket_size"),
    ({"name": "x", "kind": "pipeline"}, "kind"),
    ({"name": "x", "kind": "trace", "calls": [{"collective": "alltoall", "bytes": 8}]},
     "calls\\[0\\].collective"),
    ({"name": "x", "kind": "trace", "calls": [{"collective": "allreduce", "bytes": "8 parsecs"}]},
     "calls\\[0\\].bytes"),
])
def test_workload_errors_name_the_key(doc, match):
    from dynamiccl.envs.traces import workload_from_dict

    with pytest.raises(ConfigError, match=match):
        workload_from_dict(doc, source="w.yaml")


@pytest.mark.parametrize("overrides, match", [
    ({"straggler": {"apear": 0.1}}, "straggler.apear"),
    ({"straggler": {"appear": 1.5}}, "at most 1"),
    ({"systems": [{"topology": "dgx_h100", "nodes": [0]}]}, "nodes"),
    ({"systems": [{"topology": "dgx_h1000"}]}, "unknown topology"),
    ({"workloads": ["ddp_gpt5"]}, "unknown workload"),
    ({"c2c": {"min": 1, "max": 0}}, "c2c.max"),
])
def test_scenario_errors_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        distribution_from_dict(_dist(**overrides), source="s.yaml")


def test_an_episode_is_the_calls_of_one_iteration_in_order():
    env = CollectiveTuningEnv(scenario=_dist(workloads=["fsdp_llama2_7b"]))
    env.reset(seed=4)
    calls, terminated = [], False
    while not terminated:
        s = env.current_scenario
        calls.append((s.collective, s.nbytes))
        *_, terminated, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert tuple(calls) == load_workload("fsdp_llama2_7b").calls


def test_a_longer_episode_runs_the_next_iteration():
    w = load_workload("ddp_gpt2_medium")
    episode = load_scenario_distribution(_dist()).sample(np.random.default_rng(0), len(w) + 5)
    calls = [(s.collective, s.nbytes) for s in episode.scenarios]
    assert calls == list(w.calls) + list(w.calls[:5])


def test_node_group_workloads_run_inside_one_node():
    dist = load_scenario_distribution(_dist(systems=[{"topology": "dgx_h100", "nodes": [4]}],
                                            workloads=["tp_llama2_7b"]))
    episode = dist.sample(np.random.default_rng(0))
    assert {(s.topology.nodes, s.topology.nranks) for s in episode.scenarios} == {(1, 8)}


def test_straggler_appears_moves_and_vanishes_and_the_observation_follows_one_call_later():
    doc = _dist(straggler={"initial": 0.0, "appear": 0.3, "move": 0.3, "vanish": 0.3,
                           "delay_us": {"min": 500, "max": 5000}}, episode_length=200)
    env = CollectiveTuningEnv(scenario=doc)
    obs, _ = env.reset(seed=1)
    events = {"appear": 0, "move": 0, "vanish": 0}
    previous = env.current_scenario
    for _ in range(199):
        obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
        # the straggler fields now show what the previous call saw
        expected = encode(previous, 1.0)
        np.testing.assert_array_equal(obs[49:52], expected[49:52])
        now = env.current_scenario
        before, after = previous.straggler_rank, now.straggler_rank
        if before is None and after is not None:
            events["appear"] += 1
        elif before is not None and after is None:
            events["vanish"] += 1
        elif before is not None and after != before:
            events["move"] += 1
        previous = now
    assert all(v >= 3 for v in events.values()), events


def test_sampling_is_deterministic_per_seed():
    dist = load_scenario_distribution("train")
    a = dist.sample(np.random.default_rng(3)).scenarios
    b = dist.sample(np.random.default_rng(3)).scenarios
    c = dist.sample(np.random.default_rng(4)).scenarios
    assert a == b and a != c


def test_suites_are_fixed_and_named_uniquely():
    fresh = load_scenario_distribution(_dist(workloads=["ddp_gpt2_medium", "tp_llama2_7b"],
                                             suite={"seed": 3, "episode_length": 8}))
    assert fresh.suite() == fresh.suite()
    for name in ("train", "heldout", "smoke"):
        suite = load_suite(name)
        assert len({e.name for e in suite}) == len(suite)
        assert suite == load_scenario_distribution(name).suite()


def test_heldout_shares_no_system_and_node_count_with_train():
    train, heldout = load_scenario_distribution("train"), load_scenario_distribution("heldout")
    assert not train.system_keys() & heldout.system_keys()
    seen = {(s.topology.name, s.topology.nodes) for e in load_suite("heldout") for s in e.scenarios}
    assert seen and not seen & train.system_keys()
    assert {"pcie_cluster", "ring_ring_48to1"} <= {name for name, _ in seen}
    assert not {"pcie_cluster", "ring_ring_48to1"} & {name for name, _ in train.system_keys()}


def test_unseen_kinds_are_no_training_or_held_out_system_and_reach_past_the_sampler():
    from dynamiccl.envs.system_sampler import random_topology

    unseen = load_scenario_distribution("unseen_kinds")
    names = {name for name, _ in unseen.system_keys()}
    for other in ("train", "heldout"):
        assert not names & {name for name, _ in load_scenario_distribution(other).system_keys()}
    systems = [s.topology for e in load_suite("unseen_kinds") for s in e.scenarios]
    assert all(t.nranks > 1 for t in systems)
    rng = np.random.default_rng(0)
    sampled = max(random_topology(rng, i).gpus_per_node for i in range(400))
    assert max(t.gpus_per_node for t in systems) == 72 > sampled  # the NVL72 rack's NVLink domain


def test_heldout_sizes_reach_outside_the_training_range():
    def sizes(dist):
        return [n for w in set(dist.workloads) | {w for s in dist.systems for w in s.workloads or ()}
                for _, n in load_workload(w)]

    train = sizes(load_scenario_distribution("train"))
    heldout = sizes(load_scenario_distribution("heldout"))
    assert min(heldout) < min(train) and max(heldout) > max(train)


def test_hydra_composes_the_scenario_and_env_groups_into_an_environment():
    from importlib import resources

    from hydra import compose, initialize_config_dir

    configs = str(resources.files("dynamiccl.configs"))
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        cfg = compose(overrides=["+scenario=smoke", "+env=default", "+workload=tp_llama2_7b"])
    kwargs = {k: v for k, v in cfg.env.items() if k != "id"}
    env = CollectiveTuningEnv(scenario=cfg.scenario, **kwargs)
    assert env.distribution == load_scenario_distribution("smoke")
    assert load_workload(cfg.workload) == load_workload("tp_llama2_7b")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
