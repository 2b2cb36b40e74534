"""What NVML says about the local GPUs, behind one small interface.

Discovery only needs a snapshot of facts, so the interface is a single method. The real provider
asks the driver through ``pynvml`` (nvidia-ml-py); the recorded provider replays a snapshot saved
as YAML/JSON, which is how tests run on machines without a GPU and how a user can send us what their
cluster looks like (``dynamiccl profile topology --record answers.yaml``).

One fact comes from CUDA where NVML has none: the SM count. ``nvmlDeviceGetAttributes_v2`` answers
"not supported" on whole (non-MIG) GPUs with some drivers (an H100 80GB with driver 580 did), while
CUDA's device properties always carry it; the GPUs are matched by UUID.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import yaml

from dynamiccl.files import FileKind, read_head, write_text_atomic

#: NVML's nvmlNvLinkVersion values → the NVLink generation they name.
NVLINK_GENERATION = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 255: "unknown"}
#: Clock-event bits that mean the GPU runs slower than it could (GpuIdle and app clocks excluded).
SLOWDOWN_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}


class NoDriverError(RuntimeError):
    """NVML cannot be used here (no library, no driver, no GPU)."""


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    #: NVML's version value (see :data:`NVLINK_GENERATION`), 0 when unknown.
    version: int = 0
    #: What the link ends at: ``gpu``, ``switch`` (NVSwitch), ``ibmnpu`` or ``unknown``.
    remote: str = "unknown"
    remote_bus_id: str = ""


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    compute_capability: tuple[int, int]
    bus_id: str = ""
    uuid: str = ""
    sms: int | None = None
    memory_MiB: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    sm_clock_MHz: int | None = None
    sm_clock_max_MHz: int | None = None
    temperature_C: int | None = None
    #: nvmlDeviceGetCurrentClocksEventReasons bitmask (0: running at full clocks).
    clock_event_reasons: int = 0
    nvlinks: tuple[NvLink, ...] = ()

    @property
    def active_nvlinks(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.nvlinks if link.active)

    @property
    def slowdowns(self) -> list[str]:
        return [name for bit, name in SLOWDOWN_REASONS.items() if self.clock_event_reasons & bit]


@dataclass(frozen=True)
class NvmlSnapshot:
    driver_version: str
    gpus: tuple[GpuFacts, ...]
    cuda_driver_version: int | None = None
    hostname: str = ""
    #: Pairwise nvmlDeviceGetTopologyCommonAncestor levels (0 same board … 50 across CPU sockets).
    pci_levels: tuple[tuple[int, ...], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NvmlProvider(Protocol):
    def snapshot(self) -> NvmlSnapshot: ...


# ---------------------------------------------------------------------------------------------
# Recorded answers
# ---------------------------------------------------------------------------------------------


class RecordedNvml:
    """Replays a snapshot saved by :func:`save_snapshot` (or written by hand for a fixture)."""

    def __init__(self, snapshot: NvmlSnapshot) -> None:
        self._snapshot = snapshot

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedNvml:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such NVML recording; record one on the GPU machine "
                                    "with `dynamiccl profile topology --record FILE`")
        try:
            data = yaml.safe_load(path.read_text())  # JSON is YAML too
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML/JSON ({exc})") from None
        return cls(snapshot_from_dict(data, source=str(path)))

    def snapshot(self) -> NvmlSnapshot:
        return self._snapshot


def snapshot_from_dict(data: Any, source: str = "<dict>") -> NvmlSnapshot:
    """Validates a recorded snapshot; errors name the source and the field."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or not data["gpus"]:
        raise ValueError(f"{source}: an NVML recording is a mapping with driver_version and a "
                         "non-empty 'gpus' list")
    gpu_fields = {f.name for f in fields(GpuFacts)}
    gpus = []
    for i, g in enumerate(data["gpus"]):
        if not isinstance(g, dict) or "name" not in g or "compute_capability" not in g:
            raise ValueError(f"{source}: gpus[{i}] needs at least name and compute_capability")
        unknown = set(g) - gpu_fields
        if unknown:
            raise ValueError(f"{source}: gpus[{i}].{sorted(unknown)[0]} is not a GPU field")
        g = dict(g, index=g.get("index", i))
        g["compute_capability"] = tuple(g["compute_capability"])
        g["nvlinks"] = tuple(NvLink(**link) for link in g.get("nvlinks") or ())
        gpus.append(GpuFacts(**g))
    levels = tuple(tuple(row) for row in data.get("pci_levels") or ())
    return NvmlSnapshot(str(data.get("driver_version", "unknown")), tuple(gpus),
                        data.get("cuda_driver_version"), str(data.get("hostname", "")), levels)


#: The first line of a recording ``--record`` writes; older recordings are told by their keys.
RECORDING_HEADER = "# NVML answers recorded by `dynamiccl profile topology --record`"


def _is_recording(path: Path) -> bool:
    head = read_head(path)
    return head.startswith(RECORDING_HEADER.encode()) or (
        head.startswith(b"driver_version:") and b"\ngpus:" in head)


#: What ``profile topology --record`` writes (``--force`` replaces only such a file).
RECORDING = FileKind("an NVML recording written by `dynamiccl profile topology --record`",
                     _is_recording)


def save_snapshot(snapshot: NvmlSnapshot, path: str | Path) -> None:
    """YAML with one NVLink per line, so recordings stay readable in review; written atomically."""
    data = json.loads(json.dumps(snapshot.to_dict()))
    write_text_atomic(path, f"{RECORDING_HEADER}\n" + yaml.safe_dump(
        data, sort_keys=False, width=120, default_flow_style=None))


# ---------------------------------------------------------------------------------------------
# The real thing
# ---------------------------------------------------------------------------------------------


def cuda_sm_counts() -> dict[str, int]:
    """SMs per GPU as CUDA reports them, keyed by :func:`uuid_key`; empty without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {}
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    except (ImportError, RuntimeError, AssertionError):
        return {}
    return {uuid_key(str(p.uuid)): int(p.multi_processor_count) for p in props}


def uuid_key(uuid: str) -> str:
    """A GPU UUID as NVML (``GPU-1a2b…``) and CUDA (``1a2b…``) both spell it: lower case, no prefix."""
    return uuid.lower().removeprefix("gpu-")


class PynvmlProvider:
    """Asks the driver. ``nvml`` defaults to the ``pynvml`` module and ``cuda_sms`` to
    :func:`cuda_sm_counts`, asked only when NVML has no SM count (tests may pass stand-ins)."""

    def __init__(self, nvml: ModuleType | Any | None = None,
                 cuda_sms: Callable[[], dict[str, int]] = cuda_sm_counts) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        self.cuda_sms = cuda_sms
        self._cuda_sms: dict[str, int] | None = None

    def snapshot(self) -> NvmlSnapshot:
        nv = self.nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NoDriverError(f"{type(exc).__name__.removeprefix('NVMLError_')}: {exc}") from None
        try:
            count = nv.nvmlDeviceGetCount()
            if count == 0:
                raise NoDriverError("the driver reports no GPUs")
            handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            gpus = tuple(self._gpu(i, h) for i, h in enumerate(handles))
            levels = tuple(tuple(0 if a is b else self._call(
                nv.nvmlDeviceGetTopologyCommonAncestor, a, b, default=-1) for b in handles)
                for a in handles)
            return NvmlSnapshot(
                driver_version=_text(nv.nvmlSystemGetDriverVersion()), gpus=gpus,
                cuda_driver_version=self._call(nv.nvmlSystemGetCudaDriverVersion),
                hostname=_hostname(), pci_levels=levels)
        finally:
            nv.nvmlShutdown()

    def _call(self, fn: Any, *args: Any, default: Any = None) -> Any:
        """One NVML query; "not supported" and friends become ``default`` (e.g. NVLink on PCIe GPUs)."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return default

    def _gpu(self, index: int, h: Any) -> GpuFacts:
        nv, call = self.nvml, self._call
        attrs = call(nv.nvmlDeviceGetAttributes_v2, h)
        mem = call(nv.nvmlDeviceGetMemoryInfo, h)
        pci = call(nv.nvmlDeviceGetPciInfo_v3, h)
        uuid = _text(call(nv.nvmlDeviceGetUUID, h, default=""))
        return GpuFacts(
            index=index,
            name=_text(nv.nvmlDeviceGetName(h)),
            compute_capability=tuple(nv.nvmlDeviceGetCudaComputeCapability(h)),
            bus_id=_text(pci.busId) if pci is not None else "",
            uuid=uuid,
            sms=(attrs.multiprocessorCount if attrs is not None and attrs.multiprocessorCount
                 else self._sms_from_cuda(uuid)),
            memory_MiB=mem.total // 2**20 if mem is not None else None,
            pcie_gen=call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            pcie_gen_max=call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            pcie_width=call(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            pcie_width_max=call(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
            sm_clock_MHz=call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            sm_clock_max_MHz=call(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            temperature_C=call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            clock_event_reasons=call(nv.nvmlDeviceGetCurrentClocksEventReasons, h, default=0),
            nvlinks=self._nvlinks(h),
        )

    def _sms_from_cuda(self, uuid: str) -> int | None:
        if self._cuda_sms is None:
            self._cuda_sms = self.cuda_sms()
        return self._cuda_sms.get(uuid_key(uuid)) if uuid else None

    def _nvlinks(self, h: Any) -> tuple[NvLink, ...]:
        nv, call = self.nvml, self._call
        links = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            state = call(nv.nvmlDeviceGetNvLinkState, h, link)
            if state is None:  # not supported or past the last link
                continue
            active = state == nv.NVML_FEATURE_ENABLED
            remote_pci = call(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link) if active else None
            remote = call(nv.nvmlDeviceGetNvLinkRemoteDeviceType, h, link, default=255)
            links.append(NvLink(
                link=link, active=active,
                version=call(nv.nvmlDeviceGetNvLinkVersion, h, link, default=0) or 0,
                remote=_REMOTE_TYPES.get(remote, "unknown") if active else "unknown",
                remote_bus_id=_text(remote_pci.busId) if remote_pci is not None else ""))
        return tuple(links)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def local_provider(recorded: str | Path | None = None) -> NvmlProvider:
    """The recorded answers when a file is given, the driver otherwise."""
    return RecordedNvml.from_file(recorded) if recorded else PynvmlProvider()
