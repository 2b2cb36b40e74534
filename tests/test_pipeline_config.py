"""Hydra configs of the pipeline, composed with Hydra's compose API, and their validation."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from dynamiccl.agents.config_schema import ConfigCheckError, validate
from dynamiccl.agents.envs_factory import env_kwargs, scenario_spec
from dynamiccl.agents.sweep import SWEEP_SECTIONS, search_space, tune_settings
from dynamiccl.envs.workloads import load_scenario_distribution


def make(name: str = "train", *overrides: str):
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


def test_default_training_config_composes_in_template_order_and_validates():
    cfg = make()
    validate(cfg)
    assert cfg.agent.algo == "maskable_ppo"
    assert cfg.scenario.name == "train" and cfg.eval.suite == "heldout"
    assert cfg.logger._target_.endswith("WandbLogger") and cfg.logger.mode == "offline"
    assert cfg.get("topology") is None and cfg.get("workload") is None
    kwargs = env_kwargs(cfg)
    assert kwargs["backend"] == "sim" and kwargs["render_mode"] is None
    assert load_scenario_distribution(kwargs["scenario"]).name == "train"


@pytest.mark.parametrize("overrides", [
    ["agent=ppo"], ["agent=dqn"], ["agent=maskable_ppo"], ["experiment=smoke"],
    ["experiment=quickstart"], ["debug=default"], ["logger=none"], ["logger=wandb_online"],
])
def test_every_group_option_composes_and_its_hyperparameters_exist_in_sb3(overrides):
    validate(make("train", *overrides))


def test_experiment_overrides_groups_and_loggers_select_their_classes():
    smoke = make("train", "experiment=smoke")
    assert smoke.scenario.name == "smoke" and smoke.trainer.total_timesteps == 512
    assert smoke.logger._target_.endswith("NullLogger")
    assert smoke.agent.hparams.ent_coef == 0.03  # untouched keys of the agent group survive
    assert make("train", "logger=wandb_online").logger.mode == "online"
    assert make("train", "debug=default").logger._target_.endswith("NullLogger")


def test_topology_and_workload_groups_narrow_the_scenario_distribution():
    cfg = make("train", "topology=pcie_cluster", "workload=tp_llama2_7b", "scenario=smoke")
    spec = scenario_spec(cfg)
    assert spec["systems"] == [{"topology": "pcie_cluster", "nodes": [cfg.topology.tiers[1].size]}]
    assert spec["workloads"] == ["tp_llama2_7b"]
    dist = load_scenario_distribution(spec)
    assert {s.topology for s in dist.systems} == {"pcie_cluster"}


def test_misspelt_key_in_a_section_is_named_with_a_suggestion():
    cfg = make("train", "+trainer.totl_timesteps=5")
    with pytest.raises(ConfigCheckError, match=r"'trainer.totl_timesteps'.*did you mean 'total_timesteps'"):
        validate(cfg)


def test_misspelt_top_level_key_and_wrong_type_are_refused():
    with pytest.raises(ConfigCheckError, match="unknown top-level config key 'tranier'"):
        validate(make("train", "+tranier.total_timesteps=5"))
    with pytest.raises(ConfigCheckError, match="trainer"):
        validate(make("train", "trainer.n_envs=many"))


def test_misspelt_hyperparameter_is_checked_against_the_sb3_constructor():
    with pytest.raises(ConfigCheckError, match=r"agent.hparams.learning_rat.*'learning_rate'"):
        validate(make("train", "+agent.hparams.learning_rat=0.1"))
    with pytest.raises(ConfigCheckError, match="buffer_size"):
        validate(make("train", "agent=ppo", "+agent.hparams.buffer_size=10"))  # a DQN-only key


def test_command_line_typo_without_plus_is_refused_by_hydra_itself():
    with pytest.raises(ConfigCompositionException, match="totl_timesteps"):
        make("train", "trainer.totl_timesteps=5")


def test_sweep_config_builds_ray_tune_domains_from_yaml():
    from ray.tune.search.sample import Categorical, Float

    cfg = make("sweep")
    validate(cfg, sections=SWEEP_SECTIONS)
    assert cfg.task_name == "sweep" and cfg.ray.address is None and cfg.ray.num_cpus == 2
    space = search_space(cfg)
    assert isinstance(space["agent.hparams.learning_rate"], Float)
    assert isinstance(space["agent.hparams.n_steps"], Categorical)
    assert tune_settings(cfg).metric == "oracle_share"


def test_search_space_key_that_is_not_a_config_key_is_refused():
    cfg = make("sweep")
    OmegaConf.update(cfg, "tune.search_space", {"agent.hparams.lerning_rate": [1]}, merge=True,
                     force_add=True)
    with pytest.raises(ConfigCheckError, match="lerning_rate"):
        search_space(cfg)
