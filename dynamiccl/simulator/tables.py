"""Per-(system, configuration batch) cost tables: the algorithms evaluated once, reused per call.

Every algorithm's cost is affine in the size per phase (``phases.py``), so the per-configuration
coefficients are computed once per system, collective and configuration batch and a call to
``simulate`` only multiplies them by the sizes: no Python loop over actions or states.
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.launch import launch_floor_us
from dynamiccl.simulator.phases import Cost, CostModel
from dynamiccl.simulator.ring import hierarchical_ring
from dynamiccl.system.calibration import MeasuredCorrection
from dynamiccl.system.knobs import (
    KEEP_ID,
    KNOBS,
    NCCL_ALGORITHM_HIERARCHY,
    ConfigBatch,
    Hierarchy,
    config_from_ids,
    invalid_reason,
    validity_key,
)
from dynamiccl.system.nccl import ALGORITHM_SPECS, Algorithm, Collective
from dynamiccl.system.topology import Topology

N_COLLECTIVES = len(Collective)
#: The algorithms whose cost has a precondition that overlaps a late rank's delay (StragglAR).
_HIDES_STRAGGLER_DELAY = [int(a) for a, spec in ALGORITHM_SPECS.items() if spec.hides_straggler_delay]
_FIELDS = tuple(k.name for k in KNOBS)


@dataclass(frozen=True)
class CostCoefficients:
    """Coefficients indexed [collective, ...]; an invalid pair has ``lat = inf`` and ``coef = 0``.

    Every configuration's time is ``lat + coef · S``; a hierarchical ring with ``c > 1`` active
    chunks adds ``max_r (extra_lat + extra_coef · S)`` over its resources (``phases.py``: the
    (c − 1) × busiest-resource term, with the sums over phases folded into ``lat``/``coef``).
    """

    lat: np.ndarray          # [C, A]
    coef: np.ndarray         # [C, A]
    pipe_idx: np.ndarray     # columns of hierarchical rings with more than one active chunk
    extra_lat: np.ndarray    # [C, R, P]
    extra_coef: np.ndarray   # [C, R, P]
    sar_idx: np.ndarray      # columns of algorithms that hide a straggler's delay (StragglAR)
    pre_lat: np.ndarray      # [C, S] its precondition (inf where invalid)
    pre_coef: np.ndarray     # [C, S]
    channels: np.ndarray     # [A] float
    #: The host's launch floor (launch.py); 0 when no configuration's fixed cost is below it.
    floor_us: float
    #: The calibration's measured corrections for this system shape: (collective, the columns of
    #: the (algorithm, protocol) it was measured with, the correction).
    corrections: tuple[tuple[int, np.ndarray, MeasuredCorrection], ...] = ()
    #: Per knob with an ``effect`` (``knobs.Knob.effect``): the columns that give it a value.
    knob_idx: dict[str, np.ndarray] = field(default_factory=dict)
    #: Every column's configuration, and its fixed base latency (NCCL's baseLatencies, calibrated
    #: where the calibration says so).
    configs: ConfigBatch | None = None
    base_us: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _load(path: str) -> CostModel:
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


#: Each algorithm's physics, as its entry in ``dynamiccl.system.nccl.ALGORITHMS`` names it
#: (``module:function``), loaded with the simulator.
COST_MODELS: dict[Algorithm, CostModel] = {a: _load(spec.cost_model) for a, spec in ALGORITHM_SPECS.items()}

#: A knob's physics beyond the cost models (``knobs.Knob.effect``): (topology, collectives [B],
#: sizes [B], these tables, the columns giving the knob a value [J], their times [B, J]) -> the
#: times with the knob applied.
KnobEffect = Callable[[Topology, np.ndarray, np.ndarray, "CostCoefficients", np.ndarray, np.ndarray],
                      np.ndarray]
#: Each such knob's effect, as its entry in ``dynamiccl.system.knobs.KNOBS`` names it.
KNOB_EFFECTS: dict[str, KnobEffect] = {k.name: _load(k.effect) for k in KNOBS if k.effect}


def _cost(topology: Topology, collective: Collective, algo: Algorithm, hier: bool,
          cols: dict[str, np.ndarray]) -> Cost:
    proto, ch = cols["protocol"], cols["channels"].astype(np.float64)
    if hier:  # the knob space's ring-over-ring
        return hierarchical_ring(topology, collective, proto, ch, cols["schedule"], cols["chunks"])
    return COST_MODELS[algo](topology, collective, proto, ch)


def _finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, 0.0)


_VALID: dict[tuple, bool] = {}
_VALID_BATCHES: dict[tuple, np.ndarray] = {}


def _valid(topology: Topology, key: tuple, collective: int, row: tuple[int, ...]) -> bool:
    """``key``: :func:`~dynamiccl.system.knobs.validity_key` and whether the protocol was named
    (``valid_rows``)."""
    hit = _VALID.get((key, collective, row))
    if hit is None:
        try:
            config = config_from_ids(row)
        except ValueError:  # an id outside NCCL's enums
            hit = False
        else:
            hit = invalid_reason(topology, Collective(collective), config,
                                 protocol_named=key[-1]) is None
        if len(_VALID) > 1 << 18:
            _VALID.clear()
        _VALID[(key, collective, row)] = hit
    return hit


def valid_rows(topology: Topology, collective: int, configs: ConfigBatch,
               protocol_named: bool = False) -> np.ndarray:
    """``knobs.invalid_reason`` per configuration, cached per unique configuration and per batch by
    what it reads of the system (:func:`~dynamiccl.system.knobs.validity_key`), never its numbers, and
    whether the run named its protocol."""
    rows = np.stack([np.asarray(getattr(configs, f), dtype=np.int64) for f in _FIELDS], axis=1)
    key = (*validity_key(topology), protocol_named)
    batch = (key, int(collective), rows.tobytes())
    hit = _VALID_BATCHES.get(batch)
    if hit is None:
        uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        ok = np.array([_valid(topology, key, int(collective), tuple(int(x) for x in r)) for r in uniq],
                      dtype=bool)
        hit = ok[inverse.reshape(-1)]
        if len(_VALID_BATCHES) > 1 << 10:
            _VALID_BATCHES.clear()
        _VALID_BATCHES[batch] = hit
    return hit.copy()


def _fold_pipeline(cost: Cost) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lat, coef) of Σ_i d_i(S/c) and per resource the (c − 1) · Σ_{i on r} d_i(S/c) terms."""
    c = cost.chunks if cost.chunks is not None else np.ones_like(cost.base_us)
    lat = cost.base_us + sum(_finite(ph.lat_us) for ph in cost.phases)
    coef = sum(_finite(ph.us_per_byte) for ph in cost.phases) / c
    n_res = 1 + max(int(np.max(ph.resource)) for ph in cost.phases)
    r_lat = np.zeros((n_res, c.size))
    r_coef = np.zeros((n_res, c.size))
    for ph in cost.phases:
        res = np.broadcast_to(ph.resource, c.shape)
        for r in range(n_res):
            on = res == r
            r_lat[r] += np.where(on, _finite(ph.lat_us), 0.0)
            r_coef[r] += np.where(on, _finite(ph.us_per_byte), 0.0)
    return lat, coef, (c - 1) * r_lat, (c - 1) / c * r_coef


def _calibrated(topology: Topology, algo: np.ndarray, proto: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the calibrated bandwidth efficiency and the shift from the modelled base
    latency to the calibrated one (1 and 0 where the topology's calibration says nothing)."""
    eff, shift = np.ones(algo.size), np.zeros(algo.size)
    cal = topology.calibration
    for fit in cal.algorithms if cal is not None else ():
        cols = (algo == int(fit.algorithm)) & (proto == int(fit.protocol))
        if fit.bw_efficiency is not None:
            eff[cols] = fit.bw_efficiency.value
        if fit.base_latency_us is not None:
            default = float(P.base_latency_us(fit.algorithm, np.array([int(fit.protocol)]))[0])
            shift[cols] = fit.base_latency_us.value - default
    return eff, shift


def _corrections(topology: Topology, algo: np.ndarray, proto: np.ndarray,
                 hier: np.ndarray) -> tuple[tuple[int, np.ndarray, MeasuredCorrection], ...]:
    """The measured corrections of this system shape, each with the columns it applies to: NCCL's
    own configurations (any channel count) of the (algorithm, protocol) it was measured with."""
    cal = topology.calibration
    if cal is None:
        return ()
    out = []
    for corr in cal.corrections_for(topology.nodes, topology.gpus_per_node):
        nccl_hier = int(NCCL_ALGORITHM_HIERARCHY[corr.algorithm])
        cols = np.flatnonzero((algo == int(corr.algorithm)) & (proto == int(corr.protocol))
                              & (hier == nccl_hier))
        if cols.size:
            out.append((int(corr.collective), cols, corr))
    return tuple(out)


def _binding_floor(topology: Topology, lat: np.ndarray) -> float:
    """The launch floor, or 0 when every fixed cost already exceeds it (then ``simulate`` skips the
    pass over the whole batch that applying it costs)."""
    floor = launch_floor_us(topology)
    finite = lat[np.isfinite(lat)]
    return floor if finite.size and floor > float(finite.min()) else 0.0


def build(topology: Topology, configs: ConfigBatch, protocol_named: bool = False) -> CostCoefficients:
    a = len(configs)
    cols_all = {f: np.asarray(getattr(configs, f), dtype=np.int64) for f in _FIELDS}
    algo = cols_all["algorithm"]
    is_hier = (algo == int(Algorithm.RING)) & (cols_all["hierarchy"] == int(Hierarchy.HIERARCHICAL))
    pipe_idx = np.flatnonzero(is_hier & (cols_all["chunks"] > 1))
    sar_idx = np.flatnonzero(np.isin(algo, _HIDES_STRAGGLER_DELAY))
    lat, coef = np.zeros((N_COLLECTIVES, a)), np.zeros((N_COLLECTIVES, a))
    pre_lat = np.zeros((N_COLLECTIVES, sar_idx.size))
    pre_coef = np.zeros((N_COLLECTIVES, sar_idx.size))
    extras: list[tuple[np.ndarray, np.ndarray]] = []
    for c in Collective:
        for al in Algorithm:
            for h in (False, True):
                idx = np.flatnonzero((algo == int(al)) & (is_hier == h))
                if not idx.size:
                    continue
                sub = {f: v[idx] for f, v in cols_all.items()}
                with np.errstate(divide="ignore", invalid="ignore"):
                    cost = _cost(topology, c, al, h, sub)
                if h:
                    lat[c, idx], coef[c, idx], x_lat, x_coef = _fold_pipeline(cost)
                    keep = np.searchsorted(idx, pipe_idx)
                    extras.append((x_lat[:, keep], x_coef[:, keep]))
                    continue
                lat[c, idx] = cost.base_us + _finite(cost.phases[0].lat_us)
                coef[c, idx] = _finite(cost.phases[0].us_per_byte)
                if cost.pre is not None:
                    pos = np.searchsorted(sar_idx, idx)
                    pre_lat[c, pos] = _finite(cost.pre.lat_us)
                    pre_coef[c, pos] = _finite(cost.pre.us_per_byte)
    n_res = max((x.shape[0] for x, _ in extras), default=0)
    extra_lat = np.zeros((N_COLLECTIVES, n_res, pipe_idx.size))
    extra_coef = np.zeros((N_COLLECTIVES, n_res, pipe_idx.size))
    for c, (x_lat, x_coef) in enumerate(extras):
        extra_lat[c, : x_lat.shape[0]], extra_coef[c, : x_coef.shape[0]] = x_lat, x_coef
    eff, shift = _calibrated(topology, cols_all["algorithm"], cols_all["protocol"])
    lat += shift
    coef /= eff
    extra_coef /= eff[pipe_idx]
    pre_coef /= eff[sar_idx]
    valid = np.stack([valid_rows(topology, c, configs, protocol_named) for c in range(N_COLLECTIVES)])
    lat = np.where(valid, lat, np.inf)
    coef = np.where(valid, coef, 0.0)
    pre_lat = np.where(valid[:, sar_idx], pre_lat, np.inf)
    knob_idx = {name: np.flatnonzero(cols_all[name] != KEEP_ID) for name in KNOB_EFFECTS}
    base = np.zeros(a)
    for al in Algorithm:
        cols = np.flatnonzero(algo == int(al))
        base[cols] = P.base_latency_us(al, cols_all["protocol"][cols])
    return CostCoefficients(lat, coef, pipe_idx, extra_lat, extra_coef, sar_idx, pre_lat, pre_coef,
                            cols_all["channels"].astype(np.float64), _binding_floor(topology, lat),
                            _corrections(topology, algo, cols_all["protocol"], cols_all["hierarchy"]),
                            {k: v for k, v in knob_idx.items() if v.size}, configs, base + shift)


_CACHE: OrderedDict[tuple, CostCoefficients] = OrderedDict()
_CACHE_SIZE = 256


def tables_for(topology: Topology, configs: ConfigBatch, protocol_named: bool = False
               ) -> CostCoefficients:
    """Cached ``build``; the key is the system and the batch's contents (not its identity)."""
    key = (topology, protocol_named,
           b"".join(np.ascontiguousarray(getattr(configs, f), dtype=np.int64).tobytes()
                    for f in _FIELDS))
    hit = _CACHE.get(key)
    if hit is None:
        hit = build(topology, configs, protocol_named)
        _CACHE[key] = hit
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return hit
