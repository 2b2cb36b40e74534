"""The simulator's public entry points: ``simulate`` (vectorized) and ``evaluate`` (one scenario).

Conventions (nccl-tests' src/common.cu and *_perf.cu): ``nbytes`` is nccl-tests' size column — the whole
gathered/scattered buffer for all-gather/reduce-scatter, the per-rank buffer otherwise.
``algbw = nbytes / time_after_straggler`` (the collective's own duration once every rank is there,
which is what nccl-tests times with synchronised ranks) and ``busbw = algbw × factor`` with factors
all-reduce 2(n−1)/n, all-gather/reduce-scatter (n−1)/n, broadcast/reduce 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dynamiccl.simulator import overlap
from dynamiccl.simulator.phases import US_PER_BYTE_PER_GBPS
from dynamiccl.simulator.tables import KNOB_EFFECTS, tables_for, valid_rows
from dynamiccl.system.knobs import Config, ConfigBatch, invalid_reason
from dynamiccl.system.nccl import Collective, bus_factor
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class SimResult:
    """Each field float64 [B, A]; invalid (config, collective) pairs have time +inf and bandwidth 0."""

    time_us: np.ndarray
    time_after_straggler_us: np.ndarray
    algbw_GBps: np.ndarray
    busbw_GBps: np.ndarray


@dataclass(frozen=True)
class Timing:
    time_us: float
    time_after_straggler_us: float
    algbw_GBps: float
    busbw_GBps: float


def config_valid_mask(topology: Topology, collective: int, configs: ConfigBatch) -> np.ndarray:
    """``knobs.invalid_reason(...) is None`` for every configuration of the batch."""
    return valid_rows(topology, int(collective), configs)


def simulate(topology: Topology, collective: np.ndarray | int, nbytes: np.ndarray | float,
             configs: ConfigBatch, straggler_delay_us: np.ndarray | float = 0.0,
             c2c: np.ndarray | float = 0.0, *, noise_sigma: float = 0.0,
             rng: np.random.Generator | None = None, protocol_named: bool = False) -> SimResult:
    """Times of every configuration in ``configs`` for every state (collective, nbytes, delay, c2c).

    States are rows, configurations columns; scalars broadcast. Everything is whole-array numpy on
    cached per-system coefficient tables (``tables.py``); no Python loop over states or actions.
    ``protocol_named``: the configurations ran with their protocol named in ``NCCL_PROTO``, so one
    NCCL's default rule disables (LL128) is timed too (``knobs.invalid_reason``).
    """
    coll, size, delay, ratio = _states(collective, nbytes, straggler_delay_us, c2c)
    tab = tables_for(topology, configs, protocol_named)
    sb = size[:, None]
    t_alg = tab.lat[coll]
    t_alg += tab.coef[coll] * sb
    for name, idx in tab.knob_idx.items():  # knobs timed beyond the cost models (the chunk size)
        t_alg[:, idx] = KNOB_EFFECTS[name](topology, coll, size, tab, idx, t_alg[:, idx])
    if tab.pipe_idx.size:  # hierarchical rings with c > 1 chunks: + (c − 1) × busiest resource
        x_lat, x_coef = tab.extra_lat[coll], tab.extra_coef[coll]
        busiest = x_lat[:, 0] + x_coef[:, 0] * sb
        for r in range(1, x_lat.shape[1]):
            np.maximum(busiest, x_lat[:, r] + x_coef[:, r] * sb, out=busiest)
        t_alg[:, tab.pipe_idx] += busiest
    t_pre = tab.pre_lat[coll] + tab.pre_coef[coll] * sb if tab.sar_idx.size else None
    if tab.floor_us:  # the host cannot issue calls faster (launch.py)
        np.maximum(t_alg, tab.floor_us, out=t_alg)
    for corr_coll, cols, corr in tab.corrections:  # what the calibration measured the model misses
        rows = np.flatnonzero(coll == corr_coll)
        if rows.size:
            t_alg[np.ix_(rows, cols)] *= corr.factor(size[rows])[:, None]
    if noise_sigma > 0:
        gen = rng if rng is not None else np.random.default_rng()
        factor = gen.lognormal(0.0, noise_sigma, size=t_alg.shape)
        t_alg *= factor
        if t_pre is not None:
            t_pre *= factor[:, tab.sar_idx]
    d = delay[:, None]
    time_us, after = overlap.with_straggler(t_alg, d)
    if t_pre is not None:
        sar_total, sar_after = overlap.stragglar_with_straggler(t_pre, t_alg[:, tab.sar_idx], d)
        time_us[:, tab.sar_idx] = sar_total
        after[:, tab.sar_idx] = sar_after
    busy = np.flatnonzero(ratio > 0)
    if busy.size:
        t_comp = (ratio[busy] * overlap.reference_time_us(topology, coll[busy], size[busy]))[:, None]
        extra = overlap.stolen_and_slowed_us(after[busy], t_comp, tab.channels, topology.gpu.sms)
        time_us[busy] += extra
        after[busy] += extra
    algbw = np.divide(sb * US_PER_BYTE_PER_GBPS, after, out=np.zeros_like(after), where=after > 0)
    busbw = algbw * _bus_factors(topology.nranks)[coll][:, None]
    return SimResult(time_us, after, algbw, busbw)


@lru_cache(maxsize=1024)
def _bus_factors(nranks: int) -> np.ndarray:
    """nccl-tests' bus factor per collective id."""
    return np.array([bus_factor(c, nranks) for c in range(len(Collective))])


def _states(collective, nbytes, delay, c2c) -> tuple[np.ndarray, ...]:
    """The four state columns as 1-D arrays of one length (scalars broadcast), checked."""
    cols = [np.atleast_1d(np.asarray(x, dtype=dt)) for x, dt in
            ((collective, np.int64), (nbytes, np.float64), (delay, np.float64), (c2c, np.float64))]
    b = max(x.size for x in cols)
    try:
        coll, size, dly, ratio = (np.broadcast_to(x.reshape(-1), (b,)) for x in cols)
    except ValueError:
        raise ValueError("collective, nbytes, straggler delay and c2c must be scalars or of one length"
                         ) from None
    if np.any(size < 0) or np.any(dly < 0) or np.any(ratio < 0):
        raise ValueError("nbytes, straggler delay and c2c must not be negative")
    if np.any((coll < 0) | (coll >= len(Collective))):
        raise ValueError(f"collective ids must be 0..{len(Collective) - 1} (NCCL's ncclFunc_t)")
    return coll, size, dly, ratio


def evaluate(scenario: Scenario, config: Config) -> Timing:
    """One scenario and one configuration; raises ValueError with the reason for invalid ones."""
    reason = invalid_reason(scenario.topology, scenario.collective, config)
    if reason:
        raise ValueError(reason)
    delay = scenario.straggler_delay_us if scenario.has_straggler else 0.0
    res = simulate(scenario.topology, int(scenario.collective), float(scenario.nbytes),
                   ConfigBatch.from_configs([config]), delay, scenario.c2c)
    return Timing(float(res.time_us[0, 0]), float(res.time_after_straggler_us[0, 0]),
                  float(res.algbw_GBps[0, 0]), float(res.busbw_GBps[0, 0]))
