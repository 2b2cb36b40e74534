"""Every number NCCL 2.30.7's default selection depends on, in one place.

Each constant cites the section of ``shared/reference/nccl_abi.md`` it is restated from; the few
that the reference does not list cite the NCCL source file they were read from (read, not copied).
Tables are indexed exactly like NCCL's, with the ids of :mod:`dynamiccl.nccl`:
``[algorithm][protocol]`` and ``[compcap row][scale]``. NCCL's ids and the default tuning
constants the simulator reads too (§3.2) live in :mod:`dynamiccl.nccl`; this module holds the rest.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.nccl import MAX_CHANNELS

#: NCCL versions whose cost model this package reproduces (§3: 2.30.7 is what PyTorch 2.15 loads).
SUPPORTED_VERSIONS: tuple[str, ...] = ("2.30.7",)

UNUSABLE = -1.0  # NCCL_ALGO_PROTO_IGNORE: what an unusable table entry holds (§1.2, §1.5)

# ---------------------------------------------------------------------------------------------
# §3.1 time refinements
# ---------------------------------------------------------------------------------------------

#: treeCorrectionFactor [proto][log2(nBytes/64)], index 0 = 64 B … 23 = 256 MiB (§3.1).
TREE_CORRECTION = np.array([
    [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
     1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9,
     .9, 1.0, 1.0, 1.0],
    [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
     .8, .9, .9, .9],
])
TREE_CORRECTION_MAX_INDEX = 22  # Tree AllReduce uses indices 0…22 (§3.1)
NVLS_TREE_CORRECTION_MAX_INDEX = 23  # NVLSTree AllReduce on Blackwell + x86 uses 0…23 (§3.1)
#: Ring/Simple multi-node AllReduce "plateau" latency factor (§3.1): below sm80 / sm80 and up.
RING_PLATEAU_FACTOR_PRE_AMPERE = 1.9
RING_PLATEAU_FACTOR = 1.4
RING_PLATEAU_MIN_BYTES_PER_CHANNEL_RANK = 64  # nBytes/(nChannels*nRanks) >= 64 (§3.1)
#: Non-ring algorithms batch this many collectives per work batch: latCount = ceil(ops/8) (§3.1).
WORK_BATCH_COLLS = 8

# ---------------------------------------------------------------------------------------------
# §3.4 bandwidth refinements
# ---------------------------------------------------------------------------------------------

RING_LL_BUS_FRACTION = 0.5
LL128_BUS_FRACTION = 0.92  # Ring LL128 and Tree (all protocols) efficiency
TREE_LL_DIVISOR = 3.8
TREE_LL128_FRACTION_1NODE = 7.0 / 9.0
TREE_LL128_FRACTION_MULTI = 120.0 / 128.0
TREE_PATTERN_FACTOR = 0.85  # tree graph with all NIC traffic through one GPU
COLLNET_DIRECT_INTER_FACTOR = 0.9  # AllGather/ReduceScatter: ppn * min(bwIntra, 0.9 bwInter)
TREE_ALG_FACTOR = 0.5  # bus -> algorithm bandwidth for Tree and CollNet

# ---------------------------------------------------------------------------------------------
# §3.5 latency inputs not in the constants struct
# ---------------------------------------------------------------------------------------------

#: Per-step network overhead of inter-node rings, µs, by host CPU (§3.5); x3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0, "other": 1.0}
NET_OVERHEAD_SIMPLE_FACTOR = 3.0
COLLNET_DIRECT_ARITY_LATENCY_US = 0.4  # per extra local rank (§3.5)
PAT_LATENCY_INTER_DIVISOR = 3.5
PAT_LATENCY_PER_RANK_US = 2.8

# ---------------------------------------------------------------------------------------------
# §3.8 channels and threads
# ---------------------------------------------------------------------------------------------

DEFAULT_MIN_CHANNELS = 1  # max(NCCL_MIN_NCHANNELS default 0, minCTAs default 1) (§3.8)
#: maxThreads [algo][proto] (§3.8); 0 = combination never runs. Ring/Simple is 512 here and
#: drops to RING_SIMPLE_THREADS_SLOW on slow rings (below). PAT/Simple is not in the reference's
#: table: NCCL sizes it like the other non-ring Simple kernels (NCCL_NTHREADS default 512).
MAX_THREADS = np.array([
    [512, 640, 512],  # Tree
    [512, 640, 512],  # Ring
    [0, 0, 640],      # CollNetDirect
    [0, 0, 640],      # CollNetChain
    [0, 0, 640],      # NVLS
    [0, 0, 640],      # NVLSTree
    [0, 0, 512],      # PAT
])
RING_SIMPLE_THREADS_SLOW = 256  # when ring bwIntra * nChannels <= PCI_BW (§3.8)
#: Thread thresholds, bytes per thread (§3.8): LL 8 (Ring LL multiplied by nRanks), LL128 8,
#: Simple 64, CollNet Simple 512.
THREAD_THRESHOLD = np.array([
    [8, 8, 64], [8, 8, 64], [8, 8, 512], [8, 8, 512], [8, 8, 64], [8, 8, 64], [8, 8, 64],
])
#: NVLS channels per collective (§3.7): SM90 16; SM100 24 single node, 32 multi-node.
NVLS_CHANNELS_SM90 = 16
NVLS_CHANNELS_SM100_1NODE = 24
NVLS_CHANNELS_SM100_MULTI = 32
#: CollNetDirect's stepped channel reduction starts from this many channels per step
#: (src/enqueue.cc @2.30.7; the reference only says "its own stepped reduction").
COLLNET_DIRECT_NC_SWITCH = 16

# ---------------------------------------------------------------------------------------------
# §3.9 graph search inputs
# ---------------------------------------------------------------------------------------------

#: Per-channel speeds the topology search tries, GB/s (§3.9), keyed by (arch family, intra|inter).
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
#: NCCL's per-link NVLink bandwidth, GB/s, by minimum compute capability (§3.9).
NVLINK_BW = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}
#: Physical NVLink lane rate per direction, GB/s, used only to count a tier's links (NVIDIA
#: product specifications: V100 6x25, A100 12x25, A40 4x14.06, H100 18x25, B200 18x50).
NVLINK_LANE_GBPS = {70: 25.0, 75: 25.0, 80: 25.0, 86: 14.0625, 89: 25.0, 90: 25.0, 100: 50.0}
PCI_BW = 12.0  # PCI Gen3 x16, GB/s (§3.9); also the Ring/Simple thread rule's threshold
LOC_BW = 5000.0  # a GPU's path to itself (§3.9): what a lone GPU's search sees
#: Search limits (src/init.cc, src/graph/search.cc @2.30.7): rings search at most
#: MAXCHANNELS/2 channels, NVLS at most 32 heads, CollNetDirect at most 8 heads.
RING_SEARCH_MAX_CHANNELS = MAX_CHANNELS // 2
NVLS_MAX_ARITY = 32
COLLNET_DIRECT_MAX_HEADS = 8
#: The search keeps lowering the speed while the next one is above this fraction of the best
#: solution's speed (src/graph/search.cc @2.30.7).
SEARCH_SPEED_RATIO = 0.49
#: Channel duplication after the first search pass (src/graph/search.cc @2.30.7): only for
#: per-channel speeds of at least 25 GB/s, and not on sm81+ when below 50 GB/s with > 4 channels.
DUP_MIN_BW = 25.0
DUP_SLOW_BW = 50.0
DUP_SLOW_MAX_CHANNELS = 4
#: Communicator channel doubling for Hopper+ multi-node rings (§3.8, src/graph/connect.cc).
HOPPER_DOUBLE_MIN_BW = 45.0
HOPPER_DOUBLE_BELOW_CHANNELS = 16
#: Fallback graph when the search finds nothing (src/graph/search.cc @2.30.7).
FALLBACK_BW = 0.1
