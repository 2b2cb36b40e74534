"""The learned prior as an agent of the training pipeline: ``dynamiccl train agent=learned_prior``.

:mod:`dynamiccl.agents.training.prior_learner` trains it; this module holds only what the pipeline needs
around it (as :mod:`dynamiccl.agents.training.full_info_agent` does for the full-information learner):

* its config: ``configs/agent/learned_prior.yaml``'s ``model`` node names
  :class:`~dynamiccl.agents.training.prior_learner.PriorConfig`, so misspelt keys are refused as for every
  agent; ``seed`` seeds it;
* checkpoints at round boundaries (:mod:`dynamiccl.agents.training.round_checkpoints`): a run resumed after
  ``kill -9`` ends bit-identical to the uninterrupted one;
* the training curve: the loss on each round's examples before learning from them (new systems,
  so a held-out loss), and evaluations on the validation realities (``val_nll``, the metric of
  ``dynamiccl sweep hparams_search=learned_prior``);
* what ships: ``learned_prior.npz`` in the run folder, the file
  :meth:`~dynamiccl.agents.shipping.prior.LearnedPrior.load` reads, with the command that trains it again.

A training step is one (point, budget) example learned from; a round is ``systems_per_round`` fresh
systems' examples. The prior is no policy: the pipeline scores it on validation realities instead
of the evaluation suite, and exports nothing (``deploy`` is refused).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dynamiccl.agents.shipping.prior import SHIPPED_NAME, LearnedPrior
from dynamiccl.agents.training.prior_learner import (
    PriorConfig,
    PriorLearner,
    ValidationCase,
    score,
    validation_cases,
)
from dynamiccl.agents.training.prior_real_validation import validate_real
from dynamiccl.agents.training.round_agent import RoundAgent

NAME = "learned_prior"
AGENT = RoundAgent(NAME, PriorConfig, PriorLearner,
                   curve=("train/fresh_loss", "NLL on new systems, before learning"))
#: What the periodic evaluations show on the same figure: (evaluations.jsonl key, axis label).
EVALUATED = ("val_nll", "NLL on the validation realities")
is_learned_prior = AGENT.names


@lru_cache(maxsize=4)
def _cases(systems: int, realities: str) -> tuple[ValidationCase, ...]:
    return tuple(validation_cases(systems, realities=realities))


def validate(learner: PriorLearner, *, final: bool = False) -> dict[str, float]:
    """The prior as it would ship, scored on the validation realities of the kind it trains against
    (fixed systems; a periodic evaluation uses a third of the final one's)."""
    systems = learner.config.validation_systems
    return score(learner.prior(), list(_cases(systems if final else max(1, systems // 3),
                                              learner.config.realities)))


def summary(metrics: dict[str, Any], shipped: Path) -> str:
    """The line a finished training run ends with."""
    return (f"validation realities: NLL {metrics['val_nll']:.3f}, RMS error {metrics['val_rmse']:.3f}, "
            f"within 1 sigma {metrics['val_cover_1sigma']:.1%}, within 2 sigma "
            f"{metrics['val_cover_2sigma']:.1%} ({metrics['val_points']} points); the prior: {shipped}")


def ship(cfg: DictConfig, learner: PriorLearner, run_dir: Path, metrics: dict[str, Any]) -> Path:
    """``learned_prior.npz`` in the run folder: the prior, its validation scores and the command
    that trains it (copy it to ``agents/shipping/learned_prior.npz`` to ship it)."""
    real = validate_real(learner.prior(), learner.config.real_validation)
    prior = learner.prior({"command": AGENT.training_command(cfg), "validation": metrics,
                           **({"real_validation": real} if real else {})})
    path = prior.save(run_dir / SHIPPED_NAME)
    LearnedPrior.load(path)  # what was written reads back
    return path
