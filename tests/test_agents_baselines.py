"""Baselines: NCCL's default, the oracle, the single static best configuration, random."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl import decisions
from dynamiccl.agents.baselines import (
    NcclDefaultPolicy,
    OraclePolicy,
    RandomPolicy,
    StaticBestPolicy,
    static_best_action,
    training_scenarios,
)
from dynamiccl.agents.policy import (
    DirectChooser,
    Policy,
    masked_argmax,
    nearest_valid_action,
    scenario_mask,
)
from dynamiccl.agents.registry import BUILTIN, load_policy
from dynamiccl.envs.observation import encode
from dynamiccl.envs.workloads import load_suite
from dynamiccl.knobs import ACTIONS, EXPORTABLE_MASK, Config
from dynamiccl.nccl import Algorithm, Collective, Protocol
from dynamiccl.scenario import Scenario
from dynamiccl.topology import load_topology


@pytest.fixture(scope="module")
def smoke_calls() -> list[Scenario]:
    return list(dict.fromkeys(s for e in load_suite("smoke") for s in e.scenarios))


def test_every_builtin_name_loads_and_speaks_the_policy_protocol():
    for name in BUILTIN:
        policy = load_policy(name) if name != "static_best" else StaticBestPolicy(0)
        assert isinstance(policy, Policy)
        assert policy.name == name


def test_unknown_policy_name_gets_a_message_listing_the_choices():
    with pytest.raises(ValueError, match="nccl_default, oracle, static_best"):
        load_policy("oracel")


@pytest.mark.parametrize("deployable", [False, True])
def test_oracle_is_the_fastest_allowed_action_and_nothing_beats_it(smoke_calls, deployable):
    oracle = OraclePolicy(deployable=deployable)
    rng = np.random.default_rng(0)
    for s in smoke_calls:
        mask = scenario_mask(s, deployable=deployable)
        times = decisions.action_times(s)
        a = oracle.act(encode(s), scenario=s, action_mask=mask)
        assert mask[a]
        assert times[a] == pytest.approx(times[mask].min())
        assert oracle.act(encode(s), scenario=s) == a
        if deployable:
            assert EXPORTABLE_MASK[a]
        others = rng.choice(np.flatnonzero(mask), size=min(20, int(mask.sum())), replace=False)
        assert all(times[o] >= times[a] for o in others)


def test_nccl_default_is_scored_as_nccl_runs_it_and_acts_with_its_nearest_table_entry(smoke_calls):
    policy = NcclDefaultPolicy()
    assert isinstance(policy, DirectChooser)
    for s in smoke_calls:
        d = decisions.nccl_default(s)
        choice = policy.choose(s)
        assert choice.config == d.config and choice.time_us == d.time_us
        a = policy.act(encode(s), scenario=s, action_mask=scenario_mask(s))
        assert scenario_mask(s)[a]
        assert ACTIONS[a].algorithm == d.config.algorithm
        assert ACTIONS[a].protocol == d.config.protocol


def test_nearest_valid_action_keeps_algorithm_protocol_and_rounds_channels_on_a_log_scale():
    topo = load_topology("dgx_h100", nodes=2)
    mask = scenario_mask(Scenario(topo, Collective.ALLREDUCE, 1 << 20))
    a = nearest_valid_action(Config(Algorithm.RING, Protocol.LL128, 24), mask)
    assert (ACTIONS[a].algorithm, ACTIONS[a].protocol) == (Algorithm.RING, Protocol.LL128)
    assert ACTIONS[a].channels in (16, 32)


def test_masked_argmax_never_picks_a_forbidden_action_even_if_it_scores_best():
    values = np.array([5.0, 1.0, 3.0])
    assert masked_argmax(values, np.array([False, True, True])) == 2
    with pytest.raises(ValueError, match="allows no action"):
        masked_argmax(values, np.zeros(3, dtype=bool))


def test_random_policy_is_seeded_masked_and_needs_a_mask_or_scenario(smoke_calls):
    picks = []
    for seed in (1, 1, 2):
        policy = RandomPolicy(seed=seed)
        picks.append([policy.act(encode(s), scenario=s) for s in smoke_calls])
    assert picks[0] == picks[1] != picks[2]
    for s, a in zip(smoke_calls, picks[0], strict=True):
        assert scenario_mask(s)[a]
    with pytest.raises(ValueError, match="needs the true scenario"):
        RandomPolicy().act(np.zeros(3))


def test_static_best_maximises_mean_log_speedup_with_nccl_where_invalid(smoke_calls):
    action = static_best_action(smoke_calls)
    gains = np.zeros(len(ACTIONS))
    for s in smoke_calls:
        times = decisions.action_times(s)
        t_def = decisions.nccl_default(s).time_us
        with np.errstate(divide="ignore"):
            gains += np.where(np.isfinite(times), np.log(t_def / times), 0.0)
    assert gains[action] == pytest.approx(gains.max())
    policy = StaticBestPolicy(action)
    for s in smoke_calls:
        choice = policy.choose(s)
        if scenario_mask(s)[action]:
            assert choice.config == ACTIONS[action]
        else:
            assert choice.config == decisions.nccl_default(s).config


def test_static_best_deployable_picks_an_exportable_action_and_falls_back_when_invalid():
    calls = training_scenarios("smoke")
    action = static_best_action(calls, deployable=True)
    assert EXPORTABLE_MASK[action]
    policy = StaticBestPolicy(action, deployable=True)
    single = Scenario(load_topology("dgx_h100", nodes=1).resized(gpus_per_node=1),
                      Collective.ALLREDUCE, 1 << 20)
    a = policy.act(encode(single), scenario=single)
    assert scenario_mask(single, deployable=True)[a]


def test_static_best_for_a_topology_is_fitted_on_the_suite_moved_onto_that_system():
    pcie = load_topology("pcie_cluster", nodes=2)
    moved = training_scenarios("smoke", topology=pcie)
    assert moved and all(s.topology == pcie for s in moved)
    assert all(s.straggler_rank is None or s.straggler_rank < pcie.nranks for s in moved)
    policy = load_policy("static_best", topology=pcie)
    assert policy.action == static_best_action(training_scenarios("train", topology=pcie))
