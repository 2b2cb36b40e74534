"""The learned prior through the training pipeline (issue 22, item 3): its config, a run folder
with its curve, wandb run and the file that ships, exact resume after kill -9, its Ray Tune sweep,
and the benchmark that scores it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from training_runs import (
    ENV,
    REPO,
    check_round_curve,
    kill_after_checkpoints,
    resume,
    run,
    same_parameters,
    train_command,
    train_config,
    train_logged,
)

from dynamiccl.agents.shipping.prior import LearnedPrior
from dynamiccl.agents.training import prior_agent
from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.prior_learner import PriorConfig
from dynamiccl.agents.training.train import train

#: A prior small enough for tests: about a hundred examples a round from two fresh systems.
SMALL = ["agent=learned_prior", "trainer.progress_bar=false", "agent.model.systems_per_round=2",
         "agent.model.series_per_system=1", "agent.model.budgets_per_series=4",
         "agent.model.queries_per_budget=16", "agent.model.hidden=8", "agent.model.ensemble=2",
         "agent.model.validation_systems=3"]


def test_the_learned_prior_is_an_agent_option_whose_model_keys_are_its_config():
    cfg = train_config("agent=learned_prior")
    validate(cfg)
    assert cfg.agent.name == prior_agent.NAME and prior_agent.is_learned_prior(cfg.agent)
    assert prior_agent.AGENT.build(cfg.agent, seed=7).config == PriorConfig(seed=7), \
        "the YAML trains what the defaults describe"
    assert not prior_agent.is_learned_prior(train_config().agent)
    with pytest.raises(ConfigCheckError, match=r"agent.model.hiden.*did you mean 'hidden'"):
        validate(train_config("agent=learned_prior", "+agent.model.hiden=3"))
    with pytest.raises(ConfigCheckError, match="agent=learned_prior trains a prior for `dynamiccl "
                                               "tune`, not a policy to export; drop the export"):
        validate(train_config("experiment=quickstart", "agent=learned_prior"))
    sweep = train_config("hparams_search=learned_prior")
    validate(sweep, sweep=True)
    assert sweep.agent.name == "learned_prior" and sweep.tune.metric == "val_nll"
    assert sweep.tune.mode == "min"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short run in a run folder, logging to wandb offline."""
    run_dir = tmp_path_factory.mktemp("prior") / "run"
    return run_dir, train_logged(run_dir, SMALL, 600, 300, 300)


def test_a_training_run_leaves_its_curve_evaluations_wandb_run_and_the_prior_file(trained):
    run_dir, metrics = trained
    assert metrics["step"] >= 600 and metrics["train_seconds"] > 0
    assert np.isfinite(metrics["val_nll"]) and 0 < metrics["val_cover_2sigma"] <= 1
    check_round_curve(run_dir, metrics, "val_nll")
    assert json.loads((run_dir / "eval" / "summary.json").read_text())["val_nll"] == metrics["val_nll"]
    assert json.loads((run_dir / "model.json").read_text())["algo"] == "learned_prior"
    prior = LearnedPrior.load(run_dir / "learned_prior.npz")
    assert prior.meta["command"] == (
        "dynamiccl train agent=learned_prior seed=0 trainer.total_timesteps=600 agent.model.hidden=8 "
        "agent.model.ensemble=2 agent.model.systems_per_round=2 agent.model.series_per_system=1 "
        "agent.model.budgets_per_series=4 agent.model.queries_per_budget=16 "
        "agent.model.validation_systems=3"), "the seeded command that trains it again"
    assert prior.meta["validation"]["val_nll"] == metrics["val_nll"]
    assert (run_dir / "learned_prior.npz").stat().st_size < 20_000
    [offline] = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert list(offline.glob("*.wandb"))


def test_a_run_folder_of_the_prior_is_refused_for_another_agent(trained):
    run_dir, _ = trained
    with pytest.raises(ConfigCheckError, match="holds a learned_prior agent but agent is full_info"):
        train(train_config("agent=full_info", "resume.allow_changes=true"), run_dir)


# --- kill -9, then resume ---------------------------------------------------------------------------

TOTAL = 3000


def command(run_dir: Path) -> list[str]:
    return train_command(run_dir, [*SMALL, "logger=none"], TOTAL, 300)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    run(command(run_dir))
    return run_dir


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_run_killed_with_sigkill_and_resumed_ends_bit_identical(straight, tmp_path):
    resumed = tmp_path / "resumed"
    kill_after_checkpoints(command(resumed), resumed)
    learner, restored = prior_agent.AGENT.load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert restored and 0 < learner.samples_seen < TOTAL and not (resumed / "model.pt").exists()

    out = resume(command(resumed), learner.samples_seen, TOTAL)
    assert "optimizer and generator restored" in out.stdout
    assert same_parameters(resumed, straight)["samples_seen"] >= TOTAL
    x, y = (LearnedPrior.load(d / "learned_prior.npz") for d in (resumed, straight))
    assert all(np.array_equal(u, v) for u, v in zip(x.weights + x.biases, y.weights + y.biases,
                                                     strict=True))
    assert x.meta == y.meta


# --- the Ray Tune sweep and the benchmark -----------------------------------------------------------

@pytest.mark.slow
def test_bench_prior_scores_every_predictor_on_held_out_realities():
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "bench_prior.py"), "--seeds", "1",
                          "--json"], capture_output=True, text=True, env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    assert doc["reality"].startswith("perturbed, held-out seeds 1000")
    for budget, per in doc["budgets"].items():
        assert set(per) == {"model", "nearest", "residual", "prior", "tune", "tune_no_prior"}, budget
        assert per["prior"]["mae"] < per["model"]["mae"], budget
        assert per["prior"]["points"] == per["model"]["points"] > 0
        for name, result in per.items():
            assert result["decisions"] == per["model"]["decisions"], (budget, name)
            assert 0 <= result["slower_2pct"] <= result["overrides"] <= result["decisions"]
    bad = subprocess.run([sys.executable, str(REPO / "experiments" / "bench_prior.py"), "--prior",
                          str(REPO / "README.md")], capture_output=True, text=True, env=ENV, timeout=120)
    assert bad.returncode == 2 and "is not a learned-prior file" in bad.stderr
