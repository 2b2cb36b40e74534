"""Kill -9 and Ctrl-C during training, then resume: the run must end exactly where it would have."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from training_runs import (
    checkpoint_steps,
    interrupt,
    kill_after_checkpoints,
    resume,
    run,
    start_and_wait,
    train_command,
)

from dynamiccl.agents.policies.sb3_agents import load_checkpoint

TOTAL = 1024
AGENTS = {
    "maskable_ppo": ["experiment=smoke", "agent.model.n_steps=64", "agent.model.batch_size=32",
                     "agent.model.n_epochs=2", "agent.model.policy_kwargs.net_arch=[32]"],
    "dqn": ["agent=dqn", "scenario=smoke", "logger=none", "eval.suite=smoke",
            "agent.model.learning_starts=64", "agent.model.buffer_size=2000",
            "agent.model.batch_size=32", "agent.model.target_update_interval=64",
            "agent.model.train_freq=4", "agent.model.policy_kwargs.net_arch=[32]"],
}


def command(run_dir: Path, algo: str, *extra: str) -> list[str]:
    return [*train_command(run_dir, AGENTS[algo], TOTAL, 128), "trainer.progress_bar=false",
            "eval.baselines=[nccl_default]", "eval.plots=false", *extra]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The uninterrupted run of an agent, trained once for every test that compares with it."""
    done: dict[str, Path] = {}

    def run_of(algo: str) -> Path:
        if algo not in done:
            done[algo] = tmp_path_factory.mktemp(algo) / "straight"
            run(command(done[algo], algo))
        return done[algo]

    return run_of


def parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    model, _ = load_checkpoint(run_dir / "model.zip")
    return model.policy.state_dict()


def assert_identical(resumed: Path, straight: Path) -> None:
    a, b = parameters(resumed), parameters(straight)
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"parameters differ from the uninterrupted run: {different}"
    assert json.loads((resumed / "metrics.json").read_text())["oracle_share"] == \
        json.loads((straight / "metrics.json").read_text())["oracle_share"]
    for name in ("calls.csv", "summary.csv"):
        assert (resumed / "eval" / name).read_text() == (straight / "eval" / name).read_text()


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.parametrize("algo", ["maskable_ppo", "dqn"])
def test_run_killed_with_sigkill_and_resumed_ends_bit_identical_to_the_uninterrupted_run(tmp_path, algo,
                                                                                         straight):
    resumed = tmp_path / "resumed"
    kill_after_checkpoints(command(resumed, algo), resumed, checkpoints=3)
    model, meta = load_checkpoint(resumed / "checkpoints" / "last.zip")
    saved = int(model.num_timesteps)
    assert 0 < saved < TOTAL and saved % 128 == 0, "checkpoints sit on rollout boundaries"
    assert not (resumed / "model.zip").exists()

    out = resume(command(resumed, algo), saved, TOTAL)
    assert "environments and generators restored" in out.stdout
    assert_identical(resumed, straight(algo))
    assert checkpoint_steps(resumed)[-1] == TOTAL
    assert json.loads((resumed / "checkpoints" / "last.json").read_text())["num_timesteps"] == TOTAL
    if algo == "dqn":
        buffers = list((resumed / "checkpoints").glob("last_replay_buffer_*.pkl"))
        assert [b.name for b in buffers] == [f"last_replay_buffer_{TOTAL}.pkl"]


@pytest.mark.slow
@pytest.mark.multiproc
def test_ctrl_c_saves_at_a_rollout_boundary_exits_with_one_line_and_resume_matches(tmp_path, straight):
    resumed = tmp_path / "resumed"
    step = interrupt(start_and_wait(command(resumed, "maskable_ppo"), resumed, checkpoints=2))
    model, _ = load_checkpoint(resumed / "checkpoints" / "last.zip")
    assert model.num_timesteps == step and step % 64 == 0, "the label is the step actually trained"

    resume(command(resumed, "maskable_ppo"), step, TOTAL)
    assert_identical(resumed, straight("maskable_ppo"))
