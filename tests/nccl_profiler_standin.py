"""A stand-in for NCCL towards the profiler plugin, for tests on machines without a GPU.

NCCL loads the plugin and calls it only on a GPU; here a rank plays NCCL's part through ctypes, with
the real library: ``ncclProfiler_v6`` init for its communicator, and for each collective the events
NCCL 2.28.9 sends (src/plugin/profiler.cc, src/transport/profiler.cc): a group and a coll event at
launch (the coll stopped once enqueued), then per channel a kernelCh event started with the
channel's GPU start time, a KernelChStop state with its stop time, and its stop. The times are
whatever the caller says they were (a gloo job passes its collectives' host times).
"""

from __future__ import annotations

import ctypes
import os

from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.nccl_profiler import (
    PROFILER_ALGORITHM_NAMES,
    PROFILER_COLLECTIVE_NAMES,
    PROFILER_PROTOCOL_NAMES,
    PROFILER_STATE_KERNEL_CH_STOP,
    ProfilerEvent,
)


class _Coll(ctypes.Structure):
    _fields_ = [("seqNumber", ctypes.c_uint64), ("func", ctypes.c_char_p), ("sendBuff", ctypes.c_void_p),
                ("recvBuff", ctypes.c_void_p), ("count", ctypes.c_size_t), ("root", ctypes.c_int),
                ("datatype", ctypes.c_char_p), ("nChannels", ctypes.c_uint8), ("nWarps", ctypes.c_uint8),
                ("algo", ctypes.c_char_p), ("proto", ctypes.c_char_p), ("parentGroup", ctypes.c_void_p)]


class _KernelCh(ctypes.Structure):
    _fields_ = [("channelId", ctypes.c_uint8), ("pTimer", ctypes.c_uint64)]


class _Union(ctypes.Union):
    _fields_ = [("coll", _Coll), ("kernelCh", _KernelCh), ("bytes", ctypes.c_ubyte * 88)]


class _Descr(ctypes.Structure):
    """ncclProfilerEventDescr_v6_t (112 bytes)."""

    _anonymous_ = ("u",)
    _fields_ = [("type", ctypes.c_uint64), ("parentObj", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("u", _Union)]


class _StateArgs(ctypes.Union):
    _fields_ = [("pTimer", ctypes.c_uint64), ("bytes", ctypes.c_ubyte * 8)]


_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                         ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.c_void_p)
_START = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                          ctypes.POINTER(_Descr))
_STOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_StateArgs))


class _ProfilerV6(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("startEvent", _START),
                ("stopEvent", _STOP), ("recordEventState", _STATE), ("finalize", _STOP)]


class NcclProfilerStandIn:
    """One communicator's rank, as NCCL drives the profiler plugin at ``library``."""

    def __init__(self, library: str, comm_id: int, nranks: int, rank: int, nnodes: int = 1) -> None:
        lib = ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.v6 = _ProfilerV6.in_dll(lib, "ncclProfiler_v6")
        self.ctx = ctypes.c_void_p()
        self.mask = ctypes.c_int(0)
        self.rank = rank
        self.seq: dict[Collective, int] = {}
        assert self.v6.init(ctypes.byref(self.ctx), comm_id, ctypes.byref(self.mask), b"standin",
                            nnodes, nranks, rank, None) == 0

    @property
    def recording(self) -> bool:
        return bool(self.ctx.value) and bool(self.mask.value & ProfilerEvent.KERNEL_CH)

    def collective(self, collective: Collective, count: int, algorithm: Algorithm,
                   protocol: Protocol, channels: int, gpu_start_ns: int, duration_ns: int,
                   datatype: bytes = b"ncclFloat32") -> None:
        """One collective of ``count`` elements on ``channels`` channels that ran on the GPU from
        ``gpu_start_ns`` for ``duration_ns`` (every channel alike)."""
        call = self.launch(collective, count, algorithm, protocol, channels, datatype)
        self.complete(call, channels, gpu_start_ns, duration_ns)

    def launch(self, collective: Collective, count: int, algorithm: Algorithm, protocol: Protocol,
               channels: int, datatype: bytes = b"ncclFloat32") -> ctypes.c_void_p:
        """What NCCL reports when the rank calls the collective (its launch time is now)."""
        seq = self.seq.get(collective, 0)
        self.seq[collective] = seq + 1
        group, call = ctypes.c_void_p(), ctypes.c_void_p()
        d = _Descr(type=ProfilerEvent.GROUP)
        assert self.v6.startEvent(self.ctx, ctypes.byref(group), ctypes.byref(d)) == 0
        d = _Descr(type=ProfilerEvent.COLL, rank=self.rank)
        d.coll.seqNumber, d.coll.count, d.coll.nChannels, d.coll.nWarps = seq, count, channels, 8
        d.coll.func = PROFILER_COLLECTIVE_NAMES[collective].encode()
        d.coll.datatype = datatype
        d.coll.algo = PROFILER_ALGORITHM_NAMES[algorithm].encode()
        d.coll.proto = PROFILER_PROTOCOL_NAMES[protocol].encode()
        assert self.v6.startEvent(self.ctx, ctypes.byref(call), ctypes.byref(d)) == 0
        for handle in (call, group):
            if handle.value:
                assert self.v6.stopEvent(handle) == 0
        return call

    def complete(self, call: ctypes.c_void_p, channels: int, gpu_start_ns: int,
                 duration_ns: int) -> None:
        """What NCCL's proxy thread reports once the GPU ran the call's channels."""
        for channel in range(channels):
            handle = ctypes.c_void_p()
            d = _Descr(type=ProfilerEvent.KERNEL_CH, parentObj=call)
            d.kernelCh.channelId, d.kernelCh.pTimer = channel, gpu_start_ns
            assert self.v6.startEvent(self.ctx, ctypes.byref(handle), ctypes.byref(d)) == 0
            if handle.value:
                args = _StateArgs(pTimer=gpu_start_ns + duration_ns)
                assert self.v6.recordEventState(handle, PROFILER_STATE_KERNEL_CH_STOP,
                                                ctypes.byref(args)) == 0
                assert self.v6.stopEvent(handle) == 0

    def finalize(self) -> None:
        assert self.v6.finalize(self.ctx) == 0
