"""Every number NCCL 2.30.7's default selection depends on, in one place.

Each constant cites the section of ``shared/reference/nccl_abi.md`` it is restated from; the few
that the reference does not list cite the NCCL source file they were read from (read, not copied).
Tables are indexed exactly like NCCL's: ``[algorithm][protocol]`` with NCCL's integer ids
(Tree 0, Ring 1, CollNetDirect 2, CollNetChain 3, NVLS 4, NVLSTree 5, PAT 6; LL 0, LL128 1,
Simple 2), ``[hw link][algorithm][protocol]`` (NVLINK 0, PCI 1, NET 2) and
``[compcap row][scale]`` (rows Volta 0, Ampere 1, Hopper 2, Blackwell 3; scale 1 node 0,
2 nodes 1, 3+ nodes 2).
"""

from __future__ import annotations

import numpy as np

#: NCCL versions whose cost model this package reproduces (§3: 2.30.7 is what PyTorch 2.15 loads).
SUPPORTED_VERSIONS: tuple[str, ...] = ("2.30.7",)

N_ALGOS = 7  # NCCL_NUM_ALGORITHMS (§1.2)
N_PROTOS = 3  # NCCL_NUM_PROTOCOLS (§1.2)
N_COLLS = 5  # NCCL_NUM_FUNCTIONS (§1.2)
UNUSABLE = -1.0  # NCCL_ALGO_PROTO_IGNORE: what an unusable table entry holds (§1.2, §1.5)

# Indices (§1.2)
TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
LL, LL128, SIMPLE = range(3)
HW_NVLINK, HW_PCI, HW_NET = range(3)
BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, ALLREDUCE = range(5)
VOLTA, AMPERE, HOPPER, BLACKWELL = range(4)

# ---------------------------------------------------------------------------------------------
# §3.2 ncclTunerConstantsDefaults (identical in 2.30.7 source and the 2.31.2 binary)
# ---------------------------------------------------------------------------------------------

#: baseLatencies [algo][proto], µs (§3.2).
BASE_LATENCY_US = np.array([
    [6.8, 14.0, 8.4],   # Tree
    [6.6, 14.0, 8.4],   # Ring
    [0.0, 0.0, 0.0],    # CollNetDirect
    [0.0, 0.0, 0.0],    # CollNetChain
    [0.0, 0.0, 0.0],    # NVLS
    [0.0, 0.0, 0.0],    # NVLSTree
    [8.0, 8.0, 8.0],    # PAT
])

#: hwLatencies [link][algo][proto], µs (§3.2).
HW_LATENCY_US = np.array([
    [  # NVLINK
        [0.6, 1.25, 4.0], [0.6, 1.9, 3.4], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
        [0.0, 0.0, 25.0], [0.0, 0.0, 25.0], [0.0, 0.0, 4.0],
    ],
    [  # PCI
        [1.0, 1.9, 4.0], [1.0, 2.5, 5.7], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8],
        [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 4.0],
    ],
    [  # NET
        [5.0, 8.5, 14.0], [2.7, 4.0, 14.0], [0.0, 0.0, 31.0], [0.0, 0.0, 30.0],
        [0.0, 0.0, 18.0], [0.0, 0.0, 20.9], [0.0, 0.0, 14.0],
    ],
])

#: llMaxBws [row][scale], GB/s (§3.2; row semantics §3.3: single node = compcap row, multi-node =
#: CPU row, 0 Intel / 1 AMD). Blackwell single node is 282.0 in 2.30.7 (282.4 only in 2.32.3).
LL_MAX_BW = np.array([
    [39.0, 39.0, 20.4],
    [87.7, 22.5, 19.0],
    [141.0, 45.0, 35.0],
    [282.0, 90.0, 70.0],
])
#: perChMaxRingLL128Bws [compcap][scale], GB/s per channel (§3.2).
PER_CH_MAX_RING_LL128_BW = np.array([
    [20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 36.7], [40.0, 40.0, 40.0],
])
#: perChMaxTreeLL128Bws [compcap][scale] (§3.2; Blackwell 2-node is 31.67 in 2.30.7).
PER_CH_MAX_TREE_LL128_BW = np.array([
    [20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0],
])
#: perChMaxTreeBws [compcap][scale] (§3.2).
PER_CH_MAX_TREE_BW = np.array([
    [26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0],
])
#: perChMaxNVLSTreeBws [compcap][scale] (§3.2).
PER_CH_MAX_NVLS_TREE_BW = np.array([
    [26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0],
])
#: nvlsEfficiency per compcap (§3.2).
NVLS_EFFICIENCY = np.array([0.0, 0.0, 0.85, 0.74])

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
PAT_FACTOR = 0.75
COLLNET_DIRECT_INTER_FACTOR = 0.9  # AllGather/ReduceScatter: ppn * min(bwIntra, 0.9 bwInter)
COLLNET_DIRECT_HOPPER_FACTOR = 0.85
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

MAXCHANNELS = 64  # MAXCHANNELS and the default NCCL_MAX_NCHANNELS / maxCTAs (§3.8)
DEFAULT_MIN_CHANNELS = 1  # max(NCCL_MIN_NCHANNELS default 0, minCTAs default 1) (§3.8)
WARP_SIZE = 32
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
RING_SEARCH_MAX_CHANNELS = MAXCHANNELS // 2
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
