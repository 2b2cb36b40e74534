"""``dynamiccl tune``: from a system's measurements to a gated policy.

The decisions are the ones a user can verify with nccl-tests: per collective, system shape and
message size, pin ``NCCL_ALGO``/``NCCL_PROTO`` to one pair (NCCL keeps choosing channels) or leave
NCCL alone. A channel count pinned with the pair (``NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS``) is a
candidate only where it was measured on the system: the model alone never proposes one (seven
channel levels per pair would dilute the plan's budget for the few percent of headroom they hold,
and on NCCL 2.31+ the plugin can only lower NCCL's channel count).

Each candidate is judged by its time relative to NCCL's default at the call, ``log(t_choice /
t_default)``, from one of these sources, kept apart (:meth:`Tuner.ratio`):

1. **measured** — both were measured at this size on this shape: the measurement decides (the
   median over launches). Its uncertainty is the launch noise of the size's band
   (:mod:`dynamiccl.agents.shipping.tune_measurements`) for the launches each side had: one launch is off by
   up to the band's tail, the median of three or more only by its core spread; it is labelled
   *measured* only where each side had two launches or more, else *measured once*. Where the
   measured sizes on both sides (source 2 between them) turn its verdict, the two decide together,
   precision-weighted (*measured once + neighbours*, :meth:`Tuner.pooled_ratio`): on a noisy
   system one stray launch does not flip one size between two that agree.
2. **interpolated** — the ratio was measured at the nearest sizes below and above, and points the
   same way at both (the choice faster at both, or slower at both): the sizes between are decided
   from those measurements (each pooled with its own neighbours), linearly in log size, with the
   model adding only its shape between them (never leaving the neighbours' range). The uncertainty
   is the neighbours' own, not averaged down (both ratios come from the same two launches, whose
   offset they share), plus a growth with the distance in octaves to the nearer one, what the
   series' ratio does from one measured size to the next over that distance
   (:meth:`Tuner.span_spread`), and a share of their disagreement: averaged as independent, the
   neighbours pinned ring/LL reduce-scatter at 512 KiB on NVIDIA's Luna data between +3.7 % at
   256 KiB and +19.7 % at 1 MiB, where it was 12 % slower. One octave past the measured sizes
   (nccl-tests' next size) the nearer of the nearest two speaks where both agree and NCCL's
   modelled pick stays the same from the farther one on (*extrapolated*,
   :meth:`Tuner._extrapolate`); where that pick changes, nothing measured says what NCCL runs
   past it (x0.76 at 4 and 8 MiB of all-gather on a perturbed DGX A100 pair, x1.05 at 16 MiB).
   Where NCCL's modelled pick changes between neighbours more than an nccl-tests step apart, they
   speak only where the choice was measured the fastest of every pair at both
   (:meth:`Tuner._same_runs`): whatever NCCL runs between was slower than it on both sides.
3. **learned prior** — where one is given (``Tuner(prior=...)``, :class:`Prior`; ``dynamiccl tune
   --prior`` gives the shipped one, :mod:`dynamiccl.agents.shipping.tune_prior`): what it
   predicts from the system's measured ratios of the collective and the model's times, asked once
   per collective and shape. The gate asks it for :data:`PRIOR_SIGMAS` of its own (calibrated)
   sigmas; it counts as anchored where the system has measured ratios of that collective and the
   model was calibrated to the measurements (a failed or skipped calibration: it pins nothing).
4. **calibrated model** — the simulator, fitted to the measurements (``profiler.calibrate``, kept
   behind :func:`calibrated_topology`; *corrected model* where no fit was made or it failed), then
   corrected per choice with a latency factor and a
   bandwidth factor fitted to that choice's measured sizes (the Hockney alpha/beta split NCCL's own
   tuning tables use). The uncertainty is the launch noise plus the fit's residual plus a growth with
   the distance to the nearest measurement of that choice; where that reaches the band default the
   correction is dropped. Its ratio to NCCL's default is judged by its error on the sizes it did
   not see (:meth:`Tuner.held_out_error`) and kept within the ratios measured on both sides. It
   anchors a decision only where the model splits the time into latency
   floor and the rest much as at the choice's measured sizes (within :data:`MIX_TOLERANCE`): a
   correction fitted where calls are latency-bound does not speak for bandwidth-bound ones (on an
   8xH100 node, NVLS corrected at 1-8 MiB and carried to 32 MiB came out 85 % slower than ring
   where it is 7 % faster); where it does not, the evidence is the model's.
5. **model** — nothing measured for that choice: the simulator and the band defaults of
   :func:`dynamiccl.system.calibration.uncertainty`.

NCCL's default is what NCCL's own cost model picks on the given topology (the pick the report
names), timed on the model as fitted: a fit moves the times, not NCCL's pick. A candidate that makes
NCCL run that very configuration is no alternative to it, unless measurements of both beat the
default through the gate (then NCCL did not run its modelled pick: :func:`not_its_pick`); no row
proposes NCCL's own otherwise. Among the overrides the largest gain wins.

Sources 2, 4 and 5 compete by their uncertainty: the most certain one speaks. The learned prior
only adds: where tune's own source makes an override, it stands; where it does not, the prior's
override does if the prior makes one; elsewhere the more certain of the two is what the plan values
launches by (where only the model speaks, its ±100 %-and-more uncertainty ties every candidate, and
the prior's prediction tells them apart). Letting the prior compete by its sigma instead, or
weighting both by their precision, took less on validation realities (``experiments/bench_tuning.py
--validation --seeds 3``: 9 realities, half / same budget: 0.917 / 0.968 and 0.927 / 0.970 of the
headroom against 0.935 / 0.969; without the prior 0.914 / 0.964; 0 decisions slower in all): the
prior vetoed overrides that tune's per-choice correction got right.

A run forced with only ``NCCL_ALGO`` or only ``NCCL_PROTO`` measured the pair NCCL picked under that
constraint: its ``TUNING`` log says which where one was kept (``MeasurementRecord.nccl_pick``),
NCCL's model on the given topology otherwise (:func:`resolved`); so it is evidence for that pair.

Every decision goes through the same gate as export (:func:`dynamiccl.agents.shipping.gate.passes`): an
override only where the gain clears the margin and its uncertainty, and, unlike export, only where
measurements anchor both NCCL's default and the choice (sources 1, 2, a prior that saw
measurements of the collective, or 4): what the model alone says ranks the next measurements
(:mod:`dynamiccl.agents.shipping.tune_plan`) but pins nothing. A collective measured nowhere on a shape is
left to NCCL there (evidence *not measured*). A decision does not flip between neighbouring sizes
unless the evidence changes there (:meth:`Tuner.decide`): a size whose estimate points the way of
overrides of one pair an octave below and above joins them (*between overrides*), and a size
between two of nccl-tests' holds the nearer one's decision where NCCL picks the same pair. On the
first real sweep (``tests/fixtures/real/runner/h200_emulated4``) decisions alternated between
override and defer five times from 4 to 512 KiB; now twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Protocol

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policies.baselines import NCCL_PAIRS, pair_constraints
from dynamiccl.agents.shipping.gate import (
    BRIDGED,
    CALIBRATED,
    CORRECTED,
    DEFAULT_MARGIN,
    EXTRAPOLATED,
    INTERPOLATED,
    LEARNED_PRIOR,
    LEARNED_PRIOR_UNCALIBRATED,
    MEASURED,
    MEASURED_ONCE,
    MODEL,
    NEIGHBOURS,
    NOT_ITS_PICK,
    NOT_MEASURED,
    Verdict,
    check_margin,
    passes,
    uncertainty,
)
from dynamiccl.agents.shipping.tune_measurements import (
    DEFAULT,
    SIGMA_PER_MAD,
    Choice,
    LaunchNoise,
    Measurements,
    Sample,
)
from dynamiccl.decisions import FLOOR_BYTES, KnobConstraints, TimedConfig
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.simulator import evaluate
from dynamiccl.system.knobs import Collective
from dynamiccl.system.launch_noise import BandNoise
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

#: How fast a measurement loses credibility with distance (relative sigma per octave): for a
#: choice's measured correction of the model, and for a ratio interpolated between measured sizes.
SIGMA_PER_OCTAVE = 0.04
#: Measured sizes at most this many octaves apart (one nccl-tests size between them) may straddle a
#: change of NCCL's modelled pick and still speak for the sizes between (:meth:`Tuner._same_runs`).
NEAR_OCTAVES = 2
#: The share of the neighbours' disagreement (|ratio below - ratio above|, in log) an interpolated
#: ratio is uncertain by: half of it is how far a monotone curve between them can be from the line
#: at the midpoint.
DISAGREEMENT_SHARE = 0.5
#: How far (absolute share of the predicted time) the latency floor's share at a size may lie outside
#: the shares at the choice's measured sizes for its correction to still count as measured there: a
#: factor no measurement saw may carry that much of the call's time, of the order of the gate's own
#: margin (a judgement, not a fit).
MIX_TOLERANCE = 0.05
#: The sizes decisions are made and measured at: nccl-tests' -b 8 -e 16G -f 2.
DECISION_SIZES: tuple[int, ...] = tuple(1 << k for k in range(3, 35))
_DECISION_SET = frozenset(DECISION_SIZES)
#: How many of a learned prior's own sigmas its predicted gain must clear (the gate asks every
#: source for a gain beyond its sigma): the shipped prior's one-sided 99.5 % quantile of (truth -
#: prediction) / sigma on its validation realities (seeds 900-999; ``prior_learner.gate_sigmas`` of
#: ``validation_cases(48, budgets=4)``, the 3355 points where it predicts a gain above the 3 %
#: margin: 2.72). Overriding where the gain clears the margin plus that many sigmas, none of its
#: 1094 overrides there is more than 2 % slower than NCCL (at 1 sigma: 19 of 1779). On real
#: measurements no gate makes its answers pay (``experiments/bench_prior_real.py``: at 1 sigma or
#: none they pin calls slower than NCCL on the H100 node and the RTX 5090 pair).
PRIOR_SIGMAS = 2.72


def calibrated_topology(records: Sequence[MeasurementRecord], topology: Topology
                        ) -> tuple[Topology, str]:
    """The model's system fitted to the measurements, and a note of what happened.

    The one call into calibration (``profiler.fit.calibrate``); parameters the data cannot determine
    keep their base values, a record NCCL could not have run on the system is left out (the note
    names it), and a fit that fails leaves the base system. Without the measured
    corrections: tune corrects each choice itself (:meth:`Tuner._factors`) and judges that
    correction by its residual on the measured sizes, which corrections fitted to the very same
    sizes would make zero, and the uncertainty with it.
    """
    from dynamiccl.profiler.fit.calibrate import CalibrationError, calibrate

    usable = [r for r in records if r.backend == "nccl" and r.straggler_delay_us == 0]
    if not usable:
        return topology, "no measurements: the uncalibrated model"
    try:
        fit = calibrate(usable, topology, keep_undetermined=True, corrections=False)
    except (CalibrationError, ValueError) as exc:
        return topology, f"calibration failed ({exc}); the uncalibrated model"
    refined = sum(f.determined for f in fit.refinements)
    fitted = [f.label for f in fit.params if f.determined] + (
        [f"{refined} refinement(s)"] if refined else [])
    skipped = "" if not fit.skipped else (
        f"; {len(fit.skipped)} record(s) not fitted: {fit.skipped[0]}"
        + ("; ..." if len(fit.skipped) > 1 else ""))
    if not fitted:
        return topology, f"calibration determined nothing; the uncalibrated model{skipped}"
    return fit.topology, (f"calibrated {', '.join(fitted)} (RMS log error {fit.rms_log(False):.3f}"
                          f" -> {fit.rms_log(True):.3f}){skipped}")


@lru_cache(maxsize=131072)
def _model_run(scenario: Scenario, choice: Choice, model: Topology | None = None) -> TimedConfig:
    """What NCCL runs when told ``choice`` (its own pick for the knobs left free), as NCCL's cost
    model picks it on the scenario's system, timed there or on ``model`` (the system as fitted,
    resized alike) where given: a fit moves the times, not NCCL's pick, which NCCL makes from its own
    tables of the system (the pick the report and ``show`` name as NCCL's)."""
    run = decisions.nccl_default(scenario, choice.constraints)
    if model is None or model == scenario.topology:
        return run
    timing = evaluate(replace(scenario, topology=model), run.config)
    return replace(run, time_us=timing.time_us, time_after_straggler_us=timing.time_after_straggler_us,
                   algbw_GBps=timing.algbw_GBps, busbw_GBps=timing.busbw_GBps)


def _model_time(scenario: Scenario, choice: Choice, model: Topology | None = None) -> float:
    return _model_run(scenario, choice, model).time_us


def model_can_run(scenario: Scenario, choice: Choice) -> bool:
    """Whether NCCL could run ``choice`` for this call on the model's system (a fitted system may
    lose a pair the datasheet one has, e.g. one whose fitted bandwidth NCCL's table deems unusable)."""
    try:
        _model_run(scenario, choice)
    except ValueError:  # decisions.NcclCannotRun included
        return False
    return True


def resolved(scenario: Scenario, choice: Choice) -> Choice:
    """The pair NCCL runs for this call when told ``choice``, as NCCL's own cost model picks on the
    scenario's system (its other pinned knobs kept): a run forced with ``NCCL_ALGO`` alone measured
    that pair. NCCL's default and a choice NCCL's model cannot run stay as they are."""
    if choice.is_default or choice.exportable:
        return choice
    try:
        config = _model_run(scenario, choice).config
    except ValueError:
        return choice
    return replace(choice, algorithm=config.algorithm, protocol=config.protocol)


@lru_cache(maxsize=131072)
def _latency_split(scenario: Scenario, choice: Choice, nbytes: int, model: Topology | None = None
                   ) -> tuple[float, float]:
    """A modelled time at ``nbytes`` as (latency floor, the rest): the Hockney alpha/beta split,
    the floor being the same choice's time at :data:`FLOOR_BYTES`."""
    t = _model_time(replace(scenario, nbytes=nbytes), choice, model)
    floor = min(_model_time(replace(scenario, nbytes=FLOOR_BYTES), choice, model), t)
    return floor, t - floor


def _between(scenario: Scenario, lo: int, hi: int) -> set[int]:
    """``lo``, ``hi``, the scenario's size and every power of two between ``lo`` and ``hi``."""
    sizes = (1 << k for k in range(lo.bit_length() - 1, hi.bit_length()))
    return {lo, hi, scenario.nbytes, *(n for n in sizes if lo < n < hi)}


def _nccl_pair(scenario: Scenario) -> tuple:
    config = _model_run(scenario, DEFAULT).config
    return config.algorithm, config.protocol


def candidate_pairs(scenario: Scenario) -> list[Choice]:
    """Every NCCL algorithm/protocol pair that can run this call."""
    return [Choice(a, p) for a, p in NCCL_PAIRS if pair_constraints(scenario, (a, p)).given()]


@dataclass(frozen=True)
class Estimate:
    """A choice's time at one call as the calibrated model has it."""

    time_us: float
    sigma: float
    evidence: str
    #: Only the model (calibrated or not) speaks for it: no measurement of this choice anchors it.
    model_only: bool = False
    #: Measured here, or corrected by measurements of this choice on both sides of this size (a
    #: correction carried beyond the measured sizes is the model's shape speaking, not them).
    bracketed: bool = True


@dataclass(frozen=True)
class RatioEstimate:
    """A choice against NCCL's default at one call: ``log(t_choice / t_default)`` (negative: the
    choice is faster), its 1-sigma, the source that gave it, and whether measurements anchor it."""

    log_ratio: float
    sigma: float
    evidence: str
    anchored: bool

    @property
    def gain(self) -> float:
        """t_default / t_choice - 1."""
        return math.exp(-self.log_ratio) - 1.0


def measured_both_sides(est: RatioEstimate) -> bool:
    """Whether ``est`` rests on measurements of both the choice and NCCL's default at or around
    this size (sources 1, 2 and 4 where anchored), not on the model or the prior."""
    return est.anchored and est.evidence != LEARNED_PRIOR


def not_its_pick(est: RatioEstimate, margin: float) -> bool:
    """Whether measurements show NCCL's default slower than the very configuration its model says
    it runs, through the gate: then NCCL's default did not run it (the model misjudges NCCL's own
    pick: NVIDIA's data were measured by NCCL builds the model is not), and pinning it is an
    override like any other. Where the model has NCCL's pick right after all, the pin runs what
    NCCL ran, so it is held to no more than an override is (it was held to twice its uncertainty,
    and on NVIDIA's Viking data 4 nodes' NVLSTree all-reduce, 6-9 % faster than NCCL's default
    from 64 to 256 MiB at +-4 %, went unpinned)."""
    return measured_both_sides(est) and passes(est.gain, est.sigma, margin)


@dataclass(frozen=True)
class RatioPoint:
    """A measured ``log(t_choice / t_default)`` at one size, with its 1-sigma."""

    nbytes: int
    log_ratio: float
    sigma: float


@dataclass(frozen=True)
class PriorQuery:
    """What a :class:`Prior` is asked, once per collective and system shape: every choice's ratio
    to NCCL's default at every size.

    ``choices`` are the algorithm/protocol pairs NCCL can run for the collective there;
    ``measured`` holds every ratio measured on the system for this collective and shape, per pair
    (the pair NCCL ran, :func:`resolved`) and size; ``model_us`` gives the model's time (µs) of a
    choice (NCCL's default included) at a size, None where the model cannot run it. That model is
    the system as given, not as fitted: what NCCL's own cost model says there, the model a learned
    prior learned its residuals against.
    """

    topology: Topology
    collective: Collective
    sizes: tuple[int, ...]
    choices: tuple[Choice, ...]
    measured: Mapping[Choice, tuple[RatioPoint, ...]]
    model_us: Callable[[Choice, int], float | None]


#: A prior's answers: (log ratio, 1-sigma) per (choice, size).
PriorAnswers = Mapping[tuple[Choice, int], tuple[float, float]]


class Prior(Protocol):
    """Predicts how each choice compares with NCCL's default where it was not measured: the seam a
    learned prior plugs into (``Tuner(prior=...)``;
    :class:`dynamiccl.agents.shipping.tune_prior.LearnedPriorSource` is the shipped one). It answers
    ``(log ratio, 1-sigma)`` per (choice, size) of the query, a calibrated Gaussian, leaving out what
    it cannot answer. A :class:`Tuner` asks it once per collective and shape and keeps the answers;
    see :meth:`Tuner.prior_ratio` for how they count."""

    def estimate(self, query: PriorQuery) -> PriorAnswers: ...


@dataclass(frozen=True)
class CallDecision:
    """What tune decided for one call: the choice it pins (``DEFAULT``: leave NCCL alone), the
    gate's verdict on the best alternative to NCCL's default, and every candidate's estimate."""

    scenario: Scenario
    chosen: Choice
    #: The most convincing alternative to NCCL's default (the one the verdict judges).
    alternative: Choice
    verdict: Verdict
    #: Every candidate's ratio to NCCL's default, for the report and the plan.
    estimates: dict[Choice, RatioEstimate]


#: Which choices tune weighs for a call (besides NCCL's default).
Candidates = Callable[[Scenario], Sequence[Choice]]


class Tuner:
    """Decisions from a model (``model_topology``: the system as fitted) and measurements.

    ``calibrated`` says whether the model was fitted (the evidence label of model-only estimates;
    the learned prior overrides nothing on a model that was not, :meth:`prior_ratio`).
    ``candidates`` (default :meth:`deployable_candidates`) says which choices are weighed; a
    choice the model cannot run is never weighed. ``prior`` (a :class:`Prior`) is one more source
    of a ratio where nothing was measured.
    """

    def __init__(self, model_topology: Topology, measurements: Measurements, *,
                 margin: float = DEFAULT_MARGIN, calibrated: bool = False,
                 candidates: Candidates | None = None, prior: Prior | None = None,
                 noise_defaults: Sequence[BandNoise] | None = None) -> None:
        self.model = model_topology
        self.measurements = measurements
        self.noise = LaunchNoise(measurements, noise_defaults)
        self.margin = check_margin(margin)
        self.calibrated = calibrated
        self.model_evidence = CALIBRATED if calibrated else MODEL
        #: What the model corrected by a choice's own measurements is called: calibrated where the
        #: system was fitted too, else the model corrected (a failed fit is no calibration).
        self.corrected_evidence = CALIBRATED if calibrated else CORRECTED
        self.candidates = candidates or self.deployable_candidates
        self.prior = prior
        self._points: dict[tuple, tuple[RatioPoint, ...]] = {}
        self._sizes: dict[tuple, list[int]] = {}
        self._held_out: dict[tuple, float] = {}
        self._prior_answers: dict[tuple, tuple[PriorAnswers, bool]] = {}
        self._judged: dict[Scenario, CallDecision] = {}
        self._decided: dict[Scenario, CallDecision] = {}

    def deployable_candidates(self, scenario: Scenario) -> list[Choice]:
        """Every algorithm/protocol pair that can run the call, and each such pair with more knobs
        pinned (a channel count) wherever that was measured on this system."""
        pairs = candidate_pairs(scenario)
        forced = self.measurements.forced_choices(scenario.collective, scenario.topology.nranks)
        pinned = [c for c in forced if c != c.pair and c.pair in pairs]
        return pairs + sorted(pinned, key=Choice.label)

    def _fitted(self, scenario: Scenario) -> Topology:
        """The model's system (as fitted) in the scenario's shape."""
        return self.model.resized(nodes=scenario.topology.nodes,
                                  gpus_per_node=scenario.topology.gpus_per_node)

    def _run(self, scenario: Scenario, choice: Choice) -> TimedConfig:
        """What NCCL runs when told ``choice`` (NCCL's pick on the given system), timed on the
        model (:func:`_model_run`)."""
        return _model_run(scenario, choice, self._fitted(scenario))

    # -- what was measured ------------------------------------------------------------------------

    def sample(self, scenario: Scenario, choice: Choice) -> Sample | None:
        """``choice``'s measured time at this call: every run forced as ``choice``, and every run
        that made NCCL run the same pair (:func:`resolved`, or the pair its TUNING log names),
        their launches together."""
        measured = self.measurements.at(scenario.collective, scenario.topology.nranks,
                                         scenario.nbytes)
        if choice.is_default:
            return measured.get(DEFAULT)
        target = resolved(scenario, choice)
        found = [s for forced, s in measured.items() if not forced.is_default and (
            forced == choice or (s.logged or resolved(scenario, forced)) == target)]
        if len(found) <= 1:
            return found[0] if found else None
        times = [t for s in found for t in s.launch_times]
        return Sample(float(np.median(times)), len(times), None, tuple(times),
                      tuple(f for s in found for f in s.forced))

    def sample_sigma(self, scenario: Scenario, sample: Sample) -> float:
        """The 1-sigma of a sample's log time: its choices' launch noise over its launches."""
        return max(self.noise.of_mean(scenario.topology, forced, sample.launches, scenario.nbytes)
                   for forced in sample.forced)

    def measured_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate | None:
        """Source 1: both sides measured at this size."""
        default, mine = self.sample(scenario, DEFAULT), self.sample(scenario, choice)
        if default is None or mine is None:
            return None
        sigma = math.hypot(self.sample_sigma(scenario, mine), self.sample_sigma(scenario, default))
        repeated = min(default.launches, mine.launches) >= 2
        return RatioEstimate(math.log(mine.time_us / default.time_us), sigma,
                             MEASURED if repeated else MEASURED_ONCE, True)

    def ratio_points(self, scenario: Scenario, choice: Choice) -> tuple[RatioPoint, ...]:
        """Every size of this collective and shape where ``choice``'s ratio was measured."""
        key = (scenario.topology, scenario.collective, choice)
        if key not in self._points:
            points = []
            for n in self.measurements.sizes(scenario.collective, scenario.topology.nranks):
                m = self.measured_ratio(replace(scenario, nbytes=n), choice)
                if m is not None:
                    points.append(RatioPoint(n, m.log_ratio, m.sigma))
            self._points[key] = tuple(points)
        return self._points[key]

    def anchor_points(self, scenario: Scenario, choice: Choice) -> tuple[RatioPoint, ...]:
        """The measured ratios as the sizes between them are interpolated from: each one pooled with
        its own neighbours (:meth:`pooled_ratio`), so one stray launch does not bend the line, at
        its own measurement's sigma (the neighbours it was pooled with speak for the sizes between
        again: counting their precision twice would make the line more certain than its data)."""
        key = (scenario.topology, scenario.collective, choice, "anchors")
        if key not in self._points:
            self._points[key] = tuple(
                RatioPoint(p.nbytes, self._pooled(replace(scenario, nbytes=p.nbytes), choice)
                           .log_ratio, p.sigma) for p in self.ratio_points(scenario, choice))
        return self._points[key]

    def pooled_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate | None:
        """Source 1 where this size was measured: the measurement, unless the measured sizes on both
        sides turn its verdict, in which case the two together (label ``... + neighbours``).

        One launch a side on a noisy system leaves a measurement uncertain by the launch noise of
        both sides (±35 % on sockets); the ratio interpolated between its measured neighbours is
        another estimate of the same quantity, from other launches' timings (the noise of timings
        at different sizes is independent as far as one launch's runs show: on the H200 sweep of
        ``tests/fixtures/real/runner/h200_emulated4`` NCCL's default took 349, 271 and 440 µs at 4, 16 and
        64 KiB). Precision-weighted, they are the posterior of the ratio given both."""
        measured = self.measured_ratio(scenario, choice)
        if measured is None:
            return None
        pooled = self._pooled(scenario, choice)
        alone = passes(measured.gain, measured.sigma, self.margin)
        return measured if passes(pooled.gain, pooled.sigma, self.margin) == alone else pooled

    def _pooled(self, scenario: Scenario, choice: Choice) -> RatioEstimate:
        """A measured size's ratio pooled with the one interpolated between its measured neighbours
        (the measurement as it is where there is none)."""
        measured = self.measured_ratio(scenario, choice)
        between = self._interpolate(scenario, choice, self.ratio_points(scenario, choice))
        if between is None:
            return measured
        w_m, w_b = measured.sigma ** -2, between.sigma ** -2
        return RatioEstimate((w_m * measured.log_ratio + w_b * between.log_ratio) / (w_m + w_b),
                             (w_m + w_b) ** -0.5, measured.evidence + NEIGHBOURS, True)

    # -- the sources where this size was not measured ---------------------------------------------

    def model_log_ratio(self, scenario: Scenario, choice: Choice) -> float | None:
        """The (calibrated) model's ``log(t_choice / t_default)``; None where it cannot run it."""
        if not model_can_run(scenario, choice):
            return None
        return math.log(self._run(scenario, choice).time_us / self._run(scenario, DEFAULT).time_us)

    def interpolated_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate | None:
        """Source 2: between the nearest measured sizes below and above (each pooled with its own
        neighbours: :meth:`anchor_points`), where both point the same way (see the module
        docstring); or one octave past them (:meth:`_extrapolate`)."""
        points = self.anchor_points(scenario, choice)
        return self._interpolate(scenario, choice, points) or \
            self._extrapolate(scenario, choice, points)

    def _extrapolate(self, scenario: Scenario, choice: Choice, points: Sequence[RatioPoint]
                     ) -> RatioEstimate | None:
        """The ratio one octave past the measured sizes (nccl-tests' next size; label
        :data:`EXTRAPOLATED`): the nearer of the nearest two where both point the same way, the
        nearer no less far from a tie (a gain that shrinks towards the last measured size is
        heading for a crossover: on a perturbed DGX A100 pair ring/Simple all-gather, 26 % and
        24 % faster than ring/LL128 at 4 and 8 MiB, was 5 % slower at 16 MiB), and NCCL's
        modelled pick and the pair ``choice`` runs stay the same from the farther one through this
        size (where it changes the ratio jumps: see the module docstring). Uncertain as the
        interpolation an octave from a measurement is, plus half the two's disagreement. Where
        the pick holds, the measured ratio is the better guide than the corrected model: on NVIDIA's
        Viking-SHARP data CollNetChain beat NCCL's default by 9 % and 13 % at 2 GiB (16 and 32
        ranks) and by 9 % and 14 % at 4 GiB, where the corrected model put it 41 % and 1 % slower."""
        below = [p for p in points if p.nbytes < scenario.nbytes][::-1]
        above = [p for p in points if p.nbytes > scenario.nbytes]
        side = below if not above else above if not below else []
        if len(side) < 2 or side[0].log_ratio * side[1].log_ratio <= 0 or \
                abs(side[0].log_ratio) < abs(side[1].log_ratio):
            return None
        near, far = side[0], side[1]
        octaves = abs(math.log2(scenario.nbytes / near.nbytes))
        lo, hi = sorted((far.nbytes, scenario.nbytes))
        if octaves > 1 or not Tuner._same_choice_runs(scenario, choice, lo, hi) or \
                not Tuner._same_nccl_pick(scenario, lo, hi):
            return None
        sigma = math.sqrt(near.sigma ** 2 + (SIGMA_PER_OCTAVE * octaves) ** 2
                          + self.span_spread(scenario, choice) ** 2 * octaves
                          + (DISAGREEMENT_SHARE * (near.log_ratio - far.log_ratio)) ** 2)
        return RatioEstimate(near.log_ratio, sigma, EXTRAPOLATED, True)

    def _interpolate(self, scenario: Scenario, choice: Choice, points: Sequence[RatioPoint]
                     ) -> RatioEstimate | None:
        """The ratio at this size from the nearest of ``points`` below and above it."""
        below = [p for p in points if p.nbytes < scenario.nbytes]
        above = [p for p in points if p.nbytes > scenario.nbytes]
        if not below or not above:
            return None
        lo, hi = below[-1], above[0]
        if lo.log_ratio * hi.log_ratio <= 0 or not self._same_runs(scenario, choice, lo.nbytes,
                                                                     hi.nbytes):
            return None
        x, x0, x1 = (math.log2(n) for n in (scenario.nbytes, lo.nbytes, hi.nbytes))
        w = (x - x0) / (x1 - x0)
        line = (1 - w) * lo.log_ratio + w * hi.log_ratio
        shape = 0.0
        model = [self.model_log_ratio(replace(scenario, nbytes=n), choice)
                 for n in (lo.nbytes, scenario.nbytes, hi.nbytes)]
        if None not in model:
            shape = model[1] - ((1 - w) * model[0] + w * model[2])
        ratio = float(np.clip(line + shape, min(lo.log_ratio, hi.log_ratio),
                              max(lo.log_ratio, hi.log_ratio)))
        octaves = min(x - x0, x1 - x)
        sigma = math.sqrt(((1 - w) * lo.sigma + w * hi.sigma) ** 2
                          + (SIGMA_PER_OCTAVE * octaves) ** 2
                          + self.span_spread(scenario, choice) ** 2 * octaves
                          + (DISAGREEMENT_SHARE * (hi.log_ratio - lo.log_ratio)) ** 2)
        return RatioEstimate(ratio, sigma, INTERPOLATED, True)

    def span_spread(self, scenario: Scenario, choice: Choice) -> float:
        """How far ``choice``'s measured ratio moves from one measured size to the next, per square
        root of the octaves between them (a robust sigma: 1.4826 x the median step): what a ratio
        may do between two measured sizes, as this series shows it. Smooth on NVIDIA's forced-choice
        data (NVLSTree's gain on 4 Viking nodes 5.3, 5.8, 7.5, 8.4 % an octave apart); on the
        emulated-hosts H200 sweep tree/Simple measured +98 %, +93 % and +4 % four octaves apart
        and was 5 % slower between the first two."""
        key = (scenario.topology, scenario.collective, choice, "span")
        if key not in self._held_out:
            points = self.ratio_points(scenario, choice)
            steps = [abs(b.log_ratio - a.log_ratio) / math.sqrt(math.log2(b.nbytes / a.nbytes))
                     for a, b in zip(points, points[1:], strict=False)]
            self._held_out[key] = SIGMA_PER_MAD * float(np.median(steps)) if steps else 0.0
        return self._held_out[key]

    def _same_runs(self, scenario: Scenario, choice: Choice, lo: int, hi: int) -> bool:
        """Whether the ratio measured at ``lo`` and ``hi`` speaks for the sizes between: what
        ``choice`` makes NCCL run stays one pair there (a run forced with ``NCCL_ALGO`` alone: the
        neighbours measured other configurations than this size runs otherwise), and NCCL's
        default does not jump between. Where the default changes its pick the ratio jumps, and far
        neighbours say nothing of the sizes past the jump. Neighbours at most :data:`NEAR_OCTAVES`
        apart may straddle a change of NCCL's modelled pick: the measured default at each is what
        NCCL ran there, and the model's place for the change is no surer than the measurements (on
        NVIDIA's Viking data, all-reduce on 4 nodes, NVLSTree beat NCCL's default by 5-8 % at every
        size from 8 to 512 MiB while the model has NCCL change its pick twice between). Farther
        apart, so may neighbours where ``choice`` was measured the fastest of every pair
        (:meth:`_fastest_measured`): whichever pair NCCL's default runs between, it was measured
        slower than ``choice`` on both sides, so a jump to it is a jump to a slower configuration
        (a ratio that crosses over and back between two measured sizes is what the interpolation
        of any ratio already rules out). On NVIDIA's DGX-2V data NCCL's default ran tree/LL128 to
        8 MiB, ring/LL128 to 64 MiB and tree/Simple beyond, where the model has it change once, at
        512 MiB; tree/LL128, the fastest at 16 and 512 MiB, was 18-47 % faster between."""
        return Tuner._same_choice_runs(scenario, choice, lo, hi) and \
            self._default_speaks(scenario, choice, lo, hi)

    def _default_speaks(self, scenario: Scenario, choice: Choice, lo: int, hi: int) -> bool:
        """The half of :meth:`_same_runs` on NCCL's default: it keeps its modelled pick from ``lo``
        to ``hi``, or they are near enough, or ``choice`` was the fastest measured at both."""
        return hi <= lo << NEAR_OCTAVES or Tuner._same_nccl_pick(scenario, lo, hi) \
            or all(self._fastest_measured(replace(scenario, nbytes=n), choice) for n in (lo, hi))

    @staticmethod
    def _same_nccl_pick(scenario: Scenario, lo: int, hi: int) -> bool:
        """Whether NCCL's modelled pick stays one pair from ``lo`` to ``hi``."""
        return len({_nccl_pair(replace(scenario, nbytes=n)) for n in _between(scenario, lo, hi)}) == 1

    def _fastest_measured(self, scenario: Scenario, choice: Choice) -> bool:
        """Whether every pair that can run this call was measured here, none faster than
        ``choice``: nothing NCCL could run here is faster, on the measurements."""
        mine = self.sample(scenario, choice)
        if mine is None:
            return False
        for pair in candidate_pairs(scenario):
            other = self.sample(scenario, pair)
            if other is None or other.time_us < mine.time_us:
                return False
        return True

    @staticmethod
    def _same_choice_runs(scenario: Scenario, choice: Choice, lo: int, hi: int) -> bool:
        """Whether what ``choice`` makes NCCL run stays the same pair from ``lo`` to ``hi``."""
        return len({resolved(replace(scenario, nbytes=n), choice)
                    for n in _between(scenario, lo, hi)}) == 1

    def prior_answer(self, scenario: Scenario, choice: Choice) -> tuple[float, float] | None:
        """The prior's own answer (log ratio, 1-sigma) for the pair NCCL runs when told ``choice``,
        where a prior is given and answers."""
        if self.prior is None:
            return None
        pair = resolved(scenario, choice)
        if not pair.exportable or pair != pair.pair:
            return None
        found = self._prior_series(scenario)[0].get((pair, scenario.nbytes))
        if found is None or not all(map(math.isfinite, found)):
            return None
        return float(found[0]), float(found[1])

    def prior_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate | None:
        """Source 3: :meth:`prior_answer` as a ratio estimate. Its sigma is :data:`PRIOR_SIGMAS` of
        the prior's own: the gate asks every source for a gain beyond its sigma, and a calibrated
        Gaussian's one sigma is crossed the wrong way one time in six. Anchored where the system
        has measured ratios of this collective on this shape and the model was calibrated to them:
        on a model the measurements could not be fitted to (calibration failed, determined nothing
        or was skipped) the prior's residuals are read against a model the system contradicts
        (on the emulated-hosts H200 sweep NCCL ran pairs the model says it cannot), so it informs
        the plan but pins nothing (evidence :data:`LEARNED_PRIOR_UNCALIBRATED`)."""
        found = self.prior_answer(scenario, choice)
        if found is None:
            return None
        if not self.calibrated:
            return RatioEstimate(found[0], PRIOR_SIGMAS * found[1], LEARNED_PRIOR_UNCALIBRATED, False)
        return RatioEstimate(found[0], PRIOR_SIGMAS * found[1], LEARNED_PRIOR,
                             self._prior_series(scenario)[1])

    def _prior_series(self, scenario: Scenario) -> tuple[PriorAnswers, bool]:
        """The prior's answers for this collective and shape (one query, kept), at every decision
        size, every measured size and, where it is neither, this one; and whether any ratio of the
        series was measured."""
        grid = {*DECISION_SIZES, *self.measurements.sizes(scenario.collective, scenario.topology.nranks)}
        key = (scenario.topology, scenario.collective, None if scenario.nbytes in grid else scenario.nbytes)
        if key not in self._prior_answers:
            query = self.prior_query(scenario)
            self._prior_answers[key] = (self.prior.estimate(query), bool(query.measured))
        return self._prior_answers[key]

    def prior_query(self, scenario: Scenario) -> PriorQuery:
        """What a prior is asked for this collective and shape: every candidate pair at every
        decision size, every measured size and, where it is neither, this one, with every ratio
        measured (the learned prior's training asks the same of real systems' measurements,
        ``agents/training/prior_corpus.py``)."""
        topology, collective = scenario.topology, scenario.collective
        grid = {*DECISION_SIZES, *self.measurements.sizes(collective, topology.nranks), scenario.nbytes}
        pairs = tuple(candidate_pairs(scenario))
        measured = {c: points for c in pairs if (points := self.ratio_points(scenario, c))}

        def model_us(choice: Choice, nbytes: int) -> float | None:
            call = replace(scenario, nbytes=nbytes)
            return _model_time(call, choice) if model_can_run(call, choice) else None

        return PriorQuery(topology, collective, tuple(sorted(grid)), pairs, measured, model_us)

    def model_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate:
        """Sources 4 and 5: the calibrated model corrected by each side's own measurements, or
        the model alone."""
        default, est = self.estimate(scenario, DEFAULT), self.estimate(scenario, choice)
        if est.model_only and not default.model_only:
            # Only the model speaks for this choice: trust its ratio to NCCL's default, not its
            # absolute time (a system the model misjudges misjudges both alike). That ratio
            # carries the model's error on both choices, measured default or not.
            log_ratio = math.log(est.time_us / self._run(scenario, DEFAULT).time_us)
            sigma = math.hypot(est.sigma, est.sigma)
        else:
            log_ratio = math.log(est.time_us / default.time_us)
            sigma = math.hypot(est.sigma, default.sigma)
        anchored = not (est.model_only or default.model_only) and est.bracketed and default.bracketed
        if anchored:
            sigma = max(sigma, self.held_out_error(scenario, choice))
            log_ratio = self._within_neighbours(scenario, choice, log_ratio)
        # a correction that does not anchor this size leaves the model's shape speaking
        evidence = self.corrected_evidence if anchored else self.model_evidence
        return RatioEstimate(log_ratio, sigma, evidence, anchored)

    def _within_neighbours(self, scenario: Scenario, choice: Choice, log_ratio: float) -> float:
        """``log_ratio`` kept within the ratios measured at the nearest sizes below and above,
        where both were, of the configuration ``choice`` runs here (:meth:`_same_choice_runs`;
        NCCL's default may change between: the corrected model knows that change least, on the
        RTX 5090 socket pair it put Simple x4 faster than NCCL's default at 64 KiB between
        measurements 3 % and 17 % slower, and it was x2.9 slower): a shape of the model's
        beyond them is what they contradict (on NVIDIA's
        DGX-1V data, 64 ranks, the corrected model put tree/LL 26 % faster at 256 KiB between a
        tie at 128 KiB and x2.2 slower at 4 MiB; it was x1.4 slower). Where the neighbours do not
        speak for the sizes between (:meth:`_same_runs`: NCCL's default jumps between them), they
        only bound it from the faster side: a default that changes its pick between measured sizes
        can make ``choice`` slower there than at either (on a perturbed 4-node DGX H100,
        ring/Simple all-reduce 33-40 % faster than NCCL's tree/LL128 at 8 MiB and than its default
        at 512 MiB was 24 % slower than NVLSTree at 16 MiB, which the corrected model had right
        before the neighbours lifted it to 49 % faster)."""
        points = self.anchor_points(scenario, choice)
        below = [p for p in points if p.nbytes < scenario.nbytes][-1:]
        above = [p for p in points if p.nbytes > scenario.nbytes][:1]
        if not below or not above or not self._same_choice_runs(scenario, choice, below[0].nbytes,
                                                                above[0].nbytes):
            return log_ratio
        ratios = (below[0].log_ratio, above[0].log_ratio)
        if self._default_speaks(scenario, choice, below[0].nbytes, above[0].nbytes):
            return float(np.clip(log_ratio, min(ratios), max(ratios)))
        return max(log_ratio, min(ratios))

    def ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate:
        """``choice`` against NCCL's default here: the measurement where both were measured, else
        tune's own most certain source (interpolated, calibrated model, model) where it makes an
        override, else the learned prior where it makes one, else the more certain of the two (what
        the plan values launches by). See the module docstring for why the prior only adds."""
        own = self.own_ratio(scenario, choice)
        if own.evidence.startswith(MEASURED):  # measured here: once, repeated, or with neighbours
            return own
        prior = self.prior_ratio(scenario, choice)
        if prior is None or (own.anchored and passes(own.gain, own.sigma, self.margin)):
            return own  # an override tune's own sources make stands
        if prior.anchored and passes(prior.gain, prior.sigma, self.margin):
            return prior
        return min((own, prior), key=lambda o: o.sigma)

    def own_ratio(self, scenario: Scenario, choice: Choice) -> RatioEstimate:
        """``choice`` against NCCL's default from tune's own sources alone: the measurement where
        both were measured, else the more certain of the interpolation and the (corrected) model."""
        measured = self.pooled_ratio(scenario, choice)
        if measured is not None:
            return measured
        return min((o for o in (self.interpolated_ratio(scenario, choice),
                                self.model_ratio(scenario, choice)) if o is not None),
                   key=lambda o: o.sigma)

    # -- the calibrated model, corrected per choice -----------------------------------------------

    def measured_sizes(self, scenario: Scenario, choice: Choice) -> list[int]:
        key = (scenario.topology, scenario.collective, choice)
        if key not in self._sizes:
            self._sizes[key] = [
                n for n in self.measurements.sizes(scenario.collective, scenario.topology.nranks)
                if self.sample(replace(scenario, nbytes=n), choice) is not None]
        return self._sizes[key]

    def estimate(self, scenario: Scenario, choice: Choice) -> Estimate:
        """``choice``'s time at this call: measured here, else the model corrected by the choice's
        own measurements at other sizes, else the model."""
        sample = self.sample(scenario, choice)
        if sample is not None:
            return Estimate(sample.time_us, self.sample_sigma(scenario, sample), MEASURED)
        model = self._fitted(scenario)
        run = self._run(scenario, choice)
        band = uncertainty(scenario.topology.calibration, scenario.collective, scenario.nbytes,
                           run.config.algorithm, run.config.protocol)
        sizes = self.measured_sizes(scenario, choice)
        if choice.is_default:  # NCCL's default is another configuration where NCCL's pick differs
            pick = _nccl_pair(scenario)
            sizes = [n for n in sizes if _nccl_pair(replace(scenario, nbytes=n)) == pick]
        if not sizes:
            return Estimate(run.time_us, band, self.model_evidence, model_only=True)
        floor, rest = _latency_split(scenario, choice, scenario.nbytes, model)
        a, b, residual, unpinned = self._factors(scenario, choice, tuple(sizes))
        x = math.log2(max(scenario.nbytes, 1))
        octaves = float(np.min(np.abs(np.log2(sizes) - x)))
        # the share of this prediction a factor the measurements did not pin carries keeps the
        # model's own uncertainty (a latency floor is not known from bandwidth-bound sizes)
        share = {"floor": floor, "rest": rest, None: 0.0}[unpinned] / max(floor + rest, 1e-12)
        noise = self.noise.sigma(scenario.topology, choice, scenario.nbytes)
        sigma = noise + residual + SIGMA_PER_OCTAVE * octaves + share * band
        if sigma >= band:  # too far from anything measured: the correction says nothing here
            return Estimate(run.time_us, band, self.model_evidence, model_only=True)
        shares = [f / max(f + r, 1e-12)
                  for f, r in (_latency_split(scenario, choice, n, model) for n in sizes)]
        here = floor / max(floor + rest, 1e-12)
        return Estimate(a * floor + b * rest, sigma, self.corrected_evidence,
                        bracketed=min(shares) - MIX_TOLERANCE <= here <= max(shares) + MIX_TOLERANCE)

    def held_out_error(self, scenario: Scenario, choice: Choice) -> float:
        """The corrected model's RMS error on ``choice``'s ratio to NCCL's default at the sizes it
        did not see: at each measured ratio between two others, both sides corrected by their
        measurements at the other sizes (0 where none is between two others). What a calibrated
        model may decide is judged against it: on NVIDIA's DGX-1V data (64 ranks) the model
        corrected at every other size, each correction off its own sizes by a few percent, put
        tree/LL 31 % +- 27 % faster at 256 KiB, where it was 30 % slower."""
        key = (scenario.topology, scenario.collective, choice)
        if key not in self._held_out:
            errors = []
            for point in self.ratio_points(scenario, choice)[1:-1]:
                call = replace(scenario, nbytes=point.nbytes)
                pick = _nccl_pair(call)
                mine = tuple(n for n in self.measured_sizes(call, choice) if n != point.nbytes)
                theirs = tuple(n for n in self.measured_sizes(call, DEFAULT) if n != point.nbytes
                               and _nccl_pair(replace(call, nbytes=n)) == pick)
                if mine and theirs:
                    errors.append(point.log_ratio - math.log(self._corrected_time(call, choice, mine)
                                                             / self._corrected_time(call, DEFAULT, theirs)))
            self._held_out[key] = float(np.sqrt(np.mean(np.square(errors)))) if errors else 0.0
        return self._held_out[key]

    def _corrected_time(self, scenario: Scenario, choice: Choice, sizes: tuple[int, ...]) -> float:
        """``choice``'s time at this call on the model corrected by its measurements at ``sizes``."""
        a, b, _, _ = self._factors(scenario, choice, sizes)
        floor, rest = _latency_split(scenario, choice, scenario.nbytes, self._fitted(scenario))
        return a * floor + b * rest

    def _factors(self, scenario: Scenario, choice: Choice,
                 sizes: tuple[int, ...]) -> tuple[float, float, float, str | None]:
        """Latency and bandwidth correction factors of ``choice`` fitted to its measured sizes
        (relative least squares of ``t = a * floor + b * rest``), the fit's RMS log residual, and
        which part the measurements could not pin ("floor", "rest" or None).

        One regime measured (only small or only large calls) pins one factor; the other then
        takes the same value, and stays as uncertain as the model is where it dominates.
        """
        measured = np.array([self.sample(replace(scenario, nbytes=n), choice).time_us
                             for n in sizes])
        model = self._fitted(scenario)
        split = np.array([_latency_split(scenario, choice, n, model) for n in sizes])
        rows = split / measured[:, None]
        ratio = float(np.exp(np.mean(np.log(measured / split.sum(axis=1)))))
        a = b = ratio
        floor_share = float(np.mean(split[:, 0] / split.sum(axis=1)))
        unpinned: str | None = "rest" if floor_share > 0.5 else "floor"
        if len(sizes) > 1 and np.linalg.matrix_rank(rows, tol=0.05) == 2:
            (a, b), *_ = np.linalg.lstsq(rows, np.ones(len(sizes)), rcond=None)
            unpinned = None
            if not (0.05 < a < 20 and 0.05 < b < 20):
                a = b = ratio
                unpinned = "rest" if floor_share > 0.5 else "floor"
        fitted = split @ np.array([a, b])
        residual = float(np.sqrt(np.mean(np.log(measured / fitted) ** 2)))
        return float(a), float(b), residual, unpinned

    # -- the decision -----------------------------------------------------------------------------

    def decide(self, scenario: Scenario) -> CallDecision:
        """The decision for one call. At a size nccl-tests measures (:data:`DECISION_SIZES`) its own
        evidence decides (:meth:`judge`), and a size whose evidence points the way of the overrides
        of one pair on both sides, without being certain alone, joins them (evidence
        :data:`BRIDGED`); a size between two of them holds the decision of the nearer one where
        NCCL picks the same pair as there (else of the other one, where NCCL's pick is that one's),
        so a range changes its decision only where the evidence changes: a measured size, or NCCL
        changing its pick. Only a pick NCCL makes at neither neighbour is judged on its own."""
        nbytes = scenario.nbytes
        if nbytes in _DECISION_SET or not DECISION_SIZES[0] < nbytes < DECISION_SIZES[-1]:
            return self._at_decision_size(scenario) if nbytes in _DECISION_SET else \
                self.judge(scenario)
        below = 1 << (nbytes.bit_length() - 1)
        near = (below, 2 * below) if nbytes * nbytes <= 2 * below * below else (2 * below, below)
        pick = _nccl_pair(scenario)
        for size in near:
            neighbour = replace(scenario, nbytes=size)
            if _nccl_pair(neighbour) == pick:
                return self._held(scenario, self._at_decision_size(neighbour))
        return self.judge(scenario)

    def _held(self, scenario: Scenario, held: CallDecision) -> CallDecision:
        """``held`` (a neighbouring size's decision, where NCCL picks the same pair) at this size:
        its choice and its evidence, with the configurations NCCL runs here."""
        nccl_config = _model_run(scenario, DEFAULT).config
        alternative = held.alternative
        if not alternative.is_default and not model_can_run(scenario, alternative):
            return self.judge(scenario)
        proposed = nccl_config if alternative.is_default else _model_run(scenario, alternative).config
        return CallDecision(scenario, held.chosen, alternative,
                            replace(held.verdict, nccl=nccl_config, proposed=proposed),
                            {c: self.ratio(scenario, c) for c in held.estimates
                             if model_can_run(scenario, c)})

    def _at_decision_size(self, scenario: Scenario) -> CallDecision:
        """:meth:`judge`, or where it leaves NCCL alone between two overrides of one pair (one
        octave below and above) whose estimate here also says it is faster (beyond the margin,
        if not beyond its uncertainty), that pair (:data:`BRIDGED`): the estimates on all three
        sizes point one way, and a decision that flips for one size and back reads as noise, not
        as the system."""
        if scenario not in self._decided:
            own = self.judge(scenario)
            self._decided[scenario] = own
            flanks = [self.judge(replace(scenario, nbytes=n)).chosen
                      for n in (scenario.nbytes // 2, 2 * scenario.nbytes)
                      if n in _DECISION_SET]
            pair = flanks[0] if len(flanks) == 2 and flanks[0] == flanks[1] else DEFAULT
            # tune's own estimate, never the prior's: a pair joins the overrides around it only
            # where tune's own evidence points its way
            est = self.own_ratio(scenario, pair) if pair in own.estimates else None
            if not own.verdict.override and not pair.is_default and est is not None and \
                    self.measurements.covers(scenario.collective, scenario.topology.nranks) and \
                    est.gain > self.margin and not self._nccl_own(scenario, pair):
                verdict = Verdict(own.verdict.nccl, _model_run(scenario, pair).config, est.gain,
                                  est.sigma, BRIDGED, True)
                self._decided[scenario] = CallDecision(scenario, pair, pair, verdict, own.estimates)
        return self._decided[scenario]

    @staticmethod
    def _nccl_own(scenario: Scenario, choice: Choice) -> bool:
        """Whether telling NCCL ``choice`` here makes it run what it runs by default (its model's
        pick, channels included): no alternative to it."""
        return _model_run(scenario, choice).config == _model_run(scenario, DEFAULT).config

    def judge(self, scenario: Scenario) -> CallDecision:
        """This call's own evidence decides: every candidate's best estimate through the gate. A
        candidate that makes NCCL run its own pick is no alternative (the model's ratio between a
        configuration and itself is 1; a correction of one side alone says nothing of the other),
        unless measurements of both beat NCCL's default well beyond their noise: then NCCL's
        default did not run what its model picks (:func:`not_its_pick`)."""
        if scenario in self._judged:
            return self._judged[scenario]
        nccl_config = _model_run(scenario, DEFAULT).config
        covered = self.measurements.covers(scenario.collective, scenario.topology.nranks)
        estimates = {c: self.ratio(scenario, c) for c in dict.fromkeys(self.candidates(scenario))
                     if not c.is_default and model_can_run(scenario, c)}
        best, best_verdict, best_key = DEFAULT, None, None
        for choice, est in estimates.items():
            own = self._nccl_own(scenario, choice)
            if own and not not_its_pick(est, self.margin):
                continue
            # tune overrides NCCL only where measurements anchor both sides; what only the model
            # says is a reason to measure (tune_plan), not to pin: the model's ratio between two
            # algorithms can be off by far more than its error on one time
            override = covered and est.anchored and passes(est.gain, est.sigma, self.margin)
            evidence = (est.evidence + NOT_ITS_PICK if own else est.evidence) if covered else \
                NOT_MEASURED
            verdict = Verdict(nccl_config, _model_run(scenario, choice).config, est.gain, est.sigma,
                              evidence, override)
            # among overrides the largest gain wins, NCCL's modelled pick included (where the
            # model has NCCL's pick right, pinning it changes nothing); among the rest NCCL's
            # modelled pick is shown last: where the model has it right, its gain is noise
            key = (override, override or not own, verdict.gain)
            if best_key is None or key > best_key:
                best, best_verdict, best_key = choice, verdict, key
        if best_verdict is None:
            evidence = MEASURED if self.sample(scenario, DEFAULT) else (
                self.model_evidence if covered else NOT_MEASURED)
            best_verdict = Verdict(nccl_config, nccl_config, 0.0, 0.0, evidence, False)
        chosen = best if best_verdict.override else DEFAULT
        self._judged[scenario] = CallDecision(scenario, chosen, best, best_verdict, estimates)
        return self._judged[scenario]


class TunedPolicy:
    """A :class:`Tuner`'s decisions as something export can write: pinned choice or defer."""

    name = "tune"

    def __init__(self, tuner: Tuner) -> None:
        self.tuner = tuner

    def decide_rule(self, scenario: Scenario) -> tuple[pf.Decision | None, Verdict]:
        d = self.tuner.decide(scenario)
        if d.chosen.is_default or not d.chosen.exportable:
            return None, d.verdict
        return pf.Decision(**d.chosen.given()), d.verdict

    def force(self, scenario: Scenario) -> KnobConstraints:
        return self.tuner.decide(scenario).chosen.constraints

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        from dynamiccl.agents.policies.policy import allowed_actions, forced_action, require_scenario

        scenario = require_scenario(self.name, scenario)
        return forced_action(scenario, self.force(scenario),
                             allowed_actions(scenario, action_mask, True))
