"""``dynamiccl tune``: from a system's measurements to a gated policy, and to the next measurements.

The decisions are the ones a user can verify with nccl-tests: per collective, system shape and
message size, pin ``NCCL_ALGO``/``NCCL_PROTO`` to one pair (NCCL keeps choosing channels) or leave
NCCL alone. Evidence, strongest first:

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
override only where the gain clears the margin and its uncertainty.

:func:`plan` ranks the measurements not yet made by how much they could change a decision — the
expected gain a deferred choice could unlock, or the regression risk of an override that rests on
the model — and writes them as nccl-tests command lines.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from dynamiccl import decisions
from dynamiccl import policy_file as pf
from dynamiccl.agents.baselines import NCCL_PAIRS, pair_constraints
from dynamiccl.agents.gate import CALIBRATED, DEFAULT_MARGIN, MEASURED, MODEL, Verdict, passes, uncertainty
from dynamiccl.decisions import KnobConstraints
from dynamiccl.knobs import Algorithm, Collective, Config, Protocol, parse_enum
from dynamiccl.profiler.records import MeasurementRecord
from dynamiccl.scenario import Scenario
from dynamiccl.topology import Topology
from dynamiccl.units import format_size

#: Relative noise of one measurement when the records do not say: the top of the 1-5 % run-to-run
#: spread nccl-tests runs show, so a single measurement never looks more certain than it is.
DEFAULT_NOISE = 0.05
#: How fast a measured correction loses credibility with distance (relative sigma per octave).
SIGMA_PER_OCTAVE = 0.04
#: The sizes decisions are made and measured at: nccl-tests' -b 8 -e 16G -f 2.
DECISION_SIZES: tuple[int, ...] = tuple(1 << k for k in range(3, 35))


@dataclass(frozen=True, order=True)
class Pair:
    """A pinned (algorithm, protocol); both None = NCCL's default (nothing pinned)."""

    algorithm: Algorithm | None = None
    protocol: Protocol | None = None

    @property
    def constraints(self) -> KnobConstraints:
        return KnobConstraints(algorithm=self.algorithm, protocol=self.protocol)

    @property
    def is_default(self) -> bool:
        return self.algorithm is None and self.protocol is None

    def label(self) -> str:
        if self.is_default:
            return "NCCL default"
        return f"{self.algorithm.name.lower()}/{self.protocol.name.lower()}"


DEFAULT = Pair()


def _record_pair(rec: MeasurementRecord) -> Pair | None:
    """The pair a record measured; None for records tune cannot use (pinned channels, one knob)."""
    if rec.channels is not None or rec.backend != "nccl" or rec.straggler_delay_us > 0:
        return None
    if rec.algorithm is None and rec.protocol is None:
        return DEFAULT
    if rec.algorithm is None or rec.protocol is None:
        return None
    return Pair(Algorithm(parse_enum(Algorithm, rec.algorithm)),
                Protocol(parse_enum(Protocol, rec.protocol)))


class Measurements:
    """Measured times per (collective, ranks, pair, size): the median of out-of-place runs."""

    def __init__(self, records: Iterable[MeasurementRecord]) -> None:
        raw: dict[tuple, list[float]] = defaultdict(list)
        spreads: list[float] = []
        self.shapes: set[tuple[int, int]] = set()
        for rec in records:
            pair = _record_pair(rec)
            if pair is None or rec.in_place:
                continue
            raw[(rec.coll, rec.nranks, pair, rec.nbytes)].append(rec.time_us)
            if rec.nnodes:
                self.shapes.add((rec.nnodes, rec.nranks))
            if len(rec.time_us_runs) > 1:
                runs = np.log(np.asarray(rec.time_us_runs, dtype=float))
                spreads.append(float(np.std(runs)))
        self.times = {k: float(np.median(v)) for k, v in raw.items()}
        for times in raw.values():
            if len(times) > 1:
                spreads.append(float(np.std(np.log(times))))
        self.noise = max(float(np.median(spreads)), 0.01) if spreads else DEFAULT_NOISE
        self.sizes: dict[tuple, list[int]] = defaultdict(list)
        for coll, nranks, pair, nbytes in sorted(self.times, key=lambda k: k[3]):
            self.sizes[(coll, nranks, pair)].append(nbytes)

    def __len__(self) -> int:
        return len(self.times)

    def time(self, scenario: Scenario, pair: Pair) -> float | None:
        return self.times.get((scenario.collective, scenario.topology.nranks, pair,
                               scenario.nbytes))

    def measured_sizes(self, scenario: Scenario, pair: Pair) -> list[int]:
        return self.sizes.get((scenario.collective, scenario.topology.nranks, pair), [])


def calibrated_topology(records: Sequence[MeasurementRecord], topology: Topology
                        ) -> tuple[Topology, str]:
    """The model's system fitted to the measurements, and a note of what happened.

    The one call into calibration (``profiler.calibrate``); parameters the data cannot determine
    keep their base values, and a fit that fails leaves the base system.
    """
    from dynamiccl.profiler.calibrate import CalibrationError, calibrate

    usable = [r for r in records if r.backend == "nccl" and r.straggler_delay_us == 0]
    if not usable:
        return topology, "no measurements: the uncalibrated model"
    try:
        fit = calibrate(usable, topology, keep_undetermined=True, max_iter=30)
    except (CalibrationError, ValueError) as exc:
        return topology, f"calibration failed ({exc}); the uncalibrated model"
    fitted = [f.label for f in fit.params if f.determined]
    return fit.topology, (f"calibrated {', '.join(fitted)} (RMS log error {fit.rms_log(False):.3f}"
                          f" -> {fit.rms_log(True):.3f})" if fitted else
                          "calibration determined nothing; the uncalibrated model")


@lru_cache(maxsize=131072)
def _model_time(scenario: Scenario, pair: Pair) -> float:
    if pair.is_default:
        return decisions.nccl_default(scenario).time_us
    return decisions.nccl_default(scenario, pair.constraints).time_us


#: The size whose time stands for a choice's latency floor (as small as nccl-tests measures).
FLOOR_BYTES = 8


@lru_cache(maxsize=131072)
def _latency_split(scenario: Scenario, pair: Pair, nbytes: int) -> tuple[float, float]:
    """A modelled time at ``nbytes`` as (latency floor, the rest): the Hockney alpha/beta split,
    the floor being the same choice's time at :data:`FLOOR_BYTES`."""
    t = _model_time(replace(scenario, nbytes=nbytes), pair)
    floor = min(_model_time(replace(scenario, nbytes=FLOOR_BYTES), pair), t)
    return floor, t - floor


@lru_cache(maxsize=131072)
def _nccl_pair(scenario: Scenario) -> tuple[Algorithm, Protocol]:
    config = decisions.nccl_default(scenario).config
    return config.algorithm, config.protocol


def candidate_pairs(scenario: Scenario) -> list[Pair]:
    """Every NCCL algorithm/protocol pair that can run this call."""
    return [Pair(a, p) for a, p in NCCL_PAIRS if pair_constraints(scenario, (a, p)).given()]


@dataclass(frozen=True)
class Estimate:
    """A pair's time at one call as the evidence has it."""

    time_us: float
    sigma: float
    evidence: str


@dataclass(frozen=True)
class Decision:
    scenario: Scenario
    chosen: Pair
    verdict: Verdict
    #: Every candidate's estimate (the default included), for the report and the plan.
    estimates: dict[Pair, Estimate]


class Tuner:
    """Decisions from a model (``model_topology``: the system as fitted) and measurements.

    ``calibrated`` says whether the model was fitted (the evidence label of model-only estimates).
    """

    def __init__(self, model_topology: Topology, measurements: Measurements, *,
                 margin: float = DEFAULT_MARGIN, calibrated: bool = False) -> None:
        self.model = model_topology
        self.measurements = measurements
        self.margin = margin
        self.model_evidence = CALIBRATED if calibrated else MODEL

    def _on_model(self, scenario: Scenario) -> Scenario:
        topo = self.model.resized(nodes=scenario.topology.nodes,
                                  gpus_per_node=scenario.topology.gpus_per_node)
        return replace(scenario, topology=topo)

    def estimate(self, scenario: Scenario, pair: Pair) -> Estimate:
        measured = self.measurements.time(scenario, pair)
        if measured is not None:
            return Estimate(measured, self.measurements.noise, MEASURED)
        model_scn = self._on_model(scenario)
        predicted = _model_time(model_scn, pair)
        band = uncertainty(scenario.topology, scenario.collective, scenario.nbytes,
                           pair.algorithm or Algorithm.RING, pair.protocol or Protocol.SIMPLE)
        sizes = self.measurements.measured_sizes(scenario, pair)
        if pair.is_default:  # NCCL's default is another configuration where NCCL's pick differs
            pick = _nccl_pair(model_scn)
            sizes = [n for n in sizes if _nccl_pair(replace(model_scn, nbytes=n)) == pick]
        if not sizes:
            return Estimate(predicted, band, self.model_evidence)
        floor, rest = _latency_split(model_scn, pair, scenario.nbytes)
        a, b, residual = self._factors(scenario, model_scn, pair, tuple(sizes))
        x = math.log2(max(scenario.nbytes, 1))
        octaves = float(np.min(np.abs(np.log2(sizes) - x)))
        sigma = self.measurements.noise + residual + SIGMA_PER_OCTAVE * octaves
        if sigma >= band:  # too far from anything measured: the correction says nothing here
            return Estimate(predicted, band, self.model_evidence)
        return Estimate(a * floor + b * rest, sigma, CALIBRATED)

    def _factors(self, scenario: Scenario, model_scn: Scenario, pair: Pair,
                 sizes: tuple[int, ...]) -> tuple[float, float, float]:
        """Latency and bandwidth correction factors of ``pair`` fitted to its measured sizes
        (relative least squares of ``t = a * floor + b * rest``), and the fit's RMS log residual.

        One regime measured (only small or only large calls) pins one factor; the other then
        takes the same value, and the octave distance keeps far sizes uncertain.
        """
        measured = np.array([self.measurements.time(replace(scenario, nbytes=n), pair)
                             for n in sizes])
        split = np.array([_latency_split(model_scn, pair, n) for n in sizes])
        rows = split / measured[:, None]
        ratio = float(np.exp(np.mean(np.log(measured / split.sum(axis=1)))))
        a = b = ratio
        if len(sizes) > 1 and np.linalg.matrix_rank(rows, tol=0.05) == 2:
            (a, b), *_ = np.linalg.lstsq(rows, np.ones(len(sizes)), rcond=None)
            if not (0.05 < a < 20 and 0.05 < b < 20):
                a = b = ratio
        fitted = split @ np.array([a, b])
        residual = float(np.sqrt(np.mean(np.log(measured / fitted) ** 2)))
        return float(a), float(b), residual

    def decide(self, scenario: Scenario) -> Decision:
        estimates = {DEFAULT: self.estimate(scenario, DEFAULT)}
        for pair in candidate_pairs(scenario):
            estimates[pair] = self.estimate(scenario, pair)
        default = estimates[DEFAULT]
        nccl_config = decisions.nccl_default(scenario).config
        best, best_verdict = DEFAULT, None
        model_default = _model_time(self._on_model(scenario), DEFAULT)
        for pair, est in estimates.items():
            if pair.is_default:
                continue
            sigma = math.hypot(est.sigma, default.sigma)
            if est.evidence == self.model_evidence != default.evidence:
                # Only the model speaks for this choice: trust its ratio to NCCL's default, not
                # its absolute time (a system the model misjudges misjudges both alike). That
                # ratio carries the model's error on both choices, measured default or not.
                est = replace(est, time_us=est.time_us * default.time_us / model_default)
                estimates[pair] = est
                sigma = math.hypot(est.sigma, est.sigma)
            gain = default.time_us / est.time_us - 1.0
            evidence = MEASURED if MEASURED == est.evidence == default.evidence else (
                MODEL if MODEL == est.evidence == default.evidence else CALIBRATED)
            verdict = Verdict(nccl_config, _pair_config(pair, nccl_config), gain, sigma, evidence,
                              passes(gain, sigma, self.margin))
            better = best_verdict is None or (verdict.override, verdict.gain) > (
                best_verdict.override, best_verdict.gain)
            if better:
                best, best_verdict = pair, verdict
        if best_verdict is None:
            best_verdict = Verdict(nccl_config, nccl_config, 0.0, 0.0, default.evidence, False)
        chosen = best if best_verdict.override else DEFAULT
        return Decision(scenario, chosen, best_verdict, estimates)


def _pair_config(pair: Pair, nccl: Config) -> Config:
    """A label-able configuration for a pair (the channel count shown is NCCL's)."""
    from dynamiccl.knobs import nccl_config

    return nccl_config(pair.algorithm, pair.protocol, nccl.channels)


class TunedPolicy:
    """A :class:`Tuner`'s decisions as something export can write: pinned pair or defer."""

    name = "tune"

    def __init__(self, tuner: Tuner) -> None:
        self.tuner = tuner

    def decide_rule(self, scenario: Scenario) -> tuple[pf.Decision | None, Verdict]:
        d = self.tuner.decide(scenario)
        if d.chosen.is_default:
            return None, d.verdict
        return pf.Decision(d.chosen.algorithm, d.chosen.protocol), d.verdict

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
    pair: Pair
    nbytes: int
    #: Expected log-gain this measurement could unlock or regression it could prevent.
    value: float
    reason: str


def measurement_value(decision: Decision, pair: Pair) -> tuple[float, str]:
    """How much measuring ``pair`` (and NCCL's default, if missing) here could be worth."""
    default = decision.estimates[DEFAULT]
    est = decision.estimates[pair]
    if MEASURED == est.evidence == default.evidence:
        return 0.0, "already measured"
    log_gain = math.log(default.time_us / est.time_us)
    sigma = math.hypot(est.sigma, default.sigma)
    if decision.chosen == pair:
        return _expected_positive(-log_gain, sigma), "the override rests on the model: check it"
    return _expected_positive(log_gain, sigma), "could beat NCCL if measured"


def plan(tuner: Tuner, scenarios: Sequence[Scenario], budget: int) -> list[PlannedMeasurement]:
    """The ``budget`` most valuable (pair, size) measurements, NCCL's default counted too: a pair
    is only decisive next to a measured default, so a missing default is planned first."""
    items: dict[tuple, PlannedMeasurement] = {}
    for scenario in scenarios:
        decision = tuner.decide(scenario)
        key = (scenario.collective, scenario.topology.nranks)
        for pair in decision.estimates:
            if pair.is_default:
                continue
            value, reason = measurement_value(decision, pair)
            if value <= 0:
                continue
            for p in (DEFAULT, pair):
                if tuner.measurements.time(scenario, p) is not None:
                    continue
                item = PlannedMeasurement(scenario.collective, scenario.topology.nranks, p,
                                          scenario.nbytes, value, reason)
                k = (*key, p, scenario.nbytes)
                if k not in items or items[k].value < value:
                    items[k] = item
    ranked = sorted(items.values(), key=lambda m: (-m.value, not m.pair.is_default))
    return ranked[:max(budget, 0)]


_BINARIES = {Collective.ALLREDUCE: "all_reduce_perf", Collective.ALLGATHER: "all_gather_perf",
             Collective.REDUCESCATTER: "reduce_scatter_perf", Collective.BROADCAST: "broadcast_perf",
             Collective.REDUCE: "reduce_perf"}


def command_lines(planned: Sequence[PlannedMeasurement], gpus_per_node: int) -> list[str]:
    """nccl-tests commands covering the plan: one per (collective, ranks, pair) and contiguous run
    of powers of two (``-b/-e -f 2``), pinned with NCCL_ALGO/NCCL_PROTO (nothing for the default)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for m in planned:
        groups[(m.collective, m.nranks, m.pair)].append(m.nbytes)
    lines = []
    for (coll, nranks, pair), sizes in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][2].label())):
        sizes = sorted(set(sizes))
        runs: list[list[int]] = [[sizes[0]]]
        for n in sizes[1:]:
            if n == runs[-1][-1] * 2:
                runs[-1].append(n)
            else:
                runs.append([n])
        env = "" if pair.is_default else (f"NCCL_ALGO={_nccl_name(pair.algorithm)} "
                                          f"NCCL_PROTO={_nccl_name(pair.protocol)} ")
        nodes = max(1, nranks // max(gpus_per_node, 1))
        launcher = (f"mpirun -np {nranks} -N {min(gpus_per_node, nranks)} " if nodes > 1 else "")
        gpus = "-g 1" if nodes > 1 else f"-g {nranks}"
        for run in runs:
            lines.append(f"{env}{launcher}{_BINARIES[coll]} -b {run[0]} -e {run[-1]} -f 2 {gpus}"
                         f"  # {pair.label()}, {format_size(run[0])}..{format_size(run[-1])}")
    return lines


def _nccl_name(value: Algorithm | Protocol) -> str:
    """NCCL's spelling in NCCL_ALGO/NCCL_PROTO (case-insensitive, as NCCL parses them)."""
    names = {Algorithm.NVLS_TREE: "NVLSTree", Algorithm.COLLNET_DIRECT: "CollnetDirect",
             Algorithm.COLLNET_CHAIN: "CollnetChain", Algorithm.NVLS: "NVLS", Algorithm.PAT: "PAT",
             Algorithm.TREE: "Tree", Algorithm.RING: "Ring", Protocol.LL: "LL",
             Protocol.LL128: "LL128", Protocol.SIMPLE: "Simple"}
    return names[value]
