"""The full-information learner and its training distribution (issue 12)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dynamiccl import decisions
from dynamiccl.agents.policies.full_info import FullInfoConfig, FullInfoLearner, FullInfoPolicy, masked_loss
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.action_values import action_values
from dynamiccl.envs.deployable_observation import DEPLOYABLE_HIGH, DEPLOYABLE_LOW
from dynamiccl.envs.system_sampler import MAX_RANKS, CallBatch, random_calls, random_topology
from dynamiccl.envs.workloads import load_scenario_distribution
from dynamiccl.system.knobs import ACTIONS, EXPORTABLE_MASK, Algorithm, Collective, Protocol, nccl_config
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import ARCHS, load_topology


def test_random_systems_are_valid_broad_and_never_a_held_out_system() -> None:
    rng = np.random.default_rng(0)
    systems = [random_topology(rng, i) for i in range(400)]
    held_out = load_scenario_distribution("heldout")
    held_out_prints = {e.scenarios[0].topology.fingerprint() for e in held_out.suite()}
    assert held_out_prints.isdisjoint(t.fingerprint() for t in systems)
    assert all(2 <= t.nranks <= MAX_RANKS for t in systems)
    assert {t.gpu.arch for t in systems} == set(ARCHS)
    assert {t.tiers[0].link for t in systems} == {"nvlink", "pcie"}
    assert {len(t.tiers) for t in systems} == {1, 2, 3}
    assert max(t.nodes for t in systems) >= 1000 and min(t.gpus_per_node for t in systems) == 1


def test_action_values_time_nccl_default_as_nccl_runs_it() -> None:
    rng = np.random.default_rng(1)
    topo = load_topology("dgx_h100", nodes=2)
    calls = random_calls(rng, 24)
    values = action_values(topo, calls)
    for i in range(24):
        delay = float(calls.straggler_delay_us[i])
        scenario = Scenario(topo, Collective(int(calls.collectives[i])), int(calls.nbytes[i]),
                            0 if delay > 0 else None, delay, float(calls.c2c[i]))
        default = decisions.nccl_default(scenario)
        assert values.default_us[i] == pytest.approx(default.time_us, rel=1e-9)
        assert not values.allowed[i][~EXPORTABLE_MASK].any()  # only what the plugin can do
        if default.config in ACTIONS:  # NCCL's own pick gains nothing over itself
            assert values.gains[i][ACTIONS.index(default.config)] == pytest.approx(0.0, abs=1e-12)


def test_the_loss_ignores_actions_that_are_not_allowed() -> None:
    gains = torch.tensor([[0.1, -0.5, 9.0]])
    allowed = torch.tensor([[True, True, False]])
    exact = masked_loss(torch.tensor([[0.1, -0.5, -7.0]]), gains, allowed)
    assert float(exact) == 0.0
    assert float(masked_loss(torch.tensor([[0.3, -0.5, 9.0]]), gains, allowed)) > 0.0


def _constant_policy(values: np.ndarray, min_gain: float = 0.02) -> FullInfoPolicy:
    learner = FullInfoLearner(FullInfoConfig(hidden=8, layers=1, ensemble=2))
    with torch.no_grad():
        for p in learner.network.parameters():
            p.zero_()
        for member in learner.network.members:
            member[-1].bias.copy_(torch.as_tensor(values, dtype=torch.float32))
    learner.network.widen_support(torch.as_tensor(np.stack([DEPLOYABLE_LOW, DEPLOYABLE_HIGH])))
    return FullInfoPolicy(learner.network, min_gain)


def test_policy_defers_to_nccl_unless_the_predicted_gain_exceeds_min_gain() -> None:
    scenario = Scenario(load_topology("dgx_h100", nodes=2), Collective.ALLREDUCE, 1 << 20)
    ring = ACTIONS.index(nccl_config(1, 2, 16))  # ring/simple/16
    small = np.zeros(len(ACTIONS))
    small[ring] = np.log(1.015)                    # 1.5 % predicted: below min_gain, 2 %
    assert _constant_policy(small).force(scenario) == KnobConstraints()  # NCCL decides
    big = np.zeros(len(ACTIONS))
    big[ring] = np.log(1.5)
    assert _constant_policy(big).force(scenario) == KnobConstraints(
        algorithm=Algorithm.RING, protocol=Protocol.SIMPLE, channels=16)


def test_policy_never_picks_what_the_plugin_cannot_deploy() -> None:
    scenario = Scenario(load_topology("ring_ring_8to1", nodes=4), Collective.ALLREDUCE, 1 << 26)
    values = np.where(EXPORTABLE_MASK, 0.0, 5.0)   # predicts huge gains only for simulator-only
    assert _constant_policy(values).force(scenario) == KnobConstraints()


def test_an_action_counts_only_as_much_as_the_least_confident_member_predicts() -> None:
    policy = _constant_policy(np.zeros(len(ACTIONS)))
    with torch.no_grad():
        policy.network.members[0][-1].bias[5] = 0.5
        policy.network.members[1][-1].bias[5] = 0.01
    obs = np.zeros((1, policy.network.members[0][0].in_features), dtype=np.float32)
    assert policy.predict(obs)[0, 5] == pytest.approx(0.01)


def test_a_policy_acts_only_inside_the_box_of_observations_it_trained_on() -> None:
    """All members can agree and be wrong where nothing was trained on (module docstring): outside
    the box a predicted gain, however large, leaves NCCL's pick in place."""
    gain = np.zeros(len(ACTIONS))
    gain[ACTIONS.index(nccl_config(1, 2, 16))] = np.log(1.5)
    policy = _constant_policy(gain)
    trained = load_topology("dgx_h100", nodes=2)
    with torch.no_grad():
        policy.network.support_low.fill_(math.inf)
        policy.network.support_high.fill_(-math.inf)
        colls, sizes = np.meshgrid(np.arange(len(Collective)), 2 ** np.arange(3, 35))
        calls = CallBatch(colls.ravel(), sizes.ravel(), np.zeros(colls.size), np.zeros(colls.size))
        policy.network.widen_support(torch.as_tensor(action_values(trained, calls).observations))
    inside = Scenario(trained, Collective.ALLREDUCE, 1 << 20)
    assert policy.force(inside).algorithm == Algorithm.RING
    for outside in (Scenario(load_topology("dgx_h100", nodes=16), Collective.ALLREDUCE, 1 << 20),
                    Scenario(load_topology("gb200_nvl72", nodes=2), Collective.ALLREDUCE, 1 << 20)):
        assert policy.force(outside) == KnobConstraints()
    # What it ranks first, before min_gain decides: the pinned action inside, nothing outside.
    mixed = [load_topology("dgx_h100", nodes=n) for n in (2, 16)]
    one_call = CallBatch(np.array([int(Collective.ALLREDUCE)]), np.array([1 << 20]), np.zeros(1), np.zeros(1))
    ranked = [policy.preferred(v.observations, v.allowed)
              for v in (action_values(t, one_call) for t in mixed)]
    assert ranked[0][0][0] == ACTIONS.index(nccl_config(1, 2, 16))
    assert ranked[0][1][0] == pytest.approx(np.log(1.5))
    assert ranked[1][0][0] == -1
    untrained = FullInfoLearner(FullInfoConfig(hidden=8, layers=1, ensemble=1)).network
    assert not untrained.supports(np.stack([DEPLOYABLE_LOW, DEPLOYABLE_HIGH])).any()


def test_training_lowers_the_loss_and_a_saved_learner_predicts_the_same(tmp_path) -> None:
    cfg = FullInfoConfig(hidden=32, layers=2, systems_per_round=4, calls_per_system=32,
                         epochs_per_round=3, seed=5)
    learner = FullInfoLearner(cfg)
    data = learner.draw_round()
    with torch.no_grad():
        before = float(masked_loss(learner.network(torch.as_tensor(data.observations)),
                                   torch.as_tensor(np.where(data.allowed, data.gains, 0.0),
                                                   dtype=torch.float32),
                                   torch.as_tensor(data.allowed)))
    for _ in range(4):
        after = learner.train_round(data)
    assert after < before
    path = learner.save(tmp_path / "learner.pt")
    again = FullInfoLearner.load(path)
    obs = data.observations[:16]
    np.testing.assert_array_equal(learner.policy().predict(obs), again.policy().predict(obs))
    assert again.samples_seen == learner.samples_seen


def test_scored_in_the_environment_it_defers_as_nccl_runs_and_pins_what_it_chose() -> None:
    from dynamiccl.agents.shipping.evaluate import evaluate_policy
    from dynamiccl.envs.workloads import load_suite

    suite = load_suite("smoke")[:1]
    idle = evaluate_policy(_constant_policy(np.zeros(len(ACTIONS))), suite)
    assert idle.geomean_speedup == pytest.approx(1.0)  # every call deferred: NCCL's own times
    assert all(c.config == "NCCL default" for c in idle.calls)


def test_learning_is_seeded() -> None:
    cfg = FullInfoConfig(hidden=16, layers=1, systems_per_round=2, calls_per_system=16, seed=9)
    a, b = FullInfoLearner(cfg).learn(64), FullInfoLearner(cfg).learn(64)
    obs = a.draw_round().observations[:8]
    np.testing.assert_array_equal(a.policy().predict(obs), b.policy().predict(obs))


def test_a_learner_told_a_scenario_distribution_draws_only_its_systems() -> None:
    cfg = FullInfoConfig(hidden=16, layers=1, systems_per_round=2, calls_per_system=16,
                         systems="train", seed=3)
    learner = FullInfoLearner(cfg)
    train = load_scenario_distribution("train")
    drawn = {(t.name, t.nodes) for t in (learner.draw_system(i) for i in range(200))}
    assert drawn == train.system_keys() == {(t.name, t.nodes) for t in train.topologies()}
    assert learner.learn(64).samples_seen == 64
    sampled = FullInfoLearner(FullInfoConfig(seed=3)).draw_system(0)
    assert (sampled.name, sampled.nodes) not in train.system_keys()
