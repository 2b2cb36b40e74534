"""A stand-in for NCCL towards the tuner plugin, for tests on machines without a GPU.

NCCL loads the tuner plugin and calls it only on a GPU; here a process plays NCCL's part through
ctypes, with the real libraries: the real ``libnccl.so.2`` (the nvidia-nccl wheel) loaded into the
process first, as it is in any NCCL job, so the plugin reads the version of a real NCCL through its
``ncclGetVersion``; then ``ncclTunerPlugin_v6`` init for one communicator, getCollInfo with a cost
table of usable entries (the cells NCCL would mark unusable set to -1), and finalize. The plugin's
run-time entry points (``dynamiccl_*``) are on :attr:`NcclTunerStandIn.lib`, loaded in the same
process as the runtime loads them; what it logs through NCCL's logger is in
:attr:`NcclTunerStandIn.logs`.
"""

from __future__ import annotations

import ctypes
import os

from dynamiccl.plugin.build import find_nccl_library

#: NCCL's logger as the plugin calls it: (level, subsystem flags, file, line, "%s", message). The
#: plugin always formats its message itself and passes it as the one variadic argument, which on
#: x86-64 and AArch64 Linux arrives where a sixth fixed argument would.
_LOGGER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_char_p)
_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_size_t,
                         ctypes.c_size_t, _LOGGER, ctypes.c_void_p, ctypes.c_void_p)
_COLL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                         ctypes.POINTER(ctypes.c_int))
_FIN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_CHUNK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t))
#: NCCL's cost table the plugin edits: 7 algorithms x 3 protocols.
_CELLS = 21
#: NCCL's log levels (src/include/nccl_common.h).
WARN, INFO = 2, 3


class _TunerV6(ctypes.Structure):
    """``ncclTunerPlugin_v6`` (NCCL 2.30's src/include/plugin/tuner/tuner_v6.h)."""

    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("coll", _COLL), ("fin", _FIN),
                ("chunk", _CHUNK)]


def load_nccl() -> ctypes.CDLL:
    """The real NCCL library, in the process's global scope (where a job's NCCL is found), or a
    RuntimeError naming what to install."""
    path = find_nccl_library()
    if path is None:
        raise RuntimeError("the tuner stand-in needs the real NCCL library: install the nvidia-nccl "
                           "wheel (pip install -e '.[test]' brings it with torch)")
    return ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_GLOBAL)


class NcclTunerStandIn:
    """Loads NCCL, then ``library`` (RTLD_LOCAL, as NCCL does), inits one v6 communicator of
    ``nranks`` ranks on ``nodes`` nodes, and asks getCollInfo as NCCL would."""

    def __init__(self, library: str, nranks: int, nodes: int = 1) -> None:
        self.nccl = load_nccl()
        self.lib = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.v6 = _TunerV6.in_dll(self.lib, "ncclTunerPlugin_v6")
        #: (level, message) of every line the plugin logged, in order.
        self.logs: list[tuple[int, str]] = []
        self._logger = _LOGGER(lambda level, flags, file, line, fmt, message: self.logs.append(
            (level, (message or b"").decode(errors="replace"))))
        self.ctx = ctypes.c_void_p()
        self.communicator(nranks, nodes)

    def communicator(self, nranks: int, nodes: int = 1) -> None:
        """Inits a communicator (as NCCL does at each ncclCommInit); calls go to the newest."""
        self.ctx = ctypes.c_void_p()
        assert self.v6.init(ctypes.byref(self.ctx), 1, nranks, nodes, self._logger, None, None) == 0

    def nccl_version(self) -> int:
        """The version code of the NCCL loaded (ncclGetVersion)."""
        code = ctypes.c_int(0)
        assert self.nccl.ncclGetVersion(ctypes.byref(code)) == 0
        return code.value

    def messages(self, level: int) -> list[str]:
        return [m for lvl, m in self.logs if lvl == level]

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
