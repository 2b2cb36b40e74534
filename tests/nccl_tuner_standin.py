"""A stand-in for NCCL towards the tuner plugin, for tests on machines without a GPU.

NCCL loads the tuner plugin and calls it only on a GPU; here a process plays NCCL's part through
ctypes, with the real library: ``ncclTunerPlugin_v6`` init for one communicator, getCollInfo with a
cost table of usable entries (the cells NCCL would mark unusable set to -1), and finalize. The
plugin's run-time entry points (``dynamiccl_*``) are on :attr:`NcclTunerStandIn.lib`, loaded in the
same process as the runtime loads them.
"""

from __future__ import annotations

import ctypes
import os

_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_size_t,
                         ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_COLL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         ctypes.POINTER(ctypes.c_int))
_FIN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_CHUNK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t))
#: NCCL's cost table the plugin edits: 7 algorithms x 3 protocols.
_CELLS = 21


class _TunerV6(ctypes.Structure):
    """``ncclTunerPlugin_v6`` (NCCL 2.30's src/include/plugin/tuner/tuner_v6.h)."""

    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("coll", _COLL), ("fin", _FIN),
                ("chunk", _CHUNK)]


class NcclTunerStandIn:
    """Loads ``library`` (RTLD_LOCAL, as NCCL does), inits one v6 communicator of ``nranks`` ranks on
    ``nodes`` nodes, and asks getCollInfo as NCCL would."""

    def __init__(self, library: str, nranks: int, nodes: int = 1) -> None:
        self.lib = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.v6 = _TunerV6.in_dll(self.lib, "ncclTunerPlugin_v6")
        self.ctx = ctypes.c_void_p()
        assert self.v6.init(ctypes.byref(self.ctx), 1, nranks, nodes, None, None, None) == 0

    def decide(self, nbytes: int, collective: int = 4, disabled: tuple[int, ...] = ()
               ) -> tuple[int, int, int] | None:
        """(algorithm, protocol, channels) the plugin forces for a call, None: NCCL's.
        ``disabled``: cost-table cells (algorithm * 3 + protocol) NCCL marks unusable (-1)."""
        table = (ctypes.c_float * _CELLS)(*[-1.0 if i in disabled else 10.0 + i for i in range(_CELLS)])
        nch = ctypes.c_int(0)
        assert self.v6.coll(self.ctx, collective, nbytes, 1, table, 7, 3, 0, ctypes.byref(nch)) == 0
        forced = [i for i in range(_CELLS) if table[i] == 0.0]
        return (forced[0] // 3, forced[0] % 3, nch.value) if forced else None

    def chunk(self, piece: int, algorithm: int, protocol: int, nccl_chunk: int, collective: int = 4
              ) -> int:
        """The chunk size getChunkSize answers for one channel's piece of ``piece`` bytes that NCCL
        would chunk by ``nccl_chunk`` (NCCL asks right after the call was decided)."""
        size = ctypes.c_size_t(nccl_chunk)
        assert self.v6.chunk(self.ctx, collective, piece, algorithm, protocol, 1, ctypes.byref(size)) == 0
        return size.value

    def finalize(self) -> None:
        self.v6.fin(self.ctx)
