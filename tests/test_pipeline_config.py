"""Hydra configs of the pipeline, composed with Hydra's compose API, and their validation."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from dynamiccl.agents.policies.sb3_agents import build_model
from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.envs_factory import env_kwargs, scenario_spec
from dynamiccl.agents.training.sweep import search_space
from dynamiccl.configs.schema import Config, TrainerConfig
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.workloads import load_scenario_distribution


def make(name: str = "train", *overrides: str):
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        return compose(name, overrides=list(overrides))


def test_default_training_config_composes_in_template_order_and_validates():
    cfg = make()
    validate(cfg)
    assert cfg.agent.name == "maskable_ppo" and cfg.agent.model._target_ == "sb3_contrib.MaskablePPO"
    assert cfg.scenario.name == "train" and cfg.eval.suite == "heldout"
    assert cfg.logger._target_.endswith("WandbLogger") and cfg.logger.mode == "offline"
    assert cfg.get("topology") is None and cfg.get("workload") is None
    kwargs = env_kwargs(cfg)
    assert kwargs["backend"] == "sim" and kwargs["render_mode"] is None
    assert load_scenario_distribution(kwargs["scenario"]).name == "train"


def test_training_defaults_are_written_once_in_the_registered_schema():
    cfg = make()
    assert OmegaConf.get_type(cfg) is Config and OmegaConf.get_type(cfg.trainer) is TrainerConfig
    assert cfg.trainer == OmegaConf.structured(TrainerConfig)
    assert "trainer" not in OmegaConf.load(_config_file("train.yaml"))


def _config_file(name: str):
    from importlib import resources

    return str(resources.files("dynamiccl.configs") / name)


@pytest.mark.parametrize("overrides", [
    ["agent=ppo"], ["agent=dqn"], ["agent=maskable_ppo"], ["experiment=smoke"],
    ["experiment=quickstart"], ["debug=default"], ["logger=none"], ["logger=wandb_online"],
])
def test_every_group_option_composes_and_its_hyperparameters_exist_in_sb3(overrides):
    validate(make("train", *overrides))


@pytest.mark.parametrize("agent, cls", [("ppo", "PPO"), ("dqn", "DQN"), ("maskable_ppo", "MaskablePPO")])
def test_agents_are_instantiated_from_their_yaml(agent, cls):
    cfg = make("train", f"agent={agent}", "experiment=smoke" if agent != "dqn" else "logger=none")
    model = build_model(cfg.agent, CollectiveTuningEnv("smoke"), seed=3)
    assert type(model).__name__ == cls and model.seed == 3
    assert model.policy_kwargs["net_arch"] == [256, 256] and isinstance(model.policy_kwargs["net_arch"], list)
    if agent != "dqn":
        assert model.n_steps == 128 and model.lr_schedule(0.5) == pytest.approx(5e-4)


def test_experiment_overrides_groups_and_loggers_select_their_classes():
    smoke = make("train", "experiment=smoke")
    assert smoke.scenario.name == "smoke" and smoke.trainer.total_timesteps == 512
    assert smoke.logger._target_.endswith("NullLogger")
    assert smoke.agent.model.ent_coef == 0.03  # untouched keys of the agent group survive
    assert make("train", "logger=wandb_online").logger.mode == "online"
    assert make("train", "debug=default").logger._target_.endswith("NullLogger")


def test_topology_and_workload_groups_narrow_the_scenario_distribution():
    cfg = make("train", "topology=pcie_cluster", "workload=tp_llama2_7b", "scenario=smoke")
    spec = scenario_spec(cfg)
    assert spec["systems"] == [{"topology": "pcie_cluster", "nodes": [cfg.topology.tiers[1].size]}]
    assert spec["workloads"] == ["tp_llama2_7b"]
    dist = load_scenario_distribution(spec)
    assert {s.topology for s in dist.systems} == {"pcie_cluster"}


def test_forced_misspelt_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigCheckError, match=r"'trainer.totl_timesteps'.*did you mean 'total_timesteps'"):
        validate(make("train", "+trainer.totl_timesteps=5"))
    with pytest.raises(ConfigCheckError, match="unknown config key 'tranier'"):
        validate(make("train", "+tranier.total_timesteps=5"))


def test_typo_and_wrong_type_are_refused_by_hydra_against_the_schema():
    with pytest.raises(ConfigCompositionException, match="totl_timesteps"):
        make("train", "trainer.totl_timesteps=5")
    with pytest.raises(ConfigCompositionException, match="n_envs"):
        make("train", "trainer.n_envs=many")


@pytest.mark.parametrize("override, message", [
    ("trainer.total_timesteps=-5", "trainer.total_timesteps must be a positive number, got -5"),
    ("trainer.n_envs=0", "trainer.n_envs must be a positive number, got 0"),
    ("seed=-1", "seed must be 0 or more, got -1"),
    ("trainer.checkpoint_every=-1", "trainer.checkpoint_every must be 0 or more"),
])
def test_out_of_range_numbers_are_named_before_work_starts(override, message):
    with pytest.raises(ConfigCheckError) as err:
        validate(make("train", override))
    assert message in str(err.value)


def test_keys_of_another_algorithm_name_the_algorithms_that_take_them():
    with pytest.raises(ConfigCheckError) as err:
        validate(make("train", "experiment=smoke", "agent=dqn"))
    message = str(err.value)
    # (DQN takes n_steps and batch_size too: n-step returns, replay minibatches.)
    assert "agent.model.n_epochs: hyperparameters of maskable_ppo, ppo, not of dqn" in message
    assert "choose agent=maskable_ppo, or drop them with ~agent.model.n_epochs" in message


def test_misspelt_hyperparameter_is_checked_against_the_sb3_constructor():
    with pytest.raises(ConfigCheckError, match=r"agent.model.learning_rat.*'learning_rate'"):
        validate(make("train", "+agent.model.learning_rat=0.1"))


def test_sweep_config_builds_ray_tune_domains_from_yaml():
    from ray.tune.search.sample import Categorical, Float

    cfg = make("sweep")
    validate(cfg, sweep=True)
    assert cfg.task_name == "sweep" and cfg.ray.address is None and cfg.ray.num_cpus == 2
    space = search_space(cfg)
    assert isinstance(space["agent.model.learning_rate"], Float)
    assert isinstance(space["agent.model.n_steps"], Categorical)
    assert cfg.tune.metric == "oracle_share" and cfg.trainer.eval_every > 0


def test_search_space_key_that_is_not_a_config_key_is_refused():
    cfg = make("sweep")
    OmegaConf.update(cfg, "tune.search_space", {"agent.model.lerning_rate": [1]}, merge=True,
                     force_add=True)
    with pytest.raises(ConfigCheckError, match="lerning_rate"):
        search_space(cfg)


def test_the_observation_set_is_a_schema_key_and_what_ships_is_the_default():
    assert make("train").env.observation == "deployable"
    assert make("train", "experiment=quickstart").env.observation == "deployable"
    research = make("train", "env.observation=research")  # no `+`: the schema knows the key
    validate(research)
    assert env_kwargs(research)["observation"] == "research"
    with pytest.raises(ConfigCompositionException, match="observation"):
        make("train", "env.observation=[1]")


def test_an_unknown_observation_set_and_a_shipped_research_policy_are_refused_by_name():
    with pytest.raises(ConfigCheckError, match="env.observation must be one of research, deployable, "
                                               "got 'deployabel' \\(did you mean 'deployable'\\?\\)"):
        validate(make("train", "env.observation=deployabel"))
    with pytest.raises(ConfigCheckError, match="exports its policy \\(deploy\\), but "
                                               "env.observation=research"):
        validate(make("train", "experiment=quickstart", "agent=maskable_ppo", "env.observation=research"))
    with pytest.raises(ConfigCheckError, match="agent=full_info learns only deployable actions"):
        validate(make("train", "experiment=quickstart", "env.observation=research"))
