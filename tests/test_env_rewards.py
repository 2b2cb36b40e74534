"""Masking and rewards against the simulator: the environment never lets an invalid action through,
and its reward is exactly the simulator's log speedup over NCCL's default."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynamiccl import decisions
from dynamiccl.envs.backends.sim import SimBackend
from dynamiccl.envs.collective_tuning import INVALID_ACTION_REWARD, CollectiveTuningEnv
from dynamiccl.envs.workloads import load_suite
from dynamiccl.system.knobs import ACTION_INDEX, ACTIONS, EXPORTABLE_MASK, invalid_reason
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology, preset_names

#: Every preset at a single node and at its own size, plus a one-GPU-per-node system (PAT's case).
SYSTEMS = ([load_topology(p, nodes=n) for p in preset_names() for n in (1, 4)]
           + [load_topology("dgx_h100", nodes=4, gpus_per_node=1)])
SIZES = (4096, 32 << 20)


def _scenarios() -> list[Scenario]:
    return [Scenario(t, c, n) for t in SYSTEMS for c in Collective for n in SIZES]


def _env(deployable: bool = False) -> CollectiveTuningEnv:
    return CollectiveTuningEnv(scenario="smoke", deployable=deployable)


def _play(env: CollectiveTuningEnv, scenario: Scenario, action: int) -> tuple[float, dict]:
    env.reset(seed=0, options={"episode": [scenario]})
    _, reward, terminated, _, info = env.step(action)
    assert terminated
    return reward, info


def test_mask_is_exactly_the_valid_set_and_every_allowed_action_has_a_finite_time():
    env = _env()
    for scenario in _scenarios():
        env.reset(seed=0, options={"episode": [scenario]})
        mask = env.action_masks()
        expected = [invalid_reason(scenario.topology, scenario.collective, c) is None
                    for c in ACTIONS]
        np.testing.assert_array_equal(mask, expected, err_msg=str(scenario))
        times = decisions.action_times(scenario)
        assert np.isfinite(times[mask]).all(), scenario
        assert mask.any()


def test_deployable_mask_is_exportable_and_within_the_valid_mask():
    full, deployable = _env(), _env(deployable=True)
    for scenario in _scenarios():
        full.reset(seed=0, options={"episode": [scenario]})
        deployable.reset(seed=0, options={"episode": [scenario]})
        d_mask = deployable.action_masks()
        assert not (d_mask & ~EXPORTABLE_MASK).any()
        assert not (d_mask & ~full.action_masks()).any()
        assert d_mask.any(), f"NCCL always has some exportable choice: {scenario}"


@pytest.mark.parametrize("deployable", [False, True])
def test_oracle_is_the_fastest_allowed_action(deployable):
    env = _env(deployable)
    for scenario in _scenarios()[::3]:
        env.reset(seed=0, options={"episode": [scenario]})
        mask = env.action_masks()
        _, info = _play(env, scenario, int(np.flatnonzero(mask)[0]))
        times = decisions.action_times(scenario)
        assert mask[info["oracle_action"]]
        assert info["oracle_time_us"] == pytest.approx(times[mask].min())


def test_reward_is_the_simulators_log_speedup_with_the_right_sign():
    env = _env()
    checked = {"faster": 0, "slower": 0}
    for topo in ("dgx_h100", "ring_ring_8to1", "pcie_cluster"):
        scenario = Scenario(load_topology(topo, nodes=2), Collective.ALLREDUCE, 8 << 20)
        times = decisions.action_times(scenario)
        default_us = decisions.nccl_default(scenario).time_us
        for action in np.flatnonzero(np.isfinite(times)):
            reward, info = _play(env, scenario, int(action))
            assert reward == pytest.approx(math.log(default_us / times[action]), rel=1e-12)
            assert info["time_us"] == times[action] and info["default_time_us"] == default_us
            if times[action] < default_us:
                assert reward > 0
                checked["faster"] += 1
            elif times[action] > default_us:
                assert reward < 0
                checked["slower"] += 1
    assert checked["faster"] and checked["slower"], checked


def test_choosing_nccls_own_configuration_gives_zero_reward():
    env = _env()
    found = 0
    for scenario in _scenarios():
        config = decisions.nccl_default(scenario).config
        if config not in ACTION_INDEX:  # NCCL's channel count is not one of the table's levels
            continue
        reward, _ = _play(env, scenario, ACTION_INDEX[config])
        assert reward == pytest.approx(0.0, abs=1e-9), scenario
        found += 1
    assert found >= 10


def test_sim_backend_measures_the_straggler_it_was_given():
    topo = load_topology("dgx_h100", nodes=2)
    scenario = Scenario(topo, Collective.ALLREDUCE, 1 << 20, straggler_rank=5,
                        straggler_delay_us=2000.0)
    action = int(np.flatnonzero(np.isfinite(decisions.action_times(scenario)))[0])
    m = SimBackend().measure(scenario, action)
    assert (m.straggler_rank, m.straggler_delay_us) == (5, 2000.0)
    assert m.time_us == decisions.action_times(scenario)[action]
    calm = SimBackend().measure(Scenario(topo, Collective.ALLREDUCE, 1 << 20), action)
    assert (calm.straggler_rank, calm.straggler_delay_us) == (None, 0.0)


def test_an_invalid_action_scores_below_every_valid_one_in_the_suites():
    backend = SimBackend()
    worst = math.inf
    for suite in ("train", "heldout"):
        for scenario in {s for entry in load_suite(suite) for s in entry.scenarios}:
            times = backend.action_times(scenario)
            default_us = backend.measure(scenario, 0).default_time_us
            worst = min(worst, math.log(default_us / times[np.isfinite(times)].max()))
    assert INVALID_ACTION_REWARD < worst
