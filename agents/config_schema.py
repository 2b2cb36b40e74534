"""The schema of the training and sweep configs, registered in Hydra's ConfigStore.

``configs/train.yaml`` starts its defaults list with ``config_schema``: the dataclasses below hold
every default of the ``trainer``, ``eval``, ``resume``, ``ray`` and ``tune`` sections, so those
defaults are written once, here, and Hydra itself refuses a misspelt key or a value of the wrong
type while composing. What a type cannot say (a positive step count, a metric training reports,
hyperparameters the chosen SB3 class accepts) is checked by :func:`validate` before any work starts.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field, fields, is_dataclass
from importlib import resources
from typing import Any

import yaml
from hydra.core.config_store import ConfigStore
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf


class ConfigCheckError(ValueError):
    """A config value or run folder this package cannot use; the message names it and the fix."""


#: What a training run reports (and a sweep may optimise), with the direction that is better.
METRICS = {"oracle_share": "max", "geomean_speedup": "max", "worst_speedup": "max"}


@dataclass
class TrainerConfig:
    #: Environment steps to train for; PPO stops at the first whole rollout at or past it.
    total_timesteps: int = 50_000
    #: Parallel environments (SB3 DummyVecEnv); 1 keeps runs reproducible on 2 cores.
    n_envs: int = 1
    #: Steps between checkpoints, taken at the first rollout boundary past each multiple, so a
    #: checkpoint holds exactly the updates of the steps it is labelled with.
    checkpoint_every: int = 10_000
    progress_bar: bool = True
    #: Evaluate on ``eval.suite`` every this many steps during training (0: only at the end); a
    #: sweep reports each evaluation to Ray Tune, so schedulers such as ASHA can stop a trial early.
    eval_every: int = 0
    #: Torch CPU threads; small policy networks run fastest single-threaded on a shared machine.
    torch_threads: int = 1


@dataclass
class EvalConfig:
    #: Scenario suite of the evaluation (configs/scenario/<name>.yaml).
    suite: str = "heldout"
    #: Baselines evaluated next to the trained agent at the end.
    baselines: list[str] = field(default_factory=lambda: ["nccl_default", "oracle", "static_best",
                                                          "random"])
    plots: bool = True


@dataclass
class ResumeConfig:
    #: A run folder that holds a run resumes it only with the settings it was started with;
    #: true continues with the new settings (recorded in config_from_<step>.yaml).
    allow_changes: bool = False


@dataclass
class RayConfig:
    #: None starts a local Ray; "auto" or "ray://host:10001" joins a cluster.
    address: str | None = None
    num_cpus: int = 2
    include_dashboard: bool = False


@dataclass
class TuneConfig:
    #: Experiment name under the sweep folder, and the wandb group of its trials.
    name: str = "sweep"
    metric: str = "oracle_share"
    mode: str = "max"
    #: Trials to run; fixed when the sweep starts (a restored sweep refuses a different number).
    num_samples: int = 2
    max_concurrent_trials: int = 2
    #: Dotted config key -> instantiable Ray Tune domain (``_target_: ray.tune.loguniform`` ...).
    search_space: dict[str, Any] = field(default_factory=dict)
    #: An instantiable Tune scheduler (e.g. ``_target_: ray.tune.schedulers.ASHAScheduler``).
    scheduler: Any = None


@dataclass
class Config:
    """The whole composed config; the groups (``agent``, ``env``, ...) keep their own YAML."""

    task_name: str = "train"
    tags: list[str] = field(default_factory=list)
    #: Seeds the model, the environments and SB3's global generators.
    seed: int = 0
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    topology: Any = None
    workload: Any = None
    scenario: Any = None
    env: Any = None
    agent: Any = None
    logger: Any = None


ConfigStore.instance().store(name="config_schema", node=Config)


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def agent_options() -> dict[str, str]:
    """Agent name -> SB3 class path, for every ``configs/agent/*.yaml``."""
    folder = resources.files("dynamiccl.configs") / "agent"
    out = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text()) or {}
            out[entry.name[:-5]] = str((data.get("model") or {}).get("_target_", ""))
    return out


def constructor_keys(target: str) -> list[str]:
    cls = get_class(target)
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "env", "args",
                                                                                "kwargs")]


def check_agent(agent: DictConfig) -> None:
    """Every key under ``agent.model`` must be an argument of the SB3 class it names; a key of
    another algorithm (an experiment written for PPO run with ``agent=dqn``) says so."""
    target = str(OmegaConf.select(agent, "model._target_", default="") or "")
    try:
        params = constructor_keys(target)
    except Exception:
        raise ConfigCheckError(f"agent.model._target_ {target!r} is not an importable SB3 class; "
                               "see configs/agent/ for examples") from None
    name = agent.get("name", target)
    unknown = [str(k) for k in agent.model if k != "_target_" and k not in params]
    for key in unknown:
        if not _owners(key):
            raise ConfigCheckError(f"unknown hyperparameter 'agent.model.{key}' for {name}"
                                   f"{_suggest(key, params)}")
    if unknown:
        owners = sorted(set.intersection(*(set(_owners(k)) for k in unknown))) or _owners(unknown[0])
        keys = ", ".join(f"agent.model.{k}" for k in unknown)
        drop = " ".join(f"~agent.model.{k}" for k in unknown)
        raise ConfigCheckError(
            f"{keys}: hyperparameters of {', '.join(owners)}, not of {name} (an experiment written "
            f"for another agent?); choose agent={owners[0]}, or drop them with {drop}")


def _owners(key: str) -> list[str]:
    """The agents in configs/agent/ whose SB3 class takes ``key``."""
    owners = []
    for other, target in agent_options().items():
        try:
            if target and key in constructor_keys(target):
                owners.append(other)
        except Exception:
            continue
    return sorted(owners)


def _at_least(cfg: DictConfig, key: str, minimum: int) -> None:
    value = OmegaConf.select(cfg, key)
    if value is None or int(value) < minimum:
        bound = "a positive number" if minimum == 1 else "0 or more"
        raise ConfigCheckError(f"{key} must be {bound}, got {value}; set it with {key}=N")


def check_tune(cfg: DictConfig) -> None:
    tune = cfg.tune
    if tune.metric not in METRICS:
        raise ConfigCheckError(f"tune.metric {tune.metric!r} is not a metric training reports"
                               f"{_suggest(str(tune.metric), list(METRICS))}; choose one of "
                               f"{', '.join(METRICS)}")
    if tune.mode not in ("max", "min"):
        raise ConfigCheckError(f"tune.mode must be max or min, got {tune.mode!r}")
    for key in ("tune.num_samples", "tune.max_concurrent_trials"):
        _at_least(cfg, key, 1)


def check_keys(cfg: DictConfig) -> None:
    """Keys the schema does not know. Hydra refuses them in YAML files and in ``key=value``
    overrides, but ``+key=value`` forces them in; here they are named with a suggestion."""
    top = [f.name for f in fields(Config)]
    for key in cfg:
        if key not in top:
            raise ConfigCheckError(f"unknown config key '{key}'{_suggest(str(key), top)}")
    for section in fields(Config):
        if not is_dataclass(section.default_factory) or cfg.get(section.name) is None:
            continue
        allowed = [f.name for f in fields(section.default_factory)]
        for key in cfg[section.name]:
            if key not in allowed:
                raise ConfigCheckError(f"unknown config key '{section.name}.{key}'"
                                       f"{_suggest(str(key), allowed)}")


def validate(cfg: DictConfig, *, sweep: bool = False) -> None:
    """Checks what the schema's types cannot; raises ConfigCheckError naming the key and the fix."""
    check_keys(cfg)
    for key in ("trainer.total_timesteps", "trainer.n_envs", "trainer.torch_threads"):
        _at_least(cfg, key, 1)
    for key in ("seed", "trainer.checkpoint_every", "trainer.eval_every"):
        _at_least(cfg, key, 0)
    if cfg.get("scenario") is None:
        raise ConfigCheckError("no scenario distribution chosen: add scenario=train (configs/scenario/)")
    if cfg.get("agent") is None or cfg.agent.get("model") is None:
        raise ConfigCheckError("no agent chosen: add agent=maskable_ppo (configs/agent/)")
    check_agent(cfg.agent)
    if sweep:
        check_tune(cfg)
