"""Schemas for the training and sweep configs, so a misspelt key fails loudly and by name.

Hydra already refuses a command-line override of a key that does not exist. A typo inside a YAML
file (an experiment, a search space) would otherwise be merged silently and ignored; here every
section this package reads is checked against a structured-config dataclass, and every SB3
hyperparameter against the algorithm's constructor, with a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError


class ConfigCheckError(ValueError):
    """A config key or value this package cannot use; the message names it and the fix."""


@dataclass
class TrainerSchema:
    #: Environment steps to train for (a resumed run stops at the same total).
    total_timesteps: int = 50_000
    #: Parallel environments (SB3 DummyVecEnv); 1 keeps runs reproducible on 2 cores.
    n_envs: int = 1
    #: Steps between checkpoints (checkpoints/last.zip is replaced atomically each time).
    checkpoint_every: int = 10_000
    #: Continue from checkpoints/last.zip when the run folder already has one.
    resume: bool = True
    progress_bar: bool = True
    #: Evaluate on ``eval.suite`` every this many steps during training (0: only at the end).
    eval_every: int = 0
    #: Torch CPU threads; small policy networks run fastest single-threaded on a shared machine.
    torch_threads: int = 1


@dataclass
class EvalSchema:
    #: Scenario suite of the final evaluation (configs/scenario/<name>.yaml).
    suite: str = "heldout"
    #: Baselines evaluated next to the trained agent.
    baselines: list[str] = field(default_factory=lambda: ["nccl_default", "oracle", "static_best",
                                                          "random"])
    plots: bool = True


@dataclass
class AgentSchema:
    algo: str = "maskable_ppo"
    policy: str = "MlpPolicy"
    hparams: dict[str, Any] = field(default_factory=dict)


@dataclass
class RaySchema:
    #: None starts a local Ray; "auto" or "ray://host:10001" joins a cluster.
    address: str | None = None
    num_cpus: int = 2
    include_dashboard: bool = False


@dataclass
class TuneSchema:
    name: str = "sweep"
    metric: str = "oracle_share"
    mode: str = "max"
    num_samples: int = 2
    max_concurrent_trials: int = 2
    #: Continue an interrupted sweep stored under the same folder (unfinished trials restart from
    #: their last checkpoint).
    resume: bool = True
    #: Dotted config key -> instantiable Ray Tune domain (``_target_: ray.tune.loguniform`` ...).
    search_space: dict[str, Any] = field(default_factory=dict)


SECTIONS: dict[str, type] = {"trainer": TrainerSchema, "eval": EvalSchema, "agent": AgentSchema,
                             "ray": RaySchema, "tune": TuneSchema}
#: Top-level keys owned by other config groups or by Hydra's template conventions.
OTHER_TOP_KEYS = {"task_name", "seed", "paths", "topology", "workload",
                  "scenario", "env", "logger", "experiment", "hparams_search", "debug", "local",
                  "hydra", "tags", "deploy"}


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{hint}; allowed: {', '.join(sorted(allowed))}"


def check_section(cfg: DictConfig, name: str) -> None:
    schema = SECTIONS[name]
    section = cfg.get(name)
    if section is None:
        return
    allowed = list(schema.__dataclass_fields__)
    for key in section:
        if key not in allowed:
            raise ConfigCheckError(f"unknown config key '{name}.{key}'{_suggest(str(key), allowed)}")
    try:
        OmegaConf.merge(OmegaConf.structured(schema), section)
    except (ValidationError, ConfigKeyError) as exc:
        raise ConfigCheckError(f"config section '{name}': {exc.msg}") from None


def check_hparams(algo: str, hparams: dict[str, Any]) -> None:
    """Every ``agent.hparams`` key must be an argument of the SB3 constructor."""
    from dynamiccl.agents.sb3_agents import algorithm_class

    try:
        cls = algorithm_class(algo)
    except ValueError as exc:
        raise ConfigCheckError(f"agent.algo: {exc}") from None
    params = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "env")]
    for key in hparams:
        if key not in params:
            raise ConfigCheckError(
                f"unknown hyperparameter 'agent.hparams.{key}' for {algo}{_suggest(key, params)}")


def validate(cfg: DictConfig, sections: tuple[str, ...] = ("trainer", "eval", "agent")) -> None:
    """Checks the top-level keys and each section this package reads; raises ConfigCheckError."""
    allowed_top = sorted(OTHER_TOP_KEYS | set(SECTIONS))
    for key in cfg:
        if key not in allowed_top:
            raise ConfigCheckError(f"unknown top-level config key '{key}'{_suggest(str(key), allowed_top)}")
    for name in sections:
        check_section(cfg, name)
    if "agent" in sections and cfg.get("agent") is not None:
        hparams = OmegaConf.to_container(cfg.agent.get("hparams") or {}, resolve=True)
        check_hparams(str(cfg.agent.algo), hparams)  # type: ignore[arg-type]
