"""What a chunk size costs and buys: the time of a configuration NCCL runs with another chunk.

Every cost model times a collective as NCCL runs it, with NCCL's own chunk size (calibrations fit
it so); a chunk size given by a tuner changes that time by what the chunk changes in how one
channel's piece moves (NCCL's chunking: :mod:`dynamiccl.system.chunking`):

* **steps per chunk** -- a piece moves in ``N = ceil(piece / (per_loop x chunk))`` loops of chunks.
  A ring chains ``chained_steps`` steps per loop, each waiting for the chunk's first slice from
  the previous rank (a hop's latency plus a slice) or the link streaming the chunk (its bytes plus
  the hop's latency shared by the chunks a connection keeps in flight, ``NCCL_STEPS`` slots over
  the chunk's), whichever is longer. So a smaller chunk than NCCL's puts the hop latency on a
  ring's chain more often and never helps it; NCCL's ring chunk is also the buffer's ceiling, so
  a larger one is clamped back to it.
* **pipeline fill** -- a tree, a chain or an NVLS/CollNet loop streams chunks through ``depth``
  hops, and the first unit crosses every hop before the last hop is busy: ``depth`` hop latencies
  plus ``depth - 1`` units, then the chunks at the busiest hop's pace (bytes, or the shared hop
  latency if a chunk is shorter). With Simple the unit is the whole chunk (one slice per chunk,
  stored and forwarded), so a smaller chunk shortens the fill -- the gain at mid sizes on deep
  trees and chains -- and costs a hop latency per ``NCCL_STEPS`` chunks.
* **the protocol's grain** -- LL and LL128 carry a flag in every line, so a hop forwards line by
  line and the unit is the protocol's grain (16 B, 1920 B): their fill hardly depends on the
  chunk, only their per-chunk latency does. Every chunk is rounded down to the grain and clamped
  to the buffer's ceiling as NCCL does.

The chunk's effect is the ratio of this pipeline's time with the chunk given to its time with
NCCL's own, applied to the configuration's modelled time less NCCL's fixed base latency: at NCCL's
own chunk every time is the cost model's, and the hop latency and the per-byte time come from the
cost model itself (its chained latency over its hops, its time per byte of the piece).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynamiccl.system import chunking as nccl_chunking
from dynamiccl.system.chunking import GRAIN_BYTES, Shape, chunking_of
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import Topology


def pipeline_us(shape: Shape, protocol: Protocol, piece: np.ndarray, chunk: np.ndarray,
                hop_us: np.ndarray, us_per_byte: np.ndarray, step_cost: float = 1.0) -> np.ndarray:
    """One channel's piece moved in ``chunk``-byte chunks (module docstring), µs.

    ``hop_us``: one hop's latency; ``us_per_byte``: a hop's time per byte of the piece;
    ``step_cost`` scales what a chunk costs beyond its bytes (1: a hop's latency shared by the
    chunks in flight; more: a system whose connections hide less of it).
    """
    piece = np.maximum(piece.astype(np.float64), 1.0)
    chunk = np.maximum(chunk.astype(np.float64), 1.0)
    loops = np.ceil(piece / (shape.per_loop * chunk))
    moved = piece / loops  # a loop's bytes: NCCL spreads the last loop over its chunks
    grain = float(GRAIN_BYTES[Protocol(protocol)])
    simple = Protocol(protocol) == Protocol.SIMPLE
    shared_latency = step_cost * hop_us / shape.in_flight
    if shape.chained_steps:  # a ring: ``per_loop`` chunks a loop, each step one over one hop
        step_bytes = moved / shape.per_loop
        unit = step_bytes / shape.slices if simple else np.minimum(grain, step_bytes)
        per_step = np.maximum(step_bytes * us_per_byte + shared_latency, hop_us + unit * us_per_byte)
        return loops * shape.chained_steps * per_step
    unit = moved / shape.per_loop if simple else np.minimum(grain, moved)  # a chunk, or a line
    fill = shape.depth * hop_us + (shape.depth - 1) * unit * us_per_byte
    return fill + loops * np.maximum(moved * us_per_byte, shared_latency)


def chunk_ratio(topology: Topology, collective: Collective, algorithm: Algorithm, protocol: Protocol,
                nbytes: np.ndarray, channels: np.ndarray, chunk: np.ndarray, latency_us: np.ndarray,
                bytes_us: np.ndarray, step_cost: float = 1.0) -> np.ndarray:
    """The time with NCCL running ``chunk`` over its time with its own chunk, per call.

    ``latency_us``: the configuration's chained latency (its modelled time at size 0 less the base
    latency); ``bytes_us``: the rest of its time at ``nbytes``; ``step_cost``: as in
    :func:`pipeline_us`. Where the algorithm has no NCCL chunking the ratio is 1.
    """
    spec = chunking_of(algorithm)
    if spec is None:
        return np.ones(np.broadcast(nbytes, chunk).shape)
    shape = spec.shape(topology, collective, protocol)
    piece = nccl_chunking.piece_bytes(nbytes, channels)
    hops = shape.chained_steps or shape.depth
    hop_us = latency_us / max(hops, 1)
    per_piece = np.maximum(piece, 1).astype(np.float64)
    # the hop's time per byte: the streamed bytes over what one hop of the pattern carries
    carried = per_piece * (shape.chained_steps / shape.per_loop if shape.chained_steps else 1.0)
    us_per_byte = bytes_us / np.maximum(carried, 1.0)
    own = nccl_chunking.nccl_chunk(spec, topology, collective, protocol, piece)
    given = nccl_chunking.nccl_chunk(spec, topology, collective, protocol, piece, chunk)
    with_own = pipeline_us(shape, protocol, piece, own, hop_us, us_per_byte, step_cost)
    with_given = pipeline_us(shape, protocol, piece, given, hop_us, us_per_byte, step_cost)
    return np.where(with_own > 0, with_given / np.where(with_own > 0, with_own, 1.0), 1.0)


def with_chunk(topology: Topology, coll: np.ndarray, size: np.ndarray, tab: Any, idx: np.ndarray,
               times: np.ndarray) -> np.ndarray:
    """The chunk size's effect (the knob table's ``effect`` of ``chunk_bytes``): the columns
    ``idx`` of ``tab`` give NCCL a chunk; each time above its base latency is scaled by
    :func:`chunk_ratio`."""
    cfg, base = tab.configs, tab.base_us[idx]
    latency = tab.lat[coll][:, idx] - base
    out = times.copy()
    for c in np.unique(coll):
        rows = np.flatnonzero(coll == c)
        for j, col in enumerate(idx):
            if not np.isfinite(latency[rows[0], j]):
                continue  # the configuration cannot run this collective
            ratio = chunk_ratio(topology, Collective(int(c)), Algorithm(int(cfg.algorithm[col])),
                                Protocol(int(cfg.protocol[col])), size[rows].astype(np.int64),
                                cfg.channels[col], cfg.chunk_bytes[col], latency[rows, j],
                                times[rows, j] - tab.lat[c, col])
            out[rows, j] = base[j] + (times[rows, j] - base[j]) * ratio
    return out
