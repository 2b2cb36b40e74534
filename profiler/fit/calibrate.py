"""Fit the simulator to measured collective times: tier values plus the refinements of ``fit_params``.

The fit minimises the squared error of log-times (so a 10 % miss weighs the same at 8 B and at
8 GB), each divided by the run-to-run scatter of a measurement (``MEASUREMENT_SIGMA``), plus the
refinements' prior terms, with the trust-region reflective solver of :mod:`.least_squares` (bounds
keep latencies non-negative, finite-difference Jacobian: the simulator is a black box with kinks).

Each measurement is re-simulated on the base topology resized to the measurement's node and rank
count, with the configuration NCCL actually ran: the one recorded, or — for "NCCL default" and
partly forced runs — the one the NCCL-default model picks on the topology being fitted (re-picked
after each fit until the picks stop changing, since NCCL's choice depends on the system too).

A network tier's latency and its transport's per-message overhead are both paid per network hop,
so the data sees their sum: the overhead's prior keeps it near the transport's value unless the
tier latency cannot absorb the difference (it cannot go below zero), and it is written only if the
data determined it.

Tier bandwidths and efficiencies only show as products, so one (algorithm, protocol) — the one
whose bandwidth the measurements see most — keeps efficiency 1 and defines the tier bandwidths;
the other efficiencies are relative to it.

Each reported uncertainty is a relative 1-sigma from the Jacobian at the solution (data at the
measurement scatter and priors together, marginal over every other free parameter): how precisely
the logs pin the value *given the model*. How far the model itself is off is a separate figure, the
error on held-out sizes (``fit_report``), which is written beside it and which the safety gate adds
to it; scaling the parameters' uncertainty by the misfit as well would count the model's error
twice, and would call nothing determined on exactly the systems the model fits worst, where
calibration helps most. A parameter is *determined* exactly when its reported figure is within
``MAX_REL_STD``; one criterion, so no value is written with an uncertainty that says it is
unknown. A tier parameter the data cannot pin down is *refused*, not guessed: a tier no
measurement crosses, a latency only huge messages were timed for, two parameters the data only sees
as a product. The caller decides whether to keep those at their base values
(``keep_undetermined``). An undetermined refinement is not written: the physical model's value
stands for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dynamiccl.nccl_model import NcclModel
from dynamiccl.profiler.fit import fit_params as FP
from dynamiccl.profiler.fit.fit_params import Param
from dynamiccl.profiler.fit.least_squares import least_squares
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.profiler.formats.system_fit import record_shape
from dynamiccl.simulator import simulate
from dynamiccl.system.calibration import Calibration, Fitted, MeasuredCorrection
from dynamiccl.system.knobs import Config, ConfigBatch, invalid_reason
from dynamiccl.system.knobs import nccl_config as make_nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import Topology

#: d log(time) / d log(parameter) below this for every measurement: the data cannot see it.
MIN_SENSITIVITY = 0.02
#: Reported relative 1-sigma above which a fitted parameter counts as undetermined.
MAX_REL_STD = 0.25
#: Run-to-run scatter of one nccl-tests measurement (log-time 1-sigma; a few percent is typical).
MEASUREMENT_SIGMA = 0.05
_FD_STEP = 1e-4
#: A parameter this close to one of its bounds (solver units) sits on it.
_AT_BOUND = 1e-6
_MAX_PICK_ROUNDS = 4


class CalibrationError(ValueError):
    """The measurements cannot be used, or cannot determine what was asked for."""


class Unplaceable(CalibrationError):
    """One record NCCL could not have run on the system being fitted, as its model has it: skipped
    with a note (:attr:`FitResult.skipped`), never the end of the whole fit."""


@dataclass(frozen=True)
class ParamFit:
    label: str
    base: float
    fitted: float
    #: Relative standard error of the fitted value (log-space), ``nan`` when not fitted.
    rel_std: float
    determined: bool
    note: str = ""

    def to_json(self) -> dict:
        return {"parameter": self.label, "base": self.base, "fitted": self.fitted,
                "rel_std": None if math.isnan(self.rel_std) else self.rel_std,
                "determined": self.determined, "note": self.note}


@dataclass
class Problem:
    """Measurements prepared for simulation: one row per record."""

    records: list[MeasurementRecord]
    base: Topology
    shapes: list[tuple[int, int]]  # (nodes, gpus per node) per record
    measured_us: np.ndarray
    configs: list[Config] = field(default_factory=list)
    #: One note per record left out because NCCL could not have run it on the base topology.
    skipped: list[str] = field(default_factory=list)

    @property
    def collectives(self) -> np.ndarray:
        return np.array([int(r.coll) for r in self.records])

    @property
    def sizes(self) -> np.ndarray:
        return np.array([float(r.nbytes) for r in self.records])


@dataclass
class FitResult:
    """``topology`` is what gets written: fitted tiers plus a ``calibration`` section."""

    topology: Topology
    #: The tier parameters (bandwidth and latency of every tier), in tier order.
    params: list[ParamFit]
    problem: Problem
    predicted_base_us: np.ndarray
    predicted_us: np.ndarray
    iterations: int
    #: The refinements (fit_params), determined or not.
    refinements: list[ParamFit] = field(default_factory=list)

    @property
    def skipped(self) -> list[str]:
        """A note per record left out of the fit (:class:`Unplaceable`)."""
        return self.problem.skipped

    def rms_log(self, fitted: bool = True) -> float:
        pred = self.predicted_us if fitted else self.predicted_base_us
        return float(np.sqrt(np.mean(np.log(pred / self.problem.measured_us) ** 2)))


def prepare(records: Sequence[MeasurementRecord], base: Topology) -> Problem:
    """Checks every record can be simulated on ``base`` (resized) and fixes its shape."""
    if not records:
        raise CalibrationError("no measurements given")
    shapes, measured = [], []
    for rec in records:
        where = rec.where
        if rec.backend != "nccl":
            raise CalibrationError(
                f"{where}: measured with {rec.backend}, which does not run NCCL's algorithms; "
                "calibrate from nccl-tests output or `dynamiccl profile collective --backend nccl`")
        nodes = record_shape(rec, base)[0]
        if rec.nranks % nodes:
            raise CalibrationError(f"{where}: {rec.nranks} ranks do not split over {nodes} nodes")
        shapes.append((nodes, rec.nranks // nodes))
        measured.append(rec.time_us - rec.straggler_delay_us)
    problem = Problem(list(records), base, shapes, np.array(measured, dtype=float))
    for shape in set(shapes):
        try:
            base.resized(nodes=shape[0], gpus_per_node=shape[1])
        except ValueError as exc:
            raise CalibrationError(f"the base topology cannot take the shape of the "
                                   f"measurements ({shape[0]} nodes x {shape[1]} GPUs): {exc}") from None
    return problem


def scaled_bandwidth(topology: Topology, factor: float) -> Topology:
    """Every tier's bandwidth times ``factor``: how an efficiency factor acts on a system."""
    return replace(topology, tiers=tuple(replace(t, bandwidth_GBps=t.bandwidth_GBps * factor)
                                         for t in topology.tiers))


def pick_configs(problem: Problem, topology: Topology) -> list[Config]:
    """What NCCL ran for each record: as recorded, completed by NCCL's own choice where it chose.

    A record the model of ``topology`` cannot place raises :class:`Unplaceable`, unless the problem
    has placed it before (on the base topology): a fitted system may move NCCL's model off a pair
    NCCL did run, and the earlier pick stands."""
    models: dict[tuple[int, int], tuple[Topology, NcclModel]] = {}
    out = []
    for i, (rec, shape) in enumerate(zip(problem.records, problem.shapes, strict=True)):
        if shape not in models:
            topo = topology.resized(nodes=shape[0], gpus_per_node=shape[1])
            models[shape] = (topo, NcclModel(topo))
        topo, model = models[shape]
        try:
            out.append(_record_config(rec, topo, model))
        except Unplaceable:
            if not problem.configs:
                raise
            out.append(problem.configs[i])
    return out


def placed(problem: Problem) -> Problem:
    """The problem with the records NCCL could have run on its base topology, their configurations
    picked, and a note per record left out (:attr:`Problem.skipped`); CalibrationError when none
    is left."""
    keep, configs, skipped = [], [], []
    models: dict[tuple[int, int], tuple[Topology, NcclModel]] = {}
    for i, (rec, shape) in enumerate(zip(problem.records, problem.shapes, strict=True)):
        if shape not in models:
            topo = problem.base.resized(nodes=shape[0], gpus_per_node=shape[1])
            models[shape] = (topo, NcclModel(topo))
        try:
            configs.append(_record_config(rec, *models[shape]))
        except Unplaceable as exc:
            skipped.append(str(exc))
            continue
        keep.append(i)
    if not keep:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise CalibrationError(f"no measurement could have run on {problem.base.name}: "
                               f"{skipped[0]}{more}; give the topology of the system they were "
                               "measured on")
    return Problem([problem.records[i] for i in keep], problem.base,
                   [problem.shapes[i] for i in keep], problem.measured_us[keep], configs,
                   problem.skipped + skipped)


def record_name(rec: MeasurementRecord) -> str:
    """A record as a note names it: where it came from, what it timed and how it was forced."""
    launch = f", launch {rec.launch}" if rec.launch else ""
    return (f"{rec.source or 'a record'} ({rec.collective} {rec.nbytes} B on {rec.nranks} ranks, "
            f"{rec.config_label}{launch})")


def _record_config(rec: MeasurementRecord, topo: Topology, model: NcclModel) -> Config:
    where = record_name(rec)
    algo = Algorithm[rec.algorithm.upper()] if rec.algorithm else None
    proto = Protocol[rec.protocol.upper()] if rec.protocol else None
    if algo is not None and proto is not None and rec.channels:
        config = make_nccl_config(algo, proto, rec.channels)
    else:
        try:
            # Tree and LL are id 0: test for None, not truthiness, or a forced Tree/LL run reads
            # as NCCL's default.
            config = model.choose(rec.coll, rec.nbytes,
                                  algorithms=None if algo is None else {algo},
                                  protocols=None if proto is None else {proto},
                                  channels=rec.channels).config
        except ValueError as exc:
            raise Unplaceable(f"{where}: NCCL could not have run this on {topo.name} "
                              f"({exc})") from None
    reason = invalid_reason(topo, rec.coll, config, protocol_named=proto is not None)
    if reason:
        raise Unplaceable(f"{where}: ran {config.label()}, which {topo.name} does not allow "
                          f"({reason})")
    return config


def predict(problem: Problem, topology: Topology, configs: Sequence[Config]) -> np.ndarray:
    """Simulated time of every record (µs), one simulator call per measured system shape.

    Each configuration is one NCCL ran, so LL128 is timed where its default rule would disable it:
    only a run that named it in ``NCCL_PROTO`` can have run it there (``_record_config``)."""
    out = np.empty(len(problem.records))
    colls, sizes = problem.collectives, problem.sizes
    for shape in set(problem.shapes):
        rows = [i for i, s in enumerate(problem.shapes) if s == shape]
        topo = topology.resized(nodes=shape[0], gpus_per_node=shape[1])
        distinct = list(dict.fromkeys(configs[i] for i in rows))
        column = {c: j for j, c in enumerate(distinct)}
        res = simulate(topo, colls[rows], sizes[rows], ConfigBatch.from_configs(distinct),
                       protocol_named=True)
        out[rows] = res.time_after_straggler_us[np.arange(len(rows)),
                                                [column[configs[i]] for i in rows]]
    return out



def calibrate(records: Sequence[MeasurementRecord], base: Topology,
              keep_undetermined: bool = False, refine: bool = True,
              corrections: bool = True) -> FitResult:
    """Fits every tier parameter the data determines (refusing or keeping the others) and, with
    ``refine``, the refinements of ``fit_params`` the data determines; with ``corrections``, writes
    what the fitted model still misses at each measured size (``dynamiccl.system.calibration``).
    ``FitResult.predicted_us`` is the fitted model's, without the corrections (which would make its
    error on the fitted measurements zero by construction)."""
    if base.calibration is not None and base.calibration.corrections:
        # corrections measured against an earlier fit must not steer this one
        base = replace(base, calibration=replace(base.calibration, corrections=()))
    problem = placed(prepare(records, base))
    predicted_base = predict(problem, base, problem.configs)
    crosses = any(shape[0] > 1 for shape in problem.shapes)
    params = FP.tier_params(base)
    n_tier = len(params)
    if refine:
        params += FP.refinement_params(base, problem.configs, crosses)
    x0 = np.array([FP.encode(p, FP.natural_value(base, p)) for p in params])
    sens = _data_jacobian(problem, base, params, x0, np.arange(n_tier), problem.configs)
    blind = np.max(np.abs(sens), axis=0) < MIN_SENSITIVITY
    notes = {i: _blind_reason(problem, params[i]) for i in np.flatnonzero(blind)}
    _refuse_or_keep(notes, params, keep_undetermined)
    free = np.flatnonzero(~blind)
    start = x0.copy()
    if refine:  # the refinements some measurement is sensitive to, fitted jointly with the tiers
        cand = np.arange(n_tier, len(params))
        start = _starts(problem, params, x0)
        jac = np.abs(_data_jacobian(problem, base, params, start, cand, problem.configs))
        seen = [i for k, i in enumerate(cand) if jac[:, k].max() >= _sensitivity_floor(params[i])]
        effs = [i for i in seen if params[i].kind == "efficiency"]
        bandwidth_free = any(params[i].field != "latency_us" for i in free)
        if effs and bandwidth_free:  # the most measured (algorithm, protocol) defines the tiers
            reference = max(effs, key=lambda i: jac[:, i - n_tier].sum())
            seen.remove(reference)
        free = np.concatenate([free, np.array(seen, dtype=int)])
        start = np.where(np.isin(np.arange(len(params)), free), start, x0)
    x, iterations = _fit_with_picks(problem, base, params, start, free)
    x, free, dropped, n = _drop_undetermined(problem, base, params, x, x0, free, n_tier)
    iterations += n
    # the solver stops a hair inside a bound: a latency it holds at its floor is written as the
    # floor, not 1e-11 above it, and an efficiency at 1 as 1
    x = np.array([_on_bound(p, x[i]) for i, p in enumerate(params)])
    notes.update(dropped)
    _refuse_or_keep({i: why for i, why in dropped.items() if i < n_tier}, params, keep_undetermined)
    std = _posterior(problem, base, params, x, free).std
    rel = np.array([_relative(params[i], x[i], std[i]) for i in range(len(params))])
    fits = [ParamFit(p.label, FP.decode(p, x0[i]), FP.decode(p, x[i]),
                     float(rel[i]) if i in free else math.nan, bool(i in free), notes.get(i, ""))
            for i, p in enumerate(params)]
    topology = _written(base, params, x, rel, free, n_tier, len(problem.records))
    predicted = predict(problem, topology, problem.configs)
    if corrections:
        cal = topology.calibration or Calibration()
        topology = replace(topology, calibration=replace(
            cal, corrections=measured_corrections(problem, predicted)))
    return FitResult(replace(topology, name=f"{base.name}_calibrated"), fits[:n_tier], problem,
                     predicted_base, predicted, iterations, fits[n_tier:])


def measured_corrections(problem: Problem, predicted_us: np.ndarray) -> tuple[MeasuredCorrection, ...]:
    """Measured / predicted per (collective, algorithm, protocol, shape) and size: the geometric
    mean over a size's repeated measurements (in-place and out-of-place rows, reruns)."""
    groups: dict[tuple, dict[float, list[float]]] = {}
    for rec, shape, config, meas, pred in zip(problem.records, problem.shapes, problem.configs,
                                              problem.measured_us, predicted_us, strict=True):
        if not (meas > 0 and pred > 0 and math.isfinite(pred)):
            continue
        key = (int(rec.coll), int(config.algorithm), int(config.protocol), *shape)
        groups.setdefault(key, {}).setdefault(float(rec.nbytes), []).append(math.log(meas / pred))
    out = []
    for (coll, algo, proto, nodes, gpn), by_size in sorted(groups.items()):
        sizes = sorted(s for s in by_size if s > 0)
        if not sizes:
            continue
        factors = tuple(math.exp(float(np.mean(by_size[s]))) for s in sizes)
        out.append(MeasuredCorrection(Collective(coll), Algorithm(algo), Protocol(proto), nodes, gpn,
                                      tuple(sizes), factors))
    return tuple(out)


def _written(base: Topology, params: list[Param], x: np.ndarray, rel: np.ndarray, free: np.ndarray,
             n_tier: int, n_records: int) -> Topology:
    """Fitted tiers, and a calibration section with the determined refinements and tier fits."""
    keep = [i for i in free]  # parameters not fitted keep the base topology's exact values
    topo = FP.apply(base, [params[i] for i in keep], x[keep], rel[keep])
    tier_fits = tuple((params[i].label, Fitted(FP.decode(params[i], x[i]), float(rel[i])))
                      for i in free if i < n_tier)
    cal = topo.calibration or Calibration()
    return replace(topo, calibration=replace(cal, measurements=n_records, tiers=tier_fits))


def _drop_undetermined(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
                       x0: np.ndarray, free: np.ndarray,
                       n_tier: int) -> tuple[np.ndarray, np.ndarray, dict[int, str], int]:
    """Sets parameters whose reported uncertainty exceeds ``MAX_REL_STD`` back to their base values
    and refits, until every parameter left is determined by the very figure reported for it.

    One at a time, because of two parameters the data sees only together the one left is
    determined once its partner is gone; refinements before tier parameters (a tier value is the
    model, a refinement only a deviation from it); and of those, the one whose return to its base
    value costs the fit least. Not simply the most uncertain one: when the data pins a sum (a
    network hop's latency plus the transport's overhead) near a bound, only one of the two can go
    back to its base value without the other having to go below zero. Returns the new solution,
    the free parameters, a note per dropped one and the solver's function evaluations.
    """
    dropped: dict[int, str] = {}
    iterations = 0
    while len(free):
        post = _posterior(problem, base, params, x, free)
        rel = {int(i): _relative(params[i], x[i], post.std[i]) for i in free}
        over = [i for i in rel if rel[i] > MAX_REL_STD]
        if not over:
            break
        candidates = [i for i in over if i >= n_tier] or over
        if len(candidates) > 1:
            costs = {c: _cost_at_base(problem, base, params, x, x0, free, c) for c in candidates}
            iterations += sum(n for _, n in costs.values())
            drop = min(candidates, key=lambda c: costs[c][0])
        else:
            drop = candidates[0]
        partner = post.partner.get(drop)
        seen_with = "" if partner is None else \
            f" (the data sees it together with {params[partner].label})"
        advice = ("add measurements that separate them" if partner is not None else
                  "add measurements where it shows")
        if drop >= n_tier:
            advice = "the physical model's value stands"
        dropped[drop] = f"only determined to ±{100 * rel[drop]:.0f}%{seen_with}; {advice}"
        x[drop] = x0[drop]
        free = free[free != drop]
        x, n = _fit_with_picks(problem, base, params, x, free)
        iterations += n
    return x, free, dropped, iterations


def _cost_at_base(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
                  x0: np.ndarray, free: np.ndarray, i: int) -> tuple[float, int]:
    """The data's squared misfit once parameter ``i`` is back at its base value and the others
    refitted, and the solver's function evaluations."""
    trial = x.copy()
    trial[i] = x0[i]
    trial, n = _solve(problem, base, params, trial, free[free != i])
    r = _residuals(problem, base, params, trial)
    return float(r @ r), n


def _starts(problem: Problem, params: list[Param], x0: np.ndarray) -> np.ndarray:
    """Where the solver starts. A launch floor below every prediction has no gradient, so it starts
    just under the fastest measurement, where it binds if the system has one; the prior stays
    centred on the model's value."""
    start = x0.copy()
    for i, p in enumerate(params):
        if p.kind == "launch_floor":
            start[i] = max(x0[i], 0.8 * float(problem.measured_us.min()))
    return start


def _sensitivity_floor(p: Param) -> float:
    """Least |d log(time) / d parameter| for a refinement to be worth fitting: a 10 % effect from
    its prior's 1-sigma (a factor e^0.5 of efficiency, 10 µs of latency)."""
    return 0.1 / p.prior_sigma


def _relative(p: Param, x: float, std: float) -> float:
    """Relative 1-sigma of a parameter's decoded value from its sigma in solver units."""
    if not math.isfinite(std):
        return math.inf
    if p.log_coded:
        return math.expm1(std) if std < 50 else math.inf
    return std / max(FP.decode(p, x), 1.0)  # below 1 µs: relative to 1 µs


def _fit_with_picks(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
                    free: np.ndarray) -> tuple[np.ndarray, int]:
    """Solves, re-picks what NCCL would run on the fitted system, and solves again until stable."""
    iterations = 0
    for _ in range(_MAX_PICK_ROUNDS):
        x, n = _solve(problem, base, params, x, free)
        iterations += n
        picks = pick_configs(problem, FP.apply(base, params, x))
        if picks == problem.configs:
            break
        problem.configs = picks
    return x, iterations


def _residuals(problem: Problem, base: Topology, params: list[Param], x: np.ndarray) -> np.ndarray:
    """Data residuals in units of the measurement scatter.

    A trial point of the solver may take a log-coded bandwidth towards zero; the predicted times
    then overflow to infinity, which is the right answer (least_squares rejects a trial point whose
    residuals are not finite and shrinks its step), so the overflow is not worth a warning."""
    topo = FP.apply(base, params, x)
    with np.errstate(over="ignore"):
        predicted = predict(problem, topo, problem.configs)
    return np.log(predicted / problem.measured_us) / MEASUREMENT_SIGMA


def _priors(base: Topology, params: list[Param], x: np.ndarray, free: np.ndarray) -> np.ndarray:
    rows = [(x[i] - FP.encode(params[i], FP.natural_value(base, params[i]))) / params[i].prior_sigma
            for i in free if params[i].prior_sigma is not None]
    return np.array(rows, dtype=float)


def _on_bound(p: Param, value: float) -> float:
    """``value`` snapped onto a bound of ``p`` it sits within ``_AT_BOUND`` of."""
    low, high = FP.lower_bound(p), FP.upper_bound(p)
    return low if value - low < _AT_BOUND else high if high - value < _AT_BOUND else value


def _solve(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
           free: np.ndarray) -> tuple[np.ndarray, int]:
    if not len(free):
        return x, 0
    full = x.copy()

    def fun(z: np.ndarray) -> np.ndarray:
        full[free] = z
        return np.concatenate([_residuals(problem, base, params, full), _priors(base, params, full, free)])

    lower = np.array([FP.lower_bound(params[i]) for i in free])
    upper = np.array([FP.upper_bound(params[i]) for i in free])
    start = np.clip(x[free], lower, upper)
    res = least_squares(fun, start, lower, upper, diff_step=_FD_STEP, max_nfev=200 * len(free))
    out = x.copy()
    out[free] = res.x
    return out, int(res.nfev)


def _data_jacobian(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
                   cols: np.ndarray, configs: Sequence[Config]) -> np.ndarray:
    """Central differences of log-time in solver units (elasticities for log-coded parameters)."""
    jac = np.zeros((len(problem.records), len(cols)))
    for k, i in enumerate(cols):
        step = np.zeros_like(x)
        step[i] = _FD_STEP * max(1.0, abs(x[i])) if not params[i].log_coded else _FD_STEP
        up = _residuals(problem, base, params, x + step)
        down = _residuals(problem, base, params, x - step)
        jac[:, k] = (up - down) * MEASUREMENT_SIGMA / (2 * step[i])
    return jac


@dataclass(frozen=True)
class Posterior:
    """What the data and the priors say about the free parameters at a solution (solver units)."""

    #: Marginal sigma of every parameter (inf where not free): the uncertainty reported.
    std: np.ndarray
    #: Sigma of each free parameter were every other one known: the least it could ever reach.
    alone: np.ndarray
    #: Each free parameter's most correlated free partner, where the correlation is strong (> 0.5).
    partner: dict[int, int]


def _posterior(problem: Problem, base: Topology, params: list[Param], x: np.ndarray,
               free: np.ndarray) -> Posterior:
    """The Gauss-Newton posterior of the free parameters from data (at the measurement scatter) and
    priors together. A direction the data cannot see at all gets an enormous variance from the tiny
    ridge instead of a misleading pseudo-inverse.

    A latency the data pushes against its bound of 0 µs is pinned by the bound, which a Gaussian
    cannot say: two latencies the data only sees as a sum near 0 would each read as "anything
    within ±10 µs" although neither can be above the sum. Such a parameter counts as fixed for the
    others' covariance (an active constraint, as in constrained least squares), and its own
    uncertainty is how far its information alone lets it rise above 0.
    """
    std = np.full(len(params), math.inf)
    alone = np.full(len(params), math.inf)
    if not len(free):
        return Posterior(std, alone, {})
    jac = _data_jacobian(problem, base, params, x, free, problem.configs) / MEASUREMENT_SIGMA
    prior = np.array([0.0 if params[i].prior_sigma is None else 1.0 / params[i].prior_sigma ** 2
                      for i in free])
    h = jac.T @ jac + np.diag(prior)
    r = _residuals(problem, base, params, x)
    alone[free] = np.sqrt(1.0 / np.maximum(np.diag(h), 1e-30))
    centre = np.array([FP.encode(params[i], FP.natural_value(base, params[i])) for i in free])
    gradient = jac.T @ r + prior * (x[free] - centre)  # of half the squared residuals
    pinned = np.array([(x[i] - FP.lower_bound(params[i]) < _AT_BOUND and gradient[k] > 0)
                       or (FP.upper_bound(params[i]) - x[i] < _AT_BOUND and gradient[k] < 0)
                       for k, i in enumerate(free)], dtype=bool)
    inner = np.flatnonzero(~pinned)
    std[free[pinned]] = alone[free[pinned]]
    partner: dict[int, int] = {}
    if len(inner):
        hi = h[np.ix_(inner, inner)]
        ridge = 1e-10 * max(float(np.max(np.diag(hi))), 1e-30)
        cov = np.linalg.inv(hi + ridge * np.eye(len(hi)))
        idx = free[inner]
        std[idx] = np.sqrt(np.maximum(np.diag(cov), 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            corr = np.nan_to_num(cov / np.outer(std[idx], std[idx]))
        np.fill_diagonal(corr, 0.0)
        partner = {int(i): int(idx[np.argmax(np.abs(corr[k]))]) for k, i in enumerate(idx)
                   if len(idx) > 1 and np.max(np.abs(corr[k])) > 0.5}
    return Posterior(std, alone, partner)


def _refuse_or_keep(notes: dict[int, str], params: list[Param], keep: bool) -> None:
    if notes and not keep:
        lines = "; ".join(f"{params[i].label}: {why}" for i, why in notes.items())
        raise CalibrationError(
            f"the measurements cannot determine {len(notes)} parameter(s): {lines}. Add "
            "measurements that exercise them, or pass --keep-undetermined to keep their base values")


def _blind_reason(problem: Problem, p: Param) -> str:
    crossed = any(problem.base.resized(nodes=s[0], gpus_per_node=s[1]).tiers[p.tier].size > 1
                  for s in set(problem.shapes))
    if not crossed:
        return (f"no measurement crosses the {problem.base.tiers[p.tier].name} tier (every run "
                "fits inside one group of it); measure across it, e.g. on 2 or more nodes")
    if p.field == "latency_us":
        return "no measurement is small enough for this tier's latency to show; add small sizes"
    return "no measurement is limited by this tier's bandwidth; add large sizes that cross it"
