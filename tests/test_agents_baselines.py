"""Baselines: NCCL's default, the oracle, the single static best configuration, random."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl import decisions
from dynamiccl.agents.policies.baselines import (
    NCCL_PAIRS,
    NcclDefaultPolicy,
    OraclePolicy,
    RandomPolicy,
    StaticBestPolicy,
    pair_constraints,
    static_best_pair,
    training_scenarios,
)
from dynamiccl.agents.policies.policy import (
    ForcingPolicy,
    Policy,
    masked_argmax,
    nearest_valid_action,
    scenario_mask,
)
from dynamiccl.agents.policies.registry import BUILTIN, load_policy
from dynamiccl.envs.observation import encode
from dynamiccl.envs.workloads import load_suite
from dynamiccl.system.knobs import ACTIONS, EXPORTABLE_MASK, Config, nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology


@pytest.fixture(scope="module")
def smoke_calls() -> list[Scenario]:
    return list(dict.fromkeys(s for e in load_suite("smoke") for s in e.scenarios))


def test_every_builtin_name_loads_and_speaks_the_policy_protocol():
    for name in BUILTIN:
        policy = load_policy(name) if name != "static_best" else StaticBestPolicy(None)
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


def test_nccl_default_pins_nothing_and_acts_with_its_nearest_table_entry(smoke_calls):
    policy = NcclDefaultPolicy()
    assert isinstance(policy, ForcingPolicy)
    for s in smoke_calls:
        d = decisions.nccl_default(s)
        assert not policy.force(s).given()
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


def _pair_gains(calls: list[Scenario]) -> np.ndarray:
    gains = np.zeros(len(NCCL_PAIRS))
    for s in calls:
        t_def = decisions.nccl_default(s).time_us
        for i, pair in enumerate(NCCL_PAIRS):
            pinned = pair_constraints(s, pair)
            if pinned.given():
                gains[i] += np.log(t_def / decisions.nccl_default(s, pinned).time_us)
    return gains


def test_static_best_is_an_nccl_algo_proto_pair_or_nothing_and_falls_back_where_invalid(smoke_calls):
    pair = static_best_pair(smoke_calls)
    gains = _pair_gains(smoke_calls)
    if pair is None:
        assert gains.max() <= 0  # no setting beats leaving NCCL alone: an engineer sets none
    else:
        assert gains[NCCL_PAIRS.index(pair)] == pytest.approx(gains.max())
    policy = StaticBestPolicy((Algorithm.TREE, Protocol.SIMPLE))
    assert "NCCL_ALGO=tree NCCL_PROTO=simple" in policy.description
    for s in smoke_calls:
        pinned = policy.force(s)
        if s.collective == Collective.ALLREDUCE and s.topology.nranks > 1:
            assert (pinned.algorithm, pinned.protocol) == (Algorithm.TREE, Protocol.SIMPLE)
        elif s.collective != Collective.ALLREDUCE:
            assert not pinned.given()  # tree has no allgather: NCCL's own choice stands
        a = policy.act(encode(s), scenario=s)
        assert scenario_mask(s, deployable=True)[a]


def test_static_best_never_names_a_simulator_only_algorithm():
    assert all(nccl_config(a, p, 1).exportable for a, p in NCCL_PAIRS)
    assert Algorithm.STRAGGLAR not in {a for a, _ in NCCL_PAIRS}
    assert "none set" in StaticBestPolicy(None).description


def test_static_best_for_a_topology_is_fitted_on_the_suite_moved_onto_that_system():
    pcie = load_topology("pcie_cluster", nodes=2)
    moved = training_scenarios("smoke", topology=pcie)
    assert moved and all(s.topology == pcie for s in moved)
    assert all(s.straggler_rank is None or s.straggler_rank < pcie.nranks for s in moved)
    policy = load_policy("static_best", topology=pcie)
    assert policy.pair == static_best_pair(training_scenarios("train", topology=pcie))
