"""Checks of a composed training or sweep config that its schema's types cannot express.

The schema itself (every default, every type) is :mod:`dynamiccl.configs.schema` and only that,
registered in Hydra's ConfigStore; Hydra refuses misspelt keys and wrong types while composing.
What remains is checked here before any work starts, each with one message naming the key and the
fix: positive step counts, a metric training reports, hyperparameters the chosen SB3 class accepts
(and, for keys of another algorithm, which agents take them), keys forced in with ``+key=value``, an
observation set that exists (and is the deployable one where the run ships its policy).
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import fields, is_dataclass
from importlib import resources

import yaml
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from dynamiccl.configs.schema import Config


class ConfigCheckError(ValueError):
    """A config value or run folder this package cannot use; the message names it and the fix."""


#: What a training run reports (and a sweep may optimise), with the direction that is better.
METRICS = {"oracle_share": "max", "geomean_speedup": "max", "worst_speedup": "max",
           "val_nll": "min"}


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


def check_env(cfg: DictConfig) -> None:
    """``env.observation`` names an observation set; the full-information learner and a run that
    ships its policy (``deploy``) use the one the tuner plugin sees."""
    from dynamiccl.envs.collective_tuning import OBSERVATIONS

    observation = OmegaConf.select(cfg, "env.observation")
    if observation not in OBSERVATIONS:
        raise ConfigCheckError(f"env.observation must be one of {', '.join(OBSERVATIONS)}, got "
                               f"{observation!r}{_suggest(str(observation), list(OBSERVATIONS))}")
    from dynamiccl.agents.full_info_agent import is_full_info

    if is_full_info(cfg.agent) and (observation != "deployable"
                                    or not OmegaConf.select(cfg, "env.deployable")):
        raise ConfigCheckError("agent=full_info learns only deployable actions from the deployable "
                               "observation; keep env.observation=deployable and env.deployable=true")
    systems = OmegaConf.select(cfg, "agent.model.systems", default="random")
    if systems != "random":  # a key only full_info's model has (check_agent refuses it elsewhere)
        from dynamiccl.config_loader import ConfigError
        from dynamiccl.envs.workloads import load_scenario_distribution

        try:
            load_scenario_distribution(str(systems))
        except ConfigError as exc:
            raise ConfigCheckError(f"agent.model.systems: {exc}; or keep systems=random") from None
    from dynamiccl.agents.prior_agent import is_learned_prior

    if is_learned_prior(cfg.agent) and cfg.get("deploy") is not None:
        raise ConfigCheckError("agent=learned_prior trains a prior for `dynamiccl tune`, not a policy "
                               "to export; drop the export with ~deploy")
    if cfg.get("deploy") is not None and observation != "deployable":
        raise ConfigCheckError(f"this run exports its policy (deploy), but env.observation={observation} "
                               "holds what the tuner plugin cannot see; train with "
                               "env.observation=deployable, or drop the export with ~deploy")


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
    check_env(cfg)
    if sweep:
        check_tune(cfg)
