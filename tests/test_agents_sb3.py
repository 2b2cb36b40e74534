"""SB3 agents as policies: valid actions without masks, checkpoints that round-trip."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from omegaconf import OmegaConf

from dynamiccl.agents.policies.policy import scenario_mask
from dynamiccl.agents.policies.registry import load_policy
from dynamiccl.agents.policies.sb3_agents import (
    SB3Policy,
    build_model,
    checkpoint_meta,
    class_path,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from dynamiccl.agents.training.resume_state import StreamRecorder, capture
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.observation import encode
from dynamiccl.envs.workloads import load_suite


@pytest.fixture(scope="module")
def calls():
    return list(dict.fromkeys(s for e in load_suite("smoke") for s in e.scenarios))


CLASSES = {"ppo": "stable_baselines3.PPO", "dqn": "stable_baselines3.DQN",
           "maskable_ppo": "sb3_contrib.MaskablePPO"}


def agent(algo: str, target: str | None = None, **model):
    return OmegaConf.create({"name": algo, "model": {"_target_": target or CLASSES[algo],
                                                     "policy": "MlpPolicy", **model}})


def small_model(algo: str):
    hparams: dict = {"policy_kwargs": {"net_arch": [16]}}
    if algo == "dqn":
        hparams.update(learning_starts=0, buffer_size=1000, batch_size=8)
    else:
        hparams.update(n_steps=32, batch_size=16)
    return build_model(agent(algo, **hparams), StreamRecorder(CollectiveTuningEnv("smoke")), seed=0)


@pytest.mark.parametrize("algo", ["ppo", "dqn", "maskable_ppo"])
def test_untrained_agent_never_emits_an_invalid_action(calls, algo):
    policy = SB3Policy(small_model(algo), algo)
    for deployable in (False, True):
        policy.deployable = deployable
        for s in calls:
            mask = scenario_mask(s, deployable=deployable)
            assert mask[policy.act(encode(s), scenario=s)]
            assert mask[policy.act(encode(s), action_mask=mask)]


def test_unmasked_ppo_takes_the_best_valued_valid_action(calls):
    policy = SB3Policy(small_model("ppo"), "ppo")
    s = calls[0]
    values = policy.action_values(encode(s))
    mask = scenario_mask(s)
    assert policy.act(encode(s), action_mask=mask) == int(np.argmax(np.where(mask, values, -np.inf)))


@pytest.mark.parametrize("algo", ["dqn", "maskable_ppo"])
def test_checkpoint_round_trip_keeps_weights_step_and_replay_buffer(tmp_path, calls, algo):
    model = small_model(algo)
    model.learn(64)
    path = save_checkpoint(model, tmp_path / "ckpt", algo, resume=capture(model))
    assert path.name == "ckpt.zip"
    meta = json.loads((tmp_path / "ckpt.json").read_text())
    assert meta == {"algo": algo, "class": class_path(model), "num_timesteps": 64}
    assert (tmp_path / "ckpt_replay_buffer_64.pkl").is_file() == (algo == "dqn")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "no temp files"
    loaded, meta2 = load_checkpoint(path, env=model.get_env())
    assert loaded.num_timesteps == 64 and meta2["algo"] == algo and "resume" in meta2
    if algo == "dqn":
        assert loaded.replay_buffer.size() == model.replay_buffer.size() > 0
    before, after = SB3Policy(model, algo), load_policy(str(path))
    for s in calls:
        assert before.act(encode(s), scenario=s) == after.act(encode(s), scenario=s)
    # Without the sidecar the algorithm is read from SB3's own zip.
    (tmp_path / "ckpt.json").unlink()
    assert checkpoint_meta(path)["algo"] == algo
    with zipfile.ZipFile(path) as zf:
        assert "policy.pth" in zf.namelist()


def test_checkpoint_paths_resolve_from_run_folders_and_missing_ones_say_what_to_do(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.zip").write_bytes(b"")
    assert resolve_checkpoint(tmp_path) == tmp_path / "checkpoints" / "last.zip"
    (tmp_path / "model.zip").write_bytes(b"")
    assert resolve_checkpoint(tmp_path) == tmp_path / "model.zip"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="train first"):
        resolve_checkpoint(empty)
    with pytest.raises(FileNotFoundError, match="dynamiccl train"):
        resolve_checkpoint(tmp_path / "nope.zip")


def test_learning_rate_schedule_instantiated_from_yaml():
    schedule = {"_target_": "dynamiccl.agents.policies.sb3_agents.linear_schedule", "start": 2e-3}
    model = build_model(agent("ppo", learning_rate=schedule, n_steps=32, batch_size=16),
                        CollectiveTuningEnv("smoke"))
    assert model.lr_schedule(1.0) == pytest.approx(2e-3)
    assert model.lr_schedule(0.25) == pytest.approx(5e-4)


def test_a_new_algorithm_is_only_a_config(tmp_path, calls):
    """A2C has no YAML of its own here: a config naming its class is enough to build, save, load
    and act with it."""
    model = build_model(agent("a2c", "stable_baselines3.A2C", n_steps=8), CollectiveTuningEnv("smoke"))
    model.learn(16)
    path = save_checkpoint(model, tmp_path / "a2c", "a2c")
    policy = load_policy(str(path))
    assert type(policy.model).__name__ == "A2C"
    assert scenario_mask(calls[0])[policy.act(encode(calls[0]), scenario=calls[0])]
