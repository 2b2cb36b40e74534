"""The training environment from a composed config: the ``scenario`` group narrowed by the optional
``topology`` and ``workload`` groups, wrapped in an SB3 vectorized env.

``topology=dgx_h100`` trains on that one system (at the preset's node count); ``workload=…`` on
that one workload's trace; without them the scenario distribution decides both.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from dynamiccl import ENV_ID
from dynamiccl.config_loader import plain
from dynamiccl.system.topology import topology_from_dict


def scenario_spec(cfg: DictConfig) -> dict[str, Any] | str:
    """The scenario distribution the config asks for, as a mapping the environment accepts."""
    scenario = cfg.get("scenario")
    if scenario is None:
        raise ValueError("no scenario distribution chosen: add scenario=train (configs/scenario/)")
    spec: dict[str, Any] = plain(OmegaConf.to_container(scenario, resolve=True))
    topology = cfg.get("topology")
    if topology is not None:
        topo = topology_from_dict(plain(OmegaConf.to_container(topology, resolve=True)),
                                  source="config group 'topology'")
        spec["systems"] = [{"topology": topo.name, "nodes": [topo.nodes]}]
        spec["name"] = f"{spec.get('name', 'scenario')}@{topo.name}"
    workload = cfg.get("workload")
    if workload is not None:
        spec["workloads"] = [str(workload.name)]
        for system in spec.get("systems", []):
            system.pop("workloads", None)
    return spec


def env_kwargs(cfg: DictConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = plain(OmegaConf.to_container(cfg.get("env") or {}, resolve=True))
    kwargs.pop("id", None)
    kwargs["scenario"] = scenario_spec(cfg)
    kwargs.setdefault("render_mode", None)  # make_vec_env would otherwise ask for rgb_array
    return kwargs


def deployable(cfg: DictConfig) -> bool:
    """Whether the run is restricted to exportable actions (``env.deployable``)."""
    return bool(OmegaConf.select(cfg, "env.deployable", default=False))


def make_training_env(cfg: DictConfig) -> Any:
    """``trainer.n_envs`` copies of the environment in a DummyVecEnv, seeded from ``seed``, each
    recording its place in its stream of episodes so a checkpoint can hold it."""
    from stable_baselines3.common.env_util import make_vec_env

    import dynamiccl.envs  # noqa: F401  (registers the environment ids)
    from dynamiccl.agents.training.resume_state import StreamRecorder

    env_id = str(OmegaConf.select(cfg, "env.id", default=ENV_ID))
    return make_vec_env(env_id, n_envs=int(cfg.trainer.n_envs), seed=int(cfg.seed),
                        env_kwargs=env_kwargs(cfg), wrapper_class=StreamRecorder)
