"""The topology schema's new fields and its calibration section: parsed, validated in one line,
round-tripped through the file the calibrator writes, and turned into a prediction's error bar."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from dynamiccl.config_loader import ConfigError
from dynamiccl.profiler.fit.fit_report import topology_yaml
from dynamiccl.system.calibration import (
    DATASHEET_REL_STD,
    AlgoProtoFit,
    Calibration,
    Fitted,
    band_of,
    uncertainty,
)
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology, topology_from_dict

H100 = Path(__file__).parents[1] / "configs/topology/dgx_h100.yaml"
CAL = Calibration(
    measurements=40, source="run.txt", launch_floor_us=Fitted(31.5, 0.04),
    transport_overhead_us=Fitted(6.0, 0.2),
    algorithms=(AlgoProtoFit(Algorithm.RING, Protocol.SIMPLE, Fitted(0.93, 0.02), Fitted(9.8, 0.1)),),
    tiers=(("nvlink.bandwidth_GBps", Fitted(410.0, 0.01)),),
    heldout_error=(("small", 0.06), ("medium", 0.05), ("large", 0.02)))


def test_calibrated_topology_round_trips_through_the_written_file(tmp_path: Path) -> None:
    topo = replace(load_topology("l40s_pcie_2socket", nodes=2), calibration=CAL, launch="single_process")
    path = tmp_path / "fitted.yaml"
    path.write_text(topology_yaml(topo))
    back = load_topology(path)
    assert back.calibration == CAL and back.launch == "single_process"
    assert back.tiers[0].pcie == topo.tiers[0].pcie and back.tiers[1].transport == "roce"
    assert back.fingerprint() == topo.fingerprint()


def test_files_without_the_new_fields_keep_their_fingerprint() -> None:
    data = yaml.safe_load(H100.read_text())
    data["tiers"][1]["transport"] = "ib"  # the default, written out
    assert topology_from_dict(data).fingerprint() == load_topology("dgx_h100").fingerprint()


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d.update(launch="mpi"), "field 'launch' is 'mpi'; use one of process_per_gpu"),
    (lambda d: d["tiers"][1].update(transport="carrier-pigeon"), "'tiers[1].transport' is 'carrier"),
    (lambda d: d["tiers"][0].update(transport="ib"), "only for network tiers"),
    (lambda d: d["tiers"][0].update(pcie={"gpus_per_switch": 2}), "needs link: pcie"),
    (lambda d: d["tiers"][0].update(link="pcie", pcie={"gpus_per_switch": 3}), "does not divide"),
    (lambda d: d["tiers"][0].update(link="pcie", pcie={"gpus_per_switch": 2, "socket_link": "z80"}),
     "socket_link' is 'z80'"),
    (lambda d: d.update(calibration={"launch_floor_us": 3}), "calibration.launch_floor_us' must be"),
    (lambda d: d.update(calibration={"algorithms": {"ring/fast": {}}}), "calibration.algorithms.ring/"),
    (lambda d: d.update(calibration={"heldout_error": {"huge": 0.1}}), "is not a size band"),
])
def test_bad_new_fields_name_the_file_the_field_and_the_fix(tmp_path: Path, mutate, expected) -> None:
    data = yaml.safe_load(H100.read_text())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_topology(path)
    assert str(path) in str(err.value) and expected in str(err.value)
    assert "\n" not in str(err.value)


def test_network_latency_defaults_to_the_transport_kind() -> None:
    data = yaml.safe_load(H100.read_text())
    del data["tiers"][1]["latency_us"]
    data["tiers"][1]["transport"] = "efa"
    assert topology_from_dict(data).tiers[1].latency_us == 15.0


def test_uncertainty_uses_the_held_out_error_and_falls_back_to_the_datasheet_error() -> None:
    node = load_topology("dgx_h100")
    assert [band_of(s) for s in (8, 2**16, 2**24)] == ["small", "medium", "large"]
    plain = [uncertainty(node.calibration, Collective.ALLREDUCE, s, Algorithm.RING, Protocol.SIMPLE)
             for s in (8, 2**20, 2**30)]
    assert plain == [DATASHEET_REL_STD[b] for b in ("small", "medium", "large")]
    assert plain[2] < plain[0] < plain[1]  # the x1.1 / x1.5 / x1.7 medians
    cal = replace(node, calibration=CAL)
    large = uncertainty(cal.calibration, Collective.ALLREDUCE, 2**30, Algorithm.RING, Protocol.SIMPLE)
    assert 0.02 < large < 0.03  # held-out 2 % widened by the 2 % efficiency uncertainty
    small = uncertainty(cal.calibration, Collective.ALLREDUCE, 8, Algorithm.RING, Protocol.SIMPLE)
    # held-out 6 % and the base latency's 10 %, added in quadrature in log space
    assert small == pytest.approx(math.expm1(math.hypot(math.log(1.06), math.log(1.1))))
    # an (algorithm, protocol) the logs never ran is predicted from physics alone
    assert uncertainty(cal.calibration, Collective.ALLREDUCE, 2**30, Algorithm.TREE, Protocol.LL) == \
        DATASHEET_REL_STD["large"]
