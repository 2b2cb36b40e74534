"""NCCL's chunking, written once: how NCCL cuts each channel's piece of a collective into chunks,
the chunk size it picks by default, and what it does with a tuner plugin's chunk size.

Every fact is NCCL 2.30.7's (the NCCL PyTorch 2.15 loads):

* buffers and steps -- ``src/init.cc`` (``DEFAULT_LL_BUFFSIZE`` = 8 lines x 512 threads x
  ``NCCL_STEPS`` x 16 B, ``DEFAULT_LL128_BUFFSIZE`` = 120 elements x 640 threads x ``NCCL_STEPS`` x
  8 B, ``DEFAULT_BUFFSIZE`` = 4 MiB) and ``src/include/device.h`` (``NCCL_STEPS`` = 8 slots per
  connection; ``ncclProtoGrainSize``: LL 16 B, LL128 1920 B, Simple 512 B; an LL128 line holds 15 of
  16 words of data);
* chunk and slice steps -- ``src/include/collectives.h``: a Ring/Simple all-reduce, all-gather or
  reduce-scatter chunk fills ``NCCL_STEPS/2`` slots and is sent as two slices, a broadcast or reduce
  chunk one slot; every other algorithm and protocol uses one slot per chunk
  (``src/device/all_reduce.h``: Tree runs ``ProtoSimple<1, 1>``, one slice per chunk);
* the default -- ``src/enqueue.cc`` ``calcCollChunking``: the chunk starts at a slot times the chunk
  steps (LL: half of it, its other half is flags; LL128: 15/16), which is also the most a tuner may
  ask for (``bufferMaxChunkSize``); NCCL then shrinks it for CollNetDirect, CollNetChain, NVLS,
  NVLSTree, Tree/LL128 and PAT where the piece holds few chunks, asks the tuner (v6
  ``getChunkSize``, clamping what it answers to that ceiling), and rounds down to the protocol's
  grain;
* the piece -- ``src/enqueue.cc`` ``scheduleCollTasksToPlan``: NCCL spreads a collective over its
  channels and asks for the chunk of each channel's piece with ``nChannels = 1`` and that piece's
  bytes (CollNet asks with the whole call and its channel count, which its rules divide alike);
* the patterns -- ``calcCollChunking``'s pattern switch and the loop sizes after it: a ring loop
  holds one chunk per rank and takes 2(n-1) chained steps for all-reduce (``ncclPatternRingTwice``),
  n-1 for all-gather/reduce-scatter; NVLS and CollNetDirect loops hold one chunk per head; every
  other pattern streams one chunk per loop through a pipeline.

The algorithm table (``dynamiccl.system.nccl.ALGORITHMS``) names each NCCL algorithm's
:class:`Chunking` here (its ``chunking``); the simulator reads it for what a chunk costs, NCCL's
model for NCCL's own chunk size. NVLS's chunk ceiling of 128 KiB is ``NCCL_NVLS_CHUNKSIZE``'s default
(``src/transport/nvls.cc``), 32 KiB across nodes (where NCCL's NVLS bandwidth is below 150 GB/s,
which is every NVLS+SHARP system the simulator has), and NVLSTree's 64 KiB from 4 nodes on; the
SM100 multi-node NVLSTree tuning (``ncclNvlsTreeSm100Tuning``, by NIC speed) is not modelled.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from dynamiccl.system.nccl import (
    ALGORITHM_SPECS,
    COLLNET_DIRECT_MAX_HEADS,
    NVLS_MAX_ARITY,
    Algorithm,
    Collective,
    Protocol,
    log2i,
)

#: Slots of a connection's FIFO (``NCCL_STEPS``).
NCCL_STEPS = 8
#: Each protocol's buffer per connection, bytes (``computeBuffSizes``' defaults).
BUFFER_BYTES = {Protocol.LL: 8 * 512 * NCCL_STEPS * 16, Protocol.LL128: 120 * 640 * NCCL_STEPS * 8,
                Protocol.SIMPLE: 1 << 22}
#: Each protocol's grain: a chunk is rounded down to a multiple of it (``ncclProtoGrainSize``).
GRAIN_BYTES = {Protocol.LL: 16, Protocol.LL128: 1920, Protocol.SIMPLE: 512}
#: NVLS's chunk ceiling (``NCCL_NVLS_CHUNKSIZE``), and across nodes.
NVLS_CHUNK_BYTES = 128 << 10
NVLS_MULTI_NODE_CHUNK_BYTES = 32 << 10
#: CollNetChain's chunk ceiling.
COLLNET_CHAIN_CHUNK_BYTES = 256 << 10
_ARRAY = np.ndarray


@dataclass(frozen=True)
class Shape:
    """How one channel's piece moves in chunks.

    A ring (``chained_steps > 0``) moves ``per_loop`` chunks per loop (one per rank) in that many
    chained steps, each step a chunk over one hop, a hop's latency on the chain every step. A
    pipeline moves ``per_loop`` chunks per loop (one per head; 1 for a chain or tree) through
    ``depth`` hops, each hop forwarding a chunk once it holds it (Simple) or line by line (LL,
    LL128).
    """

    per_loop: int
    chained_steps: int = 0
    depth: int = 1
    #: Slots one chunk fills (a Ring/Simple chunk: NCCL_STEPS/2) and slices it is sent in.
    chunk_steps: int = 1
    slices: int = 1

    @property
    def in_flight(self) -> int:
        """Chunks a connection holds at once (its FIFO's slots / a chunk's)."""
        return NCCL_STEPS // self.chunk_steps


@dataclass(frozen=True)
class Chunking:
    """One NCCL algorithm's chunking: its pattern, and how NCCL shrinks its chunk for a piece.

    ``shape(system, collective, protocol)`` reads a topology (``nranks``, ``nodes``,
    ``gpus_per_node``); ``shrink(system, collective, protocol, piece, chunk)`` takes the pieces'
    bytes and the starting chunk (numpy arrays) and returns NCCL's chunk before the tuner.
    """

    shape: Callable[[Any, Collective, Protocol], Shape]
    shrink: Callable[[Any, Collective, Protocol, _ARRAY, _ARRAY], _ARRAY] | None = None


def ring_chunk_steps(collective: Collective, protocol: Protocol) -> tuple[int, int]:
    """(chunk steps, slice steps) of a Ring/Simple chunk (``collectives.h``); 1, 1 otherwise."""
    if protocol != Protocol.SIMPLE:
        return 1, 1
    if collective in (Collective.BROADCAST, Collective.REDUCE):
        return 1, 1
    return NCCL_STEPS // 2, NCCL_STEPS // 4


def start_chunk(protocol: Protocol, chunk_steps: int = 1) -> int:
    """A slot times the chunk steps, less the flags (LL: half, LL128: 1/16): NCCL's starting chunk
    and the most a tuner may ask for (``bufferMaxChunkSize``)."""
    chunk = BUFFER_BYTES[protocol] // NCCL_STEPS * chunk_steps
    if protocol == Protocol.LL:
        return chunk // 2
    if protocol == Protocol.LL128:
        return chunk // 16 * 15
    return chunk


def _halve_while(chunk: _ARRAY, keep_going: Callable[[_ARRAY], _ARRAY], floor: int) -> _ARRAY:
    """NCCL's ``while (cond && chunk > floor) chunk /= 2``, vectorized (chunks start at most at
    4 MiB, so 8 halvings reach any floor NCCL uses)."""
    for _ in range(8):
        chunk = np.where(keep_going(chunk) & (chunk > floor), chunk // 2, chunk)
    return chunk


def _ppn(system: Any) -> int:
    return max(system.nranks // max(system.nodes, 1), 1)


def _log2ceil(n: int) -> int:
    return (n - 1).bit_length() if n > 1 else 0


# ---- patterns ---------------------------------------------------------------------------------


def _ring_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    n = system.nranks
    steps, slice_steps = ring_chunk_steps(collective, protocol)
    slices = steps // slice_steps
    if collective == Collective.ALLREDUCE:
        return Shape(n, 2 * (n - 1), chunk_steps=steps, slices=slices)
    if collective in (Collective.ALLGATHER, Collective.REDUCESCATTER):
        return Shape(n, n - 1, chunk_steps=steps, slices=slices)
    return Shape(1, depth=max(n - 1, 1), chunk_steps=steps, slices=slices)  # a pipelined chain


def _tree_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    """Up the intra-node chain and the inter-node tree, and back down behind it."""
    return Shape(1, depth=max(2 * (_ppn(system) - 1 + _log2ceil(system.nodes)), 1))


def _collnet_direct_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    return Shape(min(_ppn(system), COLLNET_DIRECT_MAX_HEADS), depth=2)


def _collnet_chain_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    return Shape(1, depth=2 * _ppn(system))


def _nvls_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    return Shape(min(_ppn(system), NVLS_MAX_ARITY), depth=2 if system.nodes == 1 else 4)


def _nvls_tree_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    return Shape(min(_ppn(system), NVLS_MAX_ARITY), depth=2 + 2 * _log2ceil(system.nodes))


def _pat_shape(system: Any, collective: Collective, protocol: Protocol) -> Shape:
    return Shape(1, depth=max(_log2ceil(system.nranks), 1))


# ---- NCCL's shrinking (calcCollChunking, nChannels = 1 for a piece) ---------------------------


def _tree_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                 chunk: _ARRAY) -> _ARRAY:
    if protocol != Protocol.LL128:
        return chunk
    ppn = system.nranks / system.nodes
    steps = 1 + log2i(system.nodes) + 0.1 * ppn
    chunk = _halve_while(chunk, lambda c: piece // c < steps * 64 / ppn, 131072)
    return _halve_while(chunk, lambda c: piece // c < steps * 16 / ppn, 32768)


def _collnet_direct_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                           chunk: _ARRAY) -> _ARRAY:
    per_head = piece // min(_ppn(system), COLLNET_DIRECT_MAX_HEADS)
    depth = 2
    chunk = _halve_while(chunk, lambda c: per_head // c < depth * 64, 131072)
    chunk = _halve_while(chunk, lambda c: per_head // c < depth * 8, 65536)
    return _halve_while(chunk, lambda c: per_head // c < depth * 8, 32768)


def _collnet_chain_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                          chunk: _ARRAY) -> _ARRAY:
    depth = _ppn(system)
    chunk = np.minimum(chunk, COLLNET_CHAIN_CHUNK_BYTES)
    chunk = _halve_while(chunk, lambda c: piece // c < depth * 64, 131072)
    chunk = _halve_while(chunk, lambda c: piece // c < depth * 8, 65536)
    return _halve_while(chunk, lambda c: piece // c < depth, 32768)


def _steps_down(piece: _ARRAY, chunk: _ARRAY, heads: int, rungs: tuple[tuple[int, int], ...]
                ) -> _ARRAY:
    """NCCL's NVLS ladders: ``if (piece < times * heads * chunk && chunk > size) chunk = size``."""
    for times, size in rungs:
        chunk = np.where((piece < times * heads * chunk) & (chunk > size), size, chunk)
    return chunk


def _nvls_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                 chunk: _ARRAY) -> _ARRAY:
    ceiling = NVLS_CHUNK_BYTES if system.nodes == 1 else NVLS_MULTI_NODE_CHUNK_BYTES
    chunk = np.minimum(chunk, ceiling)
    heads = min(_ppn(system), NVLS_MAX_ARITY)
    return _steps_down(piece, chunk, heads, ((64, 65536), (8, 32768), (2, 16384)))


def _nvls_tree_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                      chunk: _ARRAY) -> _ARRAY:
    tree_max = 65536 if system.nodes >= 4 else NVLS_CHUNK_BYTES
    chunk = np.full_like(chunk, min(NVLS_CHUNK_BYTES, tree_max))
    heads = min(_ppn(system), NVLS_MAX_ARITY)
    return _steps_down(piece, chunk, heads, ((32, 262144), (16, 131072), (4, 65536), (1, 32768)))


def _pat_shrink(system: Any, collective: Collective, protocol: Protocol, piece: _ARRAY,
                chunk: _ARRAY) -> _ARRAY:
    times = 32 if collective == Collective.ALLGATHER else 16
    return _halve_while(chunk, lambda c: c * times > piece, 65536)


# ---- each NCCL algorithm's chunking, named by its entry in dynamiccl.system.nccl.ALGORITHMS ----

TREE = Chunking(_tree_shape, _tree_shrink)
RING = Chunking(_ring_shape)
COLLNET_DIRECT = Chunking(_collnet_direct_shape, _collnet_direct_shrink)
COLLNET_CHAIN = Chunking(_collnet_chain_shape, _collnet_chain_shrink)
NVLS = Chunking(_nvls_shape, _nvls_shrink)
NVLS_TREE = Chunking(_nvls_tree_shape, _nvls_tree_shrink)
PAT = Chunking(_pat_shape, _pat_shrink)


# ---- what NCCL runs -----------------------------------------------------------------------------


@cache
def chunking_of(algorithm: Algorithm) -> Chunking | None:
    """The algorithm's NCCL chunking, as its table entry names it (None: NCCL does not have it)."""
    path = ALGORITHM_SPECS[Algorithm(algorithm)].chunking
    if path is None:
        return None
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)



def piece_bytes(nbytes: np.ndarray, channels: np.ndarray | int) -> np.ndarray:
    """A channel's piece of a call, bytes: NCCL's cells spread a call evenly over its channels."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    return -(-nbytes // np.maximum(np.asarray(channels, dtype=np.int64), 1))


def nccl_chunk(chunking: Chunking, system: Any, collective: Collective, protocol: Protocol,
               piece: np.ndarray, tuner: np.ndarray | int | None = None) -> np.ndarray:
    """The chunk NCCL runs a piece with, bytes: its own default, or ``tuner``'s (None or -1 where a
    tuner keeps NCCL's), clamped to the buffer's ceiling and rounded down to the protocol's grain."""
    shape = chunking.shape(system, collective, protocol)
    piece = np.asarray(piece, dtype=np.int64)
    ceiling = start_chunk(protocol, shape.chunk_steps)
    chunk = np.full(piece.shape, ceiling, dtype=np.int64)
    if chunking.shrink is not None:
        chunk = chunking.shrink(system, collective, protocol, piece, chunk)
    if tuner is not None:
        asked = np.broadcast_to(np.asarray(tuner, dtype=np.int64), piece.shape)
        chunk = np.where(asked > 0, np.minimum(asked, ceiling), chunk)
    grain = GRAIN_BYTES[protocol]
    return chunk // grain * grain
