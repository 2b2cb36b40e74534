"""NCCL's per-call decision: the cost table, the pick, and the channel count (nccl_abi.md §3.1, §3.6,
§1.5.4, §3.8), vectorized over a batch of (collective, size) pairs.

Everything here is float32 like NCCL's ``float`` arithmetic, so exact ties resolve as NCCL's
would: the scan takes the first minimum in (algorithm, protocol) index order.
"""

from __future__ import annotations

import numpy as np

from dynamiccl import nccl
from dynamiccl.nccl import Algorithm, Collective, Protocol
from dynamiccl.nccl_model import constants as K
from dynamiccl.nccl_model.graph import NcclSystem
from dynamiccl.nccl_model.tables import Tables

_F32 = np.float32
#: Algorithms whose channel count follows the generic size rule (§3.8); NVLS and CollNetDirect
#: have their own.
_GENERIC_CHANNEL_RULE = np.isin(np.arange(nccl.N_ALGORITHMS),
                                (Algorithm.TREE, Algorithm.RING, Algorithm.COLLNET_CHAIN, Algorithm.PAT))


def log2_size_index(nbytes: np.ndarray) -> np.ndarray:
    """floor(log2(nBytes >> 6)), -1 below 64 B: the treeCorrectionFactor index (§3.1)."""
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
) -> np.ndarray:
    """float32 [B, 7, 3] of predicted µs, -1 where unusable: what ``getCollInfo`` is handed.

    ``allowed`` ([7, 3] bool) removes entries the way NCCL_ALGO/NCCL_PROTO do; ``comm_channels``
    replaces the communicator's channel count (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).
    """
    colls = np.asarray(collectives, dtype=np.int64)
    sizes = np.asarray(nbytes, dtype=np.int64)
    if num_pipe_ops < 1:
        raise ValueError(f"num_pipe_ops must be at least 1, got {num_pipe_ops}")
    if system.nranks == 1:  # §3.6: a single rank only runs the local copy, at no cost
        out = np.full((len(colls), nccl.N_ALGORITHMS, nccl.N_PROTOCOLS), K.UNUSABLE, dtype=_F32)
        ok = (np.ones(len(colls), bool) if allowed is None
              else np.full(len(colls), allowed[Algorithm.RING, Protocol.SIMPLE]))
        out[ok, Algorithm.RING, Protocol.SIMPLE] = 0.0
        return out
    bw = tables.bandwidth[colls].copy()
    lat = tables.latency[colls].copy()
    usable = (bw > 0) & tables.offered[colls]
    if allowed is not None:
        usable &= allowed
    is_ar = colls == Collective.ALLREDUCE
    index = log2_size_index(sizes)
    _correct_tree(bw, Algorithm.TREE, is_ar, index, K.TREE_CORRECTION_MAX_INDEX)
    if system.sm >= 100 and system.cpu in ("intel", "amd"):  # NVLSTree on Blackwell with x86
        _correct_tree(bw, Algorithm.NVLS_TREE, is_ar, index, K.NVLS_TREE_CORRECTION_MAX_INDEX)
    nc = system.comm_channels if comm_channels is None else comm_channels
    if system.nnodes > 1:
        plateau = is_ar & (sizes // (nc * system.nranks) >= K.RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK)
        factor = K.RING_PLATEAU_FACTOR if system.sm >= 80 else K.RING_PLATEAU_FACTOR_PRE_AMPERE
        lat[plateau, Algorithm.RING, Protocol.SIMPLE] *= _F32(factor)
    lat_count = np.full(nccl.N_ALGORITHMS, -(-num_pipe_ops // K.WORK_BATCH_COLLS), dtype=_F32)
    lat_count[Algorithm.RING] = num_pipe_ops
    safe_bw = np.where(usable, bw, _F32(1.0))
    time = lat * lat_count[None, :, None] + sizes.astype(_F32)[:, None, None] / (_F32(1000) * safe_bw)
    return np.where(usable, time, _F32(K.UNUSABLE)).astype(_F32)


def _correct_tree(bw: np.ndarray, algo: int, is_ar: np.ndarray, index: np.ndarray,
                  max_index: int) -> None:
    rows = is_ar & (index >= 0) & (index <= max_index)
    factors = K.TREE_CORRECTION[:, np.clip(index, 0, max_index)].T.astype(_F32)  # [B, 3]
    bw[rows, algo, :] *= factors[rows]


def pick(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§1.5.4: the minimum over entries >= 0, ties to the lowest algorithm, then protocol.

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
    """§3.8 per-collective channel count for the chosen (algorithm, protocol)."""
    comm = system.comm_channels if comm_channels is None else comm_channels
    algo = np.asarray(algo, dtype=np.int64)
    proto = np.asarray(proto, dtype=np.int64)
    sizes = np.asarray(nbytes, dtype=np.int64)
    per_channel = tables.max_threads[algo, proto] * tables.thread_threshold[algo, proto]
    # Ring/Tree/PAT/CollNetChain: drop channels while nBytes < nc * nThreads * threshold.
    generic = np.clip(sizes // np.maximum(per_channel, 1), 1, comm)
    out = np.where(_GENERIC_CHANNEL_RULE[algo], generic, comm)
    nvls = system.nvls_channels
    out = np.where(algo == Algorithm.NVLS, min(nvls, comm) if system.nnodes > 1 else nvls, out)
    out = np.where(algo == Algorithm.NVLS_TREE, nvls, out)
    for i in np.flatnonzero(algo == Algorithm.COLLNET_DIRECT):
        a, p = Algorithm.COLLNET_DIRECT, proto[i]
        out[i] = _collnet_direct_channels(int(sizes[i]), comm, int(tables.max_threads[a, p]),
                                          int(tables.thread_threshold[a, p]), system.collnet_heads)
    return out.astype(np.int64)


def _collnet_direct_channels(nbytes: int, nc: int, threads: int, threshold: int, heads: int) -> int:
    """CollNetDirect's stepped reduction (src/enqueue.cc @2.30.7, restated): in steps of 16, 8,
    4, 2, 1 channels, drop one channel at a time while the size is below nc x threads x heads x
    threshold, halving the threshold when passing 1.5 steps above the step size."""
    step = K.COLLNET_DIRECT_NC_SWITCH
    too_small = True
    while step >= 1 and too_small:
        while True:
            too_small = nbytes < nc * threads * heads * threshold
            if not (too_small and nc > step):
                break
            if nc == step + step // 2:
                threshold //= 2
            nc -= 1
        step //= 2
    return nc
