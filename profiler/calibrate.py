"""Fit the simulator's per-tier bandwidth and latency to measured collective times.

The fit minimises the squared error of log-times (so a 10 % miss weighs the same at 8 B and at
8 GB) over the log of every tier parameter, with Levenberg–Marquardt on a finite-difference
Jacobian: the simulator is a black box with kinks (minimums over caps), small and fast, so no
analytic derivatives and no SciPy are needed.

Each measurement is re-simulated on the base topology resized to the measurement's node and rank
count, with the configuration NCCL actually ran: the one recorded, or — for "NCCL default" and
partly forced runs — the one the NCCL-default model picks on the topology being fitted (re-picked
after each fit until the picks stop changing, since NCCL's choice depends on the system too).

A parameter the data cannot pin down is *refused*, not guessed: a tier no measurement crosses,
a latency only huge messages were timed for, two parameters the data only sees as a product. The
caller decides whether to keep those at their base values (``keep_undetermined``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dynamiccl.knobs import Config, ConfigBatch, invalid_reason
from dynamiccl.knobs import nccl_config as make_nccl_config
from dynamiccl.nccl import Algorithm, Protocol
from dynamiccl.nccl_model import NcclModel
from dynamiccl.profiler.records import MeasurementRecord
from dynamiccl.simulator import simulate
from dynamiccl.topology import Topology

#: d log(time) / d log(parameter) below this for every measurement: the data cannot see it.
MIN_SENSITIVITY = 0.02
#: Relative standard error above which a fitted parameter counts as undetermined.
MAX_REL_STD = 0.25
_FD_STEP = 1e-4
_MAX_PICK_ROUNDS = 4


class CalibrationError(ValueError):
    """The measurements cannot be used, or cannot determine what was asked for."""


@dataclass(frozen=True)
class Param:
    tier: int
    field: str  # "bandwidth_GBps" or "latency_us"
    label: str


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

    @property
    def collectives(self) -> np.ndarray:
        return np.array([int(r.coll) for r in self.records])

    @property
    def sizes(self) -> np.ndarray:
        return np.array([float(r.nbytes) for r in self.records])


@dataclass
class FitResult:
    topology: Topology
    params: list[ParamFit]
    problem: Problem
    predicted_base_us: np.ndarray
    predicted_us: np.ndarray
    iterations: int

    def rms_log(self, fitted: bool = True) -> float:
        pred = self.predicted_us if fitted else self.predicted_base_us
        return float(np.sqrt(np.mean(np.log(pred / self.problem.measured_us) ** 2)))


def prepare(records: Sequence[MeasurementRecord], base: Topology) -> Problem:
    """Checks every record can be simulated on ``base`` (resized) and fixes its shape."""
    if not records:
        raise CalibrationError("no measurements given")
    shapes, measured = [], []
    for rec in records:
        where = rec.source or "a record"
        if rec.backend != "nccl":
            raise CalibrationError(
                f"{where}: measured with {rec.backend}, which does not run NCCL's algorithms; "
                "calibrate from nccl-tests output or `dynamiccl profile collective --backend nccl`")
        nodes = rec.nnodes or max(1, rec.nranks // base.gpus_per_node)
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


def parameters(base: Topology) -> list[Param]:
    """Bandwidth and latency of every tier (whether the data can see them is decided later)."""
    return [Param(i, f, f"{t.name}.{f}") for i, t in enumerate(base.tiers)
            for f in ("bandwidth_GBps", "latency_us")]


def with_values(base: Topology, params: Sequence[Param], values: np.ndarray) -> Topology:
    tiers = list(base.tiers)
    for p, v in zip(params, values, strict=True):
        tiers[p.tier] = replace(tiers[p.tier], **{p.field: float(v)})
    return replace(base, tiers=tuple(tiers))


def scaled_bandwidth(topology: Topology, factor: float) -> Topology:
    """Every tier's bandwidth times ``factor``: how an efficiency factor acts on a system."""
    return replace(topology, tiers=tuple(replace(t, bandwidth_GBps=t.bandwidth_GBps * factor)
                                         for t in topology.tiers))


def pick_configs(problem: Problem, topology: Topology) -> list[Config]:
    """What NCCL ran for each record: as recorded, completed by NCCL's own choice where it chose."""
    models: dict[tuple[int, int], tuple[Topology, NcclModel]] = {}
    out = []
    for rec, shape in zip(problem.records, problem.shapes, strict=True):
        if shape not in models:
            topo = topology.resized(nodes=shape[0], gpus_per_node=shape[1])
            models[shape] = (topo, NcclModel(topo))
        topo, model = models[shape]
        out.append(_record_config(rec, topo, model))
    return out


def _record_config(rec: MeasurementRecord, topo: Topology, model: NcclModel) -> Config:
    where = rec.source or "a record"
    algo = Algorithm[rec.algorithm.upper()] if rec.algorithm else None
    proto = Protocol[rec.protocol.upper()] if rec.protocol else None
    if algo is not None and proto is not None and rec.channels:
        config = make_nccl_config(algo, proto, rec.channels)
    else:
        try:
            config = model.choose(rec.coll, rec.nbytes, algorithms={algo} if algo else None,
                                  protocols={proto} if proto else None,
                                  channels=rec.channels).config
        except ValueError as exc:
            raise CalibrationError(f"{where}: NCCL could not have run this on the base topology "
                                   f"({exc}); check the base topology's features") from None
    reason = invalid_reason(topo, rec.coll, config)
    if reason:
        raise CalibrationError(f"{where}: ran {config.label()}, which the base topology does not "
                               f"allow ({reason}); fix the base topology")
    return config


def predict(problem: Problem, topology: Topology, configs: Sequence[Config]) -> np.ndarray:
    """Simulated time of every record (µs), one simulator call per measured system shape."""
    out = np.empty(len(problem.records))
    colls, sizes = problem.collectives, problem.sizes
    for shape in set(problem.shapes):
        rows = [i for i, s in enumerate(problem.shapes) if s == shape]
        topo = topology.resized(nodes=shape[0], gpus_per_node=shape[1])
        distinct = list(dict.fromkeys(configs[i] for i in rows))
        column = {c: j for j, c in enumerate(distinct)}
        res = simulate(topo, colls[rows], sizes[rows], ConfigBatch.from_configs(distinct))
        out[rows] = res.time_after_straggler_us[np.arange(len(rows)),
                                                [column[configs[i]] for i in rows]]
    return out


def calibrate(records: Sequence[MeasurementRecord], base: Topology,
              keep_undetermined: bool = False, max_iter: int = 60) -> FitResult:
    """Fits every tier parameter the data determines; refuses (or keeps at base) the others."""
    problem = prepare(records, base)
    params = parameters(base)
    base_values = np.array([getattr(base.tiers[p.tier], p.field) for p in params])
    problem.configs = pick_configs(problem, base)
    predicted_base = predict(problem, base, problem.configs)
    x0 = np.log(np.maximum(base_values, 1e-3))
    jac0 = _jacobian(problem, params, x0, np.arange(len(params)), problem.configs)
    blind = np.max(np.abs(jac0), axis=0) < MIN_SENSITIVITY
    notes = {i: _blind_reason(problem, params[i]) for i in np.flatnonzero(blind)}
    _refuse_or_keep(notes, params, keep_undetermined)
    free = np.flatnonzero(~blind)
    x, iterations = x0.copy(), 0
    for _ in range(_MAX_PICK_ROUNDS):
        x, n = _levenberg_marquardt(problem, params, x, free, problem.configs, max_iter)
        iterations += n
        picks = pick_configs(problem, with_values(base, params, np.exp(x)))
        if picks == problem.configs:
            break
        problem.configs = picks
    rel_std, partner = _uncertainty(problem, params, x, free)
    weak = {i: f"only determined to ±{100 * rel_std[i]:.0f}% (the data sees it together with "
               f"{params[partner[i]].label}); add measurements that separate them"
            for i in free if rel_std[i] > MAX_REL_STD}
    if weak:
        _refuse_or_keep(weak, params, keep_undetermined)
        for i in weak:
            x[i] = x0[i]
        free = np.array([i for i in free if i not in weak], dtype=int)
        x, n = _levenberg_marquardt(problem, params, x, free, problem.configs, max_iter)
        iterations += n
        rel_std, _ = _uncertainty(problem, params, x, free)
        notes.update(weak)
    values = base_values.copy()
    values[free] = np.exp(x[free])
    fitted = with_values(base, params, values)
    fits = [ParamFit(p.label, float(base_values[i]), float(values[i]),
                     float(rel_std[i]) if i in free else math.nan, i in free, notes.get(i, ""))
            for i, p in enumerate(params)]
    return FitResult(replace(fitted, name=f"{base.name}_calibrated"), fits, problem,
                     predicted_base, predict(problem, fitted, problem.configs), iterations)


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


def _residuals(problem: Problem, params: list[Param], x: np.ndarray,
               configs: Sequence[Config]) -> np.ndarray:
    topo = with_values(problem.base, params, np.exp(x))
    return np.log(predict(problem, topo, configs) / problem.measured_us)


def _jacobian(problem: Problem, params: list[Param], x: np.ndarray, free: np.ndarray,
              configs: Sequence[Config]) -> np.ndarray:
    """Central differences of log-time in log-parameter (elasticities), free columns only."""
    jac = np.zeros((len(problem.records), len(params)))
    for i in free:
        step = np.zeros_like(x)
        step[i] = _FD_STEP
        up = _residuals(problem, params, x + step, configs)
        down = _residuals(problem, params, x - step, configs)
        jac[:, i] = (up - down) / (2 * _FD_STEP)
    return jac


def _levenberg_marquardt(problem: Problem, params: list[Param], x: np.ndarray,
                         free: np.ndarray, configs: Sequence[Config],
                         max_iter: int) -> tuple[np.ndarray, int]:
    if not len(free):
        return x, 0
    r = _residuals(problem, params, x, configs)
    cost, lam = float(r @ r), 1e-3
    for it in range(1, max_iter + 1):
        jac = _jacobian(problem, params, x, free, configs)[:, free]
        g, h = jac.T @ r, jac.T @ jac
        improved = False
        while lam < 1e8:
            delta = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            delta = np.clip(delta, -1.0, 1.0)  # at most a factor e per step
            trial = x.copy()
            trial[free] += delta
            r_trial = _residuals(problem, params, trial, configs)
            c_trial = float(r_trial @ r_trial)
            if c_trial < cost:
                improved = abs(cost - c_trial) > 1e-12 * max(cost, 1e-30)
                x, r, cost, lam = trial, r_trial, c_trial, max(lam / 3, 1e-9)
                break
            lam *= 4
        if not improved or np.max(np.abs(delta)) < 1e-7:
            return x, it
    return x, max_iter


def _uncertainty(problem: Problem, params: list[Param], x: np.ndarray,
                 free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relative standard errors of the free parameters and each one's most correlated partner.

    The noise level is estimated from the residuals, with a floor of 1 % so that a perfect fit to
    too few points cannot make a parameter look determined; a direction the data cannot see at all
    gets an enormous variance from the tiny ridge instead of a misleading pseudo-inverse.
    """
    rel = np.full(len(params), math.nan)
    partner = np.zeros(len(params), dtype=int)
    if not len(free):
        return rel, partner
    jac = _jacobian(problem, params, x, free, problem.configs)[:, free]
    r = _residuals(problem, params, x, problem.configs)
    dof = max(1, len(r) - len(free))
    sigma2 = max(float(r @ r) / dof, 1e-4)
    h = jac.T @ jac
    cov = sigma2 * np.linalg.inv(h + 1e-10 * max(float(np.max(np.diag(h))), 1e-30) * np.eye(len(h)))
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = cov / np.outer(std, std)
    np.fill_diagonal(corr, 0.0)
    for k, i in enumerate(free):
        rel[i] = math.expm1(std[k]) if std[k] < 50 else math.inf
        partner[i] = free[int(np.argmax(np.abs(np.nan_to_num(corr[k]))))] if len(free) > 1 else i
    return rel, partner
