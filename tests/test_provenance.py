"""What a log says about how it ran: tune refuses logs whose forcing it cannot establish (naming
them and the fix), reads every log's NCCL release, refuses mixed releases and stamps the policy with
the ones measured; ``dynamiccl label`` writes the sidecar of a log whose forcing its owner knows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.measurements import load
from dynamiccl.profiler.formats.published import load_sidecar
from dynamiccl.profiler.formats.records import MeasurementRecord, read_jsonl, write_jsonl
from dynamiccl.system.nccl_versions import NcclVersion, in_window, parse_version, parse_window, window_text

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"
RUNS = ("all_reduce_default_221443", "all_reduce_default_221709", "all_reduce_ring_221443",
        "all_reduce_ring_221709")
TUNE = ["tune", "--topology", "dgx_h100", "--nodes", "1", "--collective", "allreduce",
        "--no-calibrate"]


def _bare(folder: Path) -> list[Path]:
    """Two default and two NCCL_ALGO=RING launches of the 8xH100 series, without their sidecars."""
    folder.mkdir()
    return [Path(shutil.copy(REAL / f"{run}.txt", folder / f"{run}.txt")) for run in RUNS]


def test_the_fixtures_unlabelled_forced_logs_are_refused_by_name(tmp_path, capsys):
    """Issue 41: taken as four default launches, the ring runs made launch noise at >= 16 MiB look
    like 16.6 % and hid the measured rule; now tune refuses them, naming the files and the fix."""
    bare = _bare(tmp_path / "logs")
    assert all(r.forcing_unknown for r in load(bare[2]))
    assert main([*TUNE, "--measurements", str(tmp_path / "logs"), "-o", str(tmp_path / "t.dccl")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "4 log(s) do not say whether NCCL_ALGO/NCCL_PROTO" in err
    assert str(bare[0]) in err and "dynamiccl label" in err and "NCCL_DEBUG=INFO" in err
    assert not (tmp_path / "t.dccl").exists()


@pytest.mark.parametrize("how", ["label", "debug lines"])
def test_labelled_the_ring_runs_count_as_forced_and_their_rule_is_measured(tmp_path, capsys, how):
    """Labelled by their sidecar or by the INFO lines NCCL prints with NCCL_DEBUG=INFO, the same
    four logs give launch noise from the repeated launches and a measured override."""
    bare = _bare(tmp_path / "logs")
    if how == "label":
        assert main(["label", *map(str, bare[:2]), "--nodes", "1", "--gpus-per-node", "8"]) == 0
        assert main(["label", *map(str, bare[2:]), "--nodes", "1", "--gpus-per-node", "8",
                     "--forced", "NCCL_ALGO=RING"]) == 0
        assert [r.is_default for f in bare for r in load_sidecar(f.with_suffix(".yaml"))] == \
            [True, True, False, False]
    else:
        for log in bare:
            lines = ["host:1:1 [0] NCCL INFO NCCL version 2.26.2+cuda12.4"]
            if "ring" in log.name:
                lines.append("host:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring")
            log.write_text("\n".join(lines) + "\n" + log.read_text())
    capsys.readouterr()
    out = tmp_path / "t.dccl"
    assert main([*TUNE, "--measurements", str(tmp_path / "logs"), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert "from repeated launches" in captured.err and "NCCL 2.26.2..2.26.2" in captured.err
    rows = json.loads(captured.out)
    assert any(r["ours"] != "NCCL default" and r["evidence"].startswith("measured") for r in rows)
    assert pf.read(out).header.nccl == "2.26.2..2.26.2"


def test_label_refuses_to_replace_a_file_it_did_not_write_and_what_is_not_nccl_tests(tmp_path, capsys):
    log, = _bare(tmp_path / "logs")[:1]
    args = ["label", str(log), "--nodes", "1", "--gpus-per-node", "8"]
    assert main(args) == 0
    assert main(args) == 2 and "already exists; pass --force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    log.with_suffix(".yaml").write_text("my notes\n")
    assert main([*args, "--force"]) == 2 and "is not the sidecar of" in capsys.readouterr().err
    records = tmp_path / "runs.jsonl"
    write_jsonl(load(log)[:2], records)
    assert main(["label", str(records), "--nodes", "1", "--gpus-per-node", "8"]) == 2
    assert "label nccl-tests' text output only" in capsys.readouterr().err
    assert main([*args, "--forced", "NCCL_ALGO"]) == 2


def test_label_parses_each_log_once(tmp_path, opened):
    """The label is checked against the records label read (it read the log a second time, through
    the sidecar loader, to check it)."""
    logs = _bare(tmp_path / "logs")[:2]
    assert main(["label", *map(str, logs), "--nodes", "1", "--gpus-per-node", "8"]) == 0
    assert [opened[log.resolve(), "r"] for log in logs] == [1, 1]  # parsed
    assert [opened[log.resolve(), "rb"] for log in logs] == [1, 1]  # its head, for its format
    run, = load_sidecar(logs[0].with_suffix(".yaml"))
    assert run.is_default and run.nranks == 8 and run.records


def _records(version: str, tag: str) -> list[MeasurementRecord]:
    return [MeasurementRecord("allreduce", 1 << 20, 8, t, 1.0, 1.0, algorithm=a, protocol=p,
                              nnodes=1, launch=f"{tag}-{a}-{i}", nccl_version=version)
            for i, t in enumerate((100.0, 101.0)) for a, p in ((None, None), ("nvls", "simple"))]


def test_measurements_of_two_nccl_releases_are_refused_together_and_one_can_be_chosen(tmp_path, capsys):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    write_jsonl(_records("2.21.5", "o"), old)
    write_jsonl(_records("2.26.2", "n"), new)
    assert read_jsonl(old)[0].nccl_version == "2.21.5"  # the release survives the round trip
    assert main([*TUNE, "--measurements", str(old), str(new)]) == 2
    err = capsys.readouterr().err
    assert "NCCL 2.21.5: " + str(old) in err and "NCCL 2.26.2: " + str(new) in err
    assert "--nccl-version 2.21.5" in err
    out = tmp_path / "t.dccl"
    assert main([*TUNE, "--measurements", str(old), str(new), "--nccl-version", "2.26.2",
                 "-o", str(out)]) == 0
    assert "4 measurements" in capsys.readouterr().err
    assert pf.read(out).header.nccl == "2.26.2..2.26.2"
    assert main([*TUNE, "--measurements", str(old), "--nccl-version", "2.26.2"]) == 2
    assert "no measurement states that release (they state: 2.21.5)" in capsys.readouterr().err


def test_a_policy_from_logs_that_name_no_release_says_so_and_keeps_the_plugins_range(tmp_path, capsys):
    logs = tmp_path / "runs.jsonl"
    write_jsonl(_records("", "x"), logs)
    out = tmp_path / "t.dccl"
    assert main([*TUNE, "--measurements", str(logs), "-o", str(out)]) == 0
    assert "no measurement states its NCCL release" in capsys.readouterr().err
    assert pf.read(out).header.nccl == pf.DEFAULT_NCCL_RANGE


def test_every_log_format_says_its_release():
    fixture = Path(__file__).parent / "fixtures"
    assert {r.nccl_version for r in load(REAL / "all_reduce_ring.txt")} == {"2.26.2"}  # nccl-library=
    assert {r.nccl_version for r in load(fixture / "real" / "formats" / "all_reduce_perf_h100_ring.json")} \
        == {"2.26.2"}
    forced = load(fixture / "profiler" / "nccl_tests" / "reduce_scatter_perf_forced_ring_simple.txt")
    assert {r.nccl_version for r in forced} == {"2.18.5"}  # NCCL's banner
    assert not any(r.forcing_unknown for r in forced)  # its NCCL INFO lines say how it ran


def test_versions_and_the_window_a_policy_is_stamped_with():
    assert parse_version("2.29.7+cuda12.9") == parse_version(22907) == parse_version("v2.29.7-1") \
        == parse_version((2, 29, 7)) == NcclVersion(2, 29, 7)
    assert parse_version("nccl") is None and parse_version(True) is None
    versions = [NcclVersion(2, 26, 5), NcclVersion(2, 26, 2)]
    assert window_text(versions) == "2.26.2..2.26.5"
    assert parse_window("2.26.2..2.26.5") == (NcclVersion(2, 26, 2), NcclVersion(2, 26, 5))
    assert parse_window("2.26.2") == (NcclVersion(2, 26, 2),) * 2  # one release, as the plugin reads it
    for bad in ("2.26.5..2.26.2", "2.26", "2.26.2-2.26.5", "2.260.2..2.27.0"):
        assert parse_window(bad) is None, bad
    assert in_window(NcclVersion(2, 26, 3), pf.DEFAULT_NCCL_RANGE)
    assert not in_window(NcclVersion(2, 33, 0), pf.DEFAULT_NCCL_RANGE)
