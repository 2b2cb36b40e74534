"""Run folders, checkpoints and policy files saved by an earlier layout of the code still load, score
as they did and resume to where an uninterrupted run ends (tests/fixtures/old_artifacts, README)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from training_runs import ENV, REPO, checkpoint_steps, run

from dynamiccl.agents.policies.sb3_agents import load_checkpoint

SAVED = REPO / "tests" / "fixtures" / "old_artifacts"
FULL_INFO = ["agent=full_info", "scenario=smoke", "logger=none", "eval.suite=smoke",
             "eval.baselines=[nccl_default]", "eval.plots=false", "trainer.progress_bar=false",
             "agent.model.systems_per_round=4", "agent.model.calls_per_system=64",
             "agent.model.hidden=8", "agent.model.layers=1", "agent.model.ensemble=1",
             "agent.model.epochs_per_round=2", "agent.model.min_gain=0.0"]
#: Each killed run folder: the overrides it was started with, and the step it was killed at.
KILLED = {
    "maskable_ppo_killed": (["experiment=smoke", "agent.model.n_steps=64", "agent.model.batch_size=32",
                             "agent.model.n_epochs=2", "agent.model.policy_kwargs.net_arch=[8]",
                             "trainer.total_timesteps=256", "trainer.checkpoint_every=64",
                             "trainer.progress_bar=false", "eval.baselines=[nccl_default]",
                             "eval.plots=false"], 64, 256),
    "full_info_killed": ([*FULL_INFO, "trainer.total_timesteps=2048", "trainer.checkpoint_every=256"],
                         256, 2048),
    "learned_prior_killed": (["agent=learned_prior", "trainer.progress_bar=false",
                              "agent.model.systems_per_round=2", "agent.model.series_per_system=1",
                              "agent.model.budgets_per_series=4", "agent.model.queries_per_budget=16",
                              "agent.model.hidden=8", "agent.model.ensemble=2",
                              "agent.model.validation_systems=3", "logger=none",
                              "trainer.total_timesteps=3000", "trainer.checkpoint_every=300"], 346, 3000),
}


def test_the_saved_policies_score_as_they_did_when_saved(tmp_path):
    folder = tmp_path / "saved"
    shutil.copytree(SAVED, folder)
    out = subprocess.run(
        [sys.executable, "-m", "dynamiccl.cli.main", "evaluate", "--policy",
         "maskable_ppo_killed/checkpoints/last.zip,full_info_finished,full_info_killed/checkpoints/last.pt,"
         "oracle_ring_ring_8to1.dccl", "--suite", "smoke", "--json"],
        capture_output=True, text=True, env=ENV, cwd=folder, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = json.loads((SAVED / "expected_scores.json").read_text())
    scored = json.loads(out.stdout)
    assert [row["policy"] for row in scored] == [row["policy"] for row in expected]
    for now, then in zip(scored, expected, strict=True):
        numbers = [k for k, v in then.items() if isinstance(v, float)]
        assert {k: v for k, v in now.items() if k not in numbers} == \
            {k: v for k, v in then.items() if k not in numbers}
        assert [now[k] for k in numbers] == pytest.approx([then[k] for k in numbers], rel=1e-9), \
            now["policy"]


def test_a_saved_sb3_checkpoint_keeps_its_learning_rate_schedule():
    model, meta = load_checkpoint(SAVED / "maskable_ppo_killed" / "checkpoints" / "last.zip")
    assert meta["algo"] == "maskable_ppo" and model.num_timesteps == 64
    assert model.learning_rate(0.5) == pytest.approx(5e-4), "linear_schedule(start=1e-3) at half way"


def _trained(run_dir: Path) -> dict[str, np.ndarray]:
    """The run's final parameters, whichever learner wrote them."""
    if (run_dir / "model.zip").is_file():
        model, _ = load_checkpoint(run_dir / "model.zip")
        return {k: v.numpy() for k, v in model.policy.state_dict().items()}
    blob = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
    return {k: v.numpy() for k, v in blob["state"].items()}


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.parametrize("name", sorted(KILLED))
def test_a_saved_killed_run_resumes_to_where_the_uninterrupted_run_ends(name, tmp_path):
    overrides, killed_at, total = KILLED[name]
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    shutil.copytree(SAVED / name, resumed)
    train = [sys.executable, str(REPO / "experiments" / "train.py"), *overrides]
    run([*train, f"hydra.run.dir={straight}"])

    out = run([*train, f"hydra.run.dir={resumed}"])
    assert f"resuming at step {killed_at} of {total}" in out.stdout
    assert "restored" in out.stdout.split(f"resuming at step {killed_at}")[1].splitlines()[0]
    assert checkpoint_steps(resumed)[0] == killed_at and checkpoint_steps(resumed)[-1] >= total
    a, b = _trained(resumed), _trained(straight)
    assert a.keys() == b.keys()
    assert not [k for k in a if not np.array_equal(a[k], b[k])], "parameters differ"
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (resumed, straight)]
    for m in metrics:
        del m["train_seconds"]
    assert metrics[0] == metrics[1], "the resumed run scores as the uninterrupted one"


def _recorded_targets() -> set[str]:
    """Every dynamiccl ``_target_`` the saved run folders' ``config.yaml`` files record."""
    from omegaconf import OmegaConf

    found = set()
    for config in SAVED.glob("*/config.yaml"):
        flat = OmegaConf.to_container(OmegaConf.load(config))
        stack = [flat]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                target = node.get("_target_")
                if isinstance(target, str) and target.startswith("dynamiccl."):
                    found.add(target)
                stack += list(node.values())
    return found


def test_the_table_of_moved_modules_holds_exactly_what_saved_folders_name():
    import importlib
    import importlib.util

    from hydra.utils import get_object

    from dynamiccl.agents import MOVED, current_name

    recorded = _recorded_targets()
    assert {target.rsplit(".", 1)[0] for target in recorded} == set(MOVED)
    for target in recorded:
        assert importlib.util.find_spec(target.rsplit(".", 1)[0]) is None, f"{target}: not moved?"
        assert callable(get_object(current_name(target)))
    assert current_name("dynamiccl.agents.policies.full_info.FullInfoConfig") == \
        "dynamiccl.agents.policies.full_info.FullInfoConfig"
    assert current_name("dynamiccl.agents.full_info_x.Y") == "dynamiccl.agents.full_info_x.Y"


def test_a_moved_target_is_the_same_setting_and_another_target_is_not():
    from dynamiccl.agents.training.run_folder import changed_keys

    def config(target: str) -> dict:
        return {"agent": {"model": {"_target_": target, "hidden": 8}}}

    old = config("dynamiccl.agents.full_info.FullInfoConfig")
    assert changed_keys(old, config("dynamiccl.agents.policies.full_info.FullInfoConfig")) == {}
    assert changed_keys(old, config("dynamiccl.agents.training.prior_learner.PriorConfig")) == {
        "agent.model._target_": ("dynamiccl.agents.policies.full_info.FullInfoConfig",
                                 "dynamiccl.agents.training.prior_learner.PriorConfig")}
