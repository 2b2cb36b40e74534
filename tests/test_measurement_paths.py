"""Measurements from the paths a user names: folders are read for what they hold, sidecars applied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dynamiccl.profiler.measurement_paths import load_paths
from dynamiccl.profiler.measurements import MeasurementFormatError

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"


def test_a_fixture_folder_reads_every_log_through_its_sidecar_and_notes_the_rest():
    loaded = load_paths([REAL])
    runs = {(r.collective, r.algorithm) for r in loaded.records}
    assert runs == {("allreduce", None), ("allreduce", "ring"), ("allgather", None),
                    ("allgather", "ring")}  # the forced runs are known as forced
    assert all(r.nnodes == 1 and r.nranks == 8 for r in loaded.records)
    assert sorted(Path(n.split(":")[0]).name for n in loaded.skipped) == ["system.yaml",
                                                                          "topology.yaml"]


def test_a_log_named_alone_still_gets_its_sidecars_facts():
    records = load_paths([REAL / "all_reduce_ring.txt"]).records
    assert records and {r.algorithm for r in records} == {"ring"}


def test_a_log_without_sidecar_is_read_as_it_is(tmp_path):
    log = tmp_path / "all_reduce_perf.txt"
    shutil.copy(REAL / "all_reduce_ring.txt", log)
    assert {r.algorithm for r in load_paths([tmp_path]).records} == {None}


def test_a_named_file_that_holds_no_measurements_is_an_error(tmp_path):
    with pytest.raises(MeasurementFormatError, match="not a measurement format"):
        load_paths([REAL / "topology.yaml"])
    with pytest.raises(MeasurementFormatError, match="no such measurement file or folder"):
        load_paths([tmp_path / "missing"])
