"""Measurements from the paths a user names: folders are read for what they hold, sidecars applied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.measurements import MeasurementFormatError

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"


def test_a_fixture_folder_reads_every_log_through_its_sidecar_and_notes_the_rest():
    loaded = load_paths([REAL])
    runs = {(r.collective, r.algorithm) for r in loaded.records}
    assert runs == {(c, a) for c in ("allreduce", "allgather", "reducescatter")
                    for a in (None, "ring")}  # the forced runs are known as forced
    assert len({r.launch for r in loaded.records}) == len(list(REAL.glob("*.txt")))  # a launch a log
    assert all(r.nnodes == 1 and r.nranks == 8 for r in loaded.records)
    assert sorted(Path(n.split(":")[0]).name for n in loaded.skipped) == ["system.yaml",
                                                                          "topology.yaml"]


def test_a_log_named_alone_still_gets_its_sidecars_facts():
    records = load_paths([REAL / "all_reduce_ring.txt"]).records
    assert records and {r.algorithm for r in records} == {"ring"}


def test_each_sidecar_is_read_once_and_each_log_parsed_once(opened):
    """A folder asked of each sidecar whether it is one, whether it is a pinned launch's, its layout
    and its facts, reading and parsing it each time; a log named alone read its sidecar four times."""
    sidecars = [p for p in REAL.glob("*.yaml") if p.name not in ("topology.yaml", "system.yaml")]
    assert load_paths([REAL]).records
    assert {opened[p.resolve(), "r"] for p in sidecars} == {1}
    assert {opened[p.resolve(), "r"] for p in REAL.glob("*.txt")} == {1}
    opened.clear()
    assert load_paths([REAL / "all_reduce_ring.txt"]).records
    assert opened[(REAL / "all_reduce_ring.yaml").resolve(), "r"] == 1
    assert opened[(REAL / "all_reduce_ring.txt").resolve(), "r"] == 1


def test_a_log_without_sidecar_is_read_as_it_is(tmp_path):
    log = tmp_path / "all_reduce_perf.txt"
    shutil.copy(REAL / "all_reduce_ring.txt", log)
    assert {r.algorithm for r in load_paths([tmp_path]).records} == {None}


def test_a_named_file_that_holds_no_measurements_is_an_error(tmp_path):
    with pytest.raises(MeasurementFormatError, match="not a measurement format"):
        load_paths([REAL / "topology.yaml"])
    with pytest.raises(MeasurementFormatError, match="no such measurement file or folder"):
        load_paths([tmp_path / "missing"])


def test_a_tuning_log_beside_a_forced_run_says_which_pair_it_measured(tmp_path):
    """A run forced with NCCL_ALGO alone, and NCCL's TUNING log of it in the same folder: each
    record gets the pair the log says NCCL ran at its size; a log of another forcing does not
    apply."""
    shutil.copy(REAL / "all_reduce_ring.txt", tmp_path)
    shutil.copy(REAL / "all_reduce_ring.yaml", tmp_path)
    lines = ["host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
             "host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to RING",
             "host:1:1 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 "
             "channel{Lo..Hi}={0..15}",
             "host:1:1 [0] NCCL INFO AllReduce: 2048 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"]
    (tmp_path / "ring.debug.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "tree.debug.log").write_text("\n".join(
        [lines[0], "host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to TREE",
         "host:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}"]))
    loaded = load_paths([tmp_path])
    picks = {r.nbytes: r.nccl_pick for r in loaded.records if not r.in_place}
    assert (picks[1 << 20], picks[2048], picks[4096], picks[8192]) == ("ring/ll128", "ring/ll", "", "")
    assert not any("debug" in note for note in loaded.skipped)
    # named alone it is read the same; one without picks is an error naming the fix
    assert load_paths([tmp_path / "ring.debug.log"]).records == []
    (tmp_path / "table_only.log").write_text(lines[0] + "\n" + lines[1] + "\n")
    with pytest.raises(MeasurementFormatError, match="NCCL_DEBUG_SUBSYS=TUNING"):
        load_paths([tmp_path / "table_only.log"])
