"""The learned prior judged on real systems it never learned from: how honest its sigma is there, and
so how many of its sigmas a predicted gain must clear before ``dynamiccl tune`` lets it pin a call.

Simulated validation realities (:func:`~dynamiccl.agents.training.prior_learner.validation_cases`)
say the sigma is calibrated where the world is the simulator; a real system's residuals need not
look like any simulated one. So the validation systems of a run (``PriorConfig.real_validation``,
never in ``real_train``) are scored as tune meets them: per series, seeded measurement budgets
(:func:`~dynamiccl.agents.training.prior_learner.draw_budget`) over the points NVIDIA measured, the
prior answering every measured point left out from the rest. Recorded in the prior's file
(``meta["real_validation"]``): its coverage and NLL there, and the gate -- the one-sided 99.5 %
quantile of (measured - predicted) / sigma where it predicts a gain above tune's margin, the same
statistic the simulated gate :data:`~dynamiccl.agents.shipping.tune.PRIOR_SIGMAS` is. Where that
gate exceeds tune's, the source widens the prior's sigma by the ratio
(:class:`~dynamiccl.agents.shipping.tune_prior.LearnedPriorSource`); where the validation systems
gave it no predicted gain to check, it pins nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN
from dynamiccl.agents.shipping.prior import LearnedPrior
from dynamiccl.agents.training.prior_corpus import corpus
from dynamiccl.agents.training.prior_learner import (
    ValidationCase,
    draw_budget,
    gate_sigmas,
    measure,
    score,
)

#: Budgets drawn per real series, and the generator's seed (every run judged on the same cases).
REAL_BUDGETS = 8
REAL_CASES_SEED = 4343


def real_cases(folders: Sequence[str], budgets: int = REAL_BUDGETS, seed: int = REAL_CASES_SEED
               ) -> list[ValidationCase]:
    """``budgets`` seeded measurement budgets on every series of the real systems in ``folders``,
    each measured as NVIDIA measured it."""
    rng = np.random.default_rng(seed)
    cases = []
    for series in corpus(folders):
        for _ in range(budgets):
            measured = draw_budget(rng, series.known)
            values, noise = measure(rng, series, measured)
            cases.append(ValidationCase(series, measured, values, noise))
    return cases


def validate_real(prior: LearnedPrior, folders: Sequence[str], margin: float = DEFAULT_MARGIN) -> dict:
    """The prior's scores on the real systems in ``folders`` (``val_*`` of
    :func:`~dynamiccl.agents.training.prior_learner.score`) and its gate there (``gate_sigmas``: NaN
    where it predicted no gain above ``margin``), with the systems named; empty without folders."""
    if not folders:
        return {}
    cases = real_cases(folders)
    return {"systems": [Path(f).name for f in folders],
            **score(prior, cases), "gate_sigmas": gate_sigmas(prior, cases, margin)}
