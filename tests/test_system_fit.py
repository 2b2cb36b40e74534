"""Measurements that do not fit the system they tune are refused before anything is fitted (issue 33).

``profiler.formats.system_fit.check_fits`` is the one check ``tune`` and ``calibrate`` both run; a
record no measurement can have is refused where it is read, with its file and line; a file named
twice is read once. The real records of four emulated hosts on an H200 stay accepted against the
system they were measured on.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.records import MeasurementRecord, read_jsonl
from dynamiccl.profiler.formats.system_fit import RecordsDoNotFit, check_fits, record_shape
from dynamiccl.system.topology import load_topology, topology_from_dict

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "real" / "runner" / "h200_emulated4"
A100_LOG = FIXTURES / "real" / "sophia_dgx_a100_ib" / "all_reduce_n2.txt"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from hostile_inputs import RECORD_VALUES  # noqa: E402

sys.path.pop(0)


def test_real_records_of_emulated_hosts_fit_their_own_system_and_no_other():
    records = read_jsonl(H200 / "sweep.jsonl")
    emulated = load_topology(H200 / "topology.yaml")
    check_fits(records, emulated)  # the H200 sweep, against `profile topology --emulate-hosts 4`
    check_fits(records, emulated.resized(nodes=8))  # another node count of the same system
    for other, says in ((load_topology("dgx_h100"), "profile topology --emulate-hosts 4"),
                        (emulated.resized(gpus_per_node=4), "(4 pcie GPUs per node"),
                        (load_topology("g4dn_t4_tcp"), "sm75 GPUs")):
        with pytest.raises(RecordsDoNotFit, match=r"sweep\.jsonl:1: ") as refused:
            check_fits(records, other)
        assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_node_of_more_ranks_than_the_system_has_gpus_is_refused():
    records = [MeasurementRecord.from_json({**json.loads(line), "emulated_hosts": False, "nnodes": 1})
               for line in (H200 / "sweep.jsonl").read_text().splitlines()[:2]]
    with pytest.raises(RecordsDoNotFit, match="4 ranks per node, but a node of emulated_4_hosts_sm90"):
        check_fits(records, load_topology(H200 / "topology.yaml"))
    check_fits(records, load_topology("dgx_h100"))  # four of a DGX's eight GPUs


def test_a_logs_node_count_is_inferred_as_the_fewest_nodes_that_hold_its_ranks():
    dgx = load_topology("dgx_h100")
    shapes = [record_shape(MeasurementRecord("allreduce", 1024, n, 10.0, 0.0, 0.0), dgx)
              for n in (4, 8, 12, 16)]
    assert shapes == [(1, 4), (1, 8), (2, 6), (2, 8)]


def test_runs_across_nodes_need_a_topology_with_a_network_of_their_transport():
    log = [MeasurementRecord("allreduce", 1024, 16, 10.0, 0.0, 0.0, nnodes=2, env={"NCCL_NET": "Socket"})]
    with pytest.raises(RecordsDoNotFit, match="NCCL_NET=Socket across 2 nodes.*network of dgx_h100"):
        check_fits(log, load_topology("dgx_h100"))
    one_node = topology_from_dict({"name": "node", "tiers": [
        {"size": 8, "fabric": "switch", "bandwidth_GBps": 450, "latency_us": 0.6, "link": "nvlink"}]})
    with pytest.raises(RecordsDoNotFit, match="one node and no network"):
        check_fits([MeasurementRecord("allreduce", 1024, 16, 10.0, 0.0, 0.0, nnodes=2)], one_node)


@pytest.mark.parametrize("key", list(RECORD_VALUES))
def test_a_record_no_measurement_can_have_is_refused_with_its_file_and_line(tmp_path, key):
    lines = (H200 / "sweep.jsonl").read_text().splitlines()
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join([lines[0], json.dumps({**json.loads(lines[1]), **RECORD_VALUES[key]}),
                               *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"r\.jsonl:2: ") as refused:
        check_fits(read_jsonl(path), load_topology(H200 / "topology.yaml"))  # read, or fit (a shape)
    assert "\n" not in str(refused.value)


def test_a_file_named_twice_counts_once(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    sweep = shutil.copy(H200 / "sweep.jsonl", folder / "sweep.jsonl")
    os.symlink(sweep, tmp_path / "link.jsonl")
    os.link(sweep, tmp_path / "hard.jsonl")
    once = len(read_jsonl(sweep))
    loaded = load_paths([sweep, folder, tmp_path / "link.jsonl", tmp_path / "hard.jsonl",
                         folder / ".." / "logs" / "sweep.jsonl"])
    assert len(loaded.records) == once and len(loaded.repeated) == 4
    published = load_paths([A100_LOG.with_suffix(".yaml"), A100_LOG.parent, A100_LOG])
    assert len(published.records) == len(load_paths([A100_LOG.parent]).records)  # a run is its log
    # and its sidecar: named either way, and found again in their folder, it counts once


def test_calibrate_reads_a_file_named_twice_once(tmp_path):
    from dynamiccl.cli.calibrate import read_measurements

    log = shutil.copy(A100_LOG, tmp_path / "run.txt")
    os.symlink(log, tmp_path / "alias.txt")
    topology = load_topology(A100_LOG.parent / "topology.yaml")
    once, _ = read_measurements([str(log)], None, topology)
    twice, notes = read_measurements([str(log), str(tmp_path / "alias.txt"), str(log)], None, topology)
    assert len(twice) == len(once) and sum("read once" in n for n in notes) == 2
