"""SB3 agents as policies: valid actions without masks, checkpoints that round-trip."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from dynamiccl.agents.policy import scenario_mask
from dynamiccl.agents.registry import load_policy
from dynamiccl.agents.sb3_agents import (
    SB3Policy,
    build_model,
    checkpoint_meta,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
)
from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
from dynamiccl.envs.observation import encode
from dynamiccl.envs.workloads import load_suite


@pytest.fixture(scope="module")
def calls():
    return list(dict.fromkeys(s for e in load_suite("smoke") for s in e.scenarios))


def small_model(algo: str):
    env = CollectiveTuningEnv("smoke")
    hparams = {"policy_kwargs": {"net_arch": [16]}}
    if algo == "dqn":
        hparams.update(learning_starts=0, buffer_size=1000, batch_size=8)
    else:
        hparams.update(n_steps=32, batch_size=16)
    return build_model(algo, env, seed=0, hparams=hparams)


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


def test_unknown_hyperparameter_is_named():
    with pytest.raises(ValueError, match="agent.hparams"):
        build_model("ppo", CollectiveTuningEnv("smoke"), hparams={"learning_rat": 1e-3})
    with pytest.raises(ValueError, match="ppo, maskable_ppo, dqn"):
        build_model("sac", CollectiveTuningEnv("smoke"))


@pytest.mark.parametrize("algo", ["dqn", "maskable_ppo"])
def test_checkpoint_round_trip_keeps_weights_step_and_replay_buffer(tmp_path, calls, algo):
    model = small_model(algo)
    model.learn(64)
    path = save_checkpoint(model, tmp_path / "ckpt", algo, {"note": "x"})
    assert path.name == "ckpt.zip"
    meta = json.loads((tmp_path / "ckpt.json").read_text())
    assert meta == {"algo": algo, "num_timesteps": 64, "note": "x"}
    assert (tmp_path / "ckpt_replay_buffer.pkl").is_file() == (algo == "dqn")
    loaded, meta2 = load_checkpoint(path)
    assert loaded.num_timesteps == 64 and meta2["algo"] == algo
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


def test_learning_rate_schedules_in_yaml_notation():
    model = build_model("ppo", CollectiveTuningEnv("smoke"),
                        hparams={"learning_rate": "lin_2e-3", "n_steps": 32, "batch_size": 16})
    assert model.lr_schedule(1.0) == pytest.approx(2e-3)
    assert model.lr_schedule(0.25) == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="lin_<start value>"):
        build_model("ppo", CollectiveTuningEnv("smoke"), hparams={"learning_rate": "fast"})
