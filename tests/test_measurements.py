"""Every measurement format users already have, read from real published logs, and the errors.

Fixtures: tests/fixtures/real (each log's source is in its sidecar; see that folder's README).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.nccl_model import NcclModel
from dynamiccl.profiler.formats.measurements import MeasurementFormatError, detect_format, load, read
from dynamiccl.profiler.formats.nccl_debug_log import (
    NcclDebugLogError,
    compare_tables,
    parse_debug_log,
    parse_debug_log_file,
)
from dynamiccl.profiler.formats.nccl_tests_json import NcclTestsJsonError
from dynamiccl.profiler.formats.published import (
    REPLAY_COLUMNS,
    PublishedRunError,
    load_all,
    load_run,
    load_sidecar,
    replay_rows,
)
from dynamiccl.profiler.formats.records import read_jsonl, write_jsonl
from dynamiccl.profiler.formats.tuner_measurements_csv import TunerCsvError, parse_tuner_csv
from dynamiccl.system.nccl import Algorithm, Protocol
from dynamiccl.system.topology import load_topology

REAL = Path(__file__).parent / "fixtures" / "real"
H100 = REAL / "h100_nvswitch_node"
SOPHIA = REAL / "sophia_dgx_a100_ib"
DEBUG_LOG = REAL / "nccl_debug" / "rtx5090_socket_broadcast_tuning.log"


def _out_of_place(records):
    return [r for r in records if not r.in_place]


def test_nccl_tests_text_real_log() -> None:
    records = _out_of_place(load(H100 / "all_reduce_ring.txt"))
    assert detect_format(H100 / "all_reduce_ring.txt") == "nccl-tests"
    assert len(records) == 31 and records[0].nbytes == 8 and records[-1].nbytes == 8 * 2**30
    assert records[-1].time_us == pytest.approx(40848.8)
    assert {r.collective for r in records} == {"allreduce"} and records[0].nranks == 8


def test_nccl_tests_json_matches_the_text_log_it_mirrors() -> None:
    path = REAL / "formats" / "all_reduce_perf_h100_ring.json"
    assert detect_format(path) == "nccl-tests-json"
    records = load(path)
    text = load(H100 / "all_reduce_ring.txt")
    assert [(r.nbytes, r.time_us, r.in_place) for r in records] == \
        [(r.nbytes, r.time_us, r.in_place) for r in text]
    assert {(r.nranks, r.nnodes, r.algorithm) for r in records} == {(8, 1, "ring")}


def test_tuner_csv_replay_table_reads_back() -> None:
    path = REAL / "replay" / "h100_nvswitch_node.csv"
    assert detect_format(path) == "tuner-csv"
    records = load(path)
    forced = [r for r in records if r.algorithm == "ring"]
    default = [r for r in records if r.nccl_default]
    assert forced and default and len(forced) + len(default) == len(records)
    assert {r.nranks for r in records} == {8} and {r.nnodes for r in records} == {1}


def test_replay_tables_carry_the_in_place_time_of_the_same_call_from_the_same_log() -> None:
    ring = load_run(H100 / "all_reduce_ring.yaml")
    logged = {r.nbytes: r.time_us for r in load(H100 / "all_reduce_ring.txt") if r.in_place}
    assert logged and {r.nbytes: r.time_us for r in ring.in_place} == logged
    records = load(REAL / "replay" / "h100_nvswitch_node.csv")
    twins = [r for r in records if r.in_place and r.launch.endswith("#all_reduce_ring")]
    assert {r.nbytes: r.time_us for r in twins} == pytest.approx(logged)
    # a summary table has no second timing: its rows leave the column empty and give no twin
    assert not any(r.in_place for r in load(REAL / "replay" / "dgx_b200_ib.csv"))


def test_replay_tables_keep_each_logs_launch_apart() -> None:
    """Every row knows the log (one launch) it came from: the H100 node's allreduce at 4 MiB was
    launched 10 times with NCCL's default and 11 times with NCCL_ALGO=RING, and each launch's
    out-of-place and in-place timings stay together."""
    records = load(REAL / "replay" / "h100_nvswitch_node.csv")
    assert all(r.launch.endswith(tuple(f"#{p.stem}" for p in H100.glob("*.txt"))) for r in records)
    at_4m = [r for r in records if r.coll.name == "ALLREDUCE" and r.nbytes == 1 << 22]
    launches = {True: set(), False: set()}
    for r in at_4m:
        launches[r.nccl_default].add(r.launch)
    assert (len(launches[True]), len(launches[False])) == (10, 11)
    outlier = [r for r in at_4m if r.launch.endswith("#all_reduce_ring_233108")]
    # this launch's ring allreduce stalled out of place (94.22 us; in place 52.69, like the others)
    assert sorted((r.in_place, r.time_us) for r in outlier) == [(False, 94.22), (True, 52.69)]


def test_tuner_csv_in_place_column_is_optional_and_checked() -> None:
    head = "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us,latency_inplace_us\n"
    twin = parse_tuner_csv(head + "allreduce,1024,ring,ll,-1,1,8,12.5,13.0\n"
                                  "allreduce,2048,ring,ll,-1,1,8,14,\n")
    assert [(r.nbytes, r.time_us, r.in_place) for r in twin] == [(1024, 12.5, False), (1024, 13.0, True),
                                                                (2048, 14.0, False)]
    with pytest.raises(TunerCsvError, match=r"<csv>:2: latency_inplace_us is 'fast'"):
        parse_tuner_csv(head + "allreduce,1024,ring,ll,-1,1,8,12.5,fast\n")


def test_tuner_csv_in_nvidias_exact_columns() -> None:
    text = ("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,"
            "cost_metric,bandwidth_gbps,latency_us\n"
            "allreduce,1024,tree,simple,2,1,8,-1,-1,0.15,45.2,12.5\n"
            "broadcast,1048576,ring,ll128,8,1,8,-1,-1,0.28,702.1,28.3\n")
    first, second = parse_tuner_csv(text)
    assert (first.algorithm, first.protocol, first.channels, first.time_us) == ("tree", "simple", 2, 12.5)
    assert (second.collective, second.protocol, second.nnodes) == ("broadcast", "ll128", 1)


def test_runner_records_round_trip(tmp_path: Path) -> None:
    records = _out_of_place(load(H100 / "all_reduce_default.txt"))
    path = tmp_path / "records.jsonl"
    write_jsonl(records, path)
    assert detect_format(path) == "records"
    assert [(r.nbytes, r.time_us) for r in load(path)] == [(r.nbytes, r.time_us) for r in records]


def test_debug_log_is_recognised_and_refused_as_measurements() -> None:
    assert detect_format(DEBUG_LOG) == "nccl-debug-log"
    with pytest.raises(MeasurementFormatError, match="no timings"):
        load(DEBUG_LOG)


def test_debug_log_table_and_picks() -> None:
    log = parse_debug_log_file(DEBUG_LOG)
    assert log.nccl_version == "2.29.7+cuda12.9" and len(log.tables) == 1
    table = log.tables[0]
    # AllReduce / Tree / LL and Broadcast / Ring / Simple exactly as printed.
    assert (table.latency_us[4, 0, 0], table.bandwidth_GBps[4, 0, 0]) == (16.8, 0.5)
    assert (table.latency_us[0, 1, 2], table.bandwidth_GBps[0, 1, 2]) == (22.4, 2.4)
    assert table.max_threads[1, 2] == 256
    picks = log.distinct_picks()
    assert len(picks) == 18 and picks[0].nbytes == 1024 and picks[-1].nbytes == 128 * 2**20
    assert (picks[5].algorithm, picks[5].protocol, picks[5].channels) == \
        (Algorithm.RING, Protocol.SIMPLE, 1)


def test_nccl_model_against_the_real_tuning_log() -> None:
    """The agreement as it stands, asserted so a change shows.

    Latencies: every usable entry identical. Bandwidths: the model is low by one common factor
    (2.0, ± the print's rounding) on every entry. Both sides print *algorithm* bandwidth (NCCL's
    busBw times nRanks/nSteps for rings, so AllGather is twice Broadcast on 2 ranks, in both), so
    the factor is no unit mix-up: it is the ring and tree graphs' channel count. NCCL's picks use
    channels 0..3, i.e. 4 communicator channels, twice its search's 2 channels at 1.2 GB/s
    (2 x 1.2 = the printed 2.4). The topology gives each rank one 1.25 GB/s socket "NIC", which
    carries one 1.2 GB/s channel, so the model's graph has 1 channel and 2 communicator channels.
    NCCL saw two socket devices per rank, which the schema cannot express (one NIC per
    ``link_share`` GPUs, at most one per GPU). LL128: off in both, for every collective (the Socket
    transport has no GPUDirect RDMA, so NCCL sees the NIC through the CPU, a PHB path, and keeps
    LL128 to PXB). Algorithm picks: all agree.
    """
    log = parse_debug_log_file(DEBUG_LOG)
    model = NcclModel(load_topology(REAL / "rtx5090_socket_2ranks" / "topology.yaml"))
    agreement = compare_tables(log.tables[0], model.tables.latency, model.tables.bandwidth)
    printed, lat = log.tables[0], model.tables.latency
    usable = printed.bandwidth_GBps > 0
    assert np.allclose(lat[usable], printed.latency_us[usable], atol=0.06)
    ratios = printed.bandwidth_GBps[usable] / model.tables.bandwidth[usable]
    assert np.allclose(ratios, 2.0, rtol=0.08)
    assert not [m for m in agreement.mismatches if "usable in one" in m]
    ll128 = printed.bandwidth_GBps[:, :, Protocol.LL128]
    assert (ll128[~np.isnan(ll128)] == 0).all() and (model.tables.bandwidth[:, :, Protocol.LL128] <= 0).all()
    picks = log.distinct_picks()
    chosen = [model.choose(p.collective, p.nbytes).config for p in picks]
    assert all(c.algorithm == p.algorithm for c, p in zip(chosen, picks, strict=True))


def test_published_runs_carry_their_sidecar_facts() -> None:
    runs = load_all(REAL)
    assert len(runs) >= 8
    polaris = {r.name: r for r in runs["polaris_a100_slingshot"]}
    big = polaris["all_reduce_n540"]
    assert big.nodes == 540 and {r.nranks for r in big.records} == {2160}
    assert {r.nnodes for r in big.records} == {540} and big.is_default
    ring = load_run(H100 / "all_reduce_ring.yaml")
    assert {r.algorithm for r in ring.records} == {"ring"} and not ring.is_default
    assert all(r.nbytes > 0 and not r.in_place for rs in runs.values() for run in rs
               for r in run.records)


def test_replay_tables_are_up_to_date() -> None:
    for path in sorted((REAL / "replay").glob("*.csv")):
        system = path.stem
        with open(path, newline="") as fh:
            committed = list(csv.DictReader(fh))
        fresh = replay_rows(load_all(REAL)[system])
        assert committed == fresh, (f"{path} is stale; regenerate with python -m "
                                    "dynamiccl.profiler.formats.published tests/fixtures/real --replay "
                                    "tests/fixtures/real/replay")
        assert list(committed[0]) == list(REPLAY_COLUMNS)


def test_sidecar_versions_are_versions() -> None:
    """A sidecar's nccl_version is a version (or 'unknown'), not a sentence pasted into it."""
    for runs in load_all(REAL).values():
        for run in runs:
            assert re.fullmatch(r"\d+\.\d+\.\d+(\+\S+)?|unknown", run.nccl_version), \
                (run.log, run.nccl_version)


# -- rows of size 0: nccl-tests' no-op calls are not measurements, in any format ---------------

def _with_a_no_op_row(kind: str, tmp_path: Path) -> tuple[Path, int]:
    """A file of ``kind`` holding real rows plus a size-0 row, and how many real records it has."""
    if kind == "nccl-tests":  # a real log: 6 of its 29 rows are size 0, out- and in-place each
        return SOPHIA / "all_gather_n2.txt", 2 * (29 - 6)
    if kind == "nccl-tests-json":
        report = json.loads((REAL / "formats" / "all_reduce_perf_h100_ring.json").read_text())
        n = sum((r["out_of_place"] is not None) + (r["in_place"] is not None)
                for r in report["results"])
        no_op = {**report["results"][0], "size": 0, "count": 0}
        report["results"].insert(0, no_op)
        path = tmp_path / "all_reduce_perf.json"
        path.write_text(json.dumps(report))
        return path, n
    if kind == "tuner-csv":
        path = tmp_path / "sweep.csv"
        path.write_text("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n"
                        "allreduce,0,ring,simple,4,1,8,0.21\n"
                        "allreduce,1024,ring,simple,4,1,8,12.5\n")
        return path, 1
    records = _out_of_place(load(H100 / "all_reduce_ring.txt"))
    path = tmp_path / "records.jsonl"
    write_jsonl([replace(records[0], nbytes=0), *records], path)
    return path, len(records)


@pytest.mark.parametrize("kind", ["nccl-tests", "nccl-tests-json", "tuner-csv", "records"])
def test_no_op_rows_are_dropped_in_every_format(kind: str, tmp_path: Path) -> None:
    path, expected = _with_a_no_op_row(kind, tmp_path)
    assert detect_format(path) == kind
    records = load(path)
    assert len(records) == expected and min(r.nbytes for r in records) > 0


def test_the_footer_check_counts_the_dropped_no_op_rows() -> None:
    """nccl-tests' '# Avg bus bandwidth' averages every printed row, the no-ops' zero included:
    dropping them must not make the rows look inconsistent with it."""
    records, warnings = read(SOPHIA / "all_gather_n2.txt")
    assert records and not warnings


# -- bad input: one readable error naming the problem and the fix -------------------------------

def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MeasurementFormatError, match="no such file"):
        load(tmp_path / "nope.txt")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(MeasurementFormatError, match="directory"):
        load(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "core"
    path.write_bytes(b"\x7fELF\x00\x00\x01")
    with pytest.raises(MeasurementFormatError, match="binary"):
        load(path)


def test_unknown_text(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("loss 0.31 at step 100\n")
    with pytest.raises(MeasurementFormatError, match="nccl-tests output"):
        load(path)


def test_truncated_json_report(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce_perf.json"
    text = (REAL / "formats" / "all_reduce_perf_h100_ring.json").read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(NcclTestsJsonError, match="cut short"):
        load(path)


def test_json_without_results(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"version": 3, "nccl_version": 22703, "config": {}}))
    with pytest.raises(NcclTestsJsonError, match="'results'"):
        load(path)


def test_json_object_that_is_no_measurement_names_the_formats(tmp_path: Path) -> None:
    path = tmp_path / "j.json"
    path.write_text('{"a": 1}\n')
    with pytest.raises(MeasurementFormatError, match=r"j.json: a JSON object that is neither an "
                       r"nccl-tests -J report .* nor a measurement record \(it has no collective, "
                       r"nbytes, .*\); give nccl-tests output"):
        load(path)


def test_record_line_lacking_fields_names_them(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    write_jsonl(_out_of_place(load(H100 / "all_reduce_ring.txt"))[:2], path)
    first, second = path.read_text().splitlines()
    second = json.loads(second)
    del second["time_us"]
    path.write_text(first + "\n" + json.dumps(second) + "\n")
    with pytest.raises(ValueError, match=r"records.jsonl:2: not a measurement record \(lacks "
                                         r"time_us\)") as err:
        load(path)
    assert "__init__" not in str(err.value)


def test_tuner_csv_bad_row_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n"
                    "allreduce,1024,ring,simple,4,1,8,12.5\n"
                    "allreduce,lots,ring,simple,4,1,8,13.0\n")
    with pytest.raises(TunerCsvError, match=r"sweep.csv:3"):
        load(path)


def test_debug_log_without_tuning_output() -> None:
    with pytest.raises(NcclDebugLogError, match="NCCL_DEBUG_SUBSYS=INIT,TUNING"):
        parse_debug_log("host:1:1 [0] NCCL INFO Bootstrap : Using eth0\n")


def test_sidecar_missing_a_fact(tmp_path: Path) -> None:
    (tmp_path / "run.txt").write_text((H100 / "all_reduce_ring.txt").read_text())
    (tmp_path / "run.yaml").write_text("log: run.txt\ncollective: allreduce\nnodes: 1\n")
    with pytest.raises(PublishedRunError, match="missing gpus_per_node, launch, forced, source"):
        load_run(tmp_path / "run.yaml")


def test_summary_table_fixture_splits_into_runs() -> None:
    runs = {run.name: run for run in load_all(REAL)["dgx_b200_ib"]}
    tree = runs["scaling_16g:allreduce:4n:tree/auto/auto-ch"]
    assert (tree.nodes, tree.nranks, tree.is_default) == (4, 32, False)
    (rec,) = tree.records
    assert rec.nbytes == 16 * 2**30 and rec.algorithm == "tree"
    # busbw 190.7 GB/s at 32 ranks: algbw = 190.7 / (2 * 31 / 32).
    assert rec.time_us == pytest.approx(16 * 2**30 / (190.7 / (62 / 32)) / 1e3, rel=1e-4)
    assert runs["scaling_16g:allreduce:1n:NCCL default"].is_default


def test_a_replay_tables_run_is_one_launch_and_a_summary_tables_job_another() -> None:
    records = load(REAL / "replay" / "h100_nvswitch_node.csv")
    launches = {(r.collective, r.algorithm, r.launch) for r in records}
    logs = len(list(H100.glob("*.txt")))
    assert len(launches) == logs == len({launch for *_, launch in launches})  # a launch per log
    jobs = [r.launch for run in load_sidecar(REAL / "dgx_b200_ib" / "scaling_16g.yaml")
            for r in run.records]
    assert len(set(jobs)) == len(jobs) and all(jobs)  # one published number per job
    assert not any(r.launch for r in parse_tuner_csv(
        "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n"
        "allreduce,1024,ring,ll,-1,1,8,12.5\n"))  # NVIDIA's columns say nothing of launches


def test_the_json_report_is_one_launch_and_names_its_gpu(tmp_path: Path) -> None:
    report = REAL / "formats" / "all_reduce_perf_h100_ring.json"
    records = load(report)
    assert {r.launch for r in records} == {str(report.resolve())}
    assert {r.gpu for r in records} == {"NVIDIA H100 80GB HBM3"}


def test_records_keep_launch_gpu_and_nccl_pick_through_json(tmp_path: Path) -> None:
    rec = replace(_out_of_place(load(H100 / "all_reduce_default.txt"))[0], nccl_pick="nvls/simple")
    path = tmp_path / "r.jsonl"
    write_jsonl([rec], path)
    back = read_jsonl(path)[0]
    assert (back.launch, back.gpu, back.nccl_pick) == (rec.launch, rec.gpu, "nvls/simple")
    assert back.launch.endswith("all_reduce_default.txt#0")


def test_a_debug_log_is_read_a_line_at_a_time_keeping_one_pick_per_call() -> None:
    """A long job logs every call and every communicator's table: the reader keeps the first table
    and one pick per (collective, size), so its memory is what the log says, not its size (a
    300 MB log took 1.35 GB when read whole)."""
    from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log_lines

    lines = DEBUG_LOG.read_text().splitlines()
    picks = [line for line in lines if "Bytes -> Algo" in line]
    log = parse_debug_log_lines(iter(lines + lines + picks * 1000))
    once = parse_debug_log_file(DEBUG_LOG)
    assert len(log.tables) == 1 and (log.tables[0].latency_us == once.tables[0].latency_us).all()
    assert log.picks == once.picks and len(log.picks) == 18
