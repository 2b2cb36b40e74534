"""The public face of the NCCL-default model: what NCCL 2.30.7 would pick, and what it predicts.

``NcclModel`` is built once per system, like NCCL's tables are built once per communicator; every
query after that is table look-ups and float32 arithmetic, vectorized in :meth:`choose_many`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from dynamiccl.nccl_model.graph import NcclSystem, derive_system
from dynamiccl.nccl_model.releases import release
from dynamiccl.nccl_model.schedule import spread_channels
from dynamiccl.nccl_model.select import channels_for, cost_tables, pick
from dynamiccl.nccl_model.tables import Tables, build_tables
from dynamiccl.system import nccl
from dynamiccl.system.chunking import chunking_of, nccl_chunk, piece_bytes
from dynamiccl.system.knobs import KNOB, Config, nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class NcclChoice:
    """NCCL's pick for one call."""

    config: Config
    #: NCCL's own predicted time for the pick (the table entry it minimised), µs.
    nccl_model_us: float
    #: The cost table NCCL chose from (float32 [7, 3] µs, -1 = unusable), restrictions applied.
    table: np.ndarray


class NcclModel:
    """NCCL's default algorithm/protocol/channel selection for one system (NCCL 2.30.7
    ``src/graph/tuning.cc``, ``src/enqueue.cc``).

    ``algorithms``/``protocols`` restrict like NCCL_ALGO/NCCL_PROTO: entries outside become
    unusable (-1). A protocol named in ``protocols`` is enabled explicitly, as NCCL_PROTO enables
    it: NCCL applies LL128's default topology checks only while its setting is the default (NCCL
    2.28.9 and 2.30.7 ``src/graph/tuning.cc``, ``ncclTopoTuneModel``: ``pEnable == 2``), so a run
    forced with ``NCCL_PROTO=LL128`` runs LL128 where NCCL would never pick it (at the risk of
    corrupted data on paths NCCL has not validated, which is why the knob space and policies keep
    such a choice invalid: :func:`dynamiccl.system.knobs.invalid_reason`). ``channels`` pins the channel
    count as
    NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS plus a tuner's ``nChannels`` would: the communicator
    has exactly that many channels (which moves the Ring/Simple plateau rule) and the collective
    runs on all of them. The datatype is taken to be a non-fp8 float Sum (what NVLS and CollNet
    support), so the fp8 ring penalty and op-specific exclusions of ``updateCollCostTable`` never apply.
    ``version`` is the NCCL release reproduced (:mod:`~dynamiccl.nccl_model.releases`: 2.28.3 to
    2.30.x; default 2.30.7); another is a ValueError naming the window.
    """

    def __init__(self, topology: Topology, version: str | None = None) -> None:
        self.release = release(version)  # ValueError (one line) for a release not modelled
        self.topology = topology
        self.version = str(self.release.version) if version is None else str(version)
        self.system: NcclSystem = derive_system(topology, self.release)
        self.tables: Tables = build_tables(self.system)

    @property
    def comm_channels(self) -> int:
        """The communicator's channel count before any per-collective reduction."""
        return self.system.comm_channels

    def cost_table(self, collective: Collective, nbytes: int, num_pipe_ops: int = 1) -> np.ndarray:
        """float32 [7, 3] µs, -1.0 = unusable: exactly what a tuner plugin's getCollInfo gets."""
        colls, sizes = self._batch([collective], [nbytes])
        return cost_tables(self.system, self.tables, colls, sizes, num_pipe_ops=num_pipe_ops)[0]

    def own_value(self, knob: str, collective: Collective, nbytes: int, config: Config) -> Any:
        """The value NCCL gives ``knob`` itself when it runs ``config`` for this call: the
        configuration's own where NCCL's pick names it, else the knob's ``nccl_default``."""
        spec = KNOB[knob].nccl
        if spec is None or spec.nccl_default is None:
            return getattr(config, knob)
        module, _, name = spec.nccl_default.partition(":")
        return getattr(importlib.import_module(module), name)(self, Collective(collective), nbytes,
                                                               config)

    def choose(
        self,
        collective: Collective,
        nbytes: int,
        *,
        algorithms: Collection[Algorithm] | None = None,
        protocols: Collection[Protocol] | None = None,
        channels: int | None = None,
        num_pipe_ops: int = 1,
    ) -> NcclChoice:
        """NCCL's pick for one call; ValueError when nothing is usable (NCCL fails the call)."""
        colls, sizes = self._batch([collective], [nbytes])
        allowed = _allowed(algorithms, protocols)
        table = cost_tables(self.system, self.tables, colls, sizes, num_pipe_ops=num_pipe_ops,
                            comm_channels=self._pinned(channels), allowed=allowed,
                            protocols_named=protocols is not None)
        algo, proto, nc, time = self._decide(colls, sizes, table, channels, allowed)
        config = nccl_config(Algorithm(int(algo[0])), Protocol(int(proto[0])), int(nc[0]))
        return NcclChoice(config, float(time[0]), table[0])

    def choose_many(
        self,
        collectives: np.ndarray,
        nbytes: np.ndarray,
        *,
        algorithms: Collection[Algorithm] | None = None,
        protocols: Collection[Protocol] | None = None,
        channels: int | None = None,
        num_pipe_ops: int = 1,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized :meth:`choose`: (algorithm[B], protocol[B], channels[B], nccl_model_us[B])."""
        colls, sizes = self._batch(collectives, nbytes)
        allowed = _allowed(algorithms, protocols)
        table = cost_tables(self.system, self.tables, colls, sizes, num_pipe_ops=num_pipe_ops,
                            comm_channels=self._pinned(channels), allowed=allowed,
                            protocols_named=protocols is not None)
        algo, proto, nc, time = self._decide(colls, sizes, table, channels, allowed)
        return algo, proto, nc, time.astype(np.float64)

    def spread_channels(self, collective: Collective, nbytes: int, config: Config) -> int:
        """The channels NCCL deals one call of ``config`` to when it is planned alone: what
        ``channel{Lo..Hi}`` in its TUNING line counts (:mod:`~dynamiccl.nccl_model.schedule`);
        ``config.channels`` is the most it may use."""
        algo = config.algorithm
        if algo in (Algorithm.COLLNET_DIRECT, Algorithm.COLLNET_CHAIN):
            return config.channels  # a CollNet call takes all its channels (scheduleCollTasksToPlan)
        kind = self.comm_channels
        if algo in (Algorithm.NVLS, Algorithm.NVLS_TREE):
            multi = algo == Algorithm.NVLS and self.system.nnodes > 1
            kind = min(kind, self.system.nvls_channels) if multi else self.system.nvls_channels
        return spread_channels(collective, nbytes, self.topology.nranks, config.protocol,
                               config.channels, kind, self.release.min_traffic_per_channel)

    def predicted_us(
        self, collective: Collective, nbytes: int, config: Config, num_pipe_ops: int = 1
    ) -> float:
        """NCCL's own latency + bytes/bandwidth prediction for ``config``'s (algorithm, protocol).

        inf where NCCL deems the combination unusable; nan for a configuration NCCL cannot be told
        to run (StragglAR, a scheduled ring-over-ring). The channel count does not enter: NCCL's
        tables describe the communicator, not one channel choice.
        """
        if not config.exportable:
            return math.nan
        value = float(self.cost_table(collective, nbytes, num_pipe_ops)[config.algorithm,
                                                                        config.protocol])
        return value if value >= 0 else math.inf

    # -- helpers ---------------------------------------------------------------------------

    def _batch(self, collectives: object, nbytes: object) -> tuple[np.ndarray, np.ndarray]:
        colls = np.atleast_1d(np.asarray(collectives, dtype=np.int64))
        sizes = np.atleast_1d(np.asarray(nbytes, dtype=np.int64))
        if colls.shape != sizes.shape or colls.ndim != 1:
            raise ValueError(f"collectives {colls.shape} and nbytes {sizes.shape} must be 1-D "
                             "arrays of the same length")
        if colls.size and (colls.min() < 0 or colls.max() >= nccl.N_COLLECTIVES):
            raise ValueError(f"collective ids must be 0..{nccl.N_COLLECTIVES - 1} (NCCL's ncclFunc_t)")
        if sizes.size and sizes.min() < 0:
            raise ValueError("nbytes must not be negative")
        return colls, sizes

    @staticmethod
    def _pinned(channels: int | None) -> int | None:
        if channels is not None and not 1 <= channels <= nccl.MAX_CHANNELS:
            raise ValueError(f"channels must be 1..{nccl.MAX_CHANNELS}, got {channels}")
        return channels

    def _decide(
        self, colls: np.ndarray, sizes: np.ndarray, table: np.ndarray, channels: int | None,
        allowed: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        algo, proto, time = pick(table)
        missing = np.flatnonzero(algo < 0)
        if missing.size:
            i = int(missing[0])
            raise ValueError(self._nothing_usable(int(colls[i]), int(sizes[i]), allowed))
        if channels is not None:
            nc = np.full(len(algo), channels, dtype=np.int64)
        else:
            nc = channels_for(self.system, self.tables, algo, proto, sizes)
        return algo, proto, nc, time

    def _nothing_usable(self, coll: int, nbytes: int, allowed: np.ndarray | None) -> str:
        name = Collective(coll).name.lower()
        head = f"No algorithm/protocol available for {name} of {nbytes} B on {self.topology.name}"
        free = cost_tables(self.system, self.tables, np.array([coll]), np.array([nbytes]))[0]
        usable = [f"{Algorithm(a).name.lower()}/{Protocol(p).name.lower()}"
                  for a, p in np.argwhere(free >= 0)]
        if allowed is None or not usable:
            return f"{head}: NCCL itself has no usable combination here (ncclInternalError)"
        return (f"{head}: the algorithm/protocol restriction (like NCCL_ALGO/NCCL_PROTO) leaves "
                f"nothing NCCL can run; without it NCCL could use {', '.join(usable)}")


def own_chunk_bytes(model: NcclModel, collective: Collective, nbytes: int, config: Config
                    ) -> int | None:
    """NCCL's own chunk size, bytes, for a channel's piece of this call run as ``config``
    (``src/enqueue.cc`` ``calcCollChunking``: :mod:`dynamiccl.system.chunking`); None for an
    algorithm NCCL does not have."""
    spec = chunking_of(config.algorithm)
    if spec is None:
        return None
    piece = piece_bytes(np.array([nbytes]), config.channels)
    return int(nccl_chunk(spec, model.topology, collective, config.protocol, piece)[0])


def _allowed(
    algorithms: Collection[Algorithm] | None, protocols: Collection[Protocol] | None
) -> np.ndarray | None:
    """[7, 3] mask of what NCCL_ALGO/NCCL_PROTO leave; ids outside NCCL's (StragglAR) match none."""
    if algorithms is None and protocols is None:
        return None
    mask = np.ones((nccl.N_ALGORITHMS, nccl.N_PROTOCOLS), dtype=bool)
    if algorithms is not None:
        keep = [int(a) for a in algorithms if 0 <= int(a) < nccl.N_ALGORITHMS]
        rows = np.zeros(nccl.N_ALGORITHMS, dtype=bool)
        rows[keep] = True
        mask &= rows[:, None]
    if protocols is not None:
        cols = np.zeros(nccl.N_PROTOCOLS, dtype=bool)
        cols[[int(p) for p in protocols]] = True
        mask &= cols[None, :]
    return mask
