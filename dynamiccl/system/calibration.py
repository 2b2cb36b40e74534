"""A topology's ``calibration:`` section: values fitted to the system's own measurements.

``dynamiccl calibrate`` (``profiler/fit/calibrate.py``) writes it; the simulator reads it, so every
command that loads the topology file (simulate, explain, export, training) predicts with it. The
fitted tier bandwidths and latencies are written into the tiers themselves; this section holds what
the tiers cannot say, each value with its relative 1-sigma uncertainty from the fit:

.. code-block:: yaml

    calibration:
      measurements: 212
      source: all_reduce_perf.txt
      launch_floor_us: {value: 31.5, rel_std: 0.04}        # per-call host floor
      transport_overhead_us: {value: 6.2, rel_std: 0.2}    # per network hop, replaces the kind's
      algorithms:
        ring/simple: {bw_efficiency: {value: 0.93, rel_std: 0.01},
                      base_latency_us: {value: 9.8, rel_std: 0.1}}
      tiers: {infiniband.bandwidth_GBps: {value: 46.1, rel_std: 0.01}}
      heldout_error: {small: 0.06, medium: 0.05, large: 0.02}
      corrections:                                         # measured / fitted model, by size
        - {collective: allreduce, algorithm: ring, protocol: simple, nodes: 2, gpus_per_node: 8,
           sizes: [1048576, 4194304], factors: [1.31, 1.12]}

The NCCL-default model reads the fitted tiers (they are NCCL's own inputs: link and NIC
bandwidths) but not the refinements: NCCL chooses from its built-in cost model, which does not know
how fast an algorithm really ran here; that is exactly the gap a tuner exploits.

``corrections`` are what the fitted parameters still miss, measured: per collective, (algorithm,
protocol) NCCL ran and system shape, the ratio of the measured time to the fitted model's at every
size the logs timed. The parameters are physical and shared by every size and shape, so they cannot
follow a system's own steps and plateaus (a transport's eager/rendezvous switch, a launch path);
the measurements can, where they exist. Between measured sizes the correction is interpolated in
log-log space; beyond them it holds for :data:`CORRECTION_HOLD_OCTAVES` and then fades back to the
model over :data:`CORRECTION_FADE_OCTAVES`; on another system shape (node count, GPUs per node) or
for a choice never measured it does not apply, so the model answers there alone.

``heldout_error`` is the relative 1-sigma error of the fitted model on sizes the fit did not see,
per size band; :func:`uncertainty` turns all this into the error bar of one prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dynamiccl.system.nccl import Algorithm, Collective, Protocol

#: The issue's size bands: latency-bound, where NCCL's switch points lie, bandwidth-bound.
SIZE_BANDS: tuple[tuple[str, float, float], ...] = (
    ("small", 0.0, 64 * 2**10), ("medium", 64 * 2**10, 16 * 2**20), ("large", 16 * 2**20, math.inf))
#: Relative 1-sigma error of an uncalibrated (datasheet) prediction per band. Issue 10 measured the
#: median |error| of datasheet topologies on public nccl-tests runs as x1.5, x1.7 and x1.1 per band;
#: for log-normal errors the median |log error| is 0.6745 sigma, so sigma = ln(median) / 0.6745 and
#: the relative 1-sigma is exp(sigma) - 1.
DATASHEET_REL_STD = {band: math.expm1(math.log(m) / 0.6745)
                     for band, m in (("small", 1.5), ("medium", 1.7), ("large", 1.1))}
#: The datasheet model's error on the *ratio* of two choices' times (what a rule's gain is), per kind
#: of system (:func:`dynamiccl.system.transports.system_kind`): the mean |log(t_choice / t_default)
#: measured - modelled| over the published forced runs the model tells apart from NCCL's own pick
#: (``experiments/fit_realities.py``, ``envs.backends.reality_fit.real_statistics`` of
#: ``tests/fixtures/real/replay``: 26 such points on RDMA systems, the 8 x H100 node and DGX B200,
#: 32 over TCP, A3 Mega's TCPXO and the RTX 5090 socket pair; one point in ten is off by more than
#: 0.55 and 1.29). A gain the model alone predicts is that uncertain on a real system, however sure
#: the model is of each time; ``tests/test_gate.py`` recomputes the figures.
MODEL_RATIO_ERROR = {"rdma": 0.244, "tcp": 0.752}


#: A measured correction holds at its edge value this many octaves beyond the sizes measured, then
#: fades linearly (in log size and log factor) back to the model over the next ones.
CORRECTION_HOLD_OCTAVES = 1.0
CORRECTION_FADE_OCTAVES = 2.0


class CalibrationFormatError(ValueError):
    """A malformed calibration section; ``field`` is the dotted path inside it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Fitted:
    value: float
    #: Relative 1-sigma uncertainty of ``value`` (from the fit's covariance).
    rel_std: float

    def to_dict(self) -> dict[str, float]:
        return {"value": _round(self.value), "rel_std": _round(self.rel_std)}


@dataclass(frozen=True)
class AlgoProtoFit:
    """How one (algorithm, protocol) ran on this system against the physical model."""

    algorithm: Algorithm
    protocol: Protocol
    #: Factor on the modelled bandwidth (1 = as modelled).
    bw_efficiency: Fitted | None = None
    #: The fixed per-call cost that replaces the model's base latency, µs.
    base_latency_us: Fitted | None = None

    @property
    def key(self) -> str:
        return f"{self.algorithm.name.lower()}/{self.protocol.name.lower()}"


@dataclass(frozen=True)
class MeasuredCorrection:
    """Measured time / fitted model time of one collective run with one (algorithm, protocol) on one
    system shape, at the sizes measured (ascending)."""

    collective: Collective
    algorithm: Algorithm
    protocol: Protocol
    nodes: int
    gpus_per_node: int
    sizes: tuple[float, ...]
    factors: tuple[float, ...]

    def factor(self, nbytes: np.ndarray) -> np.ndarray:
        """The correction at each size in ``nbytes`` (module docstring)."""
        x = np.log2(np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0))
        xs, ys = np.log2(np.asarray(self.sizes)), np.log(np.asarray(self.factors))
        inside = np.interp(x, xs, ys)
        beyond = np.maximum(xs[0] - x, x - xs[-1]) - CORRECTION_HOLD_OCTAVES
        fade = np.clip(1.0 - beyond / CORRECTION_FADE_OCTAVES, 0.0, 1.0)
        return np.exp(inside * fade)

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective.name.lower(), "algorithm": self.algorithm.name.lower(),
                "protocol": self.protocol.name.lower(), "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node, "sizes": [int(x) for x in self.sizes],
                "factors": [_round(f) for f in self.factors]}


@dataclass(frozen=True)
class Calibration:
    measurements: int = 0
    source: str = ""
    launch_floor_us: Fitted | None = None
    transport_overhead_us: Fitted | None = None
    algorithms: tuple[AlgoProtoFit, ...] = ()
    #: Tier parameters as fitted (label, value); their values are also in the tiers.
    tiers: tuple[tuple[str, Fitted], ...] = ()
    #: Relative 1-sigma error on held-out sizes per band name of ``SIZE_BANDS``.
    heldout_error: tuple[tuple[str, float], ...] = ()
    #: What the fitted parameters still miss, measured (module docstring).
    corrections: tuple[MeasuredCorrection, ...] = ()

    def corrections_for(self, nodes: int, gpus_per_node: int) -> tuple[MeasuredCorrection, ...]:
        """The measured corrections of one system shape."""
        return tuple(c for c in self.corrections
                     if c.nodes == nodes and c.gpus_per_node == gpus_per_node)

    def algo_proto(self, algorithm: int, protocol: int) -> AlgoProtoFit | None:
        for fit in self.algorithms:
            if fit.algorithm == algorithm and fit.protocol == protocol:
                return fit
        return None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"measurements": self.measurements}
        if self.source:
            d["source"] = self.source
        for key in ("launch_floor_us", "transport_overhead_us"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value.to_dict()
        if self.algorithms:
            d["algorithms"] = {
                f.key: {k: getattr(f, k).to_dict() for k in ("bw_efficiency", "base_latency_us")
                        if getattr(f, k) is not None} for f in self.algorithms}
        if self.tiers:
            d["tiers"] = {label: f.to_dict() for label, f in self.tiers}
        if self.heldout_error:
            d["heldout_error"] = {band: _round(v) for band, v in self.heldout_error}
        if self.corrections:
            d["corrections"] = [c.to_dict() for c in self.corrections]
        return d


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def band_of(nbytes: float) -> str:
    for name, lo, hi in SIZE_BANDS:
        if lo <= nbytes < hi:
            return name
    return SIZE_BANDS[-1][0]


def uncertainty(calibration: Calibration | None, collective: int, nbytes: float, algorithm: int,
                protocol: int) -> float:
    """Relative 1-sigma error of the simulator's predicted time for this call on a topology with
    this calibration section (``topology.calibration``; None: uncalibrated).

    With a calibration section: the fit's held-out error in the size band, widened by the fitted
    (algorithm, protocol) parameters' own uncertainty. An (algorithm, protocol) the logs never ran
    is predicted from physics alone, so it keeps the datasheet error of the band
    (``DATASHEET_REL_STD``), as does every call on an uncalibrated topology. The collective does not
    change the figure: the measured errors did not differ systematically between collectives.
    """
    del collective  # accepted for the callers' symmetry; see the docstring
    band = band_of(nbytes)
    if calibration is None:
        return DATASHEET_REL_STD[band]
    fit = calibration.algo_proto(algorithm, protocol)
    if calibration.algorithms and fit is None:
        return DATASHEET_REL_STD[band]
    heldout = dict(calibration.heldout_error).get(band, DATASHEET_REL_STD[band])
    parts = [math.log1p(heldout)]
    if fit is not None:
        for param, weight in ((fit.bw_efficiency, band != "small"), (fit.base_latency_us, band == "small")):
            if param is not None and weight:
                parts.append(math.log1p(param.rel_std))
    return math.expm1(math.sqrt(sum(p * p for p in parts)))


def calibration_from_dict(data: Any) -> Calibration:
    """Parses a calibration section; errors name the field inside it."""
    if not isinstance(data, dict):
        raise CalibrationFormatError("", "must be a mapping (as `dynamiccl calibrate` writes it)")
    allowed = {"measurements", "source", "launch_floor_us", "transport_overhead_us", "algorithms",
               "tiers", "heldout_error", "corrections"}
    unknown = set(data) - allowed
    if unknown:
        raise CalibrationFormatError(sorted(unknown)[0], f"is not a calibration field; allowed: "
                                     f"{', '.join(sorted(allowed))}")
    measurements = data.get("measurements", 0)
    if not isinstance(measurements, int) or measurements < 0:
        raise CalibrationFormatError("measurements", f"is {measurements!r}; give a count")
    algorithms = []
    for key, entry in (data.get("algorithms") or {}).items():
        algorithms.append(_algo_proto(str(key), entry))
    tiers = tuple((str(label), _fitted(f"tiers.{label}", v))
                  for label, v in (data.get("tiers") or {}).items())
    heldout = []
    for band, value in (data.get("heldout_error") or {}).items():
        if band not in DATASHEET_REL_STD:
            raise CalibrationFormatError(f"heldout_error.{band}",
                                         f"is not a size band; use {', '.join(DATASHEET_REL_STD)}")
        heldout.append((str(band), _number(f"heldout_error.{band}", value)))
    corrections = data.get("corrections") or []
    if not isinstance(corrections, list):
        raise CalibrationFormatError("corrections", "must be a list of corrections")
    return Calibration(
        measurements, str(data.get("source", "")),
        _optional(data, "launch_floor_us"), _optional(data, "transport_overhead_us"),
        tuple(algorithms), tiers, tuple(heldout),
        tuple(_correction(f"corrections[{i}]", c) for i, c in enumerate(corrections)))


def _correction(where: str, entry: Any) -> MeasuredCorrection:
    keys = {"collective", "algorithm", "protocol", "nodes", "gpus_per_node", "sizes", "factors"}
    if not isinstance(entry, dict) or set(entry) != keys:
        raise CalibrationFormatError(where, f"must be a mapping with exactly {', '.join(sorted(keys))}")
    names = []
    for key, enum in (("collective", Collective), ("algorithm", Algorithm), ("protocol", Protocol)):
        try:
            names.append(enum[str(entry[key]).upper()])
        except KeyError:
            raise CalibrationFormatError(f"{where}.{key}", f"is {entry[key]!r}; use one of "
                                         f"{', '.join(m.name.lower() for m in enum)}") from None
    shape = []
    for key in ("nodes", "gpus_per_node"):
        v = entry[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise CalibrationFormatError(f"{where}.{key}", f"is {v!r}; give a positive count")
        shape.append(v)
    lists = []
    for key in ("sizes", "factors"):
        v = entry[key]
        if not isinstance(v, list) or not v:
            raise CalibrationFormatError(f"{where}.{key}", "must be a non-empty list of numbers")
        lists.append(tuple(_number(f"{where}.{key}[{i}]", x) for i, x in enumerate(v)))
    sizes, factors = lists
    if len(sizes) != len(factors):
        raise CalibrationFormatError(where, "sizes and factors must have the same length")
    if np.any(np.diff(sizes) <= 0) or sizes[0] <= 0 or min(factors) <= 0:
        raise CalibrationFormatError(where, "sizes must be positive and ascending, factors positive")
    return MeasuredCorrection(*names, *shape, sizes, factors)


def _algo_proto(key: str, entry: Any) -> AlgoProtoFit:
    where = f"algorithms.{key}"
    algo_name, _, proto_name = key.partition("/")
    try:
        algo, proto = Algorithm[algo_name.upper()], Protocol[proto_name.upper()]
    except KeyError:
        raise CalibrationFormatError(where, "is not algorithm/protocol, e.g. ring/simple") from None
    if not isinstance(entry, dict) or set(entry) - {"bw_efficiency", "base_latency_us"}:
        raise CalibrationFormatError(where, "must be a mapping with bw_efficiency and/or "
                                     "base_latency_us")
    return AlgoProtoFit(algo, proto, _optional(entry, "bw_efficiency", where),
                        _optional(entry, "base_latency_us", where))


def _optional(d: dict, key: str, where: str = "") -> Fitted | None:
    return None if d.get(key) is None else _fitted(f"{where}.{key}" if where else key, d[key])


def _fitted(where: str, v: Any) -> Fitted:
    if not isinstance(v, dict) or set(v) - {"value", "rel_std"} or "value" not in v:
        raise CalibrationFormatError(where, "must be {value: number, rel_std: number}")
    return Fitted(_number(f"{where}.value", v["value"]), _number(f"{where}.rel_std", v.get("rel_std", 0.0)))


def _number(where: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or not math.isfinite(v):
        raise CalibrationFormatError(where, f"is {v!r}; it must be a non-negative number")
    return float(v)
