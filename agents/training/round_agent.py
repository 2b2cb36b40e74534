"""What a round learner's pipeline module (:mod:`.full_info_agent`, :mod:`.prior_agent`,
:mod:`.evidence_agent`) has in common, written once: which ``agent`` config names it, a fresh learner
from that config, its checkpoints and the seeded command that trains it again. Each module binds
these to its own name, config class and learner class, and keeps only what differs (its validation,
its training curve, what it ships).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dynamiccl.agents.training import round_checkpoints


@dataclass(frozen=True)
class RoundAgent:
    """A round learner as the pipeline knows it: ``name`` (``configs/agent/<name>.yaml``, the
    checkpoint sidecar's ``algo``), ``config`` (the dataclass its ``model`` node names as
    ``_target_``), ``learner`` (built from a config; read back by ``learner.load(path)`` unless
    ``load`` is given), ``curve`` (what the training curve plots: progress CSV column, axis label)
    and ``loss`` (the loss on a round's data, ``learner.loss(data)`` unless given)."""

    name: str
    config: type
    learner: type
    curve: tuple[str, str]
    load: Callable[[str | Path], Any] | None = None
    loss: Callable[[Any, Any], float] | None = None

    @property
    def config_class(self) -> str:
        """The ``_target_`` of the agent's ``model`` node, and the class its checkpoints record."""
        return f"{self.config.__module__}.{self.config.__qualname__}"

    def names(self, agent: DictConfig) -> bool:
        """Whether an ``agent`` config (``configs/agent/*.yaml``) is this learner."""
        return str(OmegaConf.select(agent, "model._target_", default="")) == self.config_class

    def build(self, agent: DictConfig, seed: int) -> Any:
        """A fresh learner from ``agent.model`` (instantiated with Hydra, as every agent's is)."""
        import hydra

        return self.learner(hydra.utils.instantiate(agent.model, seed=int(seed)))

    def save_checkpoint(self, learner: Any, path: str | Path, *, resume: bool = True) -> Path:
        """Writes the learner to ``path`` (``.pt``) with its sidecar and, with ``resume``, the state
        a resumed run needs (:mod:`dynamiccl.agents.training.round_checkpoints`)."""
        return round_checkpoints.save(learner, path, algo=self.name, config_class=self.config_class,
                                      resume=resume)

    def load_checkpoint(self, path: str | Path) -> tuple[Any, bool]:
        """The learner of a training checkpoint, and whether its optimizer and generator came back
        too (False: the file holds only the learned state, e.g. a final ``model.pt``)."""
        learner = (self.load or self.learner.load)(path)
        return learner, round_checkpoints.restore(learner, path)

    def fresh_loss(self, learner: Any, data: Any) -> float:
        """The loss on ``data`` before learning from it (its systems or jobs are new to the
        learner)."""
        return learner.loss(data) if self.loss is None else self.loss(learner, data)

    def training_command(self, cfg: DictConfig) -> str:
        """The seeded command that trains this learner again (the settings that differ from the
        config's defaults)."""
        defaults = asdict(self.config())
        model = OmegaConf.to_container(cfg.agent.model, resolve=True)
        changed = [f"agent.model.{f.name}={_override(model[f.name])}" for f in fields(self.config)
                   if f.name != "seed" and f.name in model and model[f.name] != defaults[f.name]]
        return " ".join([f"dynamiccl train agent={self.name}", f"seed={int(cfg.seed)}",
                         f"trainer.total_timesteps={int(cfg.trainer.total_timesteps)}", *changed])


def _override(value: Any) -> str:
    """A value as Hydra's override grammar writes it, one shell word (a list as ``[a,b]``)."""
    return f"[{','.join(map(str, value))}]" if isinstance(value, list) else str(value)
