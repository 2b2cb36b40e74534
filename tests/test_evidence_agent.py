"""The evidence tuner through the training pipeline (issue 31): its config, a run folder with its
curve, wandb run and the settings file that ships, exact resume, and its Ray Tune sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from training_runs import (
    check_round_curve,
    kill_after_checkpoints,
    resume,
    run,
    same_parameters,
    sweep,
    train_command,
    train_config,
    train_logged,
)

from dynamiccl.agents.policies.evidence import Settings
from dynamiccl.agents.training import evidence_agent
from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.evidence_learner import EvidenceConfig, EvidenceLearner
from dynamiccl.agents.training.prior_learner import VALIDATION_SEED_START
from dynamiccl.agents.training.train import train

#: A tuner small enough for tests: two jobs of four calls a round, one short validation job.
SMALL = ["agent=evidence_tuner", "trainer.progress_bar=false", "agent.model.jobs_per_round=2",
         "agent.model.calls_per_job=4", "agent.model.validation_jobs=1", "agent.model.validation_rounds=6"]


def test_the_evidence_tuner_is_an_agent_option_whose_model_keys_are_its_config():
    cfg = train_config("agent=evidence_tuner")
    validate(cfg)
    assert cfg.agent.name == evidence_agent.NAME and evidence_agent.is_evidence_tuner(cfg.agent)
    assert evidence_agent.AGENT.build(cfg.agent, seed=7).config == EvidenceConfig(seed=7)
    with pytest.raises(ConfigCheckError, match=r"agent.model.risc.*did you mean 'risk'"):
        validate(train_config("agent=evidence_tuner", "+agent.model.risc=0.1"))
    with pytest.raises(ConfigCheckError, match="agent.model.risk is 0; give a number in \\(0, 1\\]"):
        validate(train_config("agent=evidence_tuner", "agent.model.risk=0"))
    with pytest.raises(ConfigCheckError, match="agent=evidence_tuner trains an online tuner"):
        validate(train_config("experiment=quickstart", "agent=evidence_tuner"))
    sweep = train_config("hparams_search=evidence_tuner")
    validate(sweep, sweep=True)
    assert sweep.tune.metric == "val_objective" and sweep.tune.mode == "min"


def test_the_learner_never_draws_a_heldout_reality_and_fits_the_spreads_it_learns_from():
    learner = EvidenceLearner(EvidenceConfig(jobs_per_round=2, calls_per_job=3, seed=1))
    data = learner.draw_round()
    assert [kind for kind, _ in data] == ["rdma", "tcp"]
    assert all(len(obs) >= 3 for _, obs in data)
    before = learner.loss(data)
    for _ in range(4):
        learner.train_round(data)
    assert learner.loss(data) < before, "the spreads move towards what the measurements say"
    assert learner.rounds == 4 and learner.samples_seen > 0
    assert learner.realities_seen and max(learner.realities_seen) < VALIDATION_SEED_START
    with pytest.raises(Exception, match="not one of uniform, measured"):
        EvidenceLearner(EvidenceConfig(profile="nosuch"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short run in a run folder, logging to wandb offline."""
    run_dir = tmp_path_factory.mktemp("evidence") / "run"
    return run_dir, train_logged(run_dir, SMALL, 240, 80, 120)


def test_a_training_run_leaves_its_curve_evaluations_wandb_run_and_the_settings_file(trained):
    run_dir, metrics = trained
    assert metrics["step"] >= 240 and metrics["train_seconds"] > 0
    assert metrics["val_regret_ratio"] > 0 and 0 < metrics["val_worst_call"] <= 1
    check_round_curve(run_dir, metrics, "val_objective")
    assert json.loads((run_dir / "model.json").read_text())["algo"] == "evidence_tuner"
    settings = Settings.load(run_dir / "evidence_tuner.json")
    assert settings.meta["command"] == (
        "dynamiccl train agent=evidence_tuner seed=0 trainer.total_timesteps=240 "
        "agent.model.jobs_per_round=2 agent.model.calls_per_job=4 agent.model.validation_jobs=1 "
        "agent.model.validation_rounds=6"), "the seeded command that trains it again"
    assert settings.meta["validation"]["val_objective"] == metrics["val_objective"]
    assert set(settings.spreads) == {"rdma", "tcp"}
    [offline] = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert list(offline.glob("*.wandb"))


def test_a_run_continued_from_its_checkpoint_ends_where_the_uninterrupted_run_does(tmp_path):
    common = [*SMALL, "logger=none", "trainer.checkpoint_every=40", "trainer.eval_every=0"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(train_config(*common, "trainer.total_timesteps=200"), straight)
    train(train_config(*common, "trainer.total_timesteps=100"), resumed)
    first = EvidenceLearner.load(resumed / "model.pt").samples_seen
    train(train_config(*common, "trainer.total_timesteps=200", "resume.allow_changes=true"), resumed)
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (resumed, straight))
    assert 100 <= first < a["samples_seen"] == b["samples_seen"]
    assert torch.equal(a["params"], b["params"]), "resumed with its optimizer and generator"
    x, y = (Settings.load(d / "evidence_tuner.json") for d in (resumed, straight))
    assert x.spreads == y.spreads


# --- kill -9, then resume, and the sweep -------------------------------------------------------------

TOTAL = 600


def command(run_dir: Path) -> list[str]:
    return train_command(run_dir, [*SMALL, "logger=none"], TOTAL, 60)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_run_killed_with_sigkill_and_resumed_ends_bit_identical(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(command(straight))
    kill_after_checkpoints(command(resumed), resumed)
    learner, restored = evidence_agent.AGENT.load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert restored and 0 < learner.samples_seen < TOTAL and not (resumed / "model.pt").exists()
    resume(command(resumed), learner.samples_seen, TOTAL)
    assert same_parameters(resumed, straight, key="params")["samples_seen"] >= TOTAL


@pytest.mark.slow
@pytest.mark.multiproc
def test_an_evidence_tuner_sweep_runs_on_ray_tune_and_reports_each_evaluation(tmp_path):
    """The round learners' sweep (the evidence tuner's, the learned prior's and the full-information
    learner's train through one round loop, :func:`train._learn_rounds`): a trial per sample,
    each evaluation reported, checkpoints to Tune, the shipped file in the trial's run folder."""
    rows = sweep(tmp_path, "evidence_tuner", ["trainer.total_timesteps=160", "trainer.checkpoint_every=80",
                                              "trainer.eval_every=80", *SMALL[2:]], [80, 160])
    for row in rows:
        if row["status"] == "OK":
            assert np.isfinite(row["val_objective"])
            assert (Path(row["path"]) / "run" / "evidence_tuner.json").is_file()
