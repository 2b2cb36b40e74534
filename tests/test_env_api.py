"""The environment's API: registration, gymnasium/SB3 conformance, vectorized use, determinism."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import dynamiccl
from dynamiccl import ENV_ID
from dynamiccl.envs.collective_tuning import INVALID_ACTION_REWARD, CollectiveTuningEnv
from dynamiccl.envs.observation import OBS_SIZE
from dynamiccl.envs.workloads import load_suite
from dynamiccl.system.knobs import N_ACTIONS


def _masked_rollout(env: gym.Env, seed: int, steps: int) -> list[tuple]:
    """(observation, reward, terminated, scenario) per step under seeded random valid actions."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = [(obs.tobytes(), 0.0, False, env.unwrapped.current_scenario)]
    for _ in range(steps):
        valid = np.flatnonzero(env.unwrapped.action_masks())
        obs, reward, terminated, _, info = env.step(int(rng.choice(valid)))
        out.append((obs.tobytes(), reward, terminated, info["scenario"]))
        if terminated:
            obs, _ = env.reset()
    return out


def test_importing_the_envs_registers_the_ids_without_importing_the_environments():
    code = ("import sys, dynamiccl.envs, gymnasium as gym; gym.spec('dynamiccl/CollectiveTuning-v0'); "
            "gym.spec('dynamiccl/OnlineTuning-v0'); "
            "print('dynamiccl.envs.collective_tuning' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_module_form_makes_the_environment_in_a_fresh_interpreter():
    code = ("import gymnasium as gym; env = gym.make('dynamiccl.envs:dynamiccl/CollectiveTuning-v0', "
            "scenario='smoke'); print(type(env.unwrapped).__name__, env.spec.id)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["CollectiveTuningEnv", "dynamiccl/CollectiveTuning-v0"]


def test_gym_make_builds_the_environment():
    env = gym.make(ENV_ID, scenario="smoke")
    assert isinstance(env.unwrapped, CollectiveTuningEnv)
    assert env.action_space == gym.spaces.Discrete(N_ACTIONS)
    obs, info = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE,) and obs.dtype == np.float32
    assert info["scenario"] is env.unwrapped.current_scenario
    assert env.get_wrapper_attr("action_masks")().shape == (N_ACTIONS,)


def test_gymnasium_check_env_passes_without_warnings():
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID, scenario="smoke", render_mode="ansi")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


def test_sb3_check_env_passes_without_warnings():
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(CollectiveTuningEnv(scenario="smoke"))


def test_same_seed_same_trajectory_and_other_seed_differs():
    a = _masked_rollout(gym.make(ENV_ID, scenario="train"), seed=11, steps=150)
    b = _masked_rollout(gym.make(ENV_ID, scenario="train"), seed=11, steps=150)
    c = _masked_rollout(gym.make(ENV_ID, scenario="train"), seed=12, steps=150)
    assert a == b
    assert a != c


def test_invalid_action_is_penalised_and_nccl_default_runs():
    env = CollectiveTuningEnv(scenario="smoke")
    env.reset(seed=0)
    invalid = np.flatnonzero(~env.action_masks())
    assert len(invalid), "every system forbids some action (e.g. NVLS on a non-NVSwitch rank set)"
    _, reward, _, _, info = env.step(int(invalid[0]))
    assert reward == INVALID_ACTION_REWARD
    assert not info["valid"] and info["config"] is None
    assert info["time_us"] == info["default_time_us"]


def test_action_outside_the_space_is_an_error():
    env = CollectiveTuningEnv(scenario="smoke")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(N_ACTIONS)


def test_stepping_past_the_end_asks_for_reset():
    env = CollectiveTuningEnv(scenario="smoke", episode_length=2)
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    *_, terminated, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert terminated
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_suite_entry_replays_through_reset_options():
    entry = load_suite("smoke")[1]
    env = CollectiveTuningEnv(scenario="smoke")
    _, info = env.reset(seed=0, options={"episode": entry})
    seen, terminated = [env.current_scenario], False
    assert info["episode_name"] == entry.name
    while not terminated:
        *_, terminated, _, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
        if not terminated:
            seen.append(env.current_scenario)
    assert tuple(seen) == entry.scenarios


def test_render_ansi_describes_the_call():
    env = CollectiveTuningEnv(scenario="smoke", render_mode="ansi")
    env.reset(seed=0)
    assert "nothing chosen yet" in env.render()
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    line = env.render()
    assert "vs NCCL" in line and env.current_scenario.topology.name in line


def test_bad_arguments_are_readable_errors():
    with pytest.raises(ValueError, match="render_mode"):
        CollectiveTuningEnv(render_mode="human")
    with pytest.raises(ValueError, match="unknown backend"):
        CollectiveTuningEnv(backend="gpu")
    with pytest.raises(ValueError, match="unknown scenario"):
        CollectiveTuningEnv(scenario="trian")


def _step_vec(vec, rounds: int) -> np.ndarray:
    rewards = []
    for _ in range(rounds):
        masks = np.stack(vec.env_method("action_masks"))
        assert masks.shape == (vec.num_envs, N_ACTIONS)
        _, reward, _, _ = vec.step(np.array([np.flatnonzero(m)[-1] for m in masks]))
        rewards.append(reward)
    return np.array(rewards)


def test_dummy_vec_env_steps_with_masks():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec = make_vec_env(ENV_ID, n_envs=3, seed=0, vec_env_cls=DummyVecEnv,
                       env_kwargs={"scenario": "smoke", "render_mode": None})
    assert vec.reset().shape == (3, OBS_SIZE)
    rewards = _step_vec(vec, 40)  # crosses episode ends (16 calls): auto-reset works
    assert np.isfinite(rewards).all()


@pytest.mark.multiproc
def test_subproc_vec_env_matches_dummy_vec_env():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    kwargs = {"scenario": "smoke", "render_mode": None}
    # A spawned worker has not imported dynamiccl.envs: the "module:id" form makes gymnasium import it.
    sub = make_vec_env(f"dynamiccl.envs:{ENV_ID}", n_envs=2, seed=5, vec_env_cls=SubprocVecEnv,
                       env_kwargs=kwargs, vec_env_kwargs={"start_method": "spawn"})
    dummy = make_vec_env(ENV_ID, n_envs=2, seed=5, vec_env_cls=DummyVecEnv, env_kwargs=kwargs)
    try:
        np.testing.assert_array_equal(sub.reset(), dummy.reset())
        # DummyVecEnv keeps rewards in float32, SubprocVecEnv in float64
        np.testing.assert_allclose(_step_vec(sub, 20), _step_vec(dummy, 20), rtol=1e-6)
    finally:
        sub.close()


def test_package_exposes_the_id():
    assert dynamiccl.ENV_ID == "dynamiccl/CollectiveTuning-v0"
    assert gym.spec(ENV_ID).entry_point == "dynamiccl.envs.collective_tuning:CollectiveTuningEnv"


def test_monitor_wrapped_environment_reports_episode_statistics():
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(CollectiveTuningEnv(scenario="smoke", episode_length=3))
    env.reset(seed=0)
    rewards = []
    for _ in range(3):
        _, reward, terminated, _, info = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))
        rewards.append(reward)
    assert terminated
    assert info["episode"]["l"] == 3 and info["episode"]["r"] == pytest.approx(sum(rewards), abs=1e-5)
    assert info["episode_name"].endswith(env.unwrapped.episode.workload)


def test_close_releases_the_backend():
    from dynamiccl.envs.backends.sim import SimBackend

    class Closing(SimBackend):
        closed = False

        def close(self) -> None:
            self.closed = True

    backend = Closing()
    env = gym.make(ENV_ID, scenario="smoke", backend=backend)
    env.close()
    assert backend.closed


def test_a_backend_that_cannot_time_every_action_reports_no_oracle():
    """Like the live backend (which needs GPUs): measure() only, action_times() is None."""
    from dynamiccl.envs.backends.sim import SimBackend

    class MeasureOnly(SimBackend):
        name = "measure-only"

        def action_times(self, scenario):
            return None

    env = CollectiveTuningEnv(scenario="smoke", backend=MeasureOnly())
    env.reset(seed=0)
    _, reward, _, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert info["oracle_action"] == -1 and np.isnan(info["oracle_time_us"])
    assert reward == pytest.approx(np.log(info["default_time_us"] / info["time_us"]))
