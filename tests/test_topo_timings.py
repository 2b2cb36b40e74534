"""NVIDIA's cost-model test timings (``time.txt`` per configuration): the reader, on the fixtures of
``tests/fixtures/real/nvidia`` (their provenance: that folder's README and PROVENANCE.tsv)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.measurements import MeasurementFormatError, detect_format, load
from dynamiccl.profiler.formats.nccl_topo_timings import TopoTimingsError, layout, read_tree
from dynamiccl.system.knobs import Collective
from dynamiccl.system.topology import load_topology

NVIDIA = Path(__file__).parent / "fixtures" / "real" / "nvidia"
VIKING = NVIDIA / "viking_dgx_h100_ib" / "data"


def test_a_file_is_one_launch_of_one_configuration_at_every_power_of_two_from_8_bytes():
    path = VIKING / "8" / "2" / "AllReduce" / "time.txt"
    records = load(path)
    assert detect_format(path) == "nccl-topo-timings"
    assert [r.nbytes for r in records] == [8 << i for i in range(32)]  # a 32-line campaign: to 16 GiB
    assert {(r.nranks, r.nnodes, r.collective, r.config_label) for r in records} == {
        (16, 2, "allreduce", "NCCL default")}
    assert len({r.launch for r in records}) == 1 and records[0].time_us == 108.3
    assert records[-1].time_us == float(path.read_text().split()[-1])


def test_the_forced_pair_comes_from_the_path_and_unmeasured_lines_are_skipped():
    forced = load(VIKING / "8" / "32" / "AllGather" / "Ring" / "LL" / "time.txt")
    lines = (VIKING / "8" / "32" / "AllGather" / "Ring" / "LL" / "time.txt").read_text().split()
    assert {(r.algorithm, r.protocol) for r in forced} == {("ring", "ll")}
    assert len(forced) == sum(float(x) != 0.0 for x in lines) < len(lines)
    upper = NVIDIA / "viking_sharp_dgx_h100_ib" / "data" / "8" / "2" / "AllReduce" / "Ring" / "SIMPLE"
    assert {(r.algorithm, r.protocol) for r in load(upper / "time.txt")} == {("ring", "simple")}
    assert layout(Path("x/16/2/AllReduce/CollNetDirect/Simple/time.txt"))[2:] == (
        Collective.ALLREDUCE, "collnet_direct", "simple")


def test_every_fixture_reads_whole_with_its_provenance_and_topology():
    for folder in sorted(p for p in NVIDIA.iterdir() if p.is_dir()):
        records = read_tree(folder / "data")
        files = sorted((folder / "data").rglob("time.txt"))
        assert len({r.launch for r in records}) == len(files)  # each file its own launch
        rows = [line.split("\t") for line in (folder / "PROVENANCE.tsv").read_text().splitlines()[1:]]
        assert sorted(folder / row[0] for row in rows) == files
        for rel, repo, path, commit, sha, url in rows:
            assert repo == "phu0ngng/nccl" and len(commit) == 40 and commit in url and path in url
            assert hashlib.sha256((folder / rel).read_bytes()).hexdigest() == sha
        topology = load_topology(folder / "topology.yaml")
        assert {r.nranks // r.nnodes for r in records} == {topology.gpus_per_node}


def test_no_held_back_platform_is_in_the_fixtures():
    text = " ".join(p.read_text() for p in NVIDIA.rglob("PROVENANCE.tsv"))
    for held in ("AWS-P5-H100", "Umbriel", "AWS-P4d", "GB200-NVL72"):
        assert f"topo/{held}/" not in text


def test_a_folder_of_them_is_measurements_and_its_notes_are_skipped(tmp_path):
    shutil.copytree(VIKING / "8" / "4" / "ReduceScatter", tmp_path / "8" / "4" / "ReduceScatter")
    (tmp_path / "README.md").write_text("notes\n")
    loaded = load_paths([tmp_path])
    assert {r.config_label for r in loaded.records} == {"NCCL default", "ring/ll/auto-ch",
                                                        "ring/ll128/auto-ch", "ring/simple/auto-ch"}
    assert [Path(n.split(":")[0]).name for n in loaded.skipped] == ["README.md"]


def test_a_time_file_outside_the_layout_or_with_a_bad_line_is_refused(tmp_path):
    loose = tmp_path / "time.txt"
    loose.write_text("12.5\n13.0\n")
    with pytest.raises(MeasurementFormatError, match="not a measurement format"):
        load(loose)
    bad = tmp_path / "8" / "1" / "AllReduce" / "time.txt"
    bad.parent.mkdir(parents=True)
    bad.write_text("12.5\nfast\n")
    with pytest.raises(MeasurementFormatError, match="not a measurement format"):
        load(bad)
    loose.unlink()
    with pytest.raises(TopoTimingsError, match=r"time.txt:2: 'fast' is not a time"):
        read_tree(tmp_path)
    with pytest.raises(TopoTimingsError, match="no time.txt under it"):
        read_tree(tmp_path / "8" / "2")  # no such folder: nothing under it


def test_tune_reads_a_platforms_folder_and_says_where_its_noise_comes_from(tmp_path, capsys):
    """`dynamiccl tune` on NVIDIA's Viking all-reduce on 2 nodes, each choice launched once: the
    noise is NCCL's default against the forced run closest to it, and the policy is written."""
    from dynamiccl.cli.main import main

    out = tmp_path / "viking.dccl"
    assert main(["tune", "--topology", str(NVIDIA / "viking_dgx_h100_ib" / "topology.yaml"),
                 "--measurements", str(VIKING / "8" / "2" / "AllReduce"), "-o", str(out),
                 "--json"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "16 ranks: launch noise" in err
    assert "no repeated launch: NCCL's default against the forced runs closest to it" in err
    assert out.exists()
