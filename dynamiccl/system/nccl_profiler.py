"""NCCL's profiler plugin vocabulary, written once (NCCL 2.28.9 ``src/include/plugin/nccl_profiler.h``
and ``src/collectives.cc``; 2.29.7 for v6): event types, the ABI versions each release loads, how an
event's descriptor spells algorithms, protocols, collectives and data types. The descriptor structs
themselves are in ``dynamiccl/plugin/csrc/nccl_profiler_abi.h``, checked against NCCL's headers by
``tests/test_profiler_plugin.py``; the profiler plugin's ring (:mod:`dynamiccl.plugin.profile_ring`)
and the job profiles read these names. Like :mod:`dynamiccl.system.nccl`, it imports nothing above it.
"""

from __future__ import annotations

import enum

from dynamiccl.system.nccl import COLLECTIVE_NCCL_NAMES, NCCL_ALGORITHMS, Algorithm, Collective, Protocol

#: The environment variable naming the profiler plugin NCCL loads (src/plugin/profiler.cc).
PROFILER_PLUGIN_ENV = "NCCL_PROFILER_PLUGIN"


class ProfilerEvent(enum.IntFlag):
    """Event types, also the bits of the activation mask a profiler's init sets."""

    GROUP = 1 << 0
    COLL = 1 << 1
    P2P = 1 << 2
    PROXY_OP = 1 << 3
    PROXY_STEP = 1 << 4
    PROXY_CTRL = 1 << 5
    KERNEL_CH = 1 << 6
    NET_PLUGIN = 1 << 7
    GROUP_API = 1 << 8
    COLL_API = 1 << 9
    P2P_API = 1 << 10
    KERNEL_LAUNCH = 1 << 11


#: ``ncclProfilerKernelChStop``: the state NCCL records on a kernel-channel event with the
#: channel's stop time (``pTimer``) before it stops the event (src/plugin/profiler.cc).
PROFILER_STATE_KERNEL_CH_STOP = 22

#: Profiler ABI version -> the first NCCL release (version code) whose loader looks it up; the
#: loader tries the newest first (v6 from 2.29.2, v5 from 2.28.3, v4 from 2.27.3; v3 and older
#: carry no GPU timestamps).
PROFILER_ABI_FIRST_NCCL: dict[int, int] = {6: 22902, 5: 22803, 4: 22703}

#: How a coll event's descriptor spells the algorithm and protocol NCCL ran (``ncclAlgoToString``
#: and ``ncclProtoToString``: NCCL's enum names, ``RING``, ``NVLS_TREE``, ``SIMPLE``), and the
#: collective (``ncclFuncToString``: ``AllReduce``).
PROFILER_ALGORITHM_NAMES: dict[Algorithm, str] = {a: a.name for a in NCCL_ALGORITHMS}
PROFILER_PROTOCOL_NAMES: dict[Protocol, str] = {p: p.name for p in Protocol}
PROFILER_COLLECTIVE_NAMES: dict[Collective, str] = COLLECTIVE_NCCL_NAMES

#: ``ncclDataType_t`` in id order, as ``ncclDatatypeToString`` names them, with their sizes in
#: bytes (src/nccl.h.in; NCCL 2.28.9 names ncclUint8 "Unknown", so a uint8 collective's bytes are
#: unknown to a profiler there).
DATATYPES: tuple[tuple[str, int], ...] = (
    ("ncclInt8", 1), ("ncclUint8", 1), ("ncclInt32", 4), ("ncclUint32", 4), ("ncclInt64", 8),
    ("ncclUint64", 8), ("ncclFloat16", 2), ("ncclFloat32", 4), ("ncclFloat64", 8),
    ("ncclBfloat16", 2), ("ncclFloat8e4m3", 1), ("ncclFloat8e5m2", 1),
)
