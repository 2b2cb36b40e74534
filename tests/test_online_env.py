"""dynamiccl/OnlineTuning-v0: a valid gymnasium env whose reward charges every call against NCCL's truth."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dynamiccl
from dynamiccl import decisions
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.envs.online_tuning import (
    CONTEXT_SIZE,
    LOG_RANGE,
    MAX_CANDIDATES,
    MAX_PREDICTED_SLOWDOWN,
    OBS_SIZE,
    SLOT_FIELDS,
    CallLog,
    Candidates,
    Context,
    OnlineTuningEnv,
    affordable,
)
from dynamiccl.system.knobs import ACTIONS, Algorithm, Protocol, valid_mask
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

SCENARIO = Scenario(load_topology("dgx_h100", nodes=2), Collective.ALLREDUCE, 64 << 10)


def test_passes_gymnasium_check_env_and_is_registered():
    env = OnlineTuningEnv(systems=(("dgx_h100", 1),), n_calls=5)
    check_env(env, skip_render_check=True)
    made = gym.make(dynamiccl.ONLINE_ENV_ID)
    obs, _ = made.reset(seed=3)
    assert obs.shape == (OBS_SIZE,) and made.observation_space.contains(obs)


def test_candidates_are_nccl_then_one_valid_deployable_action_per_pair_by_prediction():
    cands = Candidates.of(SCENARIO)
    assert cands.actions[0] == -1
    assert cands.predicted_us[0] == pytest.approx(decisions.nccl_default(SCENARIO).time_us)
    mask = valid_mask(SCENARIO.topology, SCENARIO.collective, deployable=True)
    rest = cands.actions[1:]
    assert len(rest) >= 2 and all(mask[a] for a in rest)
    pairs = [(ACTIONS[a].algorithm, ACTIONS[a].protocol) for a in rest]
    assert len(set(pairs)) == len(pairs)
    assert list(cands.predicted_us[1:]) == sorted(cands.predicted_us[1:])
    assert cands.mask().sum() == len(cands) <= MAX_CANDIDATES


def test_only_candidates_predicted_within_twice_nccls_time_may_run():
    # a 1 GiB all-reduce on two DGX H100: tree/LL is a candidate the model predicts far slower than
    # NCCL's pick (a held-out reality ran it 34x slower when tuners could try it)
    big = Scenario(load_topology("dgx_h100", nodes=2), Collective.ALLREDUCE, 1 << 30)
    cands, log = Candidates.of(big), CallLog()
    predicted = np.array(cands.predicted_us)
    slow = [k for k, a in enumerate(cands.actions) if k and
            (ACTIONS[a].algorithm, ACTIONS[a].protocol) == (Algorithm.TREE, Protocol.LL)]
    assert slow and predicted[slow[0]] > MAX_PREDICTED_SLOWDOWN * predicted[0]
    mask = affordable(cands, log)
    assert mask[0] and not mask[slow[0]]
    assert list(mask[: len(cands)]) == list(predicted <= MAX_PREDICTED_SLOWDOWN * predicted[0])
    assert not mask[len(cands):].any()
    # NCCL's pick measured 3x slower than predicted: what is within twice that becomes affordable
    log.record(0, 3 * predicted[0])
    wider = affordable(cands, log)
    assert list(wider[1: len(cands)]) == list(predicted[1:] <= 6 * predicted[0])
    # measured faster than predicted: the prediction stays the anchor (never tighter than the prior)
    quick = CallLog()
    quick.record(0, predicted[0] / 3)
    assert (affordable(cands, quick) == mask).all()
    env = OnlineTuningEnv(seeds=range(7, 8), n_calls=5)
    env.reset(seed=0, options={"context": Context(7, big)})
    assert (env.action_masks() == cands.mask() & mask).all()


def test_reward_is_minus_log_measured_over_true_nccl_and_exploration_is_charged():
    env = OnlineTuningEnv(seeds=range(7, 8), n_calls=50)
    _, info = env.reset(seed=0, options={"context": Context(7, SCENARIO)})
    truth = PerturbedBackend(7, noisy=False)
    nccl_true = truth.true_time(SCENARIO, decisions.nccl_default(SCENARIO).config)
    rewards = {}
    for slot in range(len(info["candidates"])):
        _, reward, _, _, step = env.step(slot)
        assert step["nccl_time_us"] == pytest.approx(nccl_true)
        assert reward == pytest.approx(-math.log(step["time_us"] / nccl_true))
        # the measured time is the truth of the choice actually run, plus a few % of noise
        assert abs(math.log(step["time_us"] / step["true_time_us"])) < 0.25
        rewards[slot] = reward
    worst = max(rewards, key=lambda k: -rewards[k])
    assert rewards[worst] < -0.05, "some candidate is slower than NCCL here, and trying it costs"
    assert env.step(worst)[1] < -0.05, "running it again costs again"


def test_episode_ends_after_n_calls_and_measurements_show_in_the_observation():
    env = OnlineTuningEnv(seeds=range(3, 4), n_calls=4)
    obs, info = env.reset(seed=1, options={"context": Context(3, SCENARIO)})
    slot1 = CONTEXT_SIZE + 2 + len(SLOT_FIELDS)
    assert obs[CONTEXT_SIZE] == 0.0 and obs[slot1 + 2] == 0.0 and obs[slot1 + 3] == 0.0
    steps = [env.step(1) for _ in range(4)]
    assert [s[2] for s in steps] == [False, False, False, True]
    last = steps[-1][0]
    assert last[CONTEXT_SIZE] == pytest.approx(1.0)  # progress
    assert last[slot1 + 2] == pytest.approx(math.log2(5) / math.log2(5))  # 4 tries of 4 calls
    # slot 1 measured, NCCL's not: its gain is against NCCL's *predicted* time
    cands = info["candidates"]
    mean_log = np.mean([math.log(s[4]["time_us"]) for s in steps])
    expected = (math.log(cands.predicted_us[0]) - mean_log) / LOG_RANGE
    assert last[slot1 + 3] == pytest.approx(float(np.clip(expected, -1, 1)), abs=1e-5)
    assert last[CONTEXT_SIZE + 1] > 0.0, "repeated measurements give a noise estimate"


def test_call_log_pools_the_noise_of_repeated_choices():
    log = CallLog()
    log.record(1, 10.0)
    assert log.noise() == 0.0
    log.record(1, 10.0 * math.exp(0.02))
    assert log.tries[1] == 2 and log.calls == 2
    assert log.noise() == pytest.approx(0.02 / math.sqrt(2), rel=1e-6)


def test_a_training_env_refuses_heldout_realities():
    with pytest.raises(ValueError, match="held out"):
        OnlineTuningEnv(seeds=range(HELDOUT_SEED_START - 1, HELDOUT_SEED_START + 1))
    env = OnlineTuningEnv()
    with pytest.raises(ValueError, match="held out"):
        env.reset(options={"context": Context(HELDOUT_SEED_START, SCENARIO)})
    for _ in range(30):
        env.reset()
    assert env.realities_seen and max(env.realities_seen) < HELDOUT_SEED_START
    evaluation = OnlineTuningEnv(seeds=range(HELDOUT_SEED_START, HELDOUT_SEED_START + 5), heldout=True)
    evaluation.reset(seed=0)
    assert min(evaluation.realities_seen) >= HELDOUT_SEED_START
