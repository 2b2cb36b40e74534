"""NCCL's per-call decision: the cost table, the pick and the channel count (NCCL 2.30.7
``src/graph/tuning.cc`` ncclTopoGetAlgoTime, ``src/enqueue.cc``), vectorized over a batch of
(collective, size) pairs.

Everything here is float32 like NCCL's ``float`` arithmetic, so exact ties resolve as NCCL's
would: the scan takes the first minimum in (algorithm, protocol) index order. Each algorithm's own
per-call refinements and channel rule are in its :class:`~dynamiccl.nccl_model.algorithms.NcclTuning`.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.nccl_model import constants as K
from dynamiccl.nccl_model.algorithms import Calls
from dynamiccl.nccl_model.graph import NcclSystem
from dynamiccl.nccl_model.tables import TUNINGS, Tables
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Protocol

_F32 = np.float32
#: The algorithms with per-call refinements (id, refinement), and those whose latency counts once
#: per operation, not once per batch of eight.
_REFINED = [(a, t.refine) for a, t in enumerate(TUNINGS) if t.refine is not None]
_PER_OPERATION = np.array([t.latency_per_operation for t in TUNINGS])
#: The algorithms with a channel rule of their own (id, rule); the others drop channels by size.
_OWN_CHANNEL_RULE = [(a, t.channels) for a, t in enumerate(TUNINGS) if t.channels is not None]


def log2_size_index(nbytes: np.ndarray) -> np.ndarray:
    """floor(log2(nBytes >> 6)), -1 below 64 B: the treeCorrectionFactor index (ncclTopoGetAlgoTime)."""
    shifted = np.asarray(nbytes, dtype=np.int64) >> 6
    _, exponent = np.frexp(shifted.astype(np.float64))
    return np.where(shifted > 0, exponent - 1, -1)


def cost_tables(
    system: NcclSystem,
    tables: Tables,
    collectives: np.ndarray,
    nbytes: np.ndarray,
    *,
    num_pipe_ops: int = 1,
    comm_channels: int | None = None,
    allowed: np.ndarray | None = None,
    protocols_named: bool = False,
) -> np.ndarray:
    """float32 [B, 7, 3] of predicted µs, -1 where unusable: what ``getCollInfo`` is handed.

    ``allowed`` ([7, 3] bool) removes entries the way NCCL_ALGO/NCCL_PROTO do; ``comm_channels``
    replaces the communicator's channel count (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).
    ``protocols_named``: NCCL_PROTO is set, so every protocol it leaves is enabled explicitly and
    no default enable rule applies (:attr:`Tables.named_bandwidth`).
    """
    colls = np.asarray(collectives, dtype=np.int64)
    sizes = np.asarray(nbytes, dtype=np.int64)
    if num_pipe_ops < 1:
        raise ValueError(f"num_pipe_ops must be at least 1, got {num_pipe_ops}")
    if system.nranks == 1:  # updateCollCostTable: a single rank only runs the local copy, free
        out = np.full((len(colls), nccl.N_ALGORITHMS, nccl.N_PROTOCOLS), K.UNUSABLE, dtype=_F32)
        ok = (np.ones(len(colls), bool) if allowed is None
              else np.full(len(colls), allowed[Algorithm.RING, Protocol.SIMPLE]))
        out[ok, Algorithm.RING, Protocol.SIMPLE] = 0.0
        return out
    bw = (tables.named_bandwidth if protocols_named else tables.bandwidth)[colls].copy()
    lat = tables.latency[colls].copy()
    usable = (bw > 0) & tables.offered[colls]
    if allowed is not None:
        usable &= allowed
    nc = system.comm_channels if comm_channels is None else comm_channels
    calls = Calls(colls, sizes, log2_size_index(sizes), nc)
    for a, refine in _REFINED:
        refine(system, calls, bw[:, a, :], lat[:, a, :])
    lat_count = np.where(_PER_OPERATION, _F32(num_pipe_ops),
                         _F32(-(-num_pipe_ops // K.WORK_BATCH_COLLS))).astype(_F32)
    safe_bw = np.where(usable, bw, _F32(1.0))
    time = lat * lat_count[None, :, None] + sizes.astype(_F32)[:, None, None] / (_F32(1000) * safe_bw)
    return np.where(usable, time, _F32(K.UNUSABLE)).astype(_F32)


def pick(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``topoGetAlgoInfo`` (src/enqueue.cc): the minimum over entries >= 0, ties to the lowest
    algorithm, then protocol.

    Returns (algorithm, protocol, time); rows with nothing usable get algorithm -1.
    """
    flat = table.reshape(len(table), -1)
    masked = np.where(flat >= 0, flat, np.inf)
    best = np.argmin(masked, axis=1)
    time = masked[np.arange(len(flat)), best]
    found = np.isfinite(time)
    algo = np.where(found, best // nccl.N_PROTOCOLS, -1)
    proto = np.where(found, best % nccl.N_PROTOCOLS, -1)
    return algo, proto, time


def channels_for(
    system: NcclSystem,
    tables: Tables,
    algo: np.ndarray,
    proto: np.ndarray,
    nbytes: np.ndarray,
    comm_channels: int | None = None,
) -> np.ndarray:
    """The per-collective channel count for the chosen (algorithm, protocol) (src/enqueue.cc)."""
    comm = system.comm_channels if comm_channels is None else comm_channels
    algo = np.asarray(algo, dtype=np.int64)
    proto = np.asarray(proto, dtype=np.int64)
    sizes = np.asarray(nbytes, dtype=np.int64)
    threads, thresholds = tables.max_threads[algo, proto], tables.thread_threshold[algo, proto]
    # the per-size rule: drop channels while nBytes < nc * nThreads * threshold
    out = np.clip(sizes // np.maximum(threads * thresholds, 1), 1, comm)
    for a, rule in _OWN_CHANNEL_RULE:
        rows = np.flatnonzero(algo == a)
        if rows.size:
            out[rows] = rule(system, comm, sizes[rows], threads[rows], thresholds[rows])
    return out.astype(np.int64)
