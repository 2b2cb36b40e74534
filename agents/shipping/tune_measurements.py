"""What ``dynamiccl tune`` knows from measurements: times per call and choice, by launch, and their noise.

A launch (one nccl-tests run, one start-up of the runner's ranks) shares its state across everything
it times: where its ranks landed, clocks, a warm or cold network. So two timings within one launch
(nccl-tests' out-of-place and in-place columns, the runs of a runner measurement) agree far better
than two launches do: on one H100 with four emulated hosts, runs within a launch agreed to 1.5 %
while three launches of the same call differed by x1.12-x1.64. A choice's noise is therefore read
from repeated launches where the measurements have them (:class:`LaunchNoise`), and otherwise taken
as a conservative default of the system (:func:`default_launch_noise`), never below what one
launch's own timings disagree by.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dynamiccl.decisions import KnobConstraints
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.knobs import NCCL_KNOBS, Collective, Knobs
from dynamiccl.system.launch_noise import (
    NOISE_BANDS,
    TAIL_QUANTILE,
    BandNoise,
    default_launch_noise,
    noise_band,
    updated_core,
)
from dynamiccl.system.topology import Topology

#: Median of |log(a / b)| for two timings with independent Gaussian noise of sigma 1:
#: 0.674 (the half-normal median) x sqrt(2).
PAIR_SPREAD_PER_SIGMA = 0.954
#: The sigma of a Gaussian per median absolute deviation (1 / 0.6745).
SIGMA_PER_MAD = 1.4826
#: Deviations a size band needs before its measured tail replaces the default's (fewer say little
#: about one launch in ten).
MIN_TAIL_DEVIATIONS = 20
#: Below this no noise is believed, however well launches agree (timer resolution, clock drift).
MIN_NOISE = 0.001
#: The launch id of records whose launch is unknown: all of them count as one launch per call.
UNKNOWN_LAUNCH = ""
#: A matched pair of launches (:func:`_matched_spreads`) further apart than this many core sigmas
#: ran two configurations, not one (NCCL's default ran a pair nobody forced): left out of the tail.
MATCH_OUTLIER = 5.0


@dataclass(frozen=True)
class Choice(Knobs):
    """What NCCL is told for a call: each knob of :class:`~dynamiccl.system.knobs.Knobs` pinned
    or left to NCCL (all None = NCCL's default).

    Tune's own candidates pin algorithm and protocol (what a policy rule must name); measurements
    may pin fewer knobs (``NCCL_ALGO`` alone) or the channel count as well, and are kept as such.
    """

    @property
    def constraints(self) -> KnobConstraints:
        return KnobConstraints(**self.given())

    @property
    def exportable(self) -> bool:
        """A policy rule can pin it: algorithm and protocol both named."""
        return self.algorithm is not None and self.protocol is not None

    @property
    def pair(self) -> Choice:
        """Its algorithm and protocol alone, every other knob left to NCCL."""
        return Choice(self.algorithm, self.protocol)

    def label(self) -> str:
        if self.is_default:
            return "NCCL default"
        parts = (k.label(getattr(self, k.name), "auto" if k.is_enum else None) for k in NCCL_KNOBS)
        return "/".join(p for p in parts if p is not None)


DEFAULT = Choice()


def record_choice(rec: MeasurementRecord) -> Choice | None:
    """What a record measured; None for records tune cannot use (another backend, a straggler)."""
    if rec.backend != "nccl" or rec.straggler_delay_us > 0:
        return None
    return Choice.of(rec)


def logged_pick(rec: MeasurementRecord, choice: Choice) -> Choice | None:
    """The pair NCCL's ``TUNING`` log says this record's run ran (its other pinned knobs kept);
    None where nothing was logged."""
    if not rec.nccl_pick:
        return None
    algo, _, proto = rec.nccl_pick.partition("/")
    return replace(choice, algorithm=algo, protocol=proto)


#: A measured call: collective, ranks, the choice as forced, and its size.
CallKey = tuple[Collective, int, Choice, int]


@dataclass(frozen=True)
class Sample:
    """A choice's measured time at one call: the median over launches of each launch's median."""

    time_us: float
    #: Distinct launches that timed it (all records of unknown launch count as one).
    launches: int
    #: What NCCL's TUNING log says the runs ran, where one said it.
    logged: Choice | None = None
    #: Each launch's time.
    launch_times: tuple[float, ...] = ()
    #: The choices as forced whose runs it holds.
    forced: tuple[Choice, ...] = ()


class Measurements:
    """Measured times per (collective, ranks, choice as forced, size), by launch.

    Only out-of-place timings make a sample (nccl-tests' size table and the runner time those);
    in-place timings and the runs inside one measurement tell only how far one launch's own timings
    disagree (:attr:`within_launch`), the floor of any launch noise.
    """

    def __init__(self, records: Iterable[MeasurementRecord]) -> None:
        per_launch: dict[CallKey, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        in_place: dict[tuple[CallKey, str], list[float]] = defaultdict(list)
        logged: dict[CallKey, Choice] = {}
        run_spreads: dict[tuple[int, int], list[float]] = defaultdict(list)
        self.shapes: set[tuple[int, int]] = set()
        self.collectives: set[tuple[Collective, int]] = set()
        for rec in records:
            choice = record_choice(rec)
            if choice is None:
                continue
            key = (rec.coll, rec.nranks, choice, rec.nbytes)
            if rec.in_place:
                in_place[(key, rec.launch)].append(rec.time_us)
                continue
            per_launch[key][rec.launch].append(rec.time_us)
            self.collectives.add((rec.coll, rec.nranks))
            if rec.nnodes:
                self.shapes.add((rec.nnodes, rec.nranks))
            pick = logged_pick(rec, choice)
            if pick is not None:
                logged.setdefault(key, pick)
            if len(rec.time_us_runs) > 1:
                run_spreads[(rec.nranks, noise_band(rec.nbytes))].append(
                    float(np.std(np.log(rec.time_us_runs))))
        self.launch_times: dict[CallKey, dict[str, float]] = {
            key: {launch: float(np.median(times)) for launch, times in launches.items()}
            for key, launches in per_launch.items()}
        self.samples: dict[CallKey, Sample] = {
            key: Sample(float(np.median(list(times.values()))), len(times), logged.get(key),
                        tuple(times.values()), (key[2],))
            for key, times in self.launch_times.items()}
        self.by_call: dict[tuple[Collective, int, int], dict[Choice, Sample]] = defaultdict(dict)
        for (coll, nranks, choice, nbytes), sample in self.samples.items():
            self.by_call[(coll, nranks, nbytes)][choice] = sample
        #: Per (ranks, size band): the relative sigma one launch's own repeated timings show.
        self.within_launch: dict[tuple[int, int], float] = {}
        pairs: dict[tuple[int, int], list[float]] = defaultdict(list)
        for (key, launch), times in in_place.items():
            out = self.launch_times.get(key, {}).get(launch)
            if out is not None:
                pairs[(key[1], noise_band(key[3]))].append(
                    abs(math.log(out / float(np.median(times)))) / PAIR_SPREAD_PER_SIGMA)
        for where in set(pairs) | set(run_spreads):
            spreads = pairs.get(where) or run_spreads[where]
            self.within_launch[where] = float(np.median(spreads))
        #: Per (ranks, choice as forced, size band): what its repeated launches say.
        self.spreads = _launch_spreads(self.launch_times)
        #: Per (ranks, size band): NCCL's default against the forced run closest to it, launched
        #: apart (:func:`_matched_spreads`).
        self.matched = _matched_spreads(self.launch_times)

    def __len__(self) -> int:
        return len(self.samples)

    def at(self, collective: Collective, nranks: int, nbytes: int) -> dict[Choice, Sample]:
        """Every choice measured at this call, as forced."""
        return self.by_call.get((collective, nranks, nbytes), {})

    def sizes(self, collective: Collective, nranks: int) -> list[int]:
        """The sizes at which anything was measured for this collective on this many ranks."""
        return sorted({n for (c, r, n) in self.by_call if (c, r) == (collective, nranks)})

    def covers(self, collective: Collective, nranks: int) -> bool:
        return (collective, nranks) in self.collectives

    def launch_spread(self, nranks: int | None = None) -> tuple[LaunchSpread, ...]:
        """Per size band (:data:`NOISE_BANDS`), what every call timed in repeated launches says
        about the launch noise (of one shape where ``nranks`` is given), every choice together."""
        return tuple(sum((r for (n, _, b), r in self.spreads.items()
                          if b == band and nranks in (None, n)), LaunchSpread())
                     for band in range(len(NOISE_BANDS)))

    def forced_choices(self, collective: Collective, nranks: int) -> set[Choice]:
        """Every choice measured for this collective on this many ranks (at any size), as forced."""
        return {choice for (c, r, choice, _) in self.samples if (c, r) == (collective, nranks)}


@dataclass(frozen=True)
class LaunchSpread:
    """What repeated launches of the same calls say about one size band's launch noise: every
    launch's |log(t / median of its call's launches)|, scaled by sqrt(n / (n - 1)) for the median
    fitted to those n launches, and the degrees of freedom (launches - 1 per call)."""

    deviations: tuple[float, ...] = ()
    dof: float = 0.0

    def __add__(self, other: LaunchSpread) -> LaunchSpread:
        return LaunchSpread(self.deviations + other.deviations, self.dof + other.dof)

    @property
    def core(self) -> float:
        return SIGMA_PER_MAD * float(np.median(self.deviations)) if self.deviations else 0.0

    @property
    def tail(self) -> float:
        return float(np.quantile(self.deviations, TAIL_QUANTILE)) if self.deviations else 0.0


def _spread_of(times: Sequence[float]) -> LaunchSpread:
    """One call's launches (two or more) as a :class:`LaunchSpread`."""
    logs = np.log(times)
    n = len(logs)
    scale = math.sqrt(n / (n - 1))
    return LaunchSpread(tuple(float(d) for d in np.abs(logs - np.median(logs)) * scale), n - 1)


def _launch_spreads(launch_times: Mapping[CallKey, Mapping[str, float]]
                    ) -> dict[tuple[int, Choice, int], LaunchSpread]:
    """Per (ranks, choice as forced, size band): what calls timed in several known launches say."""
    out: dict[tuple[int, Choice, int], LaunchSpread] = defaultdict(LaunchSpread)
    for (_, nranks, choice, nbytes), launches in launch_times.items():
        known = [t for launch, t in launches.items() if launch != UNKNOWN_LAUNCH]
        if len(known) > 1:
            out[(nranks, choice, noise_band(nbytes))] += _spread_of(known)
    return dict(out)


def _matched_spreads(launch_times: Mapping[CallKey, Mapping[str, float]]
                     ) -> dict[tuple[int, int], LaunchSpread]:
    """Per (ranks, size band): two launches of what is most likely one configuration, where NCCL's
    default and forced choices were each launched once (a sweep of one launch per choice, as
    NVIDIA's forced-choice data and most published sweeps are): at every such call, NCCL's default
    against the forced choice measured closest to it, timed in another launch. NCCL's default ran
    one of the pairs, so the closest forced run is that pair in another launch, or (where NCCL ran
    a pair nobody forced) a larger distance: an estimate of launch noise that errs high, except that
    the closest of several choices that run alike is the luckier one."""
    calls: dict[tuple[Collective, int, int], dict[Choice, tuple[str, float]]] = defaultdict(dict)
    for (coll, nranks, choice, nbytes), launches in launch_times.items():
        if len(launches) == 1 and UNKNOWN_LAUNCH not in launches:
            calls[(coll, nranks, nbytes)][choice] = next(iter(launches.items()))
    out: dict[tuple[int, int], LaunchSpread] = defaultdict(LaunchSpread)
    for (_, nranks, nbytes), timed in calls.items():
        default = timed.pop(DEFAULT, None)
        others = [t for launch, t in timed.values() if default is not None and launch != default[0]]
        if others:
            closest = min(others, key=lambda t: abs(math.log(t / default[1])))
            out[(nranks, noise_band(nbytes))] += _spread_of([default[1], closest])
    return dict(out)


class LaunchNoise:
    """The relative 1-sigma of one launch's time of a choice on one system shape, per size band.

    The system's default (:func:`default_launch_noise`, or ``defaults`` where given; its core
    floored by what one launch's own timings disagree by) is a prior worth
    :data:`~dynamiccl.system.launch_noise.PRIOR_DOF` launches; a choice timed in repeated launches updates
    it by their robust spread, and a choice never repeated takes the larger of the prior and what
    every repeated choice of the shape says together. One launch alone is believed only to the
    band's tail (the measured one where the shape's launches give :data:`MIN_TAIL_DEVIATIONS`, else
    the default's).
    """

    def __init__(self, measurements: Measurements,
                 defaults: Sequence[BandNoise] | None = None) -> None:
        self.measurements = measurements
        self.defaults = tuple(defaults) if defaults is not None else None
        self._cache: dict[tuple[Topology, Choice, int], float] = {}
        self._shape_spreads: dict[int, tuple[LaunchSpread, ...]] = {}

    def default(self, topology: Topology, nbytes: int) -> BandNoise:
        """The system's launch noise in ``nbytes``' band before any repeated launch: ``defaults``
        where given; else, where the shape's sweep launched each choice once, what NCCL's default
        against the forced run closest to it says (:func:`_matched_spreads`, once it holds
        :data:`MIN_TAIL_DEVIATIONS` deviations in the band: on NVIDIA's Viking data under 4 % where the
        assumed one is 5 % across InfiniBand); else the system kind's assumption
        (:func:`default_launch_noise`)."""
        band = noise_band(nbytes)
        if self.defaults is not None:
            return self.defaults[band]
        matched = self.matched(topology, band)
        if len(matched.deviations) >= MIN_TAIL_DEVIATIONS:
            kept = [d for d in matched.deviations if d <= MATCH_OUTLIER * matched.core]
            return BandNoise(matched.core, float(np.quantile(kept, TAIL_QUANTILE)))
        return default_launch_noise(topology)[band]

    def matched(self, topology: Topology, band: int) -> LaunchSpread:
        """The matched launches (:func:`_matched_spreads`) in ``band`` of every measured shape of the
        system that crosses the network as ``topology`` does (one node, or several): the launch
        noise of one machine and network, whatever the rank count."""
        alike = {n for nodes, n in self.measurements.shapes if (nodes > 1) == (topology.nodes > 1)}
        return sum((r for (n, b), r in self.measurements.matched.items() if b == band and n in alike),
                   LaunchSpread())

    def prior(self, topology: Topology, nbytes: int) -> float:
        """The core noise believed before any repeated launch of this shape."""
        within = self.measurements.within_launch.get((topology.nranks, noise_band(nbytes)), 0.0)
        return max(self.default(topology, nbytes).core, within, MIN_NOISE)

    def sigma(self, topology: Topology, choice: Choice, nbytes: int) -> float:
        """The core 1-sigma of one launch of ``choice`` at a size of ``nbytes``'s band."""
        key = (topology, choice, noise_band(nbytes))
        if key not in self._cache:
            self._cache[key] = self._sigma(topology, choice, nbytes)
        return self._cache[key]

    def tail(self, topology: Topology, nbytes: int) -> float:
        """What one launch alone may be off by at this size (:class:`BandNoise`)."""
        if topology.nranks not in self._shape_spreads:
            self._shape_spreads[topology.nranks] = self.measurements.launch_spread(topology.nranks)
        shape = self._shape_spreads[topology.nranks][noise_band(nbytes)]
        if len(shape.deviations) >= MIN_TAIL_DEVIATIONS:
            return shape.tail
        return self.default(topology, nbytes).tail

    def of_mean(self, topology: Topology, choice: Choice, launches: int, nbytes: int) -> float:
        """The 1-sigma of the median of ``launches`` launches' times of ``choice`` (log time):
        :meth:`BandNoise.of_median` with this shape's core noise and tail."""
        tail = BandNoise(0.0, self.tail(topology, nbytes))
        return tail.of_median(self.sigma(topology, choice, nbytes), launches)

    def _sigma(self, topology: Topology, choice: Choice, nbytes: int) -> float:
        prior = self.prior(topology, nbytes)
        band = noise_band(nbytes)
        shape = {c: r for (n, c, b), r in self.measurements.spreads.items()
                 if n == topology.nranks and b == band}
        others = sum((r for c, r in shape.items() if c != choice), LaunchSpread())
        if choice not in shape:
            return max(prior, _posterior(prior, others))
        return max(_posterior(_posterior(prior, others), shape[choice]), MIN_NOISE)


def _posterior(prior: float, spread: LaunchSpread) -> float:
    """The scaled inverse-chi-square update of a noise prior by repeated launches (their robust
    spread standing for the sample's)."""
    return updated_core(prior, spread.core, spread.dof)
