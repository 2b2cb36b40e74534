"""The candidate tuners act as online tuners; the trained policy is trained on training realities only."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.agents.policies.adaptive import (
    adaptive_agent,
    adaptive_tuner,
    gated_slot,
    imitate,
    prior_sweep,
    prior_sweep_tuner,
    train_adaptive,
)
from dynamiccl.agents.policies.baselines import nccl_action
from dynamiccl.agents.policies.policy import ForcingPolicy, OnlinePolicy
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START
from dynamiccl.envs.online_tuning import CallLog, Candidates, OnlineTuningEnv
from dynamiccl.system.knobs import ACTIONS, valid_mask
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

TOPO = load_topology("dgx_h100", nodes=2)
SCENARIO = Scenario(TOPO, Collective.ALLREDUCE, 64 << 10)
MASK = valid_mask(TOPO, Collective.ALLREDUCE, deployable=True)
OBS = np.zeros(1, dtype=np.float32)


def test_prior_sweep_tries_nccl_then_the_prior_order_then_keeps_the_fastest_measured():
    tuner = prior_sweep_tuner()
    assert isinstance(tuner, OnlinePolicy)
    cands = Candidates.of(SCENARIO)
    expected = [nccl_action(SCENARIO, MASK), *cands.actions[1:]]
    # a made-up reality: the candidate the model ranks last is the fastest
    times = {a: 100.0 - i for i, a in enumerate(expected)}
    picks = []
    for _ in range(len(expected) + 3):
        a = tuner.act(OBS, scenario=SCENARIO, action_mask=MASK)
        assert MASK[a]
        tuner.update(SCENARIO, a, times[a])
        picks.append(a)
    assert picks[: len(expected)] == expected
    assert picks[len(expected):] == [expected[-1]] * 3


def test_contexts_are_kept_apart_and_reset_forgets():
    tuner = prior_sweep_tuner()
    other = Scenario(TOPO, Collective.ALLREDUCE, 256 << 20)
    first = tuner.act(OBS, scenario=SCENARIO, action_mask=MASK)
    tuner.update(SCENARIO, first, 10.0)
    assert tuner.act(OBS, scenario=SCENARIO, action_mask=MASK) != first
    assert tuner.act(OBS, scenario=other, action_mask=MASK) == nccl_action(other, MASK)
    tuner.reset()
    assert tuner.act(OBS, scenario=SCENARIO, action_mask=MASK) == first


def test_a_tiny_trained_policy_acts_as_an_online_tuner_and_never_saw_a_heldout_reality():
    model = train_adaptive(400, seed=0, n_envs=2,
                           hparams={"n_steps": 100, "batch_size": 100, "n_epochs": 1})
    seen = set().union(*(e.unwrapped.realities_seen for e in model.get_env().envs))
    assert seen and max(seen) < HELDOUT_SEED_START
    tuner = adaptive_tuner(model, n_calls=10)
    assert isinstance(tuner, OnlinePolicy)
    allowed = {nccl_action(SCENARIO, MASK), *Candidates.of(SCENARIO).actions[1:]}
    for _ in range(12):
        a = tuner.act(OBS, scenario=SCENARIO, action_mask=MASK)
        assert a in allowed, "the policy runs one of the model's candidates"
        tuner.update(SCENARIO, a, 50.0)
    log = tuner.measurements(SCENARIO)
    assert log is not None and log.calls == 12, "it kept every time it was fed"


def test_imitation_fits_the_teachers_choices():
    from stable_baselines3.common.env_util import make_vec_env

    from dynamiccl.agents.policies.sb3_agents import build_model

    model = build_model(adaptive_agent(), make_vec_env(OnlineTuningEnv, n_envs=1, seed=0), seed=0)
    uniform = -np.log(5.0)  # about the mean slot count
    assert imitate(model, prior_sweep, 20, seed=0) > uniform / 3


def test_training_refuses_heldout_seeds():
    with pytest.raises(ValueError, match="held out"):
        train_adaptive(10, seeds=range(HELDOUT_SEED_START, HELDOUT_SEED_START + 2))


def test_force_pins_nothing_for_nccls_pick_and_the_candidates_knobs_otherwise():
    tuner = prior_sweep_tuner()
    assert isinstance(tuner, ForcingPolicy)
    cands = Candidates.of(SCENARIO)
    assert tuner.force(SCENARIO) == KnobConstraints()
    tuner.record(SCENARIO, 100.0)
    second = tuner.force(SCENARIO)
    c = ACTIONS[cands.actions[1]]
    assert second == KnobConstraints(algorithm=c.algorithm, protocol=c.protocol, channels=c.channels)
    tuner.record(SCENARIO, 40.0)
    log = tuner.measurements(SCENARIO)
    assert list(log.tries[:2]) == [1, 1] and log.calls == 2


def test_the_runtimes_adapter_drives_a_candidate_tuner():
    from dynamiccl.agents.policies.runtime_tuner import RuntimeTunerAdapter
    from dynamiccl.runtime.tuning import SizeBin

    adapter = RuntimeTunerAdapter(prior_sweep_tuner(), TOPO, budget=16)
    size_bin = SizeBin.of(64 << 10)
    proposed = []
    while (candidate := adapter.propose(size_bin)) is not None:
        adapter.observe(size_bin, candidate, 100.0 - len(proposed))
        proposed.append(candidate)
    assert len(proposed) == len(Candidates.of(SCENARIO)), "each candidate once, then it exploits"


def _log(times_by_slot: dict[int, list[float]]) -> CallLog:
    log = CallLog()
    for slot, times in times_by_slot.items():
        for t in times:
            log.record(slot, t)
    return log


def test_the_gate_never_holds_a_choice_that_only_looked_faster_once():
    # Confirmed three times at under 2 % faster: within the noise, NCCL's pick is kept.
    log = _log({0: [100.0, 101.0, 99.0, 100.0], 1: [97.0, 98.5, 99.0]})
    assert gated_slot(log, 1) == 0
    # It looks faster and has few tries: confirm it, alternating with NCCL's pick by tries.
    assert gated_slot(_log({0: [100.0, 100.0], 1: [97.0]}), 1) == 1
    assert gated_slot(_log({0: [100.0], 1: [97.0]}), 1) == 0
    # A choice measured slower is never re-run; first tries and NCCL's pick always pass.
    assert gated_slot(_log({0: [100.0], 1: [104.0]}), 1) == 0
    assert gated_slot(_log({0: [100.0]}), 2) == 2
    assert gated_slot(_log({0: [100.0], 1: [50.0]}), 0) == 0


def test_the_gate_holds_a_choice_clearly_faster_than_nccls_pick():
    log = _log({0: [100.0, 102.0, 98.0, 101.0], 1: [80.0, 81.0, 79.5]})
    assert gated_slot(log, 1) == 1
