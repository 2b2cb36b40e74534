"""What a checkpoint holds besides SB3's own zip, so a resumed run continues exactly where it stopped.

SB3 saves the weights, the optimizer, the step counters and the last observation; it does not save
where the environments are in their streams of episodes, nor the global generators it draws from
(torch for sampling actions, numpy for minibatches and DQN's exploration, the action space's own
generator for DQN's random actions). A run resumed without them trains on a different stream than
the uninterrupted run would have. :func:`capture` collects both at a rollout boundary and
:func:`restore` puts them back after SB3 has loaded the model.

An environment's position is stored as the way its current episode started (the seed, or its
generator's state just before the episode was drawn) plus the number of calls made since: replaying
that reset and stepping that many calls reproduces the episode, the call index and the generator
state through the environment's public API, whatever the episode holds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.monitor import Monitor

_MONITOR_FIELDS = ("rewards", "needs_reset", "episode_returns", "episode_lengths", "episode_times",
                   "total_steps")


class StreamRecorder(gym.Wrapper):
    """Records how the current episode began and how many calls it has made (the outermost
    wrapper of each training environment; SB3 reaches it through ``env_method``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._start: dict[str, Any] | None = None
        self._calls = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if options:
            self._start = None  # a given episode, not a position in the stream
        elif seed is not None:
            self._start = {"seed": int(seed)}
        else:
            self._start = {"rng": self.unwrapped.np_random.bit_generator.state}
        self._calls = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        self._calls += 1
        return self.env.step(action)

    def stream_state(self) -> dict[str, Any]:
        if self._start is None:
            raise RuntimeError("the environment was not reset from its own stream; nothing to resume")
        monitor = _monitor(self.env)
        return {"start": self._start, "calls": self._calls,
                "monitor": {k: getattr(monitor, k) for k in _MONITOR_FIELDS} if monitor else None}

    def restore_stream(self, state: dict[str, Any]) -> Any:
        """Puts the environment where ``state`` says; returns the observation of the call it is at
        (on the deployable observation set, which holds nothing of past actions, the one the run
        had there: a check that the episode stream replays as it did when saved)."""
        start = state["start"]
        if "seed" in start:
            obs, _ = self.env.reset(seed=start["seed"])
        else:
            self.unwrapped.np_random.bit_generator.state = start["rng"]
            obs, _ = self.env.reset()
        # Which call comes next depends only on the episode and the call index, not on the action.
        for _ in range(int(state["calls"])):
            obs = self.unwrapped.step(0)[0]
        monitor = _monitor(self.env)
        if monitor is not None and state.get("monitor"):
            for key, value in state["monitor"].items():
                setattr(monitor, key, value)
        self._start, self._calls = start, int(state["calls"])
        return obs


def _monitor(env: gym.Env) -> Monitor | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, Monitor):
            return env
        env = env.env
    return None


def global_rng_state() -> dict[str, Any]:
    import torch

    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_global_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Work inside (an evaluation during training) leaves the training stream untouched."""
    state = global_rng_state()
    try:
        yield
    finally:
        set_global_rng_state(state)


def capture(model: Any) -> dict[str, Any]:
    """The state :func:`restore` needs; take it at a rollout boundary (nothing half-collected)."""
    return {"rng": global_rng_state(),
            "action_space": model.action_space.np_random.bit_generator.state,
            "envs": model.get_env().env_method("stream_state")}


def restore(model: Any, state: dict[str, Any]) -> np.ndarray:
    """Puts the environments and generators back; call after SB3's ``load`` (which reseeds).
    Returns the environments' observations where they now are (see :meth:`StreamRecorder.restore_stream`)."""
    env = model.get_env()
    if len(state["envs"]) != env.num_envs:
        raise ValueError(f"the checkpoint ran {len(state['envs'])} environments, this run {env.num_envs}")
    observations = np.stack([env.env_method("restore_stream", env_state, indices=[index])[0]
                             for index, env_state in enumerate(state["envs"])])
    model.action_space.np_random.bit_generator.state = state["action_space"]
    set_global_rng_state(state["rng"])
    return observations
