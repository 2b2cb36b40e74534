"""Protocol, per-hop latency and per-channel bandwidth constants, each with its source.

Sources (facts only): NCCL 2.30.7, the NCCL PyTorch 2.15 loads: ``src/graph/tuning.cc``'s default
tuner constants (``baseLatencies``, ``hwLatencies``, ``llMaxBws``, per-channel caps,
``nvlsEfficiency``), which live in :mod:`dynamiccl.system.nccl` because NCCL's own model reads them too,
and its bandwidth rules; ``src/graph/search.cc``'s per-channel graph speeds. NVIDIA calibrated these
latencies on hardware, so the simulator uses them as the *measured* per-hop protocol cost and adds the
tier's own wire latency on top (the topology file's ``latency_us``).
"""

from __future__ import annotations

import numpy as np

from dynamiccl.system import nccl
from dynamiccl.system.nccl import (
    ALGORITHM_SPECS,
    LINK_BY_NAME,
    PROTOCOL_SPECS,
    Algorithm,
    Protocol,
    compcap_index,
    scale_index,
)
from dynamiccl.system.topology import Topology

#: Fraction of the wire bytes that is payload. LL sends 4 B of data with a 4 B flag in every 8 B
#: store; LL128 sends 120 B of data and an 8 B flag per 128 B line; Simple sends pure data and
#: synchronises with separate flags/fences (NCCL's tuning.cc uses 0.5 for LL; 120/128 for tree LL128).
PROTO_EFFICIENCY = np.array([0.5, 120.0 / 128.0, 1.0])

#: Network round trips per hop, by protocol (Simple flushes what it received: one more).
_ROUND_TRIPS = np.array([PROTOCOL_SPECS[p].network_round_trips for p in Protocol])

#: Payload share of a link's nominal rate (packet headers, flow control, encoding). Topology files
#: give nominal rates (NVLink 4: 25 GB/s per link per direction; PCIe 3.0 x16: 15.75 GB/s; 400 Gb/s
#: InfiniBand: 50 GB/s); NCCL's own per-link constants (src/graph/topo.h: NVLink SM80 20 and SM90 20.6
#: GB/s per link, PCIe Gen3 x16 12 GB/s) say how much of that data moves, i.e. 0.80-0.82 of NVLink
#: and about 0.78 of PCIe. InfiniBand's 64b/66b coding is already outside the 400 Gb/s data rate;
#: RDMA headers cost a few percent.
LINK_EFFICIENCY = {"nvlink": 0.82, "pcie": 0.78, "net": 0.95}


#: Largest per-channel speed NCCL's topology search ever assigns on each arch (src/graph/search.cc intra
#: lists: default 40, SM90 60, SM100 90 GB/s): what one CTA (one SM) can move with Simple.
SIMPLE_PER_CHANNEL_GBPS = np.array([40.0, 40.0, 60.0, 90.0])
#: ``perChMaxRingLL128Bws`` (tuning.cc), scale-independent: one channel's LL128 limit.
LL128_PER_CHANNEL_GBPS = nccl.PER_CH_MAX_RING_LL128_BW[:, 0]


#: Each algorithm's rows of NCCL's baseLatencies and hwLatencies (its entry's; StragglAR's are Ring's).
_BASE_LATENCY_US = {a: np.array(spec.base_latency_us) for a, spec in ALGORITHM_SPECS.items()}
_HW_LATENCY_US = {a: np.array(spec.hw_latency_us) for a, spec in ALGORITHM_SPECS.items()}


def base_latency_us(algo: Algorithm, proto: np.ndarray) -> np.ndarray:
    """The fixed per-collective cost of ``algo`` for each protocol in ``proto``."""
    return _BASE_LATENCY_US[algo][proto]


def hop_latency_us(link: str, tier_latency_us: float, algo: Algorithm, proto: np.ndarray) -> np.ndarray:
    """One hop: the tier's wire latency plus NCCL's measured protocol cost for that link class.

    On the network Simple also flushes the received data (one more network round trip), which NCCL
    models by adding the network latency twice for Simple (tuning.cc).
    """
    hw = _HW_LATENCY_US[algo][LINK_BY_NAME[link]][proto]
    flush = np.where(_ROUND_TRIPS[proto] > 1, tier_latency_us, 0.0) if link == "net" else 0.0
    return tier_latency_us + hw + flush


def per_channel_gbps(topology: Topology, proto: np.ndarray) -> np.ndarray:
    """What one channel (one CTA on one SM) can move per protocol, in payload GB/s.

    LL's per-channel rate is half Simple's (half of every store is flag).
    """
    cc = compcap_index(topology.gpu.sm)
    simple = SIMPLE_PER_CHANNEL_GBPS[cc]
    table = np.array([simple * PROTO_EFFICIENCY[Protocol.LL], LL128_PER_CHANNEL_GBPS[cc], simple])
    return table[proto]


def tree_per_channel_gbps(topology: Topology, proto: np.ndarray) -> np.ndarray:
    """NCCL's per-channel tree caps (its LL tree bandwidth is a third of Simple's, busBw/3.8 vs /1)."""
    cc, sc = compcap_index(topology.gpu.sm), scale_index(topology.nodes)
    simple = nccl.PER_CH_MAX_TREE_BW[cc, sc]
    table = np.array([simple * PROTO_EFFICIENCY[Protocol.LL], nccl.PER_CH_MAX_TREE_LL128_BW[cc, sc], simple])
    return table[proto]


def ll_max_gbps(topology: Topology) -> float:
    """NCCL's whole-collective LL bandwidth limit for this system (tuning.cc's llMaxBws row rule)."""
    nodes = topology.nodes
    row = compcap_index(topology.gpu.sm) if nodes == 1 else 0
    return float(nccl.LL_MAX_BW[row, scale_index(nodes)])


def ll_cap(topology: Topology, proto: np.ndarray) -> np.ndarray:
    """Aggregate bandwidth cap per protocol: LL is limited by ``llMaxBws``, the others are not."""
    return np.where(proto == Protocol.LL, ll_max_gbps(topology), np.inf)
