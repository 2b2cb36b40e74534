"""``dynamiccl tune``: from a system's measurements to a gated policy, and to the next measurements.

The decisions are the ones a user can verify with nccl-tests: per collective, system shape and
message size, pin ``NCCL_ALGO``/``NCCL_PROTO`` to one pair (NCCL keeps choosing channels) or leave
NCCL alone. A channel count pinned with the pair (``NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS``) is a
candidate only where it was measured on the system: the model alone never proposes one (seven
channel levels per pair would dilute the plan's budget for the few percent of headroom they hold,
and on NCCL 2.31+ the plugin can only lower NCCL's channel count). Evidence, strongest first:

1. **measured** — both NCCL's default and the pair were measured at this size on this shape: the
   measurement decides; its noise is the uncertainty.
2. **calibrated model** — the simulator, fitted to the measurements (``profiler.calibrate``, kept
   behind :func:`calibrated_topology`), then corrected per choice with a latency factor and a
   bandwidth factor fitted to that choice's measured sizes (the Hockney alpha/beta split NCCL's own
   tuning tables use: a time is a latency floor plus a size-proportional rest). The uncertainty is
   the measurement noise plus the fit's residual plus a growth with the distance, in octaves, to
   the nearest measurement of that choice; where that reaches the band default the correction is
   dropped.
3. **model** — nothing measured for that choice: the simulator and the band defaults of
   :func:`dynamiccl.calibration.uncertainty`.

Every decision goes through the same gate as export (:func:`dynamiccl.agents.gate.passes`): an
override only where the gain clears the margin and its uncertainty, and, unlike export, only where
measurements anchor both NCCL's default and the choice (evidence 1 or 2): what the model alone says
ranks the next measurements (:func:`plan`) but pins nothing.

:func:`plan` ranks the measurements not yet made by how much they could change a decision — the
expected gain a deferred choice could unlock, or the regression risk of an override that rests on
the model — and writes them as nccl-tests command lines.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from dynamiccl import decisions
from dynamiccl import policy_file as pf
from dynamiccl.agents.baselines import NCCL_PAIRS, pair_constraints
from dynamiccl.agents.gate import CALIBRATED, DEFAULT_MARGIN, MEASURED, MODEL, Verdict, passes, uncertainty
from dynamiccl.decisions import KnobConstraints, TimedConfig
from dynamiccl.knobs import Algorithm, Collective, Protocol, parse_enum
from dynamiccl.nccl import (
    ALGO_ENV,
    ALGORITHM_NCCL_NAMES,
    MAX_CHANNELS_ENV,
    MIN_CHANNELS_ENV,
    PROTO_ENV,
    PROTOCOL_NCCL_NAMES,
)
from dynamiccl.profiler.records import MeasurementRecord
from dynamiccl.scenario import Scenario
from dynamiccl.topology import Topology
from dynamiccl.units import format_size

#: Relative noise of one measurement when the records do not say: the top of the 1-5 % run-to-run
#: spread nccl-tests runs show, so a single measurement never looks more certain than it is.
DEFAULT_NOISE = 0.05
#: Median of |log(a / b)| for two measurements with independent Gaussian noise of sigma 1:
#: 0.674 (the half-normal median) x sqrt(2).
PAIR_SPREAD_PER_SIGMA = 0.954
#: How fast a measured correction loses credibility with distance (relative sigma per octave).
SIGMA_PER_OCTAVE = 0.04
#: The sizes decisions are made and measured at: nccl-tests' -b 8 -e 16G -f 2.
DECISION_SIZES: tuple[int, ...] = tuple(1 << k for k in range(3, 35))


@dataclass(frozen=True)
class Choice:
    """What NCCL is told for a call: each knob pinned or left to NCCL (all None = NCCL's default).

    Tune's own candidates pin algorithm and protocol (what a policy rule must name); measurements
    may pin fewer knobs (``NCCL_ALGO`` alone) or the channel count as well, and are kept as such.
    """

    algorithm: Algorithm | None = None
    protocol: Protocol | None = None
    channels: int | None = None

    @property
    def constraints(self) -> KnobConstraints:
        return KnobConstraints(algorithm=self.algorithm, protocol=self.protocol,
                               channels=self.channels)

    @property
    def is_default(self) -> bool:
        return self.algorithm is None and self.protocol is None and self.channels is None

    @property
    def exportable(self) -> bool:
        """A policy rule can pin it: algorithm and protocol both named."""
        return self.algorithm is not None and self.protocol is not None

    def label(self) -> str:
        if self.is_default:
            return "NCCL default"
        knobs = [self.algorithm.name.lower() if self.algorithm is not None else "auto",
                 self.protocol.name.lower() if self.protocol is not None else "auto"]
        return "/".join(knobs + ([f"{self.channels}ch"] if self.channels is not None else []))


DEFAULT = Choice()


def _record_choice(rec: MeasurementRecord) -> Choice | None:
    """What a record measured; None for records tune cannot use (another backend, a straggler)."""
    if rec.backend != "nccl" or rec.straggler_delay_us > 0:
        return None
    return Choice(None if rec.algorithm is None else Algorithm(parse_enum(Algorithm, rec.algorithm)),
                  None if rec.protocol is None else Protocol(parse_enum(Protocol, rec.protocol)),
                  rec.channels)


class Measurements:
    """Measured times per (collective, ranks, choice, size): the median of out-of-place runs.

    The noise of one measurement is read from the records where they repeat themselves: several
    runs of one call, and nccl-tests' in-place column, which times the same call a second time
    right after the out-of-place one (the median of |log(out-of-place / in-place)| over the calls
    of a log is, for Gaussian noise, 0.95 of one measurement's sigma; a systematic in-place
    difference only makes it more cautious). Only where nothing repeats is DEFAULT_NOISE assumed.
    """

    def __init__(self, records: Iterable[MeasurementRecord]) -> None:
        raw: dict[tuple, list[float]] = defaultdict(list)
        in_place: dict[tuple, list[float]] = defaultdict(list)
        spreads: list[float] = []
        self.shapes: set[tuple[int, int]] = set()
        for rec in records:
            choice = _record_choice(rec)
            if choice is None:
                continue
            key = (rec.coll, rec.nranks, choice, rec.nbytes)
            if rec.in_place:
                in_place[key].append(rec.time_us)
                continue
            raw[key].append(rec.time_us)
            if rec.nnodes:
                self.shapes.add((rec.nnodes, rec.nranks))
            if len(rec.time_us_runs) > 1:
                runs = np.log(np.asarray(rec.time_us_runs, dtype=float))
                spreads.append(float(np.std(runs)))
        self.times = {k: float(np.median(v)) for k, v in raw.items()}
        for times in raw.values():
            if len(times) > 1:
                spreads.append(float(np.std(np.log(times))))
        if not spreads:
            spreads = [abs(float(np.log(self.times[k] / np.median(v)))) / PAIR_SPREAD_PER_SIGMA
                       for k, v in in_place.items() if k in self.times]
        self.noise = max(float(np.median(spreads)), 0.01) if spreads else DEFAULT_NOISE
        self.sizes: dict[tuple, list[int]] = defaultdict(list)
        for coll, nranks, choice, nbytes in sorted(self.times, key=lambda k: k[3]):
            self.sizes[(coll, nranks, choice)].append(nbytes)

    def __len__(self) -> int:
        return len(self.times)

    def time(self, scenario: Scenario, choice: Choice) -> float | None:
        return self.times.get((scenario.collective, scenario.topology.nranks, choice,
                               scenario.nbytes))

    def measured_sizes(self, scenario: Scenario, choice: Choice) -> list[int]:
        return self.sizes.get((scenario.collective, scenario.topology.nranks, choice), [])

    def choices(self, scenario: Scenario) -> list[Choice]:
        """Every choice measured for this collective on this many ranks (at any size)."""
        key = (scenario.collective, scenario.topology.nranks)
        return [c for (coll, nranks, c) in self.sizes if (coll, nranks) == key]


def calibrated_topology(records: Sequence[MeasurementRecord], topology: Topology
                        ) -> tuple[Topology, str]:
    """The model's system fitted to the measurements, and a note of what happened.

    The one call into calibration (``profiler.calibrate``); parameters the data cannot determine
    keep their base values, and a fit that fails leaves the base system. Without the measured
    corrections: tune corrects each choice itself (:meth:`Tuner._factors`) and judges that
    correction by its residual on the measured sizes, which corrections fitted to the very same
    sizes would make zero, and the uncertainty with it.
    """
    from dynamiccl.profiler.calibrate import CalibrationError, calibrate

    usable = [r for r in records if r.backend == "nccl" and r.straggler_delay_us == 0]
    if not usable:
        return topology, "no measurements: the uncalibrated model"
    try:
        fit = calibrate(usable, topology, keep_undetermined=True, corrections=False)
    except (CalibrationError, ValueError) as exc:
        return topology, f"calibration failed ({exc}); the uncalibrated model"
    fitted = [f.label for f in fit.params if f.determined]
    return fit.topology, (f"calibrated {', '.join(fitted)} (RMS log error {fit.rms_log(False):.3f}"
                          f" -> {fit.rms_log(True):.3f})" if fitted else
                          "calibration determined nothing; the uncalibrated model")


@lru_cache(maxsize=131072)
def _model_run(scenario: Scenario, choice: Choice) -> TimedConfig:
    """What NCCL runs on the model when told ``choice`` (its own pick for the knobs left free)."""
    return decisions.nccl_default(scenario, choice.constraints)


def _model_time(scenario: Scenario, choice: Choice) -> float:
    return _model_run(scenario, choice).time_us


def model_can_run(scenario: Scenario, choice: Choice) -> bool:
    """Whether NCCL could run ``choice`` for this call on the model's system (a fitted system may
    lose a pair the datasheet one has, e.g. one whose fitted bandwidth NCCL's table deems unusable)."""
    try:
        _model_run(scenario, choice)
    except ValueError:  # decisions.NcclCannotRun included
        return False
    return True


#: The size whose time stands for a choice's latency floor (as small as nccl-tests measures).
FLOOR_BYTES = 8


@lru_cache(maxsize=131072)
def _latency_split(scenario: Scenario, choice: Choice, nbytes: int) -> tuple[float, float]:
    """A modelled time at ``nbytes`` as (latency floor, the rest): the Hockney alpha/beta split,
    the floor being the same choice's time at :data:`FLOOR_BYTES`."""
    t = _model_time(replace(scenario, nbytes=nbytes), choice)
    floor = min(_model_time(replace(scenario, nbytes=FLOOR_BYTES), choice), t)
    return floor, t - floor


def _nccl_pair(scenario: Scenario) -> tuple[Algorithm, Protocol]:
    config = _model_run(scenario, DEFAULT).config
    return config.algorithm, config.protocol


def candidate_pairs(scenario: Scenario) -> list[Choice]:
    """Every NCCL algorithm/protocol pair that can run this call."""
    return [Choice(a, p) for a, p in NCCL_PAIRS if pair_constraints(scenario, (a, p)).given()]


@dataclass(frozen=True)
class Estimate:
    """A choice's time at one call as the evidence has it."""

    time_us: float
    sigma: float
    evidence: str
    #: Only the model (calibrated or not) speaks for it: no measurement of this choice anchors it.
    model_only: bool = False


@dataclass(frozen=True)
class CallDecision:
    """What tune decided for one call: the choice it pins (``DEFAULT``: leave NCCL alone), the
    gate's verdict on the best alternative to NCCL's default, and the evidence for every candidate."""

    scenario: Scenario
    chosen: Choice
    #: The most convincing alternative to NCCL's default (the one the verdict judges).
    alternative: Choice
    verdict: Verdict
    #: Every candidate's estimate (the default included), for the report and the plan.
    estimates: dict[Choice, Estimate]


#: Which choices tune weighs for a call (besides NCCL's default).
Candidates = Callable[[Scenario], Sequence[Choice]]


class Tuner:
    """Decisions from a model (``model_topology``: the system as fitted) and measurements.

    ``calibrated`` says whether the model was fitted (the evidence label of model-only estimates).
    ``candidates`` (default :meth:`deployable_candidates`) says which choices are weighed; a
    choice the model cannot run is never weighed.
    """

    def __init__(self, model_topology: Topology, measurements: Measurements, *,
                 margin: float = DEFAULT_MARGIN, calibrated: bool = False,
                 candidates: Candidates | None = None) -> None:
        self.model = model_topology
        self.measurements = measurements
        self.margin = margin
        self.model_evidence = CALIBRATED if calibrated else MODEL
        self.candidates = candidates or self.deployable_candidates

    def deployable_candidates(self, scenario: Scenario) -> list[Choice]:
        """Every algorithm/protocol pair that can run the call, and each such pair with a channel
        count pinned wherever that was measured on this system."""
        pairs = candidate_pairs(scenario)
        pinned = [c for c in self.measurements.choices(scenario) if c.channels is not None
                  and Choice(c.algorithm, c.protocol) in pairs]
        return pairs + sorted(pinned, key=Choice.label)

    def _on_model(self, scenario: Scenario) -> Scenario:
        topo = self.model.resized(nodes=scenario.topology.nodes,
                                  gpus_per_node=scenario.topology.gpus_per_node)
        return replace(scenario, topology=topo)

    def estimate(self, scenario: Scenario, choice: Choice) -> Estimate:
        measured = self.measurements.time(scenario, choice)
        if measured is not None:
            return Estimate(measured, self.measurements.noise, MEASURED)
        model_scn = self._on_model(scenario)
        run = _model_run(model_scn, choice)
        band = uncertainty(scenario.topology, scenario.collective, scenario.nbytes,
                           run.config.algorithm, run.config.protocol)
        sizes = self.measurements.measured_sizes(scenario, choice)
        if choice.is_default:  # NCCL's default is another configuration where NCCL's pick differs
            pick = _nccl_pair(model_scn)
            sizes = [n for n in sizes if _nccl_pair(replace(model_scn, nbytes=n)) == pick]
        if not sizes:
            return Estimate(run.time_us, band, self.model_evidence, model_only=True)
        floor, rest = _latency_split(model_scn, choice, scenario.nbytes)
        a, b, residual, unpinned = self._factors(scenario, model_scn, choice, tuple(sizes))
        x = math.log2(max(scenario.nbytes, 1))
        octaves = float(np.min(np.abs(np.log2(sizes) - x)))
        # the share of this prediction a factor the measurements did not pin carries keeps the
        # model's own uncertainty (a latency floor is not known from bandwidth-bound sizes)
        share = {"floor": floor, "rest": rest, None: 0.0}[unpinned] / max(floor + rest, 1e-12)
        sigma = self.measurements.noise + residual + SIGMA_PER_OCTAVE * octaves + share * band
        if sigma >= band:  # too far from anything measured: the correction says nothing here
            return Estimate(run.time_us, band, self.model_evidence, model_only=True)
        return Estimate(a * floor + b * rest, sigma, CALIBRATED)

    def _factors(self, scenario: Scenario, model_scn: Scenario, choice: Choice,
                 sizes: tuple[int, ...]) -> tuple[float, float, float, str | None]:
        """Latency and bandwidth correction factors of ``choice`` fitted to its measured sizes
        (relative least squares of ``t = a * floor + b * rest``), the fit's RMS log residual, and
        which part the measurements could not pin ("floor", "rest" or None).

        One regime measured (only small or only large calls) pins one factor; the other then
        takes the same value, and stays as uncertain as the model is where it dominates.
        """
        measured = np.array([self.measurements.time(replace(scenario, nbytes=n), choice)
                             for n in sizes])
        split = np.array([_latency_split(model_scn, choice, n) for n in sizes])
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

    def decide(self, scenario: Scenario) -> CallDecision:
        model_scn = self._on_model(scenario)
        estimates = {DEFAULT: self.estimate(scenario, DEFAULT)}
        for choice in self.candidates(scenario):
            if not choice.is_default and model_can_run(model_scn, choice):
                estimates[choice] = self.estimate(scenario, choice)
        default = estimates[DEFAULT]
        nccl_config = _model_run(scenario, DEFAULT).config
        best, best_verdict = DEFAULT, None
        model_default = _model_time(model_scn, DEFAULT)
        for choice, est in estimates.items():
            if choice.is_default:
                continue
            sigma = math.hypot(est.sigma, default.sigma)
            if est.model_only and not default.model_only:
                # Only the model speaks for this choice: trust its ratio to NCCL's default, not
                # its absolute time (a system the model misjudges misjudges both alike). That
                # ratio carries the model's error on both choices, measured default or not.
                est = replace(est, time_us=est.time_us * default.time_us / model_default)
                estimates[choice] = est
                sigma = math.hypot(est.sigma, est.sigma)
            gain = default.time_us / est.time_us - 1.0
            evidence = MEASURED if MEASURED == est.evidence == default.evidence else (
                MODEL if MODEL == est.evidence == default.evidence else CALIBRATED)
            # tune overrides NCCL only where measurements anchor both sides (measured here, or
            # corrected by their own measurements nearby); what only the model says is a reason to
            # measure (plan), not to pin: the model's ratio between two algorithms can be off by
            # far more than its error on one time
            anchored = not (est.model_only or default.model_only)
            verdict = Verdict(nccl_config, _model_run(model_scn, choice).config, gain, sigma,
                              evidence, anchored and passes(gain, sigma, self.margin))
            better = best_verdict is None or (verdict.override, verdict.gain) > (
                best_verdict.override, best_verdict.gain)
            if better:
                best, best_verdict = choice, verdict
        if best_verdict is None:
            best_verdict = Verdict(nccl_config, nccl_config, 0.0, 0.0, default.evidence, False)
        chosen = best if best_verdict.override else DEFAULT
        return CallDecision(scenario, chosen, best, best_verdict, estimates)


class TunedPolicy:
    """A :class:`Tuner`'s decisions as something export can write: pinned choice or defer."""

    name = "tune"

    def __init__(self, tuner: Tuner) -> None:
        self.tuner = tuner

    def decide_rule(self, scenario: Scenario) -> tuple[pf.Decision | None, Verdict]:
        d = self.tuner.decide(scenario)
        if d.chosen.is_default or not d.chosen.exportable:
            return None, d.verdict
        return pf.Decision(d.chosen.algorithm, d.chosen.protocol, d.chosen.channels), d.verdict

    def force(self, scenario: Scenario) -> KnobConstraints:
        return self.tuner.decide(scenario).chosen.constraints

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        from dynamiccl.agents.policy import allowed_actions, forced_action, require_scenario

        scenario = require_scenario(self.name, scenario)
        return forced_action(scenario, self.force(scenario),
                             allowed_actions(scenario, action_mask, True))


# ---------------------------------------------------------------------------------------------
# Planning the next measurements
# ---------------------------------------------------------------------------------------------


def _expected_positive(mean: float, sigma: float) -> float:
    """E[max(0, X)] for X ~ N(mean, sigma)."""
    if sigma <= 0:
        return max(mean, 0.0)
    z = mean / sigma
    return sigma * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) + mean * 0.5 * (
        1 + math.erf(z / math.sqrt(2)))


@dataclass(frozen=True)
class PlannedMeasurement:
    collective: Collective
    nranks: int
    choice: Choice
    nbytes: int
    #: Expected log-gain this measurement could unlock or regression it could prevent.
    value: float
    reason: str


def measurement_value(decision: CallDecision, choice: Choice) -> tuple[float, str]:
    """How much measuring ``choice`` (and NCCL's default, if missing) here could be worth."""
    default = decision.estimates[DEFAULT]
    est = decision.estimates[choice]
    if MEASURED == est.evidence == default.evidence:
        return 0.0, "already measured"
    log_gain = math.log(default.time_us / est.time_us)
    sigma = math.hypot(est.sigma, default.sigma)
    if decision.chosen == choice:
        return _expected_positive(-log_gain, sigma), "the override rests on the model: check it"
    return _expected_positive(log_gain, sigma), "could beat NCCL if measured"


def plan(tuner: Tuner, scenarios: Sequence[Scenario], budget: int) -> list[PlannedMeasurement]:
    """The ``budget`` most valuable (choice, size) measurements, NCCL's default counted too: a
    choice is only decisive next to a measured default, so a missing default is planned first."""
    items: dict[tuple, PlannedMeasurement] = {}
    for scenario in scenarios:
        decision = tuner.decide(scenario)
        key = (scenario.collective, scenario.topology.nranks)
        for choice in decision.estimates:
            if choice.is_default:
                continue
            value, reason = measurement_value(decision, choice)
            if value <= 0:
                continue
            for c in (DEFAULT, choice):
                if tuner.measurements.time(scenario, c) is not None:
                    continue
                item = PlannedMeasurement(scenario.collective, scenario.topology.nranks, c,
                                          scenario.nbytes, value, reason)
                k = (*key, c, scenario.nbytes)
                if k not in items or items[k].value < value:
                    items[k] = item
    ranked = sorted(items.values(), key=lambda m: (-m.value, not m.choice.is_default))
    return ranked[:max(budget, 0)]


_BINARIES = {Collective.ALLREDUCE: "all_reduce_perf", Collective.ALLGATHER: "all_gather_perf",
             Collective.REDUCESCATTER: "reduce_scatter_perf", Collective.BROADCAST: "broadcast_perf",
             Collective.REDUCE: "reduce_perf"}


def nccl_environment(choice: Choice) -> dict[str, str]:
    """The environment that makes NCCL run ``choice`` (empty for NCCL's default): NCCL_ALGO and
    NCCL_PROTO in NCCL's spelling, a channel count as NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS."""
    env: dict[str, str] = {}
    if choice.algorithm is not None:
        env[ALGO_ENV] = ALGORITHM_NCCL_NAMES[choice.algorithm]
    if choice.protocol is not None:
        env[PROTO_ENV] = PROTOCOL_NCCL_NAMES[choice.protocol]
    if choice.channels is not None:
        env[MIN_CHANNELS_ENV] = env[MAX_CHANNELS_ENV] = str(choice.channels)
    return env


#: The MPI launchers a multi-node line is printed for, with how each sets a variable on every rank
#: and places ranks per node: OpenMPI forwards only the variables named with ``-x`` to remote
#: ranks, MPICH's and Intel MPI's Hydra those named with ``-genv`` (a variable set before
#: ``mpirun`` reaches the local ranks only, and ranks choosing differently hang NCCL).
LAUNCHERS = (
    ("OpenMPI", "-N", lambda k, v: f"-x {k}={v}"),
    ("MPICH/Intel MPI", "-ppn", lambda k, v: f"-genv {k} {v}"),
)


def command_lines(planned: Sequence[PlannedMeasurement], gpus_per_node: int) -> list[str]:
    """nccl-tests commands covering the plan: one per (collective, ranks, choice) and contiguous
    run of powers of two (``-b/-e -f 2``), pinned through :func:`nccl_environment`. Across nodes
    each is printed once per launcher of :data:`LAUNCHERS`, the variables set on every rank the
    way that launcher does it and the launcher named in the line's comment."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for m in planned:
        groups[(m.collective, m.nranks, m.choice)].append(m.nbytes)
    lines = []
    for (coll, nranks, choice), sizes in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2].label())):
        sizes = sorted(set(sizes))
        runs: list[list[int]] = [[sizes[0]]]
        for n in sizes[1:]:
            if n == runs[-1][-1] * 2:
                runs[-1].append(n)
            else:
                runs.append([n])
        env = nccl_environment(choice)
        nodes = max(1, nranks // max(gpus_per_node, 1))
        for run in runs:
            test = f"{_BINARIES[coll]} -b {run[0]} -e {run[-1]} -f 2"
            what = f"{choice.label()}, {format_size(run[0])}..{format_size(run[-1])}"
            if nodes == 1:  # one process drives every GPU: the shell's variables reach it
                prefix = "".join(f"{k}={v} " for k, v in env.items())
                lines.append(f"{prefix}{test} -g {nranks}  # {what}")
                continue
            for name, per_node, set_var in LAUNCHERS:
                flags = "".join(f"{set_var(k, v)} " for k, v in env.items())
                lines.append(f"mpirun -np {nranks} {per_node} {min(gpus_per_node, nranks)} {flags}"
                             f"{test} -g 1  # {name}: {what}")
    return lines
