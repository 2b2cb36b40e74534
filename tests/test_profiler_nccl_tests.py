"""The nccl-tests parser on outputs in the formats of several nccl-tests versions (fixtures written
from the documented format: header, device lines, column headers, rows, footer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamiccl.profiler.formats.nccl_tests import (
    NcclTestsParseError,
    collective_from_name,
    parse_nccl_tests,
    parse_nccl_tests_file,
)
from dynamiccl.profiler.formats.records import read_jsonl, write_jsonl
from dynamiccl.system.nccl import Collective, bus_factor

FIX = Path(__file__).parent / "fixtures" / "profiler" / "nccl_tests"


def _only_run(name: str):
    runs = parse_nccl_tests_file(FIX / name)
    assert len(runs) == 1
    return runs[0]


@pytest.mark.parametrize(
    "name, collective, nranks, nnodes, first_size, last_size",
    [
        ("all_reduce_perf_v2_13_h100x8.txt", Collective.ALLREDUCE, 8, 1, 1024, 2**27),
        ("all_gather_perf_v2_8_v100_2nodes.txt", Collective.ALLGATHER, 8, 2, 4096, 2**26),
        ("reduce_scatter_perf_forced_ring_simple.txt", Collective.REDUCESCATTER, 4, 1, 2**16, 2**28),
        ("broadcast_perf_v2_17_l40s.txt", Collective.BROADCAST, 2, 1, 8, 2**25),
        ("reduce_perf_v2_10_a100.txt", Collective.REDUCE, 4, 1, 1024, 2**24),
    ],
)
def test_each_version_parses_into_consistent_records(name, collective, nranks, nnodes,
                                                     first_size, last_size):
    run = _only_run(name)
    assert run.collective == collective
    assert run.nranks == nranks and len(run.ranks) == nranks
    recs = run.records
    n_rows = (last_size.bit_length() - first_size.bit_length()) + 1
    assert len(recs) == 2 * n_rows  # out-of-place and in-place per row
    assert [r.in_place for r in recs[:2]] == [False, True]
    assert recs[0].nbytes == first_size and recs[-1].nbytes == last_size
    for r in recs:
        assert r.nnodes == nnodes and r.collective == collective.name.lower()
        # the columns agree with nccl-tests' own definitions (up to the printed rounding)
        assert r.algbw_GBps == pytest.approx(r.nbytes / r.time_us / 1e3, rel=1e-3, abs=0.006)
        assert r.busbw_GBps == pytest.approx(r.algbw_GBps * bus_factor(r.coll, nranks),
                                             rel=1e-3, abs=0.015)
    assert run.avg_busbw_GBps is not None and not run.warnings
    assert run.header["warmup_iters"] == 5 and run.header["iters"] in (20, 50)


def test_header_fields_of_old_and_new_versions():
    new = _only_run("all_reduce_perf_v2_13_h100x8.txt").header
    old = _only_run("all_gather_perf_v2_8_v100_2nodes.txt").header
    assert new == {"nthread": 1, "ngpus": 8, "min_bytes": 1024, "max_bytes": 2**27,
                   "warmup_iters": 5, "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0}
    assert "agg_iters" not in old and old["ngpus"] == 4


def test_device_lines_with_and_without_group():
    new = _only_run("all_reduce_perf_v2_13_h100x8.txt").ranks[3]
    old = _only_run("all_gather_perf_v2_8_v100_2nodes.txt").ranks[5]
    assert (new.rank, new.host, new.device, new.bus_id, new.gpu_name) == (
        3, "dgx-h100-07", 3, "0x5d", "NVIDIA H100 80GB HBM3")
    assert (old.rank, old.host, old.device, old.gpu_name) == (5, "node-b", 1, "Tesla V100-SXM2-32GB")


def test_forced_algorithm_and_protocol_are_recorded_with_validation_off():
    run = _only_run("reduce_scatter_perf_forced_ring_simple.txt")
    assert run.env["NCCL_ALGO"] == "Ring" and run.env["NCCL_PROTO"] == "Simple"
    assert run.nccl_version == "2.18.5+cuda12.2"
    assert run.header["validation"] == 0  # '#wrong' reads N/A: rows are kept
    assert {(r.algorithm, r.protocol, r.channels) for r in run.records} == {("ring", "simple", None)}
    assert run.records[0].config_label == "ring/simple/auto-ch"
    default = _only_run("all_reduce_perf_v2_13_h100x8.txt").records[0]
    assert default.nccl_default and default.config_label == "NCCL default"


def test_per_collective_algo_lists_and_channel_pins():
    text = (FIX / "all_reduce_perf_v2_13_h100x8.txt").read_text()
    env = ("NCCL_ALGO='allgather:ring;allreduce:tree' NCCL_PROTO=^LL NCCL_MIN_NCHANNELS=16 "
           "NCCL_MAX_NCHANNELS=16 ./all_reduce_perf -b 1K -e 128M\n")
    rec = parse_nccl_tests(env + text)[0].records[0]
    assert (rec.algorithm, rec.protocol, rec.channels) == ("tree", None, 16)


def test_malformed_row_names_the_line():
    with pytest.raises(NcclTestsParseError, match=r"malformed_truncated_row.txt:26: .*13 columns"):
        parse_nccl_tests_file(FIX / "malformed_truncated_row.txt")


def test_non_numeric_cell_names_line_and_column():
    text = (FIX / "broadcast_perf_v2_17_l40s.txt").read_text().replace("12.23", "12.2x", 1)
    with pytest.raises(NcclTestsParseError, match=r"<text>:11: column 'time' should be a number"):
        parse_nccl_tests(text)


def test_not_nccl_tests_output_is_refused():
    with pytest.raises(NcclTestsParseError, match="no nccl-tests size table"):
        parse_nccl_tests("hello\nworld\n", source="notes.txt")


def test_collective_inferred_from_columns_or_refused():
    text = (FIX / "reduce_scatter_perf_forced_ring_simple.txt").read_text()
    body = "\n".join(line for line in text.splitlines() if "reduce_scatter_perf" not in line)
    assert parse_nccl_tests(body)[0].collective == Collective.REDUCESCATTER  # count = size/4/n
    old_ag = (FIX / "all_gather_perf_v2_8_v100_2nodes.txt").read_text()
    with pytest.raises(NcclTestsParseError, match="cannot tell which collective"):
        parse_nccl_tests(old_ag)  # no redop column, no binary name
    assert parse_nccl_tests(old_ag, collective=Collective.ALLGATHER)[0].collective == Collective.ALLGATHER
    assert collective_from_name("runs/all_gather_perf-8n.log") == Collective.ALLGATHER
    assert collective_from_name("reduce_perf.txt") == Collective.REDUCE


def test_wrong_values_skip_the_row_with_a_warning_and_footer_mismatch_is_flagged():
    text = (FIX / "broadcast_perf_v2_17_l40s.txt").read_text().splitlines()
    i = next(k for k, line in enumerate(text) if line.strip().startswith("1048576 "))
    cells = text[i].split()
    cells[8] = "3"  # out-of-place #wrong
    text[i] = "  ".join(cells)
    run = parse_nccl_tests("\n".join(text))[0]
    assert len(run.records) == 2 * 23 - 1
    assert any("3 wrong values" in w for w in run.warnings)


def test_two_runs_in_one_log_and_a_truncated_one():
    a = (FIX / "all_reduce_perf_v2_13_h100x8.txt").read_text()
    b = (FIX / "broadcast_perf_v2_17_l40s.txt").read_text()
    runs = parse_nccl_tests(a + "\n" + b)
    assert [r.collective for r in runs] == [Collective.ALLREDUCE, Collective.BROADCAST]
    cut = b[: b.index("# Out of bounds")]
    assert any("truncated" in w for w in parse_nccl_tests(cut)[0].warnings)


def test_records_round_trip_through_jsonl(tmp_path):
    recs = _only_run("reduce_scatter_perf_forced_ring_simple.txt").records
    path = tmp_path / "m.jsonl"
    assert write_jsonl(recs, path) == len(recs)
    assert read_jsonl(path) == recs
    path.write_text(path.read_text() + "{not json}\n")
    with pytest.raises(ValueError, match=rf"m.jsonl:{len(recs) + 1}: not a measurement record"):
        read_jsonl(path)


def test_each_run_is_one_launch_and_names_its_gpu():
    a = (FIX / "all_reduce_perf_v2_13_h100x8.txt").read_text()
    b = (FIX / "broadcast_perf_v2_17_l40s.txt").read_text()
    first, second = parse_nccl_tests(a + "\n" + b, source="two.log")
    # out-of-place and in-place timings of one run share its launch; the next run is another
    assert {r.launch for r in first.records} == {"two.log#0"}
    assert {r.launch for r in second.records} == {"two.log#1"}
    assert {r.gpu for r in first.records} == {first.ranks[0].gpu_name} and "H100" in first.ranks[0].gpu_name
    # a file's launch id is its resolved path, so the same log named twice is one launch
    named = _only_run("all_reduce_perf_v2_13_h100x8.txt").records
    assert named[0].launch == f"{(FIX / 'all_reduce_perf_v2_13_h100x8.txt').resolve()}#0"


def test_tuning_lines_in_the_output_say_what_nccl_ran_for_each_size():
    text = (FIX / "reduce_scatter_perf_forced_ring_simple.txt").read_text().splitlines()
    i = next(k for k, line in enumerate(text) if line.strip().startswith("65536 "))
    text.insert(i, "host:1:1 [0] NCCL INFO ReduceScatter: 65536 Bytes -> Algo RING proto SIMPLE "
                   "channel{Lo..Hi}={0..1}")
    records = parse_nccl_tests("\n".join(text))[0].records
    assert {r.nccl_pick for r in records if r.nbytes == 65536} == {"ring/simple"}
    assert {r.nccl_pick for r in records if r.nbytes != 65536} == {""}


def test_a_log_glued_to_endless_junk_is_read_no_further_and_says_so():
    """Lines after the size table that are no nccl-tests output are counted and named; after
    MAX_IDLE_LINES of them in a row the rest is not read: an endless input ends (1 GB of junk after
    a valid header took minutes and 4 GB when the file was read whole)."""
    import itertools

    from dynamiccl.profiler.formats.nccl_tests import MAX_IDLE_LINES, parse_nccl_tests_lines

    log = (FIX / "all_reduce_perf_v2_13_h100x8.txt").read_text().splitlines()
    read = itertools.count(1)
    junk = (f"garbage {next(read)}" for _ in itertools.repeat(None))  # never ends
    (run,) = parse_nccl_tests_lines(itertools.chain(log, ["srun: launcher noise"], junk), "x.log")
    assert next(read) == MAX_IDLE_LINES  # the launcher's line and the junk: then it stopped asking
    assert run.records and run.warnings[-2:] == [
        f"{MAX_IDLE_LINES} line(s) are no nccl-tests output and were passed over (the first, line "
        f"{len(log) + 1}: 'srun: launcher noise')",
        f"read no further than line {len(log) + MAX_IDLE_LINES}: the {MAX_IDLE_LINES} lines up to it "
        "are no nccl-tests output, so the rest of the file is not read"]


def test_tune_and_calibrate_say_what_they_passed_over_in_a_log(tmp_path, capsys):
    from dynamiccl.cli.main import main

    sophia = Path(__file__).parent / "fixtures" / "real" / "sophia_dgx_a100_ib"
    log = tmp_path / "all_reduce_n2.txt"
    log.write_text((sophia / "all_reduce_n2.txt").read_text() + "job finished at 12:00\n" * 3)
    (tmp_path / "all_reduce_n2.yaml").write_text((sophia / "all_reduce_n2.yaml").read_text())
    assert main(["calibrate", str(log), "--topology", str(sophia / "topology.yaml"), "-o",
                 str(tmp_path / "fit.yaml"), "--keep-undetermined"]) == 0
    assert "3 line(s) are no nccl-tests output and were passed over" in capsys.readouterr().err
    assert main(["tune", "--topology", str(sophia / "topology.yaml"), "--measurements", str(log),
                 "--plan", "--budget", "1"]) == 0
    assert "3 line(s) are no nccl-tests output and were passed over" in capsys.readouterr().err


def test_a_line_longer_than_any_is_cut_and_its_rest_passed_over(tmp_path):
    from dynamiccl.files import MAX_LINE_CHARS, text_lines
    from dynamiccl.profiler.formats.records import read_jsonl

    path = tmp_path / "long.jsonl"
    path.write_text("a" * (10 * MAX_LINE_CHARS + 7) + "\nsecond\r\nthird")
    assert [len(line) for line in text_lines(path)] == [MAX_LINE_CHARS, 6, 5]
    with pytest.raises(ValueError, match=f"long.jsonl:1: a line of more than {MAX_LINE_CHARS} "
                                         "characters, too long to be a measurement record"):
        read_jsonl(path)
