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
import math
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
           "val_nll": "min", "val_objective": "min", "val_regret_ratio": "min"}


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


#: The range of each hyperparameter the agents of configs/agent/ take: (lowest, highest, whole
#: number, lowest allowed). Checked before the run folder exists: SB3 itself fails only once work
#: started (n_steps=0: an UnboundLocalError mid-rollout), or never (gamma=5 trains into NaN).
HYPERPARAMETERS: dict[str, tuple[float, float, bool, bool]] = {
    "learning_rate": (0.0, 1.0, False, False), "n_steps": (1, 10**7, True, True),
    "batch_size": (2, 10**7, True, True), "n_epochs": (1, 10_000, True, True),
    "gamma": (0.0, 1.0, False, True), "gae_lambda": (0.0, 1.0, False, True),
    "ent_coef": (0.0, 10.0, False, True), "vf_coef": (0.0, 10.0, False, True),
    "clip_range": (0.0, 10.0, False, False), "max_grad_norm": (0.0, 1e6, False, False),
    "buffer_size": (1, 10**8, True, True), "learning_starts": (0, 10**9, True, True),
    "tau": (0.0, 1.0, False, False), "train_freq": (1, 10**6, True, True),
    "gradient_steps": (-1, 10**6, True, True), "target_update_interval": (1, 10**9, True, True),
    "exploration_fraction": (0.0, 1.0, False, True), "exploration_initial_eps": (0.0, 1.0, False, True),
    "exploration_final_eps": (0.0, 1.0, False, True),
    # the full-information learner (agents/policies/full_info.py)
    "hidden": (1, 8192, True, True), "layers": (1, 64, True, True),
    "systems_per_round": (1, 10_000, True, True), "calls_per_system": (1, 100_000, True, True),
    "epochs_per_round": (1, 1000, True, True), "margin": (0.0, 1.0, False, True),
    "min_gain": (0.0, 1.0, False, True),
    "ensemble": (1, 64, True, True),
    # the evidence tuner (agents/training/evidence_learner.py)
    "jobs_per_round": (1, 10_000, True, True), "calls_per_job": (1, 10_000, True, True),
    "step": (0.0, 1.0, False, False), "validation_jobs": (1, 100, True, True),
    "validation_rounds": (1, 1000, True, True), "risk": (0.0, 1.0, False, False),
    "gate_z": (0.0, 10.0, False, True), "max_repeats": (1, 1000, True, True),
}


def check_hyperparameters(agent: DictConfig, n_envs: int) -> None:
    """Every known hyperparameter under ``agent.model`` is a number within its range (a schedule
    such as ``linear_schedule`` is checked by its ``start``), and PPO's rollout holds more than one
    step (``n_steps`` x ``trainer.n_envs``)."""
    model = agent.model
    for key, (low, high, whole, low_ok) in HYPERPARAMETERS.items():
        if key not in model:
            continue
        value = model[key]
        where = f"agent.model.{key}"
        if isinstance(value, DictConfig):  # a schedule: its starting value is the hyperparameter
            if "start" not in value:
                continue
            value, where = value.start, f"{where}.start"
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            math.isfinite(value) and (not whole or float(value).is_integer())
        inside = number and (low <= value if low_ok else low < value) and value <= high
        if not inside:
            kind = "a whole number" if whole else "a number"
            span = f"{'[' if low_ok else '('}{_plain(low)}, {_plain(high)}]"
            raise ConfigCheckError(f"{where} is {value!r}; give {kind} in {span}, e.g. "
                                   f"{where}={_example(key, agent)}")
    if "n_steps" in model and int(model.n_steps) * n_envs < 2:
        raise ConfigCheckError(f"agent.model.n_steps={model.n_steps} with trainer.n_envs={n_envs} "
                               "collects one step per rollout; PPO needs at least 2 (raise either)")


def _plain(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _example(key: str, agent: DictConfig) -> str:
    """The value the agent's own YAML file gives ``key`` (its default), for the fix."""
    folder = resources.files("dynamiccl.configs") / "agent"
    name = str(agent.get("name", ""))
    for candidate in (name, "maskable_ppo", "dqn", "full_info"):
        entry = folder / f"{candidate}.yaml"
        if entry.is_file():
            model = (yaml.safe_load(entry.read_text()) or {}).get("model") or {}
            value = model.get(key)
            if isinstance(value, dict):
                value = value.get("start")
            if value is not None:
                return str(value)
    return "N"


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


#: Upper bounds of the run's counts: a slip (1e20 steps, 10^6 environments) is refused before work
#: starts instead of running for ever. 10^9 steps is weeks on a workstation.
MAXIMA = {"trainer.total_timesteps": 10**9, "trainer.n_envs": 1024, "trainer.torch_threads": 1024,
          "trainer.checkpoint_every": 10**9, "trainer.eval_every": 10**9, "tune.num_samples": 10_000,
          "tune.max_concurrent_trials": 1024, "seed": 2**32 - 1}


def _at_least(cfg: DictConfig, key: str, minimum: int) -> None:
    value = OmegaConf.select(cfg, key)
    if value is None or int(value) < minimum:
        bound = "a positive number" if minimum == 1 else "0 or more"
        raise ConfigCheckError(f"{key} must be {bound}, got {value}; set it with {key}=N")
    if key in MAXIMA and int(value) > MAXIMA[key]:
        raise ConfigCheckError(f"{key} is {value}, more than the limit of {MAXIMA[key]}; set it with "
                               f"{key}=N")


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


def check_systems(cfg: DictConfig) -> None:
    """The scenario's systems (every topology file they name, within the system limits) and the
    evaluation suite load, before the run folder is written: a bad ``scenario.systems`` entry
    failed only when the environment was built, after ``config.yaml``."""
    from dynamiccl.agents.training.envs_factory import scenario_spec
    from dynamiccl.config_loader import ConfigError
    from dynamiccl.envs.workloads import load_scenario_distribution, load_suite

    try:
        load_scenario_distribution(scenario_spec(cfg)).topologies()
        load_suite(str(cfg.eval.suite))
    except ConfigError as exc:
        raise ConfigCheckError(str(exc)) from None


def check_env(cfg: DictConfig) -> None:
    """``env.observation`` names an observation set; the full-information learner and a run that
    ships its policy (``deploy``) use the one the tuner plugin sees."""
    from dynamiccl.envs.collective_tuning import OBSERVATIONS

    observation = OmegaConf.select(cfg, "env.observation")
    if observation not in OBSERVATIONS:
        raise ConfigCheckError(f"env.observation must be one of {', '.join(OBSERVATIONS)}, got "
                               f"{observation!r}{_suggest(str(observation), list(OBSERVATIONS))}")
    from dynamiccl.agents.training.full_info_agent import is_full_info

    if is_full_info(cfg.agent) and (observation != "deployable"
                                    or not OmegaConf.select(cfg, "env.deployable")):
        raise ConfigCheckError("agent=full_info learns only deployable actions from the deployable "
                               "observation; keep env.observation=deployable and env.deployable=true")
    check_systems(cfg)
    systems = OmegaConf.select(cfg, "agent.model.systems", default="random")
    if systems != "random":  # a key only full_info's model has (check_agent refuses it elsewhere)
        from dynamiccl.config_loader import ConfigError
        from dynamiccl.envs.workloads import load_scenario_distribution

        try:
            load_scenario_distribution(str(systems))
        except ConfigError as exc:
            raise ConfigCheckError(f"agent.model.systems: {exc}; or keep systems=random") from None
    from dynamiccl.agents.training.prior_agent import is_learned_prior

    if is_learned_prior(cfg.agent) and cfg.get("deploy") is not None:
        raise ConfigCheckError("agent=learned_prior trains a prior for `dynamiccl tune`, not a policy "
                               "to export; drop the export with ~deploy")
    if is_learned_prior(cfg.agent):
        from dynamiccl.agents.training.prior_learner import REALITIES, PriorConfig

        realities = OmegaConf.select(cfg, "agent.model.realities")
        if realities not in REALITIES:
            raise ConfigCheckError(f"agent.model.realities is {realities!r}; give one of "
                                   f"{', '.join(REALITIES)}, e.g. "
                                   f"agent.model.realities={PriorConfig.realities}")
    from dynamiccl.agents.training.evidence_agent import is_evidence_tuner

    if is_evidence_tuner(cfg.agent) and cfg.get("deploy") is not None:
        raise ConfigCheckError("agent=evidence_tuner trains an online tuner for the runtime, not a "
                               "policy to export; drop the export with ~deploy")
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
    check_hyperparameters(cfg.agent, int(cfg.trainer.n_envs))
    check_env(cfg)
    if sweep:
        check_tune(cfg)
