"""NVML facts → a topology YAML in the simulator's schema.

NVML sees one node: GPU model, SM count, NVLink links and what they end at, PCIe link. The tiers
above the node (node count, NIC bandwidth and latency) are invisible to it, so they come from flags
or defaults, and every value that was not measured says so in a YAML comment next to it
(``topology_from_dict`` rejects unknown keys, so the provenance cannot be a field).
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from dataclasses import dataclass, field

import yaml

from dynamiccl.files import FileKind, starts_with
from dynamiccl.profiler.measure.nvml import NVLINK_GENERATION, GpuFacts, NvmlSnapshot
from dynamiccl.system.topology import ARCHS, DEFAULT_NIC_PATH, Topology, modelled_arch, topology_from_dict

#: Unidirectional GB/s per NVLink link, by NVML's version value (NVLink 1: 20, 2–4: 25, 5: 50).
NVLINK_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}
#: GB/s per PCIe lane per direction: NCCL's Gen3 x16 = 12 GB/s scaled by each generation's rate.
PCIE_LANE_GBPS = {1: 0.1875, 2: 0.375, 3: 0.75, 4: 1.5, 5: 3.0, 6: 6.0}
#: Hop latencies when nothing better is known (the presets' values), in µs.
DEFAULT_LATENCY_US = {"nvlink": 0.6, "pcie": 1.0, "net": 3.0}
#: One 400 Gb/s NIC per GPU, as on DGX H100: a default, never a measurement.
DEFAULT_NETWORK_GBPS = 50.0


@dataclass(frozen=True)
class NetworkSpec:
    """The tiers NVML cannot see. ``None`` means "use the default" (and the YAML says so)."""

    nodes: int = 1
    bandwidth_GBps: float | None = None
    latency_us: float | None = None
    nics_per_node: int | None = None
    intra_latency_us: float | None = None
    #: NCCL's path type from a GPU to its NIC (``NIC_PATHS``; ``nvidia-smi topo -m`` prints it).
    nic_path: str | None = None


#: The first words of every topology ``profile topology`` writes (``--force`` replaces only such a file).
DISCOVERED_HEADER = "# Discovered by `dynamiccl profile topology`"
DISCOVERED = FileKind("a topology written by `dynamiccl profile topology`",
                      starts_with(DISCOVERED_HEADER.encode()))


@dataclass
class Discovery:
    topology: Topology
    yaml_text: str
    warnings: list[str] = field(default_factory=list)


def discover(snapshot: NvmlSnapshot, network: NetworkSpec | None = None,
             name: str | None = None) -> Discovery:
    """The topology of ``snapshot``'s node replicated over ``network.nodes`` nodes."""
    network = network or NetworkSpec()
    gpus = snapshot.gpus
    warnings = _health_warnings(gpus)
    arch, arch_note = _arch(gpus, warnings)
    sms = min((g.sms for g in gpus if g.sms), default=None)
    intra, intra_note = _intra_tier(gpus)
    intra_lat = network.intra_latency_us
    intra["latency_us"] = intra_lat if intra_lat is not None else DEFAULT_LATENCY_US[intra["link"]]
    intra_note += ("; latency_us from --intra-latency-us" if intra_lat is not None
                   else "; latency_us: default (not measured)")
    nvswitch = intra["fabric"] == "switch" and intra["link"] == "nvlink"
    nvls = nvswitch and ARCHS[arch] >= 90
    net, net_note = _network_tier(network, len(gpus))
    topo_name = name or "discovered_" + _slug(gpus[0].name)

    sms_text = f"sms: {sms}" if sms else "sms: 132"
    lines = [
        f"{DISCOVERED_HEADER} from NVML on {snapshot.hostname or 'this host'}"
        f" (driver {snapshot.driver_version}), {_dt.date.today().isoformat()}.",
        f"# {len(gpus)} x {gpus[0].name}. Values marked 'default' or 'from --flag' were NOT measured.",
        f"name: {topo_name}",
        f"# gpu: {arch_note}" + ("" if sms else "; sms: default (NVML did not report it)"),
        f"gpu: {{arch: {arch}, {sms_text}}}",
        "# features: nvls " + ("inferred from NVSwitch on sm90+ (multicast not queried)" if nvls
                               else "off (no NVSwitch on sm90+)")
        + "; collnet: default false (SHARP is invisible to NVML)",
        f"features: {{nvls: {str(nvls).lower()}, collnet: false}}",
        "tiers:",
        f"  # {intra_note}",
        f"  - {_flow(intra)}",
        f"  # {net_note}",
        f"  - {_flow(net)}",
    ]
    text = "\n".join(lines) + "\n"
    topology = topology_from_dict(yaml.safe_load(text), source="discovered topology")
    return Discovery(topology, text, warnings)


def _flow(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}"
                           for k, v in d.items()) + "}"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:40]


def _arch(gpus: tuple[GpuFacts, ...], warnings: list[str]) -> tuple[str, str]:
    """The lowest compute capability (NCCL tunes for the minimum), snapped to a modelled arch."""
    major, minor = min(g.compute_capability for g in gpus)
    if len({g.name for g in gpus}) > 1:
        warnings.append("mixed GPU models: " + ", ".join(sorted({g.name for g in gpus}))
                        + "; the topology uses the oldest one, as NCCL does")
    cc = major * 10 + minor
    arch = modelled_arch(cc)
    if ARCHS[arch] > cc:
        return arch, f"compute capability {major}.{minor} is older than any modelled GPU; {arch} assumed"
    if ARCHS[arch] == cc:
        return arch, f"compute capability {major}.{minor} from NVML"
    return arch, f"compute capability {major}.{minor} from NVML, modelled as the nearest older {arch}"


def _intra_tier(gpus: tuple[GpuFacts, ...]) -> tuple[dict, str]:
    n = len(gpus)
    links = [g.active_nvlinks for g in gpus]
    if n > 1 and all(links):
        nvlink = _nvlink_tier(gpus)
        if nvlink is not None:
            return nvlink
    tier, note = _pcie_tier(gpus)
    if n > 1 and any(links):
        note += "; NVLink joins only some GPUs, so collectives across all of them run over PCIe"
    return tier, note


def _nvlink_tier(gpus: tuple[GpuFacts, ...]) -> tuple[dict, str] | None:
    """NVSwitch, a full mesh or a ring of direct links; ``None`` when NVLink does not join them all."""
    n = len(gpus)
    per_gpu_bw, versions = [], Counter()
    for g in gpus:
        bw = 0.0
        for link in g.active_nvlinks:
            bw += NVLINK_LINK_GBPS.get(link.version, NVLINK_LINK_GBPS[7])
            versions[link.version] += 1
        per_gpu_bw.append(bw)
    bw = min(per_gpu_bw)
    version, _ = versions.most_common(1)[0]
    gen = NVLINK_GENERATION.get(version, "unknown (assumed like 5.0)")
    nlinks = min(len(g.active_nvlinks) for g in gpus)
    note = f"NVML: {nlinks} active NVLink {gen} links per GPU x {bw / nlinks:g} GB/s"
    if all(any(link.remote == "switch" for link in g.active_nvlinks) for g in gpus):
        return _tier("nvlink", n, "switch", bw, "nvlink"), note + " to NVSwitch"
    bus = {_norm_bus(g.bus_id): g.index for g in gpus}
    peers = [{bus.get(_norm_bus(link.remote_bus_id)) for link in g.active_nvlinks} - {None}
             for g in gpus]
    if not _connected(peers):
        return None
    if all(len(p) == n - 1 for p in peers):
        return _tier("nvlink", n, "fully_connected", bw, "nvlink"), note + ", every pair linked"
    if all(len(p) == 2 for p in peers) and _is_one_cycle(peers):
        return _tier("nvlink", n, "ring", bw, "nvlink"), note + ", linked as a ring"
    return (_tier("nvlink", n, "ring", bw, "nvlink"),
            note + ", partial mesh approximated as a ring (NCCL builds rings over it)")


def _connected(peers: list[set]) -> bool:
    seen, todo = {0}, [0]
    while todo:
        for nxt in peers[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return len(seen) == len(peers)


def _is_one_cycle(peers: list[set]) -> bool:
    seen, node = {0}, 0
    prev = None
    for _ in range(len(peers) - 1):
        nxt = next((p for p in peers[node] if p != prev), None)
        if nxt is None or nxt in seen:
            return False
        seen.add(nxt)
        prev, node = node, nxt
    return len(seen) == len(peers)


def _pcie_tier(gpus: tuple[GpuFacts, ...]) -> tuple[dict, str]:
    gens = [g.pcie_gen_max or g.pcie_gen for g in gpus]
    widths = [g.pcie_width_max or g.pcie_width for g in gpus]
    if all(gens) and all(widths):
        gen, width = min(gens), min(widths)
        bw = PCIE_LANE_GBPS.get(gen, PCIE_LANE_GBPS[6]) * width
        note = f"NVML: PCIe Gen{gen} x{width} (NCCL's estimate {bw:g} GB/s)"
    else:
        bw, note = 12.0, "PCIe link not reported by NVML; bandwidth_GBps: default (Gen3 x16)"
    return _tier("pcie", len(gpus), "switch", bw, "pcie"), note


def _tier(name: str, size: int, fabric: str, bw: float, link: str) -> dict:
    return {"name": name, "size": size, "fabric": fabric, "bandwidth_GBps": float(bw),
            "latency_us": 0.0, "link": link}


def _norm_bus(bus_id: str) -> str:
    """NVML writes ``00000000:18:00.0``; older drivers ``0000:18:00.0``: compare the tail."""
    return bus_id.lower().split(":", 1)[-1] if bus_id.count(":") == 2 else bus_id.lower()


def _network_tier(net: NetworkSpec, gpus_per_node: int) -> tuple[dict, str]:
    if net.nodes < 1:
        raise ValueError(f"--nodes must be at least 1, got {net.nodes}")
    nics = net.nics_per_node or gpus_per_node
    if nics < 1 or gpus_per_node % nics:
        raise ValueError(f"--nics-per-node {nics} must divide the {gpus_per_node} GPUs per node")
    tier = {"name": "network", "size": net.nodes, "fabric": "switch",
            "bandwidth_GBps": float(net.bandwidth_GBps or DEFAULT_NETWORK_GBPS),
            "latency_us": float(net.latency_us if net.latency_us is not None
                                else DEFAULT_LATENCY_US["net"]),
            "link": "net", "link_share": gpus_per_node // nics}
    if net.nic_path is not None:
        tier["nic_path"] = net.nic_path
    parts = [
        "size from --nodes" if net.nodes > 1 else "size: default 1 node (resize with --nodes)",
        "bandwidth_GBps from --network-bandwidth-GBps" if net.bandwidth_GBps
        else f"bandwidth_GBps: default ({DEFAULT_NETWORK_GBPS:g} GB/s, one 400 Gb/s NIC per GPU)",
        "latency_us from --network-latency-us" if net.latency_us is not None
        else "latency_us: default",
        "link_share from --nics-per-node" if net.nics_per_node else "link_share: default (a NIC per GPU)",
        "nic_path from --nic-path" if net.nic_path is not None
        else f"nic_path: default ({DEFAULT_NIC_PATH}, each NIC on its GPUs' PCIe switch)",
    ]
    return tier, "NOT measured: " + "; ".join(parts)


def _health_warnings(gpus: tuple[GpuFacts, ...]) -> list[str]:
    """Things that make one GPU slower than its peers: tomorrow's persistent straggler."""
    out = []
    for g in gpus:
        if g.slowdowns:
            temp = f" at {g.temperature_C} C" if g.temperature_C is not None else ""
            out.append(f"GPU {g.index} is throttling ({', '.join(g.slowdowns)}){temp}: "
                       "a straggler in the making")
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            out.append(f"GPU {g.index} runs its PCIe link at x{g.pcie_width} of x{g.pcie_width_max}:"
                       " a degraded link")
    counts = [len(g.active_nvlinks) for g in gpus]
    if any(counts) and len(set(counts)) > 1:
        worst = min(range(len(gpus)), key=lambda i: counts[i])
        out.append(f"GPU {gpus[worst].index} has {counts[worst]} active NVLinks, others up to "
                   f"{max(counts)}: a link is down")
    return out
