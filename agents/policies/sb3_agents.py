"""stable-baselines3 agents: construction, checkpoints, and a :class:`Policy` view of a checkpoint.

A model is built by instantiating ``agent.model`` (``configs/agent/*.yaml``, ``_target_`` names
the SB3 class). A checkpoint is SB3's own zip (weights, optimizer state, hyperparameters, and for a
training checkpoint the environment stream and generators), for off-policy agents the replay buffer
beside it, and a small JSON sidecar naming the agent, its class and the step it was taken at.

PPO and DQN know nothing about action masks. At ``act()`` time we therefore never take their raw
greedy output: PPO's action probabilities and DQN's Q-values are evaluated for every action and the
best *allowed* one is taken, so an unmasked agent still never emits an invalid configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl.agents.policies.policy import masked_argmax, scenario_mask
from dynamiccl.config_loader import CHECKPOINT_FIX, ConfigError, read_as
from dynamiccl.files import replace_atomically, write_text_atomic

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

    from dynamiccl.system.scenario import Scenario

#: The SB3 class of the built-in agents, for checkpoints whose sidecar (or lack of one) does not
#: name their class.
_BUILTIN_CLASSES = {"maskable_ppo": "sb3_contrib.MaskablePPO", "dqn": "stable_baselines3.DQN",
                    "ppo": "stable_baselines3.PPO"}
_RESUME_ATTR = "_dynamiccl_resume"


def build_model(agent: Any, env: Any, *, seed: int = 0, verbose: int = 0) -> BaseAlgorithm:
    """A fresh SB3 model from an ``agent`` config (``configs/agent/*.yaml``): ``agent.model`` is
    instantiated with Hydra, so a new algorithm needs only a YAML file naming its class."""
    import hydra

    return hydra.utils.instantiate(agent.model, env=env, seed=seed, verbose=verbose, device="cpu",
                                   _convert_="all")


def linear_schedule(start: float) -> Callable[[float], float]:
    """A value decaying linearly from ``start`` to 0 over training (SB3 calls it with the
    remaining progress, 1 to 0); YAML names it with ``_target_``."""
    start = float(start)

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * start

    return schedule


def class_path(model: BaseAlgorithm) -> str:
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def save_checkpoint(model: BaseAlgorithm, path: str | Path, algo: str,
                    resume: Mapping[str, Any] | None = None) -> Path:
    """Writes the model (with ``resume``, the state :mod:`~dynamiccl.agents.training.resume_state` captured,
    inside SB3's zip) and a JSON sidecar; for an off-policy agent taken for resuming, also its
    replay buffer, in a file named after the step. Every file lands atomically, the zip after the
    buffer it names, so a kill at any moment leaves a complete checkpoint."""
    path = Path(path).with_suffix(".zip")
    path.parent.mkdir(parents=True, exist_ok=True)
    step = int(model.num_timesteps)
    meta = {"algo": algo, "class": class_path(model), "num_timesteps": step}
    include = None
    if resume is not None:
        resume = dict(resume)
        if getattr(model, "replay_buffer", None) is not None:
            resume["replay_buffer"] = f"{path.stem}_replay_buffer_{step}.pkl"
            replace_atomically(path.with_name(resume["replay_buffer"]), model.save_replay_buffer)
        setattr(model, _RESUME_ATTR, resume)
        include = [_RESUME_ATTR]
    try:
        replace_atomically(path, lambda tmp: model.save(tmp, include=include))
    finally:
        if resume is not None:
            delattr(model, _RESUME_ATTR)
    write_text_atomic(_sidecar(path), json.dumps(meta, indent=2))
    keep = (resume or {}).get("replay_buffer")
    for stale in path.parent.glob(f"{path.stem}_replay_buffer_*.pkl"):
        if stale.name != keep:
            stale.unlink()
    return path


def checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The sidecar of a checkpoint; without one, the class is read from SB3's own zip."""
    path = Path(path)
    side = _sidecar(path)
    if side.is_file():
        with read_as(side, "a checkpoint's sidecar written by `dynamiccl train`", CHECKPOINT_FIX):
            meta = json.loads(side.read_text())
            if not isinstance(meta, dict) or not isinstance(meta.get("algo"), str):
                raise ValueError("no algo named")
        return meta
    import zipfile

    with read_as(path, "a checkpoint written by `dynamiccl train`", CHECKPOINT_FIX), \
            zipfile.ZipFile(path) as zf:
        try:
            data = json.loads(zf.read("data"))
        except (KeyError, ValueError):  # no SB3 "data" member, or not SB3's JSON in it
            raise ConfigError(f"{path} is a zip archive but not a checkpoint written by `dynamiccl "
                              "train` (it holds no SB3 model); give model.zip or its run folder") from None
    module = data.get("policy_class", {}).get("__module__", "")
    algo = "maskable_ppo" if "maskable" in module else "dqn" if "dqn" in module else "ppo"
    return {"algo": algo, "class": _BUILTIN_CLASSES[algo]}


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
    """Model and sidecar. With ``env``, a checkpoint taken for resuming also gets its replay
    buffer back and keeps its last observation, and ``meta["resume"]`` holds the rest of its
    state for :func:`dynamiccl.agents.training.resume_state.restore`."""
    from hydra.utils import get_class

    path = resolve_checkpoint(path)
    meta = checkpoint_meta(path)
    with read_as(path, "a checkpoint written by `dynamiccl train`", CHECKPOINT_FIX):
        cls = get_class(meta.get("class") or _BUILTIN_CLASSES[meta["algo"]])
        model = cls.load(path, env=env, device="cpu", force_reset=False)
    resume = model.__dict__.pop(_RESUME_ATTR, None)
    if env is not None and resume is not None:
        if resume.get("replay_buffer"):
            buffer = path.with_name(resume["replay_buffer"])
            with read_as(buffer, "the replay buffer of a checkpoint", CHECKPOINT_FIX):
                model.load_replay_buffer(buffer)
        meta["resume"] = resume
    return model, meta


class SB3Policy:
    """A trained SB3 model as a :class:`~dynamiccl.agents.policies.policy.Policy`.

    ``observation`` is the observation set the model was trained on, read from the observation
    space saved with it, so evaluation shows it that set and export knows what it needs.
    """

    def __init__(self, model: BaseAlgorithm, algo: str, name: str | None = None,
                 deployable: bool = False) -> None:
        from dynamiccl.envs.collective_tuning import observation_set

        self.model = model
        self.algo = algo
        self.name = name or algo
        self.deployable = deployable
        self.observation = observation_set(int(np.prod(model.observation_space.shape)))

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
            if hasattr(policy, "q_net"):
                values = policy.q_net(obs_tensor)
            else:
                values = policy.get_distribution(obs_tensor).distribution.logits
        return values.cpu().numpy().reshape(-1)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        if action_mask is None and scenario is not None:
            action_mask = scenario_mask(scenario, deployable=self.deployable)
        return masked_argmax(self.action_values(observation), action_mask)
