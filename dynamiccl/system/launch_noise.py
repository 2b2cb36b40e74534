"""How far one launch's time of a call lands from another's, per size band: written once for
``dynamiccl tune`` (which assumes it where no repeated launches were measured), the perturbed
realities (which draw it) and the online tuners (which weigh their trials by it).

A launch (one nccl-tests run, one start-up of a job's ranks) shares its state across everything
it times, so launches disagree far more than the timings inside one do. The figures are measured
where the fixtures have repeated launches (an 8 x H100 NVSwitch node) and assumed elsewhere from
the network transport (:data:`dynamiccl.system.transports.TRANSPORTS`' ``launch_noise``: 5 % for RDMA,
25 % for kernel sockets).

A band's noise has a *core* (the robust 1-sigma of log time: what the median of several launches
is uncertain by) and a *tail*: one launch in ten (:data:`STRAY_SHARE`) strays further than the
tail. :meth:`BandNoise.sample` draws that shape and :meth:`BandNoise.log_density` is its density:
a Gaussian core, and strays past the tail by an exponential distance (scale :data:`STRAY_SPREAD` x
the tail), either way.

Whether a choice measured faster than NCCL's default may be held is judged here too, once, for every
online path (:func:`held_verdict`: the evidence tuner in a job, the runtime's trials): it must beat
NCCL's default by :data:`HOLD_MARGIN` beyond :data:`HOLD_Z` standard errors of the two medians, from
:data:`MIN_TRIALS` trials each at least, the noise being the larger of what the trials measured
(:func:`trial_spread`) and what the caller knows launches disagree by.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dynamiccl.system.topology import Topology
from dynamiccl.system.transports import TRANSPORTS

#: Launch-to-launch noise (relative 1-sigma) of a call that crosses no network tier and runs on
#: anything but an NVSwitch node, where the measurements have no repeated launch: the top of the
#: 1-5 % run-to-run spread nccl-tests runs show within a node, so a single launch never looks more
#: certain than it is.
INTRA_NODE_LAUNCH_NOISE = 0.05
#: The share of launches ``BandNoise.tail`` covers: one launch in ten strays further.
TAIL_QUANTILE = 0.9
#: The share of launches that stray beyond the tail.
STRAY_SHARE = 1.0 - TAIL_QUANTILE
#: How far beyond the tail a stray lands: tail x (1 + Exponential(STRAY_SPREAD)) (median 1.35 x the
#: tail, one stray in twenty past 2.5 x).
STRAY_SPREAD = 0.5
#: How many launches' worth of belief a system's default noise carries against measured launches
#: (pseudo degrees of freedom of the scaled inverse-chi-square prior): two launches at one size
#: (one degree of freedom) move it a third of the way, launches at many sizes settle it.
PRIOR_DOF = 2.0
#: The sigma of the median of n Gaussian draws is this times sigma / sqrt(n) (sqrt(pi / 2)).
MEDIAN_EFFICIENCY = 1.2533
#: Upper edges (bytes) of the size bands launch noise is told apart in, and their names. Below
#: 1 MiB a call's time is mostly its launch latency; from 16 MiB it is bandwidth; between, NCCL's
#: protocol and channel changes make it the most erratic (measured: :data:`NVSWITCH_NODE_LAUNCH_NOISE`).
NOISE_BAND_EDGES: tuple[int, ...] = (1 << 20, 1 << 24)
NOISE_BANDS: tuple[str, ...] = ("< 1 MiB", "1-16 MiB", ">= 16 MiB")


def noise_band(nbytes: int) -> int:
    """The index of the size band ``nbytes`` falls in (:data:`NOISE_BANDS`)."""
    return bisect.bisect_right(NOISE_BAND_EDGES, nbytes)


@dataclass(frozen=True)
class BandNoise:
    """One launch's noise in one size band, relative (log time).

    ``core`` is the robust 1-sigma of a launch around its call's median over launches (1.4826 x the
    median absolute deviation): blind to the rare stalled launch, it is what the median of several
    launches is uncertain by. ``tail`` is what one launch alone may be off by (the
    :data:`TAIL_QUANTILE` quantile of the deviations, stalled launches included): on real machines a
    launch now and then takes x1.1-x1.8 of its call's usual time.
    """

    core: float
    tail: float

    @classmethod
    def flat(cls, sigma: float) -> BandNoise:
        return cls(sigma, sigma)

    def of_median(self, core: float, launches: int) -> float:
        """The 1-sigma of the median of ``launches`` launches (log time), ``core`` being the core
        noise believed (measured or this band's). One launch is off by up to the tail; the mean of
        two by half a stray launch (the tail over sqrt 2); from three the median is blind to one
        stray launch and only the core noise remains (:data:`MEDIAN_EFFICIENCY` x core / sqrt n)."""
        if launches < 3:
            return max(core, self.tail) / math.sqrt(max(launches, 1))
        return MEDIAN_EFFICIENCY * core / math.sqrt(launches)

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...] | None = None) -> np.ndarray:
        """Launch deviations (log time): the Gaussian core, or with :data:`STRAY_SHARE` a stray
        past the tail, either way."""
        core = rng.normal(0.0, self.core, size)
        stray = self.tail * (1.0 + rng.exponential(STRAY_SPREAD, size))
        sign = np.where(rng.random(size) < 0.5, -1.0, 1.0)
        return np.where(rng.random(size) < STRAY_SHARE, sign * stray, core)

    def log_density(self, deviation: np.ndarray | float, blur: float = 0.0) -> np.ndarray:
        """log of the density :meth:`sample` draws from at ``deviation`` (log time), its core
        widened by a Gaussian ``blur`` (a model's own misfit)."""
        d = np.abs(np.asarray(deviation, dtype=np.float64))
        var = self.core ** 2 + blur ** 2
        core = math.log(1.0 - STRAY_SHARE) - 0.5 * d * d / var - 0.5 * math.log(2 * math.pi * var)
        scale = STRAY_SPREAD * self.tail
        with np.errstate(divide="ignore"):
            stray = np.where(d >= self.tail, math.log(0.5 * STRAY_SHARE / scale) - (d - self.tail) / scale,
                             -np.inf)
        return np.logaddexp(core, stray)


def updated_core(prior: float, observed: float, dof: float) -> float:
    """The scaled inverse-chi-square update of a core noise ``prior`` by repeated launches whose
    spread is ``observed`` with ``dof`` degrees of freedom."""
    if not dof:
        return prior
    return math.sqrt((PRIOR_DOF * prior * prior + dof * observed * observed) / (PRIOR_DOF + dof))


#: Launch-to-launch noise of one 8 x H100 NVSwitch node (NCCL 2.26.2, nccl-tests -g 8), per size
#: band (:data:`NOISE_BANDS`), from the repeated launches of togethercomputer/together-nccl-tests
#: ``benchmarks/H100/results/20260305_*`` kept in ``tests/fixtures/real/h100_nvswitch_node``
#: (allreduce NCCL default x 10 and NCCL_ALGO=RING x 11 launches from 1 MiB, ring x 2 below;
#: allgather and reducescatter ring x 2): ``Measurements.launch_spread`` of those fixtures
#: (``tests/test_tune.py`` recomputes it).
NVSWITCH_NODE_LAUNCH_NOISE: tuple[BandNoise, ...] = (
    BandNoise(core=0.0183, tail=0.0944),  # < 1 MiB: 86 launch deviations
    BandNoise(core=0.0065, tail=0.0412),  # 1-16 MiB: 100
    BandNoise(core=0.0014, tail=0.0039),  # >= 16 MiB: 250
)


def default_launch_noise(topology: Topology) -> tuple[BandNoise, ...]:
    """The system's conservative launch-to-launch noise per size band where nothing measured it:
    the largest of the network transports its calls cross, else the measured NVSwitch node's
    (:data:`NVSWITCH_NODE_LAUNCH_NOISE`) on a node whose GPUs meet at an NVLink switch, else
    :data:`INTRA_NODE_LAUNCH_NOISE`."""
    crossed = [TRANSPORTS[t.transport].launch_noise for t in topology.tiers[1:]
               if t.link == "net" and t.transport and t.size > 1]
    if crossed:
        return (BandNoise.flat(max(INTRA_NODE_LAUNCH_NOISE, *crossed)),) * len(NOISE_BANDS)
    inner = topology.tiers[0]
    if inner.link == "nvlink" and inner.fabric == "switch":
        return NVSWITCH_NODE_LAUNCH_NOISE
    return (BandNoise.flat(INTRA_NODE_LAUNCH_NOISE),) * len(NOISE_BANDS)


#: What :func:`held_verdict` answers: hold the choice, or drop it for NCCL's default (None: open).
HOLD, DROP = "hold", "drop"
#: The gain over NCCL's default a held choice must show beyond the noise (nccl-tests' run-to-run
#: spread is 1-5 %), the standard errors of the difference of the two medians it must clear, and
#: the trials of each before either decision: one trial measures no spread.
HOLD_MARGIN = 0.02
HOLD_Z = 2.0
MIN_TRIALS = 2


def trial_spread(*trials: Sequence[float]) -> tuple[float, int]:
    """The spread repeated trials show (1-sigma of log time about each choice's own mean, pooled
    over the choices given) and its degrees of freedom (0: no choice was tried twice)."""
    ss, dof = 0.0, 0
    for times in trials:
        if len(times) > 1:
            logs = np.log(np.asarray(times, dtype=np.float64))
            ss += float(((logs - logs.mean()) ** 2).sum())
            dof += len(times) - 1
    return (math.sqrt(ss / dof) if dof else 0.0), dof


def held_verdict(advantage: float, tries: int, reference_tries: int, noise: BandNoise, core: float, *,
                 max_tries: int, margin: float = HOLD_MARGIN, z: float = HOLD_Z,
                 min_tries: int = MIN_TRIALS) -> str | None:
    """Whether a choice whose median over ``tries`` trials beats NCCL's default's (over
    ``reference_tries``) by ``advantage`` (log time) is held: :data:`HOLD` once the advantage
    clears ``margin`` by ``z`` standard errors of the two medians (:meth:`BandNoise.of_median` of
    ``core``, the noise believed: never less than what the trials measured), from ``min_tries``
    trials each; :data:`DROP` once it falls short of the margin by as much, once ``min_tries``
    trials each show that even ``max_tries`` each could not clear the noise at the advantage
    measured (more trials would only cost), or once both had ``max_tries``; None while the noise
    leaves it open (measure again), and while it is unknown (``core`` infinite: nothing measured
    it, nothing assumed)."""
    bar = math.log1p(margin)
    se = math.hypot(noise.of_median(core, tries), noise.of_median(core, reference_tries))
    if not math.isfinite(se):
        return None
    fewest = min(tries, reference_tries)
    if fewest >= min_tries and advantage - z * se > bar:
        return HOLD
    at_most = math.hypot(noise.of_median(core, max(tries, max_tries)),
                         noise.of_median(core, max(reference_tries, max_tries)))
    futile = fewest >= min_tries and advantage - z * at_most <= bar
    if advantage + z * se < bar or futile or fewest >= max_tries:
        return DROP
    return None
