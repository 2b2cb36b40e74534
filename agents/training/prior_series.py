"""One series the learned prior learns from or is validated on: a collective on one system, every
pair at every size, as the model times it (:class:`~dynamiccl.agents.shipping.prior.ModelledSeries`,
the arrays the prior reads in ``tune`` too) and as it truly is.

Two kinds share it, so training and validation treat them alike: a simulated series
(:func:`~dynamiccl.agents.training.prior_learner.time_series`) knows the truth wherever the model runs
a pair and is measured with noise drawn per budget; a real one
(:mod:`~dynamiccl.agents.training.prior_corpus`) knows only what was measured, which is its truth,
with the noise of one measured ratio, and is measured as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamiccl.agents.shipping.prior import PICK_TOLERANCE, ModelledSeries


@dataclass(frozen=True)
class Series(ModelledSeries):
    """The model's arrays of one series and its true log(t_pair / t_default) ([P, S]; a real
    series': the measured ratio, NaN where not measured); ``noise``, the 1-sigma of one measured
    ratio of a real series, None for a simulated one (drawn per budget)."""

    truth: np.ndarray
    noise: float | None = None

    @property
    def known(self) -> np.ndarray:
        """Where the model runs the pair and its truth is known ([P, S])."""
        return np.isfinite(self.model) & np.isfinite(self.truth)

    @property
    def asked(self) -> np.ndarray:
        """Where the prior is asked and its answer can be checked ([P, S]): the truth is known and
        the pair is not NCCL's modelled pick (answered 0 without asking)."""
        return self.known & (np.abs(self.model) >= PICK_TOLERANCE)

    def window(self, start: int, stop: int) -> Series:
        """The sizes ``start:stop`` of the series."""
        return Series(self.collective, self.nranks, self.pairs, self.log2_sizes[start:stop],
                      self.pair_log_time[:, start:stop], self.default_log_time[start:stop],
                      self.truth[:, start:stop], self.noise)
