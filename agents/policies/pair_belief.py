"""What one system's measurements say about every choice's time: the online tuners' belief.

A model is off from its machine in a shaped way, and a tuner can learn the shape from the calls it
has run. Each (collective, algorithm, protocol) *series* has its own latency-floor factor and
bandwidth factor, and the whole system a common pair of factors every choice shares (NCCL's
default included): a configuration's true time is ``L * floor + rest / B`` with ``floor`` and
``rest`` the model's latency/bandwidth split of its time (:func:`dynamiccl.decisions.latency_split`),
``log L`` the common plus the series' latency factor, ``log B`` likewise. That is the split
``dynamiccl tune`` corrects a choice's model time by, and what ``calibrate`` fits per pair.

So one measurement says something about calls never run: a choice that ran slow at 64 KiB is slow
at 128 KiB too (the same series), and NCCL's own time, measured at every size, says how far the
whole system is off (the common factors) and how far the series NCCL runs there is. The belief is
an exact posterior on a grid: the common factors on a coarse grid, each series' given them on a
finer one, Gaussian priors of learned spreads (:class:`Spreads`, per kind of system; fitted by
marginal likelihood on training realities, :mod:`dynamiccl.agents.training.evidence_learner`).
A measurement's likelihood is its launch noise (:mod:`dynamiccl.system.launch_noise`: a Gaussian core, one
launch in ten a stray past the tail) widened by the model's own ``misfit`` (what the split cannot
express); several measurements of one choice at one call count as their median, whose noise is
:meth:`~dynamiccl.system.launch_noise.BandNoise.of_median` (the misfit is counted once: repeating a call
cannot teach what the model gets wrong about it).

Everything here is deterministic numpy in float64 (no clocks, ranks or environment): every rank
that holds the same measurements believes the same.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from dynamiccl.system.knobs import Algorithm, Collective, Protocol
from dynamiccl.system.launch_noise import BandNoise

#: Grid points, in units of each prior's 1-sigma, of the common factors (per dimension) and of a
#: series' factors: coarse where every measurement speaks, finer where a few do.
COMMON_GRID = np.linspace(-2.5, 2.5, 7)
SERIES_GRID = np.linspace(-3.0, 3.0, 13)
#: The smallest misfit believed: a model is never exact, and a posterior narrower than its grid
#: would only reflect where the grid points lie.
MIN_MISFIT = 0.01

#: One series: (collective, algorithm, protocol).
Series = tuple[Collective, Algorithm, Protocol]


def logsumexp(x: np.ndarray, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(x))) along ``axis``, safe where every entry is -inf."""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
    return out if keepdims else np.squeeze(out, axis=axis)


@dataclass(frozen=True)
class Spreads:
    """The belief's prior on one kind of system: 1-sigmas of the log factors, and the model's misfit
    (log time) beyond them."""

    pair_latency: float
    pair_bandwidth: float
    common_latency: float
    common_bandwidth: float
    misfit: float

    def as_vector(self) -> np.ndarray:
        return np.log([self.pair_latency, self.pair_bandwidth, self.common_latency,
                       self.common_bandwidth, self.misfit])

    @classmethod
    def from_vector(cls, v: Sequence[float]) -> Spreads:
        return cls(*(float(math.exp(x)) for x in v))


def _grid2(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(latency units, bandwidth units, normalised log prior) over the 2-D grid of ``points``."""
    lat, bw = (g.ravel() for g in np.meshgrid(points, points, indexing="ij"))
    log_prior = -0.5 * (lat * lat + bw * bw)
    return lat, bw, log_prior - logsumexp(log_prior)


_COMMON = _grid2(COMMON_GRID)
_SERIES = _grid2(SERIES_GRID)


@dataclass(frozen=True)
class Prediction:
    """A log time (or log ratio) as a mixture over the belief's grid cells: each cell's value, a
    Gaussian spread around it (0: exact given the cell) and the cell's weight."""

    value: np.ndarray
    weights: np.ndarray
    spread: np.ndarray | float = 0.0

    def mean(self) -> float:
        return float(self.weights @ self.value)

    def chance_above(self, bound: float) -> float:
        """P(value > bound)."""
        spread = np.maximum(self.spread, 1e-12)
        return float(self.weights @ ndtr((self.value - bound) / spread))

    def expected_shortfall(self, below: float) -> float:
        """E[max(below - value, 0)]: how far below ``below`` it is expected to be."""
        spread = np.maximum(self.spread, 1e-12)
        z = (below - self.value) / spread
        return float(self.weights @ ((below - self.value) * ndtr(z) + spread * np.exp(-0.5 * z * z)
                                     / math.sqrt(2 * math.pi)))


class SystemBelief:
    """The posterior over one system's model error, from every measurement :meth:`observe` got."""

    def __init__(self, spreads: Spreads) -> None:
        self.spreads = spreads
        self.misfit = max(spreads.misfit, MIN_MISFIT)
        c_lat, c_bw, self._log_prior_common = _COMMON
        s_lat, s_bw, self._log_prior_series = _SERIES
        # log L and log B over [common cell, series cell]
        self._log_lat = (spreads.common_latency * c_lat)[:, None] + (spreads.pair_latency * s_lat)[None, :]
        self._log_bw = (spreads.common_bandwidth * c_bw)[:, None] + (spreads.pair_bandwidth * s_bw)[None, :]
        self._lat, self._inv_bw = np.exp(self._log_lat), np.exp(-self._log_bw)
        self._terms: dict[Hashable, tuple[Series, np.ndarray]] = {}
        self._series: dict[Series, np.ndarray] = {}
        #: Per series: log p(its measurements | common cell), and its cells' log weights given the
        #: common cell (normalised); dropped when the series learns something.
        self._evidence: dict[Series, np.ndarray] = {}
        self._conditional: dict[Series, np.ndarray] = {}
        self._common: np.ndarray | None = None
        self._log_times: dict[tuple[float, float], np.ndarray] = {}

    def log_time(self, floor_us: float, rest_us: float) -> np.ndarray:
        """The configuration's log time over [common cell, series cell]."""
        key = (floor_us, rest_us)
        if key not in self._log_times:
            self._log_times[key] = np.log(self._lat * floor_us + self._inv_bw * rest_us)
        return self._log_times[key]

    def observe(self, key: Hashable, series: Series, floor_us: float, rest_us: float,
                times_us: Sequence[float], noise: BandNoise, core: float | None = None) -> None:
        """Every measurement of one configuration at one call (``key`` names it: a later call with
        the same key replaces these), with the launch noise of its size band and the core noise
        believed there (the band's own unless repeats measured another)."""
        predicted = self.log_time(floor_us, rest_us)
        logs = np.log(np.asarray(times_us, dtype=np.float64))
        if len(logs) == 1:
            term = noise.log_density(logs[0] - predicted, blur=self.misfit)
        else:
            sd = math.hypot(noise.of_median(noise.core if core is None else core, len(logs)), self.misfit)
            d = (float(np.median(logs)) - predicted) / sd
            term = -0.5 * d * d - math.log(sd * math.sqrt(2 * math.pi))
        old = self._terms.get(key)
        if old is not None:
            self._series[old[0]] = self._series[old[0]] - old[1]
        self._terms[key] = (series, term)
        self._series[series] = self._series.get(series, 0.0) + term
        joint = self._log_prior_series[None, :] + self._series[series]
        self._evidence[series] = logsumexp(joint, axis=1)
        self._conditional[series] = joint - self._evidence[series][:, None]
        self._common = None

    def _log_joint_common(self) -> np.ndarray:
        """log p(common cell, every measurement), [common]."""
        return self._log_prior_common + sum(self._evidence.values(), np.zeros_like(self._log_prior_common))

    def _common_posterior(self) -> np.ndarray:
        if self._common is None:
            joint = self._log_joint_common()
            self._common = joint - logsumexp(joint)
        return self._common

    def log_evidence(self) -> float:
        """log p(every measurement): the marginal likelihood the spreads are fitted by."""
        return float(logsumexp(self._log_joint_common()))

    def _weights(self, series: Series) -> np.ndarray:
        """The cells' posterior weights [common, series cell] for ``series``."""
        conditional = self._conditional.get(series, self._log_prior_series[None, :])
        return np.exp(self._common_posterior()[:, None] + conditional)

    def predict(self, series: Series, floor_us: float, rest_us: float) -> Prediction:
        """The belief about a configuration's log time at a call (its series and model split)."""
        return Prediction(self.log_time(floor_us, rest_us).ravel(), self._weights(series).ravel())

    def relative(self, series: Series, floor_us: float, rest_us: float, reference: Series,
                 reference_floor_us: float, reference_rest_us: float) -> Prediction:
        """The belief about log(t / t_reference) at one call: a configuration against another
        (NCCL's default), both as the belief has them. Given the common factors the two series
        are independent, and the reference is summarised per common cell by its mean and spread.
        A configuration of the reference's own series is believed as a series nothing measured:
        that the model runs NCCL's default as that series says nothing about a real NCCL, which
        may pick another (on the published socket pair NCCL_PROTO=LL, the model's "NCCL pick",
        ran 5-14x slower than NCCL's default at 8-32 KiB)."""
        mine = self.log_time(floor_us, rest_us)
        theirs = self.log_time(reference_floor_us, reference_rest_us)
        if series == reference:
            weights = np.exp(self._common_posterior()[:, None] + self._log_prior_series[None, :])
        else:
            weights = self._weights(series)
        ref = self._weights(reference)
        per_common = ref.sum(axis=1, keepdims=True)
        ref = ref / np.where(per_common > 0, per_common, 1.0)
        mean = (ref * theirs).sum(axis=1, keepdims=True)
        spread = np.sqrt(np.maximum((ref * (theirs - mean) ** 2).sum(axis=1, keepdims=True), 0.0))
        return Prediction((mine - mean).ravel(), weights.ravel(), np.broadcast_to(spread, mine.shape).ravel())
