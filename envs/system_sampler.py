"""Random systems and calls around physical ranges: the breadth a policy must generalise from.

A policy trained on a handful of presets meets held-out systems (a PCIe cluster with slow NICs,
decode-sized messages) outside anything it saw. So training draws systems from ranges that real
machines span, each range written with its source, instead of from a list of machines:

* GPUs: sm70 (V100, 80 SMs), sm75 (T4, 40 SMs, PCIe only) … sm100 (B200, 148 SMs), with the NVLink
  generation of their era
  (per-GPU unidirectional NVLink: V100 150 GB/s, A100 300, H100 450, B200 900);
* nodes: NVSwitch boxes (4 or 8 GPUs), NVLink meshes without a switch (2-4 GPUs, GH200/DGX-1
  style), GPUs cabled in a ring (4-16, seed 000's systems), PCIe boxes (1-8 GPUs at 12-64 GB/s:
  Gen3 x16 to Gen5 x16) and one-GPU nodes;
* networks: 25-400 Gb/s per NIC shared by 1 to all GPUs of a node (3-100 GB/s per GPU), 1.5-10 µs
  per hop, switched or cabled as rings (seed 000's two-tier rings), optionally a third tier;
* 1 to 2048 nodes (at most 4096 ranks), NVLS on sm90+ NVSwitch nodes, CollNet (SHARP) sometimes;
* calls: every collective, sizes log-uniform from 8 B to 16 GiB, straggler and c2c contexts.

Every system is a valid :class:`~dynamiccl.system.topology.Topology` (built through the YAML loader, so it
obeys the same rules as a user's file). The held-out suite's systems are named presets at fixed
node counts; a sampled system is never one of them (a test checks the fingerprints).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamiccl.plugin.policy_file import C2C_BUCKETS, STRAGGLER_BUCKETS
from dynamiccl.system.knobs import Collective
from dynamiccl.system.topology import Topology, topology_from_dict

#: (arch, SMs, nominal per-GPU NVLink GB/s of that generation).
GPUS: tuple[tuple[str, int, float], ...] = (
    ("sm70", 80, 150.0), ("sm75", 40, 0.0), ("sm80", 108, 300.0), ("sm86", 84, 112.5), ("sm89", 142, 0.0),
    ("sm90", 132, 450.0), ("sm100", 148, 900.0),
)
MAX_RANKS = 4096
MAX_NODES = 2048
LOG2_MIN_BYTES, LOG2_MAX_BYTES = 3, 34


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _node_tier(rng: np.random.Generator, nvlink_gbps: float) -> tuple[dict, bool]:
    """(tier 0, has an NVSwitch) for one GPU generation."""
    kinds = ["pcie", "single"] + (["nvswitch", "nvswitch", "mesh", "ring"] if nvlink_gbps > 0 else [])
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "ring":  # GPUs cabled in a ring (seed 000's ASTRA-sim ring_ring nodes)
        return {"name": "nvlink", "size": int(rng.choice([4, 8, 16])), "fabric": "ring", "link": "nvlink",
                "bandwidth_GBps": round(_log_uniform(rng, 100.0, 900.0), 1),
                "latency_us": round(rng.uniform(0.3, 1.0), 2)}, False
    if kind == "nvswitch":
        size = int(rng.choice([4, 8]))
        return {"name": "nvlink", "size": size, "fabric": "switch", "link": "nvlink",
                "bandwidth_GBps": round(nvlink_gbps * rng.uniform(0.6, 1.0), 1),
                "latency_us": round(rng.uniform(0.4, 1.0), 2)}, True
    if kind == "mesh":
        size = int(rng.choice([2, 4]))
        return {"name": "nvlink", "size": size, "fabric": "fully_connected", "link": "nvlink",
                "bandwidth_GBps": round(nvlink_gbps / (size - 1) * rng.uniform(0.6, 1.0), 1),
                "latency_us": round(rng.uniform(0.4, 1.0), 2)}, False
    size = 1 if kind == "single" else int(rng.choice([2, 4, 8]))
    return {"name": "pcie", "size": size, "fabric": "switch", "link": "pcie",
            "bandwidth_GBps": round(_log_uniform(rng, 12.0, 64.0), 1),
            "latency_us": round(rng.uniform(1.0, 3.0), 2)}, False


def random_topology(rng: np.random.Generator, index: int = 0) -> Topology:
    """One random system (see the module docstring for the ranges)."""
    arch, sms, nvlink = GPUS[int(rng.integers(len(GPUS)))]
    node, nvswitch = _node_tier(rng, nvlink)
    ppn = node["size"]
    nodes = min(int(round(_log_uniform(rng, 1, MAX_NODES))), MAX_RANKS // ppn)
    if ppn == 1:
        nodes = max(nodes, 2)
    tiers = [node]
    if nodes > 1:
        nic_gbps = _log_uniform(rng, 3.0, 100.0)
        share = int(rng.choice([s for s in (1, 2, 4, 8) if s <= ppn] or [1]))
        ring = rng.random() < 0.2
        net = {"name": "network", "size": nodes, "fabric": "ring" if ring else "switch", "link": "net",
               "bandwidth_GBps": round(nic_gbps * share, 2), "link_share": share,
               "latency_us": round(rng.uniform(1.5, 10.0), 2)}
        pods = int(rng.choice([2, 4, 8]))
        if not ring and nodes % pods == 0 and nodes // pods > 1 and rng.random() < 0.15:
            tiers.append({**net, "name": "leaf", "size": pods})
            net = {**net, "name": "spine", "size": nodes // pods,
                   "bandwidth_GBps": round(net["bandwidth_GBps"] * rng.uniform(0.25, 1.0), 2),
                   "latency_us": round(net["latency_us"] * rng.uniform(1.0, 2.0), 2)}
        tiers.append(net)
    features = {"nvls": bool(nvswitch and arch in ("sm90", "sm100") and rng.random() < 0.7),
                "collnet": bool(nvswitch and nodes > 1 and rng.random() < 0.3)}  # SHARP: DGX-class
    return topology_from_dict({"name": f"random{index}_{arch}", "gpu": {"arch": arch, "sms": sms},
                               "features": features, "tiers": tiers}, source="system_sampler")


@dataclass(frozen=True)
class CallBatch:
    """Calls on one system, as parallel columns (the simulator's vectorized input)."""

    collectives: np.ndarray   # int64 [B]
    nbytes: np.ndarray        # int64 [B]
    straggler_delay_us: np.ndarray
    c2c: np.ndarray


def random_calls(rng: np.random.Generator, n: int) -> CallBatch:
    """``n`` calls: collectives uniformly, sizes log-uniform 8 B - 16 GiB, and the contexts a
    runtime reports (a persistent straggler in a third of the calls, overlapped compute)."""
    colls = rng.integers(len(Collective), size=n)
    sizes = np.floor(2.0 ** rng.uniform(LOG2_MIN_BYTES, LOG2_MAX_BYTES, size=n)).astype(np.int64)
    buckets = list(STRAGGLER_BUCKETS.values())
    delay = np.where(rng.random(n) < 2 / 3, 0.0, rng.choice(buckets[1:], size=n) * rng.uniform(0.5, 4, n))
    c2c = rng.choice(list(C2C_BUCKETS.values()), size=n)
    return CallBatch(colls.astype(np.int64), np.maximum(sizes, 8), delay, c2c)
