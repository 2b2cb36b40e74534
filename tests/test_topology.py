"""Topology files: presets load, resize, and bad files get one clear message naming field and fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from dynamiccl.config_loader import ConfigError
from dynamiccl.nccl_model.model import NcclModel
from dynamiccl.simulator import simulate
from dynamiccl.system.knobs import ACTIONS, Collective, ConfigBatch, Protocol, valid_mask
from dynamiccl.system.topology import Topology, load_topology, preset_names, topology_from_dict
from dynamiccl.system.units import format_size, parse_duration_us, parse_size

REQUIRED_PRESETS = {"dgx_h100", "dgx_a100", "pcie_cluster", "ring_ring_1to1", "ring_ring_4to1",
                    "ring_ring_8to1", "ring_ring_16to1", "ring_ring_48to1", "switch", "torus2d"}


def test_required_presets_exist_and_load() -> None:
    assert REQUIRED_PRESETS <= set(preset_names())
    for name in preset_names():
        topo = load_topology(name)
        assert topo.name == name
        assert topo.nranks == topo.nodes * topo.gpus_per_node


def test_presets_hold_the_published_facts() -> None:
    h100 = load_topology("dgx_h100")
    assert (h100.gpus_per_node, h100.tiers[0].bandwidth_GBps, h100.tiers[1].bandwidth_GBps) == (8, 450, 50)
    assert h100.features.nvls and h100.gpu.sm == 90
    ratios = {n: load_topology(f"ring_ring_{n}to1") for n in (1, 4, 8, 16, 48)}
    for n, topo in ratios.items():
        assert topo.tiers[0].bandwidth_GBps / topo.tiers[1].bandwidth_GBps == pytest.approx(n)
    pcie = load_topology("pcie_cluster")
    assert (pcie.nodes, pcie.gpus_per_node, pcie.tiers[1].link_share) == (8, 4, 4)
    assert not pcie.ll128_enabled and h100.ll128_enabled
    assert load_topology("torus2d").tiers[0].dims == (8, 8)


def test_resize_changes_only_what_was_asked() -> None:
    topo = load_topology("dgx_h100", nodes=16)
    assert (topo.nodes, topo.gpus_per_node, topo.nranks) == (16, 8, 128)
    small = load_topology("ring_ring_4to1", nodes=4, gpus_per_node=4)
    assert small.nranks == 16 and small.tiers[1].bandwidth_GBps == 150
    torus = load_topology("torus2d", gpus_per_node=16)
    assert torus.tiers[0].dims == (4, 4)
    assert load_topology("dgx_h100").fingerprint() != topo.fingerprint()
    with pytest.raises(ConfigError, match="positive integer"):
        load_topology("dgx_h100", nodes=0)


def test_custom_file_with_the_issue_schema(tmp_path: Path) -> None:
    path = tmp_path / "two_tier.yaml"
    path.write_text(yaml.safe_dump({
        "name": "two_tier_ring_48to1", "gpu": {"arch": "sm90", "sms": 132},
        "features": {"nvls": False, "collnet": False},
        "tiers": [
            {"name": "nvlink", "size": 8, "fabric": "ring", "bandwidth_GBps": 600, "latency_us": 0.5},
            {"name": "network", "size": 8, "fabric": "ring", "bandwidth_GBps": 12.5, "latency_us": 5},
        ],
    }))
    topo = load_topology(path)
    assert topo.nranks == 64 and topo.tiers[0].link == "nvlink" and topo.tiers[1].link == "net"


def test_a_nic_behind_the_host_bridge_turns_ll128_off_across_nodes(tmp_path: Path) -> None:
    """Polaris-like: NCCL keeps LL128 off when the NIC is PHB from its GPU (typeInter > PXB), so
    NCCL's cost table marks it unusable and no deployable action may force it; inside one node,
    and with the default PXB NIC of an HGX board, LL128 stays on."""
    data = yaml.safe_load((Path(__file__).parents[1] / "configs/topology/dgx_a100.yaml").read_text())
    switch_nic = topology_from_dict(data, source="x").resized(nodes=2)
    data["tiers"][1]["nic_path"] = "PHB"
    path = tmp_path / "phb.yaml"
    path.write_text(yaml.safe_dump(data))
    host_nic = load_topology(path, nodes=2)
    assert switch_nic.ll128_enabled and not host_nic.ll128_enabled
    assert load_topology(path).ll128_enabled
    assert host_nic.to_dict()["tiers"][1]["nic_path"] == "PHB"
    assert "nic_path" not in switch_nic.to_dict()["tiers"][1]  # the default keeps old fingerprints
    ll128 = int(Protocol.LL128)
    assert (NcclModel(switch_nic).cost_table(Collective.ALLREDUCE, 1 << 20)[:, ll128] > 0).any()
    assert (NcclModel(host_nic).cost_table(Collective.ALLREDUCE, 1 << 20)[:, ll128] == -1).all()
    allowed = valid_mask(host_nic, Collective.ALLREDUCE, deployable=True)
    assert not any(a.protocol == Protocol.LL128 for a, ok in zip(ACTIONS, allowed, strict=True) if ok)
    assert any(a.protocol == Protocol.LL128
               for a, ok in zip(ACTIONS, valid_mask(switch_nic, Collective.ALLREDUCE, deployable=True),
                                strict=True) if ok)


def test_a_socket_transport_puts_the_nic_behind_the_cpu_and_keeps_ll128_off_across_nodes() -> None:
    """Without GPUDirect RDMA NCCL routes a GPU's network traffic through its CPU (a PHB path,
    whatever PCIe slot the NIC is in), so LL128 stays off across socket-transport nodes; the file
    needs no nic_path for it, and one that names the NIC's slot does not turn LL128 on."""
    def system(**net: object) -> Topology:
        return topology_from_dict({"name": "socket_hosts", "gpu": {"arch": "sm90", "sms": 132},
                                   "tiers": [{"name": "gpu", "size": 1, "fabric": "switch",
                                              "bandwidth_GBps": 64, "latency_us": 1.0, "link": "pcie"},
                                             {"name": "lo", "size": 4, "fabric": "switch",
                                              "bandwidth_GBps": 3, "link": "net", **net}]})

    socket = system(transport="socket")
    assert socket.tiers[1].nic_path == "PHB" and not socket.ll128_enabled
    assert "nic_path" not in socket.to_dict()["tiers"][1]  # PHB is this transport's default
    slotted = system(transport="socket", nic_path="PIX")
    assert slotted.tiers[1].nccl_nic_path == "PHB" and not slotted.ll128_enabled
    assert slotted.to_dict()["tiers"][1]["nic_path"] == "PIX"
    assert system(transport="ib").tiers[1].nic_path == "PXB" and system(transport="ib").ll128_enabled


def test_the_simulator_keeps_ll128_apart_for_systems_that_differ_only_in_where_the_nic_sits() -> None:
    """The simulator caches validity per system shape; a PHB system simulated first must not lend
    its LL128 verdict to the same shape with a PXB NIC, nor the other way round."""
    pxb = load_topology("dgx_a100", nodes=2)
    phb = replace(pxb, tiers=(pxb.tiers[0], replace(pxb.tiers[1], nic_path="PHB")))
    ll128 = ConfigBatch.from_configs([c for c in ACTIONS if c.protocol == Protocol.LL128])
    for first, second in ((phb, pxb), (pxb, phb)):
        times = {t.tiers[1].nic_path: simulate(t, int(Collective.ALLREDUCE), 1 << 20, ll128).time_us
                 for t in (first, second)}
        assert np.isinf(times["PHB"]).all() and np.isfinite(times["PXB"]).any()


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("name"), "field 'name' is missing"),
        (lambda d: d["tiers"][0].update(fabric="mesh"), "field 'tiers[0].fabric' is 'mesh'; use one of"),
        (lambda d: d["tiers"][1].update(size=0), "field 'tiers[1].size' is 0; it must be a positive"),
        (lambda d: d["tiers"][1].pop("bandwidth_GBps"), "field 'tiers[1].bandwidth_GBps' is missing"),
        (lambda d: d["tiers"][0].update(bandwith_GBps=3), "field 'tiers[0].bandwith_GBps' is not a tier"),
        (lambda d: d["gpu"].update(arch="sm999"), "field 'gpu.arch' is 'sm999'; use one of"),
        (lambda d: d["features"].update(nvls="yes"), "field 'features.nvls' is 'yes'; write true"),
        (lambda d: d.update(tiers=[]), "field 'tiers' must be a non-empty list"),
        (lambda d: d["tiers"][0].update(fabric="torus2d", dims=[3, 3]), "product is 8"),
        (lambda d: d["tiers"][1].update(nic_path="NODE"), "field 'tiers[1].nic_path' is 'NODE'; use one of"),
        (lambda d: d["tiers"][0].update(nic_path="PHB"), "field 'tiers[0].nic_path' is only for network"),
    ],
)
def test_bad_files_name_the_file_the_field_and_the_fix(
    tmp_path: Path, mutate: Callable[[dict], object], expected: str
) -> None:
    data = yaml.safe_load((Path(__file__).parents[1] / "configs/topology/dgx_h100.yaml").read_text())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_topology(path)
    message = str(err.value)
    assert str(path) in message and expected in message
    assert "\n" not in message


def test_unreadable_inputs_get_clear_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_topology(broken)
    with pytest.raises(ConfigError, match="no such topology file"):
        load_topology(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="unknown topology 'dgx_h1000'.*dgx_h100"):
        load_topology("dgx_h1000")
    with pytest.raises(ConfigError, match="mapping"):
        topology_from_dict(["not", "a", "mapping"], source="x")


def test_units() -> None:
    assert parse_size("100MB") == parse_size("100M") == 100 * 2**20  # nccl-tests: binary
    assert parse_size("64KiB") == 65536
    assert parse_size("1.5GB") == 3 * 2**29
    assert parse_size("8") == 8 and parse_size("4 GiB") == 4 * 2**30
    assert parse_duration_us("10ms") == 10_000 and parse_duration_us("250us") == 250
    assert format_size(4 * 2**30) == "4GiB" and format_size(1536) == "1.5KiB"
    with pytest.raises(ValueError, match="100M, 100MB and 100MiB"):
        parse_size("100 parsecs")
    with pytest.raises(ValueError, match="10ms"):
        parse_duration_us("soon")
