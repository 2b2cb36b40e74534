"""stable-baselines3 agents: construction, checkpoints, and a :class:`Policy` view of a checkpoint.

A checkpoint is SB3's own zip (weights, optimizer state, hyperparameters) plus, for off-policy
agents, the replay buffer SB3 can save beside it, plus a small JSON sidecar naming the algorithm and
the step it was taken at. Together they are enough to continue training exactly where it stopped.

PPO and DQN know nothing about action masks. At ``act()`` time we therefore never take their raw
greedy output: PPO's action probabilities and DQN's Q-values are evaluated for every action and the
best *allowed* one is taken, so an unmasked agent still never emits an invalid configuration.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl.agents.policy import masked_argmax, scenario_mask

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

    from dynamiccl.scenario import Scenario

ALGORITHMS = ("ppo", "maskable_ppo", "dqn")


def algorithm_class(algo: str) -> type[BaseAlgorithm]:
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "dqn":
        from stable_baselines3 import DQN

        return DQN
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    raise ValueError(f"unknown agent algorithm {algo!r}; choose one of {', '.join(ALGORITHMS)}")


def build_model(algo: str, env: Any, *, seed: int = 0, hparams: Mapping[str, Any] | None = None,
                verbose: int = 0) -> BaseAlgorithm:
    """A fresh SB3 model; an unknown hyperparameter name gets a message naming the algorithm."""
    cls = algorithm_class(algo)
    kwargs = dict(hparams or {})
    policy = kwargs.pop("policy", "MlpPolicy")
    for key in ("learning_rate", "clip_range"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = linear_schedule(key, kwargs[key])
    try:
        return cls(policy, env, seed=seed, verbose=verbose, device="cpu", **kwargs)
    except TypeError as exc:
        raise ValueError(f"agent {algo}: {exc}; check the keys under `agent.hparams`") from None


def linear_schedule(key: str, text: str) -> Callable[[float], float]:
    """``lin_0.001``: a value decaying linearly to 0 over training (rl-baselines3-zoo's notation,
    so a schedule can be written in YAML)."""
    if not text.startswith("lin_"):
        raise ValueError(f"agent.hparams.{key}: {text!r} is not a number or lin_<start value>")
    try:
        start = float(text[4:])
    except ValueError:
        raise ValueError(f"agent.hparams.{key}: {text!r} is not lin_<start value>, e.g. lin_1e-3") from None
    return lambda progress_remaining: progress_remaining * start


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def _replay_path(path: Path) -> Path:
    return path.with_name(path.stem + "_replay_buffer.pkl")


def save_checkpoint(model: BaseAlgorithm, path: str | Path, algo: str,
                    extra: Mapping[str, Any] | None = None) -> Path:
    """Writes model, replay buffer (off-policy agents) and sidecar; each file lands atomically so a
    kill mid-save leaves the previous checkpoint intact."""
    path = Path(path).with_suffix(".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.zip")
    model.save(tmp)
    if hasattr(model, "save_replay_buffer") and getattr(model, "replay_buffer", None) is not None:
        tmp_buf = path.with_name(path.stem + ".tmp_replay_buffer.pkl")
        model.save_replay_buffer(tmp_buf)
        os.replace(tmp_buf, _replay_path(path))
    os.replace(tmp, path)
    meta = {"algo": algo, "num_timesteps": int(model.num_timesteps), **dict(extra or {})}
    tmp_meta = path.with_name(path.stem + ".tmp.json")
    tmp_meta.write_text(json.dumps(meta, indent=2))
    os.replace(tmp_meta, _sidecar(path))
    return path


def checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The sidecar of a checkpoint; without one, the algorithm is read from SB3's own zip."""
    path = Path(path)
    side = _sidecar(path)
    if side.is_file():
        return json.loads(side.read_text())
    import zipfile

    with zipfile.ZipFile(path) as zf:
        data = json.loads(zf.read("data"))
    module = data.get("policy_class", {}).get("__module__", "")
    if "maskable" in module:
        return {"algo": "maskable_ppo"}
    return {"algo": "dqn" if "dqn" in module else "ppo"}


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a training run directory (its final model, else its last checkpoint)."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / "model.zip", path / "checkpoints" / "last.zip"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{path} holds no model.zip or checkpoints/last.zip; train first")
    if not path.is_file() and path.with_suffix(".zip").is_file():
        path = path.with_suffix(".zip")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; give a .zip written by `dynamiccl train`")
    return path


def load_checkpoint(path: str | Path, env: Any = None) -> tuple[BaseAlgorithm, dict[str, Any]]:
    """Model (with its replay buffer when one was saved) and its sidecar."""
    path = resolve_checkpoint(path)
    meta = checkpoint_meta(path)
    model = algorithm_class(meta["algo"]).load(path, env=env, device="cpu")
    replay = _replay_path(path)
    if replay.is_file() and hasattr(model, "load_replay_buffer"):
        model.load_replay_buffer(replay)
    return model, meta


class SB3Policy:
    """A trained SB3 model as a :class:`~dynamiccl.agents.policy.Policy`."""

    def __init__(self, model: BaseAlgorithm, algo: str, name: str | None = None,
                 deployable: bool = False) -> None:
        self.model = model
        self.algo = algo
        self.name = name or algo
        self.deployable = deployable

    @classmethod
    def load(cls, path: str | Path, *, deployable: bool = False) -> SB3Policy:
        model, meta = load_checkpoint(path)
        return cls(model, meta["algo"], name=Path(path).stem if Path(path).is_file() else None,
                   deployable=deployable)

    def action_values(self, observation: np.ndarray) -> np.ndarray:
        """A score per action (log-probabilities for PPO, Q-values for DQN)."""
        import torch

        policy = self.model.policy
        obs_tensor, _ = policy.obs_to_tensor(np.asarray(observation, dtype=np.float32))
        with torch.no_grad():
            if self.algo == "dqn":
                values = policy.q_net(obs_tensor)
            else:
                values = policy.get_distribution(obs_tensor).distribution.logits
        return values.cpu().numpy().reshape(-1)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        if action_mask is None and scenario is not None:
            action_mask = scenario_mask(scenario, deployable=self.deployable)
        return masked_argmax(self.action_values(observation), action_mask)
