"""Online black-box tuners learn from the times they are fed, and only from those."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl import decisions
from dynamiccl.agents.policies.baselines import nccl_action
from dynamiccl.agents.policies.online import (
    COORDINATES,
    CoordinateDescentTuner,
    UcbBandit,
    context_key,
    coordinate_candidates,
)
from dynamiccl.agents.policies.policy import OnlinePolicy, scenario_mask
from dynamiccl.envs.observation import encode
from dynamiccl.system.knobs import ACTIONS
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

SCENARIO = Scenario(load_topology("ring_ring_8to1", nodes=4), Collective.ALLREDUCE, 64 << 20)


def synthetic_times(target: int) -> np.ndarray:
    """A made-up cost landscape (not the simulator's): distance to ``target`` in knob space."""
    t = np.full(len(ACTIONS), 100.0)
    for name, col in COORDINATES.items():
        if name == "channels":
            t += 5.0 * np.abs(np.log2(col) - np.log2(col[target]))
        else:
            t += 20.0 * (col != col[target])
    return t


def run(tuner, times: np.ndarray, calls: int, scenario: Scenario = SCENARIO) -> list[int]:
    mask = scenario_mask(scenario)
    picks = []
    for _ in range(calls):
        a = tuner.act(encode(scenario), scenario=scenario, action_mask=mask)
        assert mask[a], "an online tuner proposed an invalid action"
        tuner.update(scenario, a, float(times[a]))
        picks.append(a)
    return picks


def _target() -> int:
    """A valid action far from NCCL's pick, so finding it takes real search."""
    mask = scenario_mask(SCENARIO)
    nccl = decisions.nccl_default(SCENARIO).config
    far = [i for i in np.flatnonzero(mask)
           if ACTIONS[i].algorithm != nccl.algorithm and ACTIONS[i].protocol != nccl.protocol]
    return int(far[len(far) // 2])


def test_coordinate_descent_finds_the_optimum_of_times_it_is_fed_not_the_simulators():
    target = _target()
    times = synthetic_times(target)
    tuner = CoordinateDescentTuner(budget=64)
    assert isinstance(tuner, OnlinePolicy)
    picks = run(tuner, times, 64)
    assert tuner.act(encode(SCENARIO), scenario=SCENARIO) == target
    assert picks.index(target) < 40
    sim_best = int(np.argmin(decisions.action_times(SCENARIO)))
    assert sim_best != target  # so the test would fail if the tuner peeked at the simulator


def test_coordinate_descent_respects_its_budget_then_exploits():
    tuner = CoordinateDescentTuner(budget=5)
    times = synthetic_times(_target())
    picks = run(tuner, times, 12)
    measured_best = min(picks[:5], key=lambda a: times[a])
    assert picks[5:] == [measured_best] * 7
    assert picks[0] != picks[1]


@pytest.mark.parametrize("budget", range(2, 16))
def test_a_budget_spent_mid_coordinate_exploits_the_best_measured_never_an_untried_one(budget):
    """The budget can end while a coordinate still has candidates pending; what is kept is then
    the fastest measured action, not the next candidate (which nobody measured)."""
    tuner = CoordinateDescentTuner(budget=budget)
    times = synthetic_times(_target())
    picks = run(tuner, times, budget + 3)
    assert picks[budget:] == [min(picks[:budget], key=lambda a: times[a])] * 3


def test_coordinate_candidates_change_one_knob_and_stay_valid():
    mask = scenario_mask(SCENARIO)
    start = int(np.flatnonzero(mask)[0])
    cands = coordinate_candidates(start, "channels", mask)
    assert cands and all(mask[c] for c in cands)
    for c in cands:
        assert ACTIONS[c].channels != ACTIONS[start].channels
        assert ACTIONS[c].algorithm == ACTIONS[start].algorithm
        assert ACTIONS[c].protocol == ACTIONS[start].protocol


def test_bandit_tries_untried_arms_first_then_exploits_the_best_mean():
    target = _target()
    times = synthetic_times(target)
    n_valid = int(scenario_mask(SCENARIO).sum())
    tuner = UcbBandit(budget=n_valid + 10, seed=0)
    picks = run(tuner, times, n_valid)
    assert sorted(set(picks)) == sorted(picks), "an arm was repeated before all were tried"
    assert picks[0] == nccl_action(SCENARIO, scenario_mask(SCENARIO))
    run(tuner, times, 10)
    assert tuner.act(encode(SCENARIO), scenario=SCENARIO) == target


def test_tuners_keep_separate_state_per_context_and_reset_clears_it():
    other = Scenario(SCENARIO.topology, Collective.ALLGATHER, 64 << 20)
    assert context_key(other) != context_key(SCENARIO)
    assert context_key(Scenario(SCENARIO.topology, Collective.ALLREDUCE, (64 << 20) + 7)) == \
        context_key(SCENARIO)
    for tuner in (CoordinateDescentTuner(budget=8), UcbBandit(budget=8, seed=1)):
        first = tuner.act(encode(SCENARIO), scenario=SCENARIO)
        run(tuner, synthetic_times(_target()), 8)
        assert tuner.act(encode(other), scenario=other) == tuner.act(encode(other), scenario=other)
        tuner.reset()
        assert tuner.act(encode(SCENARIO), scenario=SCENARIO) == first


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="budget"):
        CoordinateDescentTuner(budget=0)
    with pytest.raises(ValueError, match="budget"):
        UcbBandit(budget=0)
