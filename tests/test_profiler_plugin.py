"""The profiler plugin (dynamiccl/plugin/csrc/profiler.c, ring.c) called the way NCCL calls it, and the
rings it writes read back through dynamiccl.plugin.profile_ring's numpy view.

A C driver (csrc/tests/profiler_driver.c) loads the library with dlopen, looks up one
ncclProfiler_vN and replays commands: NCCL's own sequence for a collective (group and coll events at
launch, then per channel kernelCh start, KernelChStop, stop) and hostile events. The driver flags
any non-zero return itself; these tests check the records, the drop counters and the logs. The
struct layout is compared with NCCL's own headers (tests/fixtures/nccl_headers: 2.28.9's v4/v5,
2.29.7's v6), and the concurrency and fuzz harnesses run under ThreadSanitizer and libFuzzer.
"""

from __future__ import annotations

import mmap
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from sanitizers import ASAN, TSAN, clang_fuzzer, tsan_works

from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import profile_ring
from dynamiccl.plugin.profile_ring import FLAG_TIMED, RingFormatError, RingView, ring_files
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.nccl_profiler import PROFILER_ABI_FIRST_NCCL

SRC = plugin.source_dir()
TESTS = SRC / "tests" if SRC else None
HEADERS = Path(__file__).parent / "fixtures" / "nccl_headers"
WARN = 2
pytestmark = pytest.mark.skipif(SRC is None, reason="needs the C sources (a source checkout)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"


def _exe(name: str, cache: Path, flags: list[str], *sources: Path, cc: str | None = None) -> Path:
    return plugin.compile_c([TESTS / f"{name}.c", *sources], name, cc=cc, cache=cache,
                            flags=["-std=c11", "-Wall", "-Wextra", "-Wno-unused-function", *flags],
                            depends=[TESTS / "profiler_harness.h", *plugin.headers(SRC)])


@dataclass
class Run:
    ctx: list[tuple[bool, int]] = field(default_factory=list)   # (context set, mask after init)
    events: dict[int, bool] = field(default_factory=dict)        # event -> handle given
    logs: list[tuple[int, int, str]] = field(default_factory=list)


class Driver:
    """Runs driver commands in a fresh process; the rings go to ``folder``."""

    def __init__(self, exe: Path, library: Path) -> None:
        self.exe, self.library = exe, library

    def run(self, commands: list[str], folder: Path | None, env: dict[str, str] | None = None,
            extra_env: dict[str, str] | None = None) -> Run:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
        if folder is not None:
            clean[profile_ring.PROFILE_ENV] = str(folder)
        proc = subprocess.run([str(self.exe), str(self.library)], input="\n".join(commands) + "\n",
                              capture_output=True, text=True, timeout=120,
                              env={**clean, **(env or {}), **(extra_env or {})})
        assert "VIOLATION" not in proc.stdout, proc.stdout
        assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
        assert "ERROR" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[-4000:]
        out = Run()
        for line in proc.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "CTX":
                parts = rest.split()
                out.ctx.append((parts[1] == "set", int(parts[3])))
            elif kind == "EV":
                e, state = rest.split()
                out.events[int(e)] = state == "set"
            elif kind == "LOG":
                level, flags, message = rest.split(" ", 2)
                out.logs.append((int(level), int(flags, 16), message))
        return out


@pytest.fixture(scope="module")
def driver(cache) -> Driver:
    return Driver(_exe("profiler_driver", cache, ["-O1", "-g"]), plugin.build(cache=cache))


@pytest.fixture(scope="module")
def asan_driver(cache) -> Driver:
    return Driver(_exe("profiler_driver", cache, ASAN), plugin.build(flags=ASAN, cache=cache))


def _one_ring(folder: Path) -> RingView:
    rings = ring_files(folder)
    assert len(rings) == 1, rings
    return RingView(rings[0])


def _call(k: int, func: str = "AllReduce", dtype: str = "ncclFloat32", count: int = 1024,
          algo: str = "RING", proto: str = "SIMPLE", channels: int = 4, seq: int = 0,
          t0: int = 10_000, duration: int = 700, skew: int = 10, first: int = 0) -> str:
    return f"call {k} {func} {dtype} {count} {algo} {proto} {channels} {seq} {t0} {duration} {skew} {first}"


# ---- the ABI -----------------------------------------------------------------------------------


def test_exports_the_profiler_tables_with_nccls_size(cache):
    """ncclProfiler_v4..v6 are six pointers each (name + five functions; NCCL 2.28.9/2.29.7)."""
    symbols = plugin.exported_symbols(plugin.build(cache=cache))
    assert {s: symbols[s] for s in plugin.PROFILER_SYMBOLS} == dict.fromkeys(plugin.PROFILER_SYMBOLS, 48)


@pytest.mark.parametrize(("version", "tag"), [(4, "v2.28.9-1"), (5, "v2.28.9-1"), (6, "v2.29.7-1")])
def test_layout_matches_nccls_own_header(cache, version, tag):
    """Every offset and size the plugin reads, in NCCL's header (fixture: NCCL 2.28.9
    src/include/plugin/profiler/profiler_v4.h and profiler_v5.h, 2.29.7 profiler_v6.h) and in
    csrc/nccl_profiler_abi.h."""
    exe = _exe("nccl_layout", cache, [f"-DNCCL_V{version}", f"-I{HEADERS / tag}",
                                      f"-I{HEADERS / 'v2.28.9-1'}"])  # v6's profiler_v5.h
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) == 23
    for line in lines:
        name, nccl_off, nccl_size, our_off, our_size = line.split()
        assert (nccl_off, nccl_size) == (our_off, our_size), line
    descriptor = int(lines[0].split()[2])
    assert descriptor == (104 if version == 4 else 112)


# ---- what a call becomes ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5, 6])
def test_every_abi_version_records_a_call_with_nccls_choice_and_gpu_time(driver, tmp_path, version):
    run = driver.run([f"init 0 {version} 1a2b3c4d5e6f7081 2 8 3",
                      _call(0, "AllGather", "ncclBfloat16", 3000, "NVLS_TREE", "LL128", 6, 41,
                            t0=5_000, duration=900, skew=25, first=3),
                      _call(0, "ReduceScatter", "ncclInt8", 7, "PAT", "LL", 1, 9), "fin 0"], tmp_path)
    assert run.ctx == [(True, 2 | 64)]  # coll and kernelCh events asked for
    ring = _one_ring(tmp_path)
    assert (ring.info.comm_id, ring.info.rank, ring.info.nranks, ring.info.nnodes, ring.info.abi,
            ring.info.comm_name) == (0x1A2B3C4D5E6F7081, 3, 8, 2, version, "test-comm")
    assert ring.info.pid > 0 and ring.closed() and ring.started() == 2
    read = ring.read()
    assert (read.next, read.lost) == (2, 0)
    first, second = read.records
    assert (first["seq"], first["bytes"], first["coll"], first["algo"], first["proto"],
            first["channels"], first["warps"], first["dtype"]) == \
        (41, 6000, Collective.ALLGATHER, Algorithm.NVLS_TREE, Protocol.LL128, 6, 8, 9)
    # first channel's start to the last channel's stop on the GPU timer
    assert (first["gpu_start_ns"], first["gpu_stop_ns"]) == (5_000, 5_000 + 5 * 25 + 900)
    assert first["flags"] == FLAG_TIMED and first["timed_channels"] == 6
    assert 0 < first["host_start_ns"] <= first["host_stop_ns"] <= second["host_start_ns"]
    assert (second["coll"], second["algo"], second["proto"], second["bytes"]) == \
        (Collective.REDUCESCATTER, Algorithm.PAT, Protocol.LL, 7)
    assert ring.drops() == dict.fromkeys(profile_ring.DROP_REASONS, 0)


def test_a_call_is_complete_whichever_of_its_stops_arrives_last(driver, tmp_path):
    """Channels may end before NCCL stops the coll event (a small kernel), in any order."""
    run = driver.run(["init 0 6 1 1 2 0", "coll 0 0 AllReduce ncclFloat32 10 TREE LL 2 5",
                      "chan 0 1 0 7 1000", "chan 0 2 0 2 1100", "kstop 2 1500", "stop 2",
                      "kstop 1 1300", "stop 1", "stop 0", "fin 0"], tmp_path)
    assert run.events == {0: True, 1: True, 2: True}
    records = _one_ring(tmp_path).read().records
    assert len(records) == 1 and records[0]["flags"] == FLAG_TIMED
    assert (records[0]["gpu_start_ns"], records[0]["gpu_stop_ns"]) == (1000, 1500)


def test_without_the_environment_nothing_is_recorded_and_the_mask_is_left_alone(driver, tmp_path):
    """Another communicator may have set the process-wide mask: an unprofiled one leaves it."""
    run = driver.run(["init 0 5 1 1 2 0", "coll 0 0 AllReduce ncclFloat32 10 RING LL 1 1",
                      "stop 0", "fin 0"], None)
    assert run.ctx == [(False, 0)] and run.events == {0: False} and not run.logs


@pytest.mark.parametrize(("setting", "why"), [
    ({"records": "1000"}, "not a power of two"), ({"records": "32"}, "not a power of two"),
    ({"records": "64k"}, "not a power of two"), ({"folder": "missing"}, "cannot create"),
])
def test_a_bad_setting_is_one_warning_and_nothing_recorded(driver, tmp_path, setting, why):
    folder = tmp_path / "missing" if setting.get("folder") else tmp_path
    env = {profile_ring.RECORDS_ENV: setting["records"]} if "records" in setting else {}
    run = driver.run(["init 0 6 1 1 2 0", _call(0), "fin 0"], folder, env)
    assert run.ctx == [(False, 0)]
    warnings = [m for level, _, m in run.logs if level == WARN]
    assert len(warnings) == 1 and why in warnings[0] and "not recording" in warnings[0]
    assert not list(tmp_path.iterdir())


def test_ring_capacity_comes_from_the_environment_and_the_oldest_records_go(driver, tmp_path):
    calls = [_call(0, seq=i, t0=1000 * i) for i in range(100)]
    driver.run(["init 0 6 1 1 2 0", *calls, "fin 0"], tmp_path, {profile_ring.RECORDS_ENV: "64"})
    ring = _one_ring(tmp_path)
    assert ring.capacity == 64 and ring.head() == 100
    read = ring.read()
    assert read.lost == 36 and list(read.records["seq"]) == list(range(36, 100))
    again = ring.read(read.next)
    assert (len(again.records), again.next, again.lost) == (0, 100, 0)
    assert list(ring.read(90).records["seq"]) == list(range(90, 100))


# ---- hostile input --------------------------------------------------------------------------------

#: Descriptors the ring has no ids for: each is dropped and counted, none recorded.
BAD_DESCRIPTORS = [
    "coll 0 0 AlltoAll ncclFloat32 10 RING LL 1 1",        # not one of the five collectives
    "coll 0 1 NULL ncclFloat32 10 RING LL 1 1",
    "coll 0 2 AllReduce ncclUint4 10 RING LL 1 1",
    "coll 0 3 AllReduce Unknown 10 RING LL 1 1",           # 2.28.9 names ncclUint8 so
    "coll 0 4 AllReduce ncclFloat32 10 Ring LL 1 1",       # the tuner's spelling, not the profiler's
    "coll 0 5 AllReduce ncclFloat32 10 RING NULL 1 1",
    "coll 0 6 AllReduce ncclFloat32 10 RING Simple 1 1",
    "coll 0 7 AllReduce ncclFloat32 10 RING LL 65 1",       # more channels than NCCL has
    "coll 0 8 AllReduce ncclFloat64 3074457345618258603 RING LL 1 1",  # bytes overflow 64 bits
]
#: Hostile channel and state events; which call each breaks is in the comments.
HOSTILE = [
    "nullargs 0", "event 0 40 1", "event 0 41 8", "event 0 42 4096", "event 0 43 0",
    "coll 0 10 AllReduce ncclFloat32 1 RING LL 2 10",   # call 10: stop before its stop time
    "chan 0 11 10 0 100", "chan 0 12 10 1 100", "stop 11", "kstop 12 200", "stop 12", "stop 10",
    "coll 0 13 AllReduce ncclFloat32 1 RING LL 1 11",   # call 11: the stop time twice
    "chan 0 14 13 0 100", "kstop 14 200", "kstop 14 300", "stop 14", "stop 13",
    "coll 0 15 AllReduce ncclFloat32 1 RING LL 1 12",   # call 12: stops before it starts
    "chan 0 16 15 0 500", "kstop 16 400", "stop 16", "stop 15",
    "coll 0 17 AllReduce ncclFloat32 1 RING LL 2 13",   # call 13: one channel id twice, a 3rd
    "chan 0 18 17 4 100", "chan 0 19 17 4 100", "chan 0 20 17 5 100", "chan 0 21 17 6 100",
    "kstop 18 200", "stop 18", "kstop 20 200", "stop 20", "stop 17",
    "coll 0 22 AllReduce ncclFloat32 1 RING LL 1 14",   # call 14: channel id beyond 63
    "chan 0 23 22 64 100", "chan 0 24 22 0 100", "kstop 24 150", "stop 24", "stop 22",
    "chan 0 25 NULL 0 100",                             # no parent: a call not recorded
    "chan 0 26 foreign 0 100",                          # not a call of this communicator
    "coll 0 28 AllReduce ncclFloat32 1 RING LL 2 15",   # call 15: recorded with its time, though
    "chan 0 27 28+8 0 100",                             # a parent pointer inside it,
    "chan 0 29 28 0 100", "chan 0 32 28 1 110", "stop 28", "stop 28",  # its stop twice,
    "kstop 29 120", "stop 29", "stop 29", "kstop 32 140", "stop 32",   # a channel's stop twice
    "state 29 22 null", "state 29 13 zero", "stop 28",  # and events after it completed
    "coll 0 30 AllReduce ncclFloat32 1 RING LL 1 16",   # call 16: a stop state without arguments
    "chan 0 31 30 0 100", "state 31 22 null", "state 31 8 zero", "stop 31", "stop 30",
]


def _hostile(driver: Driver, folder: Path) -> RingView:
    driver.run(["init 0 5 1 1 2 0", *BAD_DESCRIPTORS, *HOSTILE, _call(0, seq=99), "fin 0"], folder)
    return _one_ring(folder)


def test_hostile_descriptors_and_events_are_dropped_and_counted(driver, tmp_path):
    ring = _hostile(driver, tmp_path)
    records = {int(r["seq"]): r for r in ring.read().records}
    # calls 10..16 are recorded, untimed; 15's own time was complete before the extra stops
    assert sorted(records) == [10, 11, 12, 13, 14, 15, 16, 99]
    timed = {seq for seq, r in records.items() if r["flags"] & FLAG_TIMED}
    assert timed == {15, 99}
    assert records[99]["gpu_stop_ns"] - records[99]["gpu_start_ns"] == 700 + 3 * 10
    drops = ring.drops()
    assert drops["descriptor"] == len(BAD_DESCRIPTORS)
    # calls 13 (two channels never stopped) and 14 (one) wait for channels until finalize
    assert drops["stale"] == 2 and drops["untimed"] == 4  # 10, 11, 12, 16
    # a foreign parent, a misaligned one, the coll stopped twice and the channel stopped twice
    assert drops["handle"] == 4 and drops["no_slot"] == 0


def test_hostile_input_under_address_and_undefined_behaviour_sanitizers(asan_driver, tmp_path):
    ring = _hostile(asan_driver, tmp_path)  # the driver asserts no sanitizer report
    assert ring.drops()["descriptor"] == len(BAD_DESCRIPTORS)



def _check_thread_rings(folder: Path, comms: int, calls: int) -> None:
    """Every call of every communicator recorded once, timed, with the duration the harness ran."""
    rings = ring_files(folder)
    assert len(rings) == comms
    for path in rings:
        with RingView(path) as ring:
            records = ring.read().records
            i = records["seq"].astype(np.int64)
            channels = 1 + i % 8
            assert sorted(i) == list(range(calls))
            assert (records["flags"] == FLAG_TIMED).all() and (records["channels"] == channels).all()
            duration = (records["gpu_stop_ns"] - records["gpu_start_ns"]).astype(np.int64)
            assert (duration == 1000 + i % 100 + 10 * (channels - 1)).all()
            assert (records["bytes"] == 4 * (i + 1)).all()
            assert ring.drops() == dict.fromkeys(profile_ring.DROP_REASONS, 0)


@pytest.mark.parametrize("sanitizer", ["thread", "address"])
def test_many_communicators_with_host_and_proxy_threads(cache, tmp_path, sanitizer):
    flags = TSAN if sanitizer == "thread" else ASAN
    if sanitizer == "thread" and not tsan_works(cache):
        pytest.skip("ThreadSanitizer cannot run on this kernel/compiler")
    library = plugin.build(flags=flags, cache=cache)
    exe = _exe("profiler_threads", cache, [*flags, "-pthread"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    proc = subprocess.run([str(exe), str(library), "6", "1500"], capture_output=True, text=True,
                          timeout=300, env={**env, profile_ring.PROFILE_ENV: str(tmp_path),
                                            profile_ring.RECORDS_ENV: "2048",
                                            "TSAN_OPTIONS": "halt_on_error=1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.startswith("PASS comms=6 calls=1500")
    assert "WARNING: ThreadSanitizer" not in proc.stderr
    _check_thread_rings(tmp_path, 6, 1500)


def test_the_reader_sees_each_record_once_while_the_plugin_writes(cache, tmp_path):
    """Rings of 64 records read while six communicators write 20 000 calls each: every record read
    is whole (its duration is the one the harness ran), none twice, and what was read plus what
    the reader was told it lost is every call."""
    library = plugin.build(cache=cache)
    exe = _exe("profiler_threads", cache, ["-O2", "-pthread"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    calls = 20_000
    proc = subprocess.Popen([str(exe), str(library), "6", str(calls)], stdout=subprocess.PIPE,
                            env={**env, profile_ring.PROFILE_ENV: str(tmp_path),
                                 profile_ring.RECORDS_ENV: "64"})
    views: dict[Path, RingView] = {}
    cursors: dict[Path, int] = {}
    seen: dict[Path, list[np.ndarray]] = {}
    lost: dict[Path, int] = {}
    deadline = time.monotonic() + 120
    while True:
        done = proc.poll() is not None
        for path in ring_files(tmp_path):
            if path not in views:
                views[path], cursors[path], seen[path], lost[path] = RingView(path), 0, [], 0
            read = views[path].read(cursors[path])
            cursors[path] = read.next
            lost[path] += read.lost
            seen[path].append(read.records)
        if done or time.monotonic() > deadline:
            break
    assert proc.wait(timeout=60) == 0
    assert len(views) == 6
    for path, view in views.items():
        records = np.concatenate(seen[path])
        i = records["seq"].astype(np.int64)
        channels = 1 + i % 8
        duration = (records["gpu_stop_ns"] - records["gpu_start_ns"]).astype(np.int64)
        assert (duration == 1000 + i % 100 + 10 * (channels - 1)).all()
        assert len(set(i.tolist())) == len(i), "a record was read twice"
        assert len(i) + lost[path] == calls == view.head()
        view.close()


# ---- the reader of a job's rings ----------------------------------------------------------------


def test_the_reader_joins_the_ranks_of_a_call(driver, tmp_path):
    """Two ranks of one communicator (and a second communicator) recorded by the C harness: one
    row per call with the slowest rank's time, the ranks' launch spread, nccl-tests' sizes, and
    the [call, rank] matrices straggler detection reads."""
    from dynamiccl.profiler.measure.profile_reader import ProfileReader, join_ranks, rank_matrix

    commands = ["init 0 6 aa 1 2 0", "init 1 6 aa 1 2 1", "init 2 5 bb 1 1 0"]
    for seq in range(3):  # rank 1 starts its kernels 40 ns late and so runs 40 ns shorter
        commands += [_call(0, seq=seq, t0=10_000 * seq, duration=500),
                     _call(1, seq=seq, t0=10_000 * seq + 40, duration=460)]
    commands += [_call(0, "AllGather", count=100, seq=0, duration=90),  # rank 1 never records it
                 _call(2, "Broadcast", "ncclInt64", 3, "TREE", "LL", 1, 0, duration=50),
                 "fin 0", "fin 1", "fin 2"]
    driver.run(commands, tmp_path)
    with ProfileReader(tmp_path) as reader:
        calls = reader.poll()
        assert len(calls) == 3 + 3 + 1 + 1 and len(reader.poll()) == 0 and reader.all_closed()
        assert reader.lost == 0 and len(reader.rings) == 3
    joined = join_ranks(calls)
    allreduce = joined[joined["collective"] == Collective.ALLREDUCE]
    assert list(allreduce["seq"]) == [0, 1, 2] and (allreduce["ranks_seen"] == 2).all()
    assert (allreduce["duration_us"] == (500 + 3 * 10) / 1e3).all()  # the slowest rank's
    assert (allreduce["nbytes"] == 4096).all() and (allreduce["launch_spread_us"] >= 0).all()
    gather = joined[joined["collective"] == Collective.ALLGATHER][0]
    assert (gather["nbytes"], gather["ranks_seen"], gather["nranks"]) == (100 * 4 * 2, 1, 2)
    broadcast = joined[joined["collective"] == Collective.BROADCAST][0]
    assert (broadcast["algorithm"], broadcast["protocol"], broadcast["nbytes"]) == \
        (Algorithm.TREE, Protocol.LL, 24)
    mine = calls[(calls["comm_id"] == 0xAA) & (calls["collective"] == Collective.ALLREDUCE)]
    durations = rank_matrix(mine, "duration_us")
    assert durations.shape == (3, 2) and (durations[:, 1] < durations[:, 0]).all()
    assert rank_matrix(calls[calls["comm_id"] == 0xAA], "duration_us").shape == (3, 2)  # gather: 1 rank


def test_the_reader_follows_rings_as_they_appear_and_grow(driver, tmp_path):
    from dynamiccl.profiler.measure.profile_reader import ProfileReader

    with ProfileReader(tmp_path) as reader:
        assert len(reader.poll()) == 0
        driver.run(["init 0 6 aa 1 1 0", _call(0, seq=0), "fin 0"], tmp_path)
        assert list(reader.poll()["seq"]) == [0]
        (tmp_path / "dynamiccl-1-9-00000000000000cc-r0.ring").write_bytes(b"not a ring")
        driver.run(["init 0 6 bb 1 1 0", _call(0, seq=5), _call(0, seq=6), "fin 0"], tmp_path)
        assert list(reader.poll()["seq"]) == [5, 6] and len(reader.poll()) == 0
        assert [p.name for p in reader.unreadable] == ["dynamiccl-1-9-00000000000000cc-r0.ring"]


def test_the_live_backend_takes_each_steps_times_from_the_profiler(driver, tmp_path):
    """A live step measures its choice, then NCCL's default, back to back (warmup + timed calls
    each); with the profiler's rings (here filled by the C harness for two ranks, a barrier's tiny
    all-reduce between) the step's times are the medians of the timed calls' GPU times."""
    from dynamiccl.envs.backends.live import LiveBackend
    from dynamiccl.profiler.measure.profile_reader import ProfileReader
    from dynamiccl.profiler.measure.runner import CollectiveSpec

    specs = [CollectiveSpec("allreduce", 1 << 20, "nccl", warmup=2, iters=3, runs=1, algorithm="ring",
                            protocol="ll"), CollectiveSpec("allreduce", 1 << 20, "nccl", 2, 3, 1)]
    commands, seq = ["init 0 6 aa 1 2 0", "init 1 6 aa 1 2 1"], 0
    for duration in (900, 400, 410, 420, 430, 50_000, 2000, 700, 710, 720):  # mine, then NCCL's
        for k in (0, 1):
            commands.append(_call(k, count=1 << 18, seq=seq, duration=duration - 10 * k, skew=0))
            commands.append(_call(k, count=1, seq=1000 + seq, duration=5, skew=0))  # a barrier
        seq += 1
    backend = LiveBackend(2, "nccl")
    backend._reader = ProfileReader(tmp_path)
    assert backend._gpu_times(specs, 2) is None  # nothing recorded yet: the runner's times stand
    driver.run([*commands[:10], "fin 0", "fin 1"], tmp_path)
    assert backend._gpu_times(specs, 2) is None  # only part of the step's calls
    backend._reader = ProfileReader(tmp_path)
    for path in ring_files(tmp_path):
        path.unlink()
    driver.run([*commands, "fin 0", "fin 1"], tmp_path)
    assert backend._gpu_times(specs, 2) == pytest.approx([0.42, 0.71])  # warmup and barriers out


# ---- the reader refuses what is not a ring ---------------------------------------------------------


def test_the_reader_refuses_files_that_are_not_complete_rings(driver, tmp_path):
    driver.run(["init 0 6 1 1 2 0", _call(0), "fin 0"], tmp_path)
    good = ring_files(tmp_path)[0]
    data = good.read_bytes()
    cases = {"empty": b"", "text": b"hello\n" * 100, "truncated": data[:-64],
             "longer": data + b"\0" * 64,
             "capacity": data[:20] + (3).to_bytes(4, "little") + data[24:],
             "version": data[:8] + (99).to_bytes(4, "little") + data[12:]}
    for name, content in cases.items():
        path = tmp_path / f"{name}.ring"
        path.write_bytes(content)
        with pytest.raises(RingFormatError) as info:
            RingView(path)
        message = str(info.value)
        assert str(path) in message and "\n" not in message, (name, message)
    with pytest.raises(RingFormatError, match="cannot read"):
        RingView(tmp_path / "nothing-here.ring")


def test_a_ring_being_created_is_not_listed(driver, tmp_path):
    """The plugin writes a ring under a hidden name and renames it once its header is complete."""
    (tmp_path / ".dynamiccl-1-0-00000000000000ff-r0.ring.tmp").write_bytes(b"\0" * 300)
    driver.run(["init 0 6 1 1 2 0", "fin 0"], tmp_path)
    assert [p.name.startswith("dynamiccl-") for p in ring_files(tmp_path)] == [True]


# ---- fuzzing and the real NCCL ------------------------------------------------------------------



@pytest.mark.slow
def test_bounded_libfuzzer_run_of_the_event_handlers(cache, tmp_path):
    clang = clang_fuzzer()
    if clang is None:
        pytest.skip("clang with libFuzzer is not installed (apt-get install -y clang)")
    fuzzer = _exe("fuzz_profiler", cache, ["-fsanitize=fuzzer,address,undefined",
                                           "-fno-sanitize-recover=all", "-g", "-O1"],
                  SRC / "profiler.c", SRC / "ring.c", cc=clang)
    rings, corpus = tmp_path / "rings", tmp_path / "corpus"
    rings.mkdir()
    corpus.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    proc = subprocess.run([str(fuzzer), "-max_total_time=15", "-timeout=10", "-rss_limit_mb=2048",
                           "-print_final_stats=1", str(corpus)], capture_output=True, text=True,
                          timeout=120, env={**env, profile_ring.PROFILE_ENV: str(rings)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = int(next(line.split()[-1] for line in proc.stderr.splitlines()
                    if line.startswith("stat::number_of_executed_units")))
    assert runs > 10_000


def test_the_installed_nccl_looks_up_a_profiler_version_we_export():
    """NCCL's loader finds ncclProfiler_vN by name: the newest name in the binary is one we export
    (or older than all we export: then NCCL predates GPU channel timers) and matches the version
    table."""
    nccl = plugin.find_nccl_library()
    if nccl is None:
        pytest.skip("no nvidia-nccl wheel installed")
    with open(nccl, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        named = {int(v) for v in re.findall(rb"ncclProfiler_v(\d+)\x00", data)}
    assert max(named) in plugin.PROFILER_ABI_VERSIONS
    assert max(plugin.PROFILER_ABI_VERSIONS) == max(PROFILER_ABI_FIRST_NCCL)
