"""The shipped learned prior (:mod:`dynamiccl.agents.shipping.prior`) as ``dynamiccl tune``'s :class:`Prior`.

``tune`` asks its prior once per collective and system shape (:class:`PriorQuery`), and this adapter
answers with one :meth:`LearnedPrior.predict` call: the model's times of every pair and of NCCL's
default at every size asked, the measured log-ratios, and the noise of one measured ratio.

Three things differ between how the prior learned and how tune uses it, and are handled here:

* the model: the prior learned the residuals of the datasheet model (a nominal system against a
  perturbed reality), while tune may fit the model to the measurements first. The query's model is
  therefore the system as given (:class:`PriorQuery`), never the fitted one: the prior sees the
  features it was trained on, and NCCL's pick in its features is NCCL's cost model on the topology,
  the pick tune compares against.
* NCCL's pick: where the model says a pair *is* NCCL's pick, the prior answers "no change, surely";
  in its simulated training realities NCCL ran exactly that, on a real system NCCL may run another
  pair. Those answers are left out, so tune's model source (with the model's uncertainty) speaks
  there: with them, ``bench_tuning``'s replay tables lost nearly all of tune's headroom (half
  budget 0.49 -> 0.02: the plan never measured the choices the model took for NCCL's own).
* the noise: it learned from one timing of the pair and one of NCCL's default per measured size,
  each with one noise per series (:data:`NOISE_RANGE`), while tune's measured ratios have the noise
  of their launches (a median of several is surer than one launch). The noise it is given is the
  median 1-sigma of the measured ratios, kept within the range it was trained on.
"""

from __future__ import annotations

import math

import numpy as np

from dynamiccl.agents.shipping.prior import DEFAULT_RATIO_NOISE, NOISE_RANGE, LearnedPrior, Point
from dynamiccl.agents.shipping.tune import DEFAULT, PRIOR_SIGMAS, PriorAnswers, PriorQuery


class LearnedPriorSource:
    """tune's :class:`~dynamiccl.agents.shipping.tune.Prior` backed by a :class:`LearnedPrior` (default: the
    one shipped in the package)."""

    def __init__(self, learned: LearnedPrior | None = None) -> None:
        self.learned = learned if learned is not None else LearnedPrior.load()
        self.widen = self.real_widening(self.learned)

    @staticmethod
    def real_widening(learned: LearnedPrior) -> float:
        """What the prior's sigma is multiplied by so that tune's gate (:data:`PRIOR_SIGMAS` of
        it) is the gate its validation on held-out real systems asks for
        (``agents/training/prior_real_validation.py``, the file's ``real_validation``): 1 where that
        asks for less or the file has none (trained before), inf (it pins nothing) where those
        systems gave no predicted gain to check it on."""
        gate = learned.meta.get("real_validation", {}).get("gate_sigmas")
        if gate is None:
            return 1.0
        return max(1.0, float(gate) / PRIOR_SIGMAS) if math.isfinite(float(gate)) else math.inf

    def estimate(self, query: PriorQuery) -> PriorAnswers:
        model_us, measured = self.points(query)
        if not model_us:
            return {}
        answers = self.learned.predict(model_us, measured, noise=self.noise(query))
        # a pair the model says NCCL picks itself is answered (0, 0) by the prior: as sure as the
        # model's idea of NCCL's pick, which is right by construction in a simulated reality and
        # not on a real system (on the RTX 5090 pair's logs NCCL_PROTO=Simple, "NCCL's own pick",
        # measured faster than NCCL's default); tune's model source weighs that doubt, so leave it
        return {(key[2], key[3]): (a.log_ratio, a.sigma * self.widen) for key, a in answers.items()
                if math.isfinite(a.log_ratio) and a.sigma > 0 and math.isfinite(a.sigma * self.widen)}

    @staticmethod
    def points(query: PriorQuery) -> tuple[dict[Point, float], dict[Point, float]]:
        """The query as :meth:`LearnedPrior.predict` takes it: the model's time of every choice and
        of NCCL's default at every size NCCL can run the call at (``inf``: a pair the model cannot
        run), and the measured log-ratios there (the prior's training reads real systems so too)."""
        collective, nranks = query.collective, query.topology.nranks
        model_us: dict[Point, float] = {}
        for n in query.sizes:
            default = query.model_us(DEFAULT, n)
            if default is None:  # NCCL cannot run the call at this size: nothing to compare with
                continue
            model_us[(collective, nranks, None, n)] = default
            for choice in query.choices:
                t = query.model_us(choice, n)
                model_us[(collective, nranks, choice, n)] = math.inf if t is None else t
        measured = {(collective, nranks, choice, p.nbytes): p.log_ratio
                    for choice, points in query.measured.items() for p in points
                    if (collective, nranks, choice, p.nbytes) in model_us}
        return model_us, measured

    @staticmethod
    def noise(query: PriorQuery) -> float:
        """The 1-sigma of one measured log-ratio the prior is told: the median of the measured
        ratios' own, within what it learned from; the prior's default where nothing was measured."""
        sigmas = [p.sigma for points in query.measured.values() for p in points]
        if not sigmas:
            return DEFAULT_RATIO_NOISE
        low, high = (math.sqrt(2) * n for n in NOISE_RANGE)
        return float(np.clip(np.median(sigmas), low, high))
