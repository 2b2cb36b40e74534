"""NVML layer and topology discovery on recorded NVML answers (this machine has no GPU driver)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from dynamiccl.cli.main import main
from dynamiccl.profiler.measure.discover import NetworkSpec, discover
from dynamiccl.profiler.measure.nvml import (
    NoDriverError,
    PynvmlProvider,
    RecordedNvml,
    save_snapshot,
    snapshot_from_dict,
)
from dynamiccl.system.topology import load_topology

FIX = Path(__file__).parent / "fixtures" / "profiler" / "nvml"


def _snap(name: str):
    return RecordedNvml.from_file(FIX / name).snapshot()


def _driver_present() -> bool:
    try:
        PynvmlProvider().snapshot()
    except NoDriverError:
        return False
    return True


def test_dgx_h100_recording_becomes_nvswitch_tier_with_nvls():
    found = discover(_snap("dgx_h100.yaml"), NetworkSpec(nodes=2))
    topo = found.topology
    assert topo.gpu.arch == "sm90" and topo.gpu.sms == 132 and topo.features.nvls
    t0, t1 = topo.tiers
    assert (t0.size, t0.fabric, t0.link, t0.bandwidth_GBps) == (8, "switch", "nvlink", 450.0)
    assert (t1.size, t1.link) == (2, "net") and topo.nranks == 16
    assert not found.warnings


def test_pcie_box_reports_throttling_and_degraded_link():
    found = discover(_snap("pcie_l40s.yaml"))
    t0 = found.topology.tiers[0]
    assert (t0.fabric, t0.link, t0.bandwidth_GBps) == ("switch", "pcie", 24.0)  # Gen4 x16
    assert found.topology.gpu.arch == "sm89" and not found.topology.features.nvls
    text = " ".join(found.warnings)
    assert "GPU 2 is throttling" in text and "thermal" in text and "GPU 3" in text and "x8" in text


def test_nvlink_mesh_and_bridged_pairs():
    mesh = discover(_snap("v100_nvlink_mesh.yaml")).topology.tiers[0]
    assert (mesh.fabric, mesh.link, mesh.bandwidth_GBps) == ("fully_connected", "nvlink", 150.0)
    bridged = discover(_snap("a100_pcie_bridged_pairs.yaml"))
    assert bridged.topology.tiers[0].link == "pcie"  # NVLink does not join all four GPUs
    assert "NVLink joins only some GPUs" in bridged.yaml_text


def test_unmeasured_values_are_marked_and_flags_say_so(tmp_path):
    found = discover(_snap("dgx_h100.yaml"),
                     NetworkSpec(nodes=4, bandwidth_GBps=25.0, nics_per_node=4))
    text = found.yaml_text
    assert "latency_us: default (not measured)" in text
    assert "size from --nodes" in text and "bandwidth_GBps from --network-bandwidth-GBps" in text
    assert "latency_us: default" in text.split("NOT measured")[1]
    assert "nic_path: default (PXB" in text
    net = found.topology.tiers[1]
    assert (net.size, net.bandwidth_GBps, net.link_share) == (4, 25.0, 2)
    path = tmp_path / "found.yaml"
    path.write_text(text)
    assert load_topology(path) == found.topology  # a normal topology file
    host_bridge = discover(_snap("dgx_h100.yaml"), NetworkSpec(nodes=4, nic_path="PHB"))
    assert "nic_path from --nic-path" in host_bridge.yaml_text
    assert host_bridge.topology.tiers[1].nic_path == "PHB" and not host_bridge.topology.ll128_enabled


def test_pynvml_provider_reads_everything_through_a_fake_nvml_module():
    """The real provider's code path, fed by a stand-in module that replays a recording."""
    recorded = _snap("v100_nvlink_mesh.yaml")
    assert PynvmlProvider(_FakeNvml(recorded)).snapshot().gpus == recorded.gpus


def test_sm_count_comes_from_cuda_where_nvml_has_none():
    """A stand-in NVML that answers "not supported" for the device attributes (as driver 580 did
    on an H100) and a stand-in for CUDA's device properties: the SM count comes from CUDA, matched
    by UUID (CUDA spells it without NVML's "GPU-" prefix), and only for the GPU NVML lacks it for."""
    recorded = _snap("dgx_h100.yaml")
    gpus = recorded.gpus[:2]
    recorded = replace(recorded, gpus=(replace(gpus[0], uuid="GPU-AAAA-0001", sms=None),
                                       replace(gpus[1], uuid="GPU-bbbb-0002", sms=132)),
                       pci_levels=())
    asked = []

    def cuda_sms():
        asked.append(True)
        return {"aaaa-0001": 132, "bbbb-0002": 7}

    snapshot = PynvmlProvider(_FakeNvml(recorded), cuda_sms=cuda_sms).snapshot()
    assert [g.sms for g in snapshot.gpus] == [132, 132] and asked == [True]
    assert PynvmlProvider(_FakeNvml(recorded), cuda_sms=dict).snapshot().gpus[0].sms is None


def test_recording_round_trip(tmp_path):
    snap = _snap("dgx_h100.yaml")
    save_snapshot(snap, tmp_path / "again.yaml")
    assert RecordedNvml.from_file(tmp_path / "again.yaml").snapshot() == snap


def test_bad_recordings_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="gpus\\[0\\].colour is not a GPU field"):
        snapshot_from_dict({"gpus": [{"name": "x", "compute_capability": [9, 0], "colour": 1}]},
                           source="f.yaml")
    with pytest.raises(FileNotFoundError, match="--record FILE"):
        RecordedNvml.from_file(tmp_path / "missing.yaml")


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present")
def test_no_driver_message_without_traceback(capsys):
    with pytest.raises(NoDriverError):
        PynvmlProvider().snapshot()
    assert main(["profile", "topology"]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA driver found: " in err and "use --from FILE" in err and "preset" in err
    assert "Traceback" not in err


def test_cli_from_recording_writes_a_loadable_file(tmp_path, capsys):
    out, raw = tmp_path / "t.yaml", tmp_path / "raw.yaml"
    rc = main(["profile", "topology", "--from", str(FIX / "pcie_l40s.yaml"), "--nodes", "3",
               "-o", str(out), "--record", str(raw), "--name", "lab"])
    assert rc == 0
    topo = load_topology(out)
    assert topo.name == "lab" and topo.nodes == 3 and topo.nranks == 12
    assert RecordedNvml.from_file(raw).snapshot() == _snap("pcie_l40s.yaml")
    assert "throttling" in capsys.readouterr().err


class _FakeNvml:
    """Answers the pynvml calls PynvmlProvider makes from a recorded snapshot."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU, NVML_FEATURE_ENABLED, NVML_NVLINK_MAX_LINKS = 1, 0, 1, 18
    _TYPES = {"gpu": 0, "ibmnpu": 1, "switch": 2, "unknown": 255}

    def __init__(self, snap):
        self.snap, self.gpus = snap, snap.gpus

    def _link(self, h, link):
        if link >= len(self.gpus[h].nvlinks):
            raise self.NVMLError("invalid argument")
        return self.gpus[h].nvlinks[link]

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return len(self.gpus)
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlSystemGetDriverVersion(self): return self.snap.driver_version
    def nvmlSystemGetCudaDriverVersion(self): return self.snap.cuda_driver_version
    def nvmlDeviceGetTopologyCommonAncestor(self, a, b): return 0
    def nvmlDeviceGetName(self, h): return self.gpus[h].name.encode()
    def nvmlDeviceGetCudaComputeCapability(self, h): return self.gpus[h].compute_capability
    def nvmlDeviceGetPciInfo_v3(self, h): return SimpleNamespace(busId=self.gpus[h].bus_id)
    def nvmlDeviceGetUUID(self, h): return self.gpus[h].uuid
    def nvmlDeviceGetAttributes_v2(self, h):
        if self.gpus[h].sms is None:
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(multiprocessorCount=self.gpus[h].sms)
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(total=self.gpus[h].memory_MiB * 2**20)
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h): return self.gpus[h].pcie_gen
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h): return self.gpus[h].pcie_gen_max
    def nvmlDeviceGetCurrPcieLinkWidth(self, h): return self.gpus[h].pcie_width
    def nvmlDeviceGetMaxPcieLinkWidth(self, h): return self.gpus[h].pcie_width_max
    def nvmlDeviceGetClockInfo(self, h, kind): return self.gpus[h].sm_clock_MHz
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return self.gpus[h].sm_clock_max_MHz
    def nvmlDeviceGetTemperature(self, h, kind): return self.gpus[h].temperature_C
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return self.gpus[h].clock_event_reasons
    def nvmlDeviceGetNvLinkState(self, h, link): return int(self._link(h, link).active)
    def nvmlDeviceGetNvLinkVersion(self, h, link): return self._link(h, link).version
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._TYPES[self._link(h, link).remote]
    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self._link(h, link).remote_bus_id)

