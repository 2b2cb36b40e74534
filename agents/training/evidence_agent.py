"""The evidence tuner as an agent of the training pipeline: ``dynamiccl train agent=evidence_tuner``.

:mod:`dynamiccl.agents.training.evidence_learner` learns its belief; this module holds what the
pipeline needs around it (as :mod:`dynamiccl.agents.training.prior_agent` does for the learned
prior): the config (``configs/agent/evidence_tuner.yaml``'s ``model`` names
:class:`~dynamiccl.agents.training.evidence_learner.EvidenceConfig`, so misspelt keys are refused),
checkpoints at round boundaries (:mod:`dynamiccl.agents.training.round_checkpoints`: a run resumed
after ``kill -9`` ends bit-identical to the uninterrupted one), the training curve (the negative log
evidence of each round's new jobs before learning from them) and evaluations on the validation jobs
(``val_objective``, the metric of ``dynamiccl sweep hparams_search=evidence_tuner``), and what ships:
``evidence_tuner.json`` in the run folder, the file
:meth:`~dynamiccl.agents.policies.evidence.Settings.load` reads (copy it to
``agents/policies/evidence_tuner.json`` to ship it), with the command that trains it again.

A training step is one measurement learned from; a round is ``jobs_per_round`` fresh jobs. The
tuner is scored on validation jobs instead of the evaluation suite (it tunes inside a job, the
suite scores per-call policies), and exports nothing (``deploy`` is refused).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dynamiccl.agents.policies.evidence import SHIPPED_NAME, Settings
from dynamiccl.agents.training.evidence_learner import (
    EvidenceConfig,
    EvidenceLearner,
    validation_jobs,
)
from dynamiccl.agents.training.evidence_learner import (
    validate as play_validation,
)
from dynamiccl.agents.training.round_agent import RoundAgent

NAME = "evidence_tuner"
AGENT = RoundAgent(NAME, EvidenceConfig, EvidenceLearner,
                   curve=("train/fresh_loss", "NLL per measurement on new jobs, before learning"))
#: What the periodic evaluations show on the same figure: (evaluations.jsonl key, axis label).
EVALUATED = ("val_regret_ratio", "regret / the prior sweep's, validation jobs")
is_evidence_tuner = AGENT.names


@lru_cache(maxsize=4)
def _jobs(count: int, profile: str) -> tuple:
    return tuple(validation_jobs(count, profile))


def validate(learner: EvidenceLearner, *, final: bool = False) -> dict[str, float]:
    """The tuner as it would ship, on the validation jobs (a periodic evaluation plays half)."""
    cfg = learner.config
    count = cfg.validation_jobs if final else max(1, cfg.validation_jobs // 2)
    return play_validation(learner.settings(), list(_jobs(count, cfg.profile)), cfg.validation_rounds)


def summary(metrics: dict[str, Any], shipped: Path) -> str:
    """The line a finished training run ends with."""
    return (f"validation jobs: regret {metrics['val_regret_ratio']:.3f} x the prior sweep's, worst call "
            f"{metrics['val_worst_call']:.3f} x NCCL's, share {metrics['val_share']:.3f}; the settings: "
            f"{shipped}")


def ship(cfg: DictConfig, learner: EvidenceLearner, run_dir: Path, metrics: dict[str, Any]) -> Path:
    """``evidence_tuner.json`` in the run folder: the settings, their validation scores and the
    command that trains them."""
    settings = learner.settings({"command": AGENT.training_command(cfg), "validation": metrics})
    path = settings.save(run_dir / SHIPPED_NAME)
    Settings.load(path)  # what was written reads back
    return path
