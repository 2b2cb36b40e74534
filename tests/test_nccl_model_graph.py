"""NCCL's init-time search, emulated (dynamiccl.nccl_model.graph): values derived by hand.

Each expected graph is worked out in the comment beside it from the rules in graph.py's docstring
(NCCL 2.30.7 src/graph/search.cc, connect.cc, topo.h). Three of them reproduce channel
counts NCCL printed on real machines (cited), which is how the emulation was checked.
"""

from __future__ import annotations

import pytest

from dynamiccl.nccl_model.graph import derive_system, nvlink_link_bw
from dynamiccl.system.nccl import compcap_index
from dynamiccl.system.topology import load_topology, topology_from_dict

RING, TREE, NVLS, PAT = 1, 0, 4, 6


def _sm90_nodes(bandwidth: float, ppn: int, nodes: int, nic: float = 50.0) -> object:
    return topology_from_dict({
        "name": "t", "gpu": {"arch": "sm90"}, "features": {"nvls": True},
        "tiers": [{"size": ppn, "fabric": "switch", "bandwidth_GBps": bandwidth,
                   "latency_us": 0.6, "link": "nvlink"},
                  {"size": nodes, "fabric": "switch", "bandwidth_GBps": nic, "latency_us": 3,
                   "link": "net"}],
    })


@pytest.mark.parametrize(("sm", "index", "link_bw"), [
    (70, 0, 20.0), (75, 0, 20.0), (80, 1, 20.0), (86, 1, 12.0), (89, 1, 20.0), (90, 2, 20.6),
    (100, 3, 40.1),
])
def test_compcap_row_and_nvlink_constant(sm: int, index: int, link_bw: float) -> None:
    # tuning.cc: >=100 Blackwell(3), >=90 Hopper(2), >=80 Ampere(1), else Volta(0).
    # topo.h: NVLink SM70 20, SM80 20, SM86 12, SM90 20.6, SM100 40.1 (sm75 -> SM70, sm89 -> SM80).
    assert compcap_index(sm) == index
    assert nvlink_link_bw(sm) == link_bw


def test_dgx_h100_single_node_matches_nccls_24_channels() -> None:
    # NCCL sees 450/25 = 18 NVLinks x 20.6 = 370.8 GB/s (its "totalBw 370.8", NVIDIA/nccl#1189).
    # Ring, sm90 intra speeds: 60 -> floor(370.8/60)=6 ch = 360 (< 370.8, not optimal);
    # 50 -> 7x50=350, 40 -> 9x40=360, 30 -> 12x30=360 (not better); 24/60 = 0.4 < 0.49: stop.
    # Best 6x60; 60 >= 50 so duplicated: 12 x 30. Pass 2: 40x12 = 480 > 370.8 fails.
    # Communicator: 2 x 12 = 24 channels (single node: no Hopper doubling).
    system = derive_system(load_topology("dgx_h100"))
    ring = system.graphs[RING]
    assert (ring.n_channels, ring.bw_intra, ring.bw_inter) == (12, 30.0, 30.0)
    assert system.graphs[TREE].n_channels == 12 and system.graphs[TREE].bw_intra == 30.0
    assert system.comm_channels == 24
    # NVLS: all 8 GPUs are heads; a head's link carries (8+1) x s <= 370.8 -> s = 40 (50 x 9 =
    # 450 fails). Pass 2 raises bwInter while below 2 x 40: 50, 60 (top of the list).
    nvls = system.graphs[NVLS]
    assert (nvls.n_channels, nvls.bw_intra, nvls.bw_inter) == (8, 40.0, 60.0)
    assert system.nvls_channels == 16


def test_dgx_h100_multi_node_matches_nccls_16_channels() -> None:
    # 8 NICs x 50 GB/s; sm90 inter speeds, maxBw = 50 -> start at 48. NICs: 8 x floor(50/48) = 8;
    # NVLink: floor(370.8/48) = 7 link slots, 7 + 7//7 = 8 with the entry GPU rotating.
    # 8 x 48 = 384 >= 370.8: optimal. No dup (sm90, 48 < 50, 8 > 4 channels).
    # Communicator 2 x 8 = 16; the Hopper rule needs < 16, so 16 (NVIDIA/nccl#1453: "Channel 00/16").
    system = derive_system(load_topology("dgx_h100", nodes=8))
    ring = system.graphs[RING]
    assert (ring.n_channels, ring.bw_intra) == (8, 48.0)
    assert system.comm_channels == 16
    # PAT shares the tree graph (src/init.cc graphs[] order).
    assert system.graphs[PAT] == system.graphs[TREE]


def test_h800_eight_nvlinks_gives_nccls_16_channels() -> None:
    # H800: 8 NVLinks (200 GB/s) -> 8 x 20.6 = 164.8. 60 -> 2 ch (120); 50 -> 3 (150); 40 -> 4
    # (160); 30 -> 5 (150); 24 -> 6 (144); 20 -> 8 (160, not better); 15/40 < 0.49: stop.
    # 4 x 40: 40 < 50 but only 4 channels, so duplicated: 8 x 20; 24 x 8 = 192 > 164.8.
    # Communicator 16 ("16 coll channels" in NVIDIA/nccl#892's H800 log).
    system = derive_system(_sm90_nodes(200.0, ppn=8, nodes=1))
    assert (system.graphs[RING].n_channels, system.graphs[RING].bw_intra) == (8, 20.0)
    assert system.comm_channels == 16


def test_two_gpus_per_node_matches_nccls_log() -> None:
    # 2 nodes x 2 GPUs, one 50 GB/s NIC each: 48 -> 2 NICs x 1 = 2 channels (96), next speeds
    # never beat it. 48 >= 25 with only 2 (<= 4) channels: duplicated to 4 x 24. Communicator 8.
    # NVIDIA/nccl#1189 (H20, 2 GPUs/node): "nChannels 4, bw 24/24" and "8 coll channels".
    system = derive_system(_sm90_nodes(450.0, ppn=2, nodes=2))
    assert (system.graphs[RING].n_channels, system.graphs[RING].bw_intra) == (4, 24.0)
    assert system.comm_channels == 8


def test_hopper_multi_node_doubling() -> None:
    # 6 GPUs + 6 NICs per node, 2 nodes: 48 -> 6 NICs x 1 = 6 channels; NVLink 7 + 7//5 = 8.
    # 6 x 48 = 288 < 370.8; 24 -> 12 x 24 = 288 (not better); 22/48 < 0.49: stop.
    # No dup (48 < 50, 6 > 4). Communicator 2 x 6 = 12 < 16 and ring bwIntra 48 > 45: x2 = 24.
    system = derive_system(_sm90_nodes(450.0, ppn=6, nodes=2))
    assert (system.graphs[RING].n_channels, system.graphs[RING].bw_intra) == (6, 48.0)
    assert system.comm_channels == 24
    # The same node on sm80 (no Hopper rule; default speed lists):
    a100 = topology_from_dict({
        "name": "a", "gpu": {"arch": "sm80"},
        "tiers": [{"size": 6, "fabric": "switch", "bandwidth_GBps": 300, "latency_us": 1,
                   "link": "nvlink"},
                  {"size": 2, "fabric": "switch", "bandwidth_GBps": 50, "latency_us": 3}],
    })
    # 240 GB/s NVLink; 48 -> 6 NICs x 1 = 6 (288 >= 240: optimal); 48 >= 25, sm80 -> dup 12 x 24.
    system = derive_system(a100)
    assert (system.graphs[RING].n_channels, system.graphs[RING].bw_intra) == (12, 24.0)
    assert system.comm_channels == 24


def test_dgx_a100_multi_node_tree_raises_intra_speed() -> None:
    # 8 NICs x 25 GB/s, NVLink 12 x 20 = 240. Ring: maxBw 25 -> 24: 8 NICs x 1 = 8 channels
    # (192 < 240); 20 -> 8 (160); 18, 15 -> 8; 12 -> 16 x 12 = 192 (not better); 10/24 < .49.
    # 24 < 25: no dup. Tree (8 channels): 24 works; pass 2 raises bwIntra while < 2 x 24:
    # 28 (240/28 = 8 slots + 1 >= 8), 30 (8 + 1), 48 (5 slots) fails -> bwIntra 30, bwInter 24.
    system = derive_system(load_topology("dgx_a100", nodes=4))
    ring, tree = system.graphs[RING], system.graphs[TREE]
    assert (ring.n_channels, ring.bw_intra, ring.bw_inter) == (8, 24.0, 24.0)
    assert (tree.n_channels, tree.bw_intra, tree.bw_inter) == (8, 30.0, 24.0)
    assert system.comm_channels == 16


def test_pcie_cluster_one_search_channel() -> None:
    # One 12.5 GB/s NIC shared by 4 GPUs on 12 GB/s PCIe: maxBw = min(12.5, 12) = 12 -> speed 12:
    # PCIe floor(12/12) = 1 (+ 1//3 = 1), NIC 1 x 1 -> 1 x 12 >= 12: optimal; 12 < 25 no dup.
    # Communicator 2. Ring bwIntra x channels = 12 <= PCI_BW, so Ring/Simple runs 256 threads.
    system = derive_system(load_topology("pcie_cluster"))
    assert (system.graphs[RING].n_channels, system.graphs[RING].bw_intra) == (1, 12.0)
    assert system.comm_channels == 2
    assert not system.graphs[RING].nvlink_intra and not system.ll128_enabled


def test_one_gpu_per_node_uses_the_plain_tree_pattern() -> None:
    # 1 GPU + 1 NIC per node: 48 -> 1 channel; 24 -> 2 x 24 = 48 (not better) -> 1 x 48, which
    # is duplicated (1 <= 4 channels) to 2 x 24. Tree (2 channels): 24 is the first speed with 2
    # NIC slots; its intra speed rises while below 48: 30, 40, 42, 45, 48.
    system = derive_system(load_topology("dgx_h100", nodes=4, gpus_per_node=1))
    tree = system.graphs[TREE]
    assert (tree.n_channels, tree.bw_intra, tree.bw_inter) == (2, 48.0, 24.0)
    assert tree.tree_pattern and system.pat_enabled and system.comm_channels == 4
    assert not derive_system(load_topology("dgx_h100", nodes=4)).pat_enabled


def test_feature_gates() -> None:
    assert derive_system(load_topology("dgx_a100")).nvls_channels == 0  # sm80: no NVLS graph
    assert not derive_system(load_topology("dgx_h100", gpus_per_node=1, nodes=2)).nvls_support
    h100 = derive_system(load_topology("dgx_h100", nodes=2))
    assert h100.nvls_support and not h100.collnet_support
    assert h100.graphs[2].n_channels == 0 and h100.graphs[3].n_channels == 0
