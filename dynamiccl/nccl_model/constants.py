"""The numbers NCCL 2.30.7's init-time search and per-call selection depend on, beyond each algorithm's.

Each algorithm's own numbers are in its entry of :data:`dynamiccl.system.nccl.ALGORITHMS` (its
latency rows) and of ``algorithms.py`` (its thread rows, bandwidth and latency refinements), the
default tuning constants the simulator reads too in :mod:`dynamiccl.system.nccl`; this module holds
the rest: the topology search's inputs (NCCL 2.30.7
``src/graph/search.cc``, ``src/graph/topo.h``), the communicator's channel counts
(``src/graph/connect.cc``, ``src/init.cc``) and the cost table's shared rules
(``src/graph/tuning.cc``, ``src/enqueue.cc``), each read from that source, not copied.
"""

from __future__ import annotations

from dynamiccl.system.nccl import MAX_CHANNELS

UNUSABLE = -1.0  # NCCL_ALGO_PROTO_IGNORE: what an unusable table entry holds

#: Non-ring algorithms batch this many collectives per work batch: latCount = ceil(ops/8)
#: (1024-byte work batch / 128-byte ncclDevWorkColl, src/enqueue.cc).
WORK_BATCH_COLLS = 8

# ---------------------------------------------------------------------------------------------
# Channels (src/graph/connect.cc, src/init.cc)
# ---------------------------------------------------------------------------------------------

DEFAULT_MIN_CHANNELS = 1  # max(NCCL_MIN_NCHANNELS default 0, minCTAs default 1)
#: NVLS channels per collective: SM90 16; SM100 24 single node, 32 multi-node.
NVLS_CHANNELS_SM90 = 16
NVLS_CHANNELS_SM100_1NODE = 24
NVLS_CHANNELS_SM100_MULTI = 32

# ---------------------------------------------------------------------------------------------
# Graph search inputs (src/graph/search.cc, src/graph/topo.h)
# ---------------------------------------------------------------------------------------------

#: Per-channel speeds the topology search tries, GB/s, keyed by (arch family, intra|inter).
SEARCH_SPEEDS: dict[tuple[str, str], tuple[float, ...]] = {
    ("default", "intra"): (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
    ("default", "inter"): (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2,
                           0.24, 0.12),
    ("sm90", "intra"): (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
    ("sm90", "inter"): (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
    ("sm100", "intra"): (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
    ("sm100", "inter"): (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4,
                         1.2, 0.24, 0.12),
}
#: NCCL's per-link NVLink bandwidth, GB/s, by minimum compute capability (src/graph/topo.h).
NVLINK_BW = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}
#: Physical NVLink lane rate per direction, GB/s, used only to count a tier's links (NVIDIA
#: product specifications: V100 6x25, A100 12x25, A40 4x14.06, H100 18x25, B200 18x50).
NVLINK_LANE_GBPS = {70: 25.0, 75: 25.0, 80: 25.0, 86: 14.0625, 89: 25.0, 90: 25.0, 100: 50.0}
LOC_BW = 5000.0  # a GPU's path to itself: what a lone GPU's search sees
#: Search limits (src/init.cc, src/graph/search.cc @2.30.7): rings search at most MAXCHANNELS/2
#: channels (NVLS at most 32 heads, CollNetDirect 8: dynamiccl.system.nccl).
RING_SEARCH_MAX_CHANNELS = MAX_CHANNELS // 2
#: The search keeps lowering the speed while the next one is above this fraction of the best
#: solution's speed (src/graph/search.cc @2.30.7).
SEARCH_SPEED_RATIO = 0.49
#: Channel duplication after the first search pass (src/graph/search.cc @2.30.7): only for
#: per-channel speeds of at least 25 GB/s, and not on sm81+ when below 50 GB/s with > 4 channels.
DUP_MIN_BW = 25.0
DUP_SLOW_BW = 50.0
DUP_SLOW_MAX_CHANNELS = 4
#: Communicator channel doubling for Hopper+ multi-node rings (src/graph/connect.cc).
HOPPER_DOUBLE_MIN_BW = 45.0
HOPPER_DOUBLE_BELOW_CHANNELS = 16
#: Fallback graph when the search finds nothing (src/graph/search.cc @2.30.7).
FALLBACK_BW = 0.1
