"""The system model: a list of tiers, innermost first, plus GPU facts and fabric features.

A tier is one level of the machine's interconnect (NVLink inside a node, InfiniBand between nodes,
…). Its ``bandwidth_GBps`` is the unidirectional bandwidth one rank can drive into that tier and
``latency_us`` the cost of one hop across it. The product of the tier sizes is the number of ranks;
the innermost tier is "the node".

Topologies are plain YAML files (presets live in ``configs/topology/``, the Hydra group
``topology``); :func:`load_topology` accepts a preset name or a path and reports a malformed file
with one message naming the file, the field and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dynamiccl.config_loader import ConfigError, config_names, read_config
from dynamiccl.system.calibration import Calibration, CalibrationFormatError, calibration_from_dict
from dynamiccl.system.nccl import LINK_NAMES
from dynamiccl.system.transports import DEFAULT_TRANSPORT, TRANSPORTS

FABRICS = ("switch", "ring", "torus2d", "fully_connected")
#: Physical links one hop of a fabric crosses. A switch hop is GPU -> switch -> GPU: two cables. A
#: ring, a 2-D torus (each rank cabled to its 2 neighbours per dimension) and a fully connected
#: fabric link neighbours by one cable. Used when a tier gives ``link_latency_us`` (per cable, as
#: seed 001's ASTRA-sim configuration does) instead of a measured per-hop ``latency_us``.
LINKS_PER_HOP = {"switch": 2, "ring": 1, "torus2d": 1, "fully_connected": 1}
LINKS = tuple(LINK_NAMES.values())
#: How the measured program drives the GPUs: one process (or thread) per GPU, as ``mpirun -np N``
#: with nccl-tests ``-g 1`` and every training framework do, or one thread launching every local
#: GPU's kernel in turn (nccl-tests ``-g 8``), whose host launch cost grows with the GPU count.
LAUNCH_MODES = ("process_per_gpu", "single_process")
#: NCCL's path types between two GPUs of a node, best first (src/graph/topo.h): NVLink, one PCIe
#: switch, several PCIe switches, through the CPU's host bridge, across the CPU socket interconnect.
PATH_TYPES = ("NVL", "PIX", "PXB", "PHB", "SYS")
#: The PCIe path from a GPU to its NIC, in NCCL's path types (a network tier's ``nic_path``). NVIDIA's
#: HGX/DGX boards, p4d/p5 and A3 put each NIC on a PCIe switch with its GPUs (PIX/PXB); a NIC on a CPU
#: root port while the GPUs hang elsewhere is PHB, one on the other socket SYS. NCCL reads it when it
#: decides whether LL128 may cross the network (NCCL 2.30.7 ``src/graph/tuning.cc``: only when the
#: path is at most PXB).
NIC_PATHS = PATH_TYPES[1:]
DEFAULT_NIC_PATH = "PXB"
#: The GPU-NIC path NCCL sees, at best, on a transport without GPUDirect RDMA: it routes the GPU's
#: network traffic through the CPU local to the GPU (NCCL 2.28.9 src/graph/paths.cc,
#: ncclTopoComputePaths: "We cannot use GPU Direct RDMA, divert all traffic through the CPU local to
#: the GPU"), and a NIC without a PCI device (the loopback) hangs off the CPU anyway
#: (src/graph/xml.cc, ncclTopoFillNet). Such a tier's nic_path defaults to it.
CPU_NIC_PATH = "PHB"
#: NIC paths beyond PXB, across which NCCL keeps LL128 off by default.
NO_LL128_NIC_PATHS = NIC_PATHS[NIC_PATHS.index("PXB") + 1:]
#: GB/s NCCL assigns to a CPU socket interconnect for GPU traffic (NCCL 2.30.7 ``src/graph/topo.h``,
#: its QPI/UPI, AMD, Zhaoxin, POWER and ARM constants): Intel Broadwell, Skylake, Sapphire Rapids,
#: Emerald Rapids.
SOCKET_LINK_GBPS = {"bdw": 6.0, "skl": 10.0, "srp": 22.0, "erp": 40.0, "amd": 16.0, "p9": 32.0,
                    "arm": 6.0}
#: The most ranks a system may have. The largest systems built hold about 10^5 GPUs; beyond 2^17 a
#: size is a slip (an extra zero), and every command's work grows with it.
MAX_RANKS = 2**17
#: The most GPUs one node (the innermost NVLink or PCIe tier) may hold: NVIDIA's largest NVLink
#: domain, the NVL576 rack (PCIe servers hold at most 16-20).
MAX_GPUS_PER_NODE = 576
#: A link's bandwidth (GB/s) is within this range and a hop's latency (µs) at most this: no link
#: moves more than 100 TB/s or less than 1 MB/s, and no hop takes a second; a figure beyond is a
#: unit slip, and would overflow or vanish in the times computed from it.
BANDWIDTH_RANGE_GBPS = (1e-3, 1e5)
MAX_LATENCY_US = 1e6
#: More streaming multiprocessors than any GPU has (the largest have about 160).
MAX_SMS = 1024
#: Streaming multiprocessor generations we know per-channel limits for (NCCL's compcap rows).
ARCHS = {"sm70": 70, "sm75": 75, "sm80": 80, "sm86": 86, "sm89": 89, "sm90": 90, "sm100": 100}


def modelled_arch(capability: int) -> str:
    """The architecture a GPU of compute capability ``capability`` (x 10: 90 for an H100) is
    modelled as: the newest of :data:`ARCHS` not newer than it (NCCL's tables change only at
    these), the oldest where it is older than all."""
    known = [(v, k) for k, v in ARCHS.items() if v <= capability]
    return max(known)[1] if known else min(ARCHS, key=ARCHS.__getitem__)


@dataclass(frozen=True)
class Tier:
    name: str
    size: int
    fabric: str
    bandwidth_GBps: float
    #: One hop across the tier, end to end (what NCCL's per-hop model and a ping-pong measure). A
    #: file may give ``link_latency_us`` instead: the loader multiplies it by ``LINKS_PER_HOP``.
    latency_us: float
    #: Physical link class: decides protocol rules (LL128 needs NVLink) and NCCL's latency row.
    link: str = "net"
    #: Ranks of the tier below that share one port of this tier (e.g. 4 GPUs behind one NIC).
    link_share: int = 1
    #: For torus2d: the two dimensions (their product is ``size``).
    dims: tuple[int, ...] = ()
    #: Network tiers: the transport kind (``dynamiccl.system.transports``); empty for NVLink and PCIe.
    transport: str = ""
    #: A PCIe node tier's tree of switches and sockets (None: every GPU on one switch).
    pcie: PcieTree | None = None
    #: Network tiers: the PCIe path from a GPU to its NIC (``NIC_PATHS``); empty for NVLink and PCIe.
    nic_path: str = ""

    @property
    def path(self) -> str:
        """NCCL's worst path type between two GPUs of this tier (``PATH_TYPES``; NET across a
        network tier)."""
        if self.link != "pcie":
            return "NVL" if self.link == "nvlink" else "NET"
        return self.pcie.path if self.pcie is not None else "PIX"

    @property
    def port_bandwidth_GBps(self) -> float:
        """What one rank gets when every rank of a node crosses this tier at once."""
        return self.bandwidth_GBps / self.link_share

    @property
    def nccl_nic_path(self) -> str:
        """The GPU-NIC path NCCL's graph has for this network tier: ``nic_path``, or through the CPU
        (:data:`CPU_NIC_PATH`) where the transport has no GPUDirect RDMA and the NIC sits nearer."""
        if self.transport and not TRANSPORTS[self.transport].gpudirect_rdma:
            return max(self.nic_path, CPU_NIC_PATH, key=PATH_TYPES.index)
        return self.nic_path


@dataclass(frozen=True)
class PcieTree:
    """How a node's GPUs hang off PCIe: ``gpus_per_switch`` GPUs under each switch,
    ``switches_per_socket`` switches under each CPU socket, sockets joined by ``socket_link``.

    "2 GPUs per socket, 2 sockets, no NVLink" is ``{gpus_per_switch: 2, switches_per_socket: 1,
    socket_link: skl}`` on a 4-GPU ``link: pcie`` tier.
    """

    gpus_per_switch: int
    switches_per_socket: int = 1
    #: GB/s a GPU-to-GPU stream gets across the socket interconnect (``SOCKET_LINK_GBPS``).
    socket_link_GBps: float = SOCKET_LINK_GBPS["skl"]
    sockets: int = 1

    @property
    def path(self) -> str:
        if self.sockets > 1:
            return "SYS"
        if self.switches_per_socket > 1 or self.gpus_per_switch == 1:
            return "PHB"
        return "PIX"


@dataclass(frozen=True)
class GpuSpec:
    arch: str = "sm90"
    sms: int = 132

    @property
    def sm(self) -> int:
        return ARCHS[self.arch]


@dataclass(frozen=True)
class Features:
    nvls: bool = False
    collnet: bool = False


@dataclass(frozen=True)
class Topology:
    name: str
    tiers: tuple[Tier, ...]
    gpu: GpuSpec = field(default_factory=GpuSpec)
    features: Features = field(default_factory=Features)
    launch: str = LAUNCH_MODES[0]
    #: Values fitted to this system's own measurements (``dynamiccl.system.calibration``), if any.
    calibration: Calibration | None = None

    @property
    def nranks(self) -> int:
        return math.prod(t.size for t in self.tiers)

    @property
    def gpus_per_node(self) -> int:
        return self.tiers[0].size

    @property
    def nodes(self) -> int:
        return self.nranks // self.gpus_per_node

    @property
    def ring_dimensions(self) -> tuple[int, ...]:
        """Sizes of the levels a ring can be built along, innermost first: every crossed tier, a
        2-D torus as its two dimensions (each rank has its own links in both)."""
        dims: list[int] = []
        for tier in self.tiers:
            parts = tier.dims if tier.fabric == "torus2d" and tier.dims else (tier.size,)
            dims.extend(d for d in parts if d > 1)
        return tuple(dims)

    @property
    def any_to_any(self) -> bool:
        return all(t.fabric in ("switch", "fully_connected") or t.size == 1 for t in self.tiers)

    @property
    def ll128_enabled(self) -> bool:
        """NCCL's default LL128 rule (NCCL 2.28.9 src/graph/tuning.cc, ncclTopoTuneModel): sm70+, an
        NVLink intra-node path, and across nodes a NIC at most PXB from its GPU as NCCL sees it
        (:attr:`Tier.nccl_nic_path`: through the CPU without GPUDirect RDMA). LL128 needs every
        128-byte line to land whole; NCCL trusts that only on paths it has validated and keeps
        LL128 off through a host bridge."""
        if self.gpu.sm < 70 or not (self.tiers[0].link == "nvlink" or self.gpus_per_node == 1):
            return False
        nic = next((t for t in self.tiers if t.link == "net" and t.size > 1), None)
        return nic is None or nic.nccl_nic_path not in NO_LL128_NIC_PATHS

    def resized(self, nodes: int | None = None, gpus_per_node: int | None = None) -> Topology:
        """The same system with another node count or node size (``--nodes``/``--gpus-per-node``).

        The node count is put into the outermost tier; inner tiers above the node keep their size,
        so a three-tier system needs a node count their product divides.
        """
        tiers = list(self.tiers)
        _check_resize(self, nodes, gpus_per_node)
        if gpus_per_node is not None:
            _require_positive("gpus_per_node", gpus_per_node)
            tiers[0] = _retier(tiers[0], gpus_per_node)
        if nodes is not None:
            _require_positive("nodes", nodes)
            if len(tiers) == 1:
                if nodes != 1:
                    tiers.append(Tier("network", nodes, "switch", 50.0, 3.0, "net",
                                      transport=DEFAULT_TRANSPORT, nic_path=DEFAULT_NIC_PATH))
            else:
                middle = math.prod(t.size for t in tiers[1:-1])
                if nodes % middle:
                    raise ConfigError(
                        f"{self.name}: --nodes {nodes} is not a multiple of the {middle} nodes the "
                        "inner network tiers already group; pick a multiple"
                    )
                tiers[-1] = _retier(tiers[-1], nodes // middle)
        if tiers == list(self.tiers):
            return self
        return replace(self, tiers=tuple(tiers))

    def to_dict(self) -> dict[str, Any]:
        """Plain data; fields still at their defaults are left out, so a file written before they
        existed keeps its fingerprint."""
        d = asdict(self)
        for t in d["tiers"]:
            t["dims"] = list(t["dims"])
            if t["nic_path"] in ("", default_nic_path(t["transport"] or DEFAULT_TRANSPORT)):
                del t["nic_path"]
            if t["transport"] in ("", DEFAULT_TRANSPORT):
                del t["transport"]
            if t["pcie"] is None:
                del t["pcie"]
            else:  # the file's form: the socket count follows from the tier size
                t["pcie"] = {"gpus_per_switch": t["pcie"]["gpus_per_switch"],
                             "switches_per_socket": t["pcie"]["switches_per_socket"],
                             "socket_link": t["pcie"]["socket_link_GBps"]}
        if d["launch"] == LAUNCH_MODES[0]:
            del d["launch"]
        del d["calibration"]
        if self.calibration is not None:
            d["calibration"] = self.calibration.to_dict()
        return d

    def fingerprint(self) -> str:
        """Stable hash of everything that shapes a decision; recorded in exported policies."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> str:
        tiers = " × ".join(f"{t.size} {t.name} ({t.fabric}, {t.bandwidth_GBps:g} GB/s)"
                           for t in self.tiers)
        return f"{self.name}: {self.nranks} ranks = {tiers}; {self.gpu.arch}"


def default_nic_path(transport: str) -> str:
    """A network tier's ``nic_path`` when its file does not say: on the GPUs' PCIe switch, or at the
    CPU for a transport without GPUDirect RDMA (:data:`CPU_NIC_PATH`)."""
    return DEFAULT_NIC_PATH if TRANSPORTS[transport].gpudirect_rdma else CPU_NIC_PATH


def _check_resize(topology: Topology, nodes: int | None, gpus_per_node: int | None) -> None:
    """--nodes/--gpus-per-node within :data:`MAX_RANKS` and :data:`MAX_GPUS_PER_NODE`, said before any
    tier is built (a per-node loop over 10^9 nodes ran for minutes)."""
    node = topology.tiers[0]
    gpus = topology.gpus_per_node if gpus_per_node is None else gpus_per_node
    if gpus_per_node is not None and node.link != "net" and gpus_per_node > MAX_GPUS_PER_NODE:
        raise ConfigError(f"--gpus-per-node {gpus_per_node} is more than the {MAX_GPUS_PER_NODE} GPUs "
                          f"of the largest NVLink domain (NVL576); give 1..{MAX_GPUS_PER_NODE}")
    count = topology.nodes if nodes is None else nodes
    if isinstance(count, int) and isinstance(gpus, int) and count * gpus > MAX_RANKS:
        flag = "--nodes" if nodes is not None else "--gpus-per-node"
        value = nodes if nodes is not None else gpus_per_node
        raise ConfigError(f"{flag} {value} makes {count * gpus} ranks, more than the {MAX_RANKS} "
                          f"this models (the largest systems have about 10^5 GPUs); give at most "
                          + (f"{MAX_RANKS // gpus} nodes" if nodes is not None else
                             f"{MAX_RANKS // count} GPUs per node"))


def _check_size(tiers: tuple[Tier, ...], fail: Any) -> None:
    """A file's tiers within :data:`MAX_RANKS`, and every NVLink or PCIe tier (the node, whatever
    its place) within :data:`MAX_GPUS_PER_NODE`."""
    ranks = 1
    for i, tier in enumerate(tiers):
        if tier.link_share > ranks:
            raise fail(f"tiers[{i}].link_share", f"is {tier.link_share}, but one element of the tier "
                       f"below holds {ranks} rank{'s' if ranks > 1 else ''}; give 1..{ranks}")
        if tier.link != "net" and tier.size > MAX_GPUS_PER_NODE:
            raise fail(f"tiers[{i}].size", f"is {tier.size}; an NVLink or PCIe tier holds at most "
                       f"{MAX_GPUS_PER_NODE} GPUs (the largest NVLink domain, NVL576)")
        ranks *= tier.size
        if ranks > MAX_RANKS:
            raise fail(f"tiers[{i}].size", f"is {tier.size}, which makes more than {MAX_RANKS} ranks "
                       "(the largest systems have about 10^5 GPUs); give a smaller size")


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _retier(tier: Tier, size: int) -> Tier:
    dims = _torus_dims(size) if tier.fabric == "torus2d" else ()
    pcie = tier.pcie
    if pcie is not None:  # more or fewer GPUs fill more or fewer sockets of the same kind
        per_switch = min(pcie.gpus_per_switch, size)
        per_socket = max(1, min(pcie.switches_per_socket, size // per_switch))
        pcie = replace(pcie, gpus_per_switch=per_switch, switches_per_socket=per_socket,
                       sockets=max(1, size // (per_switch * per_socket)))
    return replace(tier, size=size, dims=dims, pcie=pcie)


def _torus_dims(size: int) -> tuple[int, int]:
    """The most nearly square factorisation, as a 2-D torus would be cabled."""
    a = int(math.isqrt(size))
    while size % a:
        a -= 1
    return (a, size // a)


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------

_TIER_FIELDS = {"name", "size", "fabric", "bandwidth_GBps", "latency_us", "link_latency_us", "link",
                "link_share", "dims", "transport", "pcie", "nic_path"}
_TOP_FIELDS = ("name", "gpu", "features", "launch", "tiers", "calibration")


def preset_names() -> list[str]:
    return config_names("topology")


def load_topology(
    name_or_path: str | Path, nodes: int | None = None, gpus_per_node: int | None = None
) -> Topology:
    """A preset by name or a YAML file by path, optionally resized."""
    data, source = read_config("topology", name_or_path)
    topo = topology_from_dict(data, source=source)
    return topo.resized(nodes=nodes, gpus_per_node=gpus_per_node)


def topology_from_dict(data: Any, source: str = "<dict>") -> Topology:
    """Validates a parsed topology document; every error names ``source``, the field and a fix."""

    def fail(where: str, problem: str) -> ConfigError:
        return ConfigError(f"{source}: field '{where}' {problem}")

    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a topology is a mapping with 'name' and 'tiers' at the top")
    unknown = set(data) - {*_TOP_FIELDS, "_target_", "defaults"}
    if unknown:
        raise fail(sorted(unknown)[0], f"is not a topology field; allowed: {', '.join(_TOP_FIELDS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        said = "is missing" if name is None else f"is {name!r}, not a name"
        raise fail("name", f"{said}; give the system a name, e.g. name: my_cluster")
    gpu_d = data.get("gpu") or {}
    if not isinstance(gpu_d, dict):
        raise fail("gpu", "must be a mapping like {arch: sm90, sms: 132}")
    arch = str(gpu_d.get("arch", "sm90"))
    if arch not in ARCHS:
        raise fail("gpu.arch", f"is {arch!r}; use one of {', '.join(ARCHS)}")
    sms = gpu_d.get("sms", 132)
    if not isinstance(sms, int) or isinstance(sms, bool) or not 1 <= sms <= MAX_SMS:
        raise fail("gpu.sms", f"is {sms!r}; give the GPU's SM count, a whole number 1..{MAX_SMS}")
    feat_d = data.get("features") or {}
    if not isinstance(feat_d, dict) or set(feat_d) - {"nvls", "collnet"}:
        raise fail("features", "must be a mapping with keys nvls and collnet (true/false)")
    for key, val in feat_d.items():
        if not isinstance(val, bool):
            raise fail(f"features.{key}", f"is {val!r}; write true or false")
    tiers_d = data.get("tiers")
    if not isinstance(tiers_d, list) or not tiers_d:
        raise fail("tiers", "must be a non-empty list of tiers, innermost (the node) first")
    tiers = tuple(_tier_from_dict(t, i, fail, len(tiers_d)) for i, t in enumerate(tiers_d))
    _check_size(tiers, fail)
    if feat_d.get("nvls") and ARCHS[arch] < 90:
        raise fail("features.nvls", f"is true on {arch}; NVLS needs NVSwitch multicast on sm90+ "
                   "GPUs: set it false or give the GPU's real arch")
    launch = data.get("launch", LAUNCH_MODES[0])
    if launch not in LAUNCH_MODES:
        raise fail("launch", f"is {launch!r}; use one of {', '.join(LAUNCH_MODES)} (nccl-tests -g 1 "
                   "under mpirun is process_per_gpu, -g 8 in one process is single_process)")
    calibration = None
    if data.get("calibration") is not None:
        try:
            calibration = calibration_from_dict(data["calibration"])
        except CalibrationFormatError as exc:
            raise fail(f"calibration.{exc.field}".rstrip("."), str(exc)) from None
    return Topology(name, tiers, GpuSpec(arch, sms), Features(**feat_d), launch, calibration)


def _tier_from_dict(t: Any, i: int, fail: Any, n_tiers: int) -> Tier:
    where = f"tiers[{i}]"
    if not isinstance(t, dict):
        raise fail(where, "must be a mapping with name, size, fabric, bandwidth_GBps, latency_us")
    unknown = set(t) - _TIER_FIELDS
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}",
                   f"is not a tier field; allowed: {', '.join(sorted(_TIER_FIELDS))}")
    for key in ("size", "fabric", "bandwidth_GBps"):
        if key not in t:
            raise fail(f"{where}.{key}", "is missing")
    link = t.get("link", "nvlink" if i == 0 and n_tiers > 1 else "net")
    if link not in LINKS:
        raise fail(f"{where}.link", f"is {link!r}; use one of {', '.join(LINKS)}")
    if "latency_us" in t and "link_latency_us" in t:
        raise fail(f"{where}.latency_us", "needs exactly one of latency_us (measured per hop) and "
                   "link_latency_us (per cable; a switch hop crosses two)")
    if "latency_us" not in t and "link_latency_us" not in t and not (link == "net" and "transport" in t):
        raise fail(f"{where}.latency_us", "needs exactly one of latency_us (measured per hop) and "
                   "link_latency_us (per cable; a switch hop crosses two); a network tier that names "
                   "its transport may leave both out and get the kind's latency")
    size = t["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise fail(f"{where}.size", f"is {size!r}; it must be a positive integer")
    if t["fabric"] not in FABRICS:
        raise fail(f"{where}.fabric", f"is {t['fabric']!r}; use one of {', '.join(FABRICS)}")
    for key in ("bandwidth_GBps", "latency_us", "link_latency_us"):
        if key not in t:
            continue
        val = t[key]
        number = isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val)
        if not number or val < 0 or (key == "bandwidth_GBps" and val == 0):
            raise fail(f"{where}.{key}", f"is {val!r}; it must be a positive number")
        low, high = BANDWIDTH_RANGE_GBPS if key == "bandwidth_GBps" else (0.0, MAX_LATENCY_US)
        if not low <= val <= high:
            raise fail(f"{where}.{key}", f"is {val!r}; no link is outside {low:g}..{high:g} (a unit "
                       "slip?)")
    share = t.get("link_share", 1)
    if not isinstance(share, int) or share < 1:
        raise fail(f"{where}.link_share", f"is {share!r}; it must be a positive integer")
    dims: tuple[int, ...] = ()
    if t["fabric"] == "torus2d":
        dims = tuple(t.get("dims") or _torus_dims(size))
        if len(dims) != 2 or math.prod(dims) != size:
            raise fail(f"{where}.dims", f"is {list(dims)}; give two numbers whose product is {size}")
    transport = nic_path = ""
    if link == "net":
        transport = t.get("transport", DEFAULT_TRANSPORT)
        if transport not in TRANSPORTS:
            raise fail(f"{where}.transport", f"is {transport!r}; use one of {', '.join(TRANSPORTS)}")
        nic_path = t.get("nic_path", default_nic_path(transport))
        if nic_path not in NIC_PATHS:
            raise fail(f"{where}.nic_path", f"is {nic_path!r}; use one of {', '.join(NIC_PATHS)} "
                       "as nvidia-smi topo -m prints the GPU-NIC pair (its NODE is PHB; NIC on "
                       "the GPUs' PCIe switch: PIX or PXB; on a CPU root port: PHB; on the other "
                       "socket: SYS)")
    else:
        for key in ("transport", "nic_path"):
            if t.get(key):
                raise fail(f"{where}.{key}", f"is only for network tiers (link: net), not link: {link}")
    per_link = t.get("link_latency_us")
    if per_link is not None:
        latency = LINKS_PER_HOP[t["fabric"]] * float(per_link)
    else:
        latency = float(t["latency_us"]) if "latency_us" in t else TRANSPORTS[transport].wire_latency_us
    pcie = _pcie_from_dict(t.get("pcie"), size, link, f"{where}.pcie", fail)
    return Tier(str(t.get("name", f"tier{i}")), size, t["fabric"], float(t["bandwidth_GBps"]),
                latency, link, share, dims, transport, pcie, nic_path)


def _pcie_from_dict(p: Any, size: int, link: str, where: str, fail: Any) -> PcieTree | None:
    """The optional PCIe tree of a node tier; sockets = size / (GPUs per switch × switches)."""
    if p is None:
        return None
    if link != "pcie":
        raise fail(where, f"describes PCIe switches and sockets; it needs link: pcie, not {link}")
    if not isinstance(p, dict) or set(p) - {"gpus_per_switch", "switches_per_socket", "socket_link"}:
        raise fail(where, "must be a mapping with gpus_per_switch, switches_per_socket and "
                   f"socket_link ({', '.join(SOCKET_LINK_GBPS)} or GB/s)")
    per_switch, per_socket = p.get("gpus_per_switch", size), p.get("switches_per_socket", 1)
    for key, val in (("gpus_per_switch", per_switch), ("switches_per_socket", per_socket)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise fail(f"{where}.{key}", f"is {val!r}; it must be a positive integer")
    if size % (per_switch * per_socket):
        raise fail(where, f"puts {per_switch} x {per_socket} GPUs under a socket, which does not "
                   f"divide the tier's {size} GPUs")
    sockets = size // (per_switch * per_socket)
    link_bw = p.get("socket_link", "skl")
    if isinstance(link_bw, str):
        if link_bw not in SOCKET_LINK_GBPS:
            raise fail(f"{where}.socket_link", f"is {link_bw!r}; use one of "
                       f"{', '.join(SOCKET_LINK_GBPS)} or a bandwidth in GB/s")
        link_bw = SOCKET_LINK_GBPS[link_bw]
    low, high = BANDWIDTH_RANGE_GBPS
    if not isinstance(link_bw, (int, float)) or isinstance(link_bw, bool) or not low <= link_bw <= high:
        raise fail(f"{where}.socket_link", f"is {link_bw!r}; give a CPU kind or GB/s in {low:g}..{high:g}")
    return PcieTree(per_switch, per_socket, float(link_bw), sockets)
