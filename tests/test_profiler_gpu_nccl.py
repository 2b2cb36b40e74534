"""NCCL itself with DynamICCL as its profiler plugin, on a GPU with emulated hosts (``-m gpu``: four
NCCL ranks as hosts of their own on one GPU, needing the CUDA MPS daemon; skipped without a GPU).

What NCCL reports must be what ran: one record per collective run, the pair NCCL's own TUNING log
says it picked (and the pair the tuner plugin forced where it forced one), GPU times within 10 % of
the runner's for the same calls, and ``profile job`` on bench_real's DDP job the buckets DDP
all-reduced, each as often as it ran.
"""

from __future__ import annotations

import collections
import ctypes
import json
import sys
from pathlib import Path

import pytest

from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.knobs import Algorithm, Collective, Protocol
from dynamiccl.system.nccl_profiler import PROFILER_ABI_FIRST_NCCL

NCCL = plugin.find_nccl_library()
pytestmark = [pytest.mark.gpu, pytest.mark.multiproc,
              pytest.mark.skipif(NCCL is None, reason="no nvidia-nccl wheel installed")]
TESTS = Path(__file__).parent
WORKERS = str(TESTS / "runtime_workers.py")
HOSTS, REPEATS = 4, 5
SIZES = [64 << 10, 4 << 20, 32 << 20]
OVERRIDDEN = 4 << 20
ALTERNATIVES = [(Algorithm.TREE, Protocol.SIMPLE), (Algorithm.RING, Protocol.LL),
                (Algorithm.RING, Protocol.SIMPLE), (Algorithm.TREE, Protocol.LL)]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    return plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds")


def _profiled(library: Path, rings: Path) -> dict[str, str]:
    from dynamiccl.profiler.measure.job_profile import profiling_env

    rings.mkdir()
    return profiling_env(library, rings, 4096)


def _all_reduce(tmp_path: Path, name: str, library: Path, env: dict[str, str] | None = None):
    """SIZES all-reduced REPEATS times each on HOSTS emulated hosts with the profiler loaded and
    NCCL's TUNING log; (the calls every rank recorded, rank 0's log)."""
    from dynamiccl.profiler.measure.launcher import launch
    from dynamiccl.profiler.measure.profile_reader import ProfileReader

    folder = tmp_path / name
    folder.mkdir()
    exact = launch(f"{WORKERS}:all_reduce_sizes", HOSTS,
                   {"sizes": SIZES, "log_dir": str(folder), "repeats": REPEATS}, timeout_s=300,
                   emulate_hosts=True, env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING",
                                            **_profiled(library, folder / "rings"), **(env or {})})
    assert all(exact), f"{name}: a rank's all-reduce result was not the sum"
    with ProfileReader(folder / "rings") as reader:
        calls = reader.poll()
        assert reader.lost == 0 and reader.all_closed()
        abis = {view.info.abi for view in reader.rings}
    return calls, (folder / "rank0.log").read_text(errors="replace"), abis


def _ring_picks(calls, rank: int = 0) -> dict[int, set[tuple[Algorithm, Protocol]]]:
    mine = calls[(calls["rank"] == rank) & (calls["collective"] == Collective.ALLREDUCE)]
    return {n: {(Algorithm(int(a)), Protocol(int(p)))
                for a, p in zip(mine["algorithm"][mine["nbytes"] == n],
                                mine["protocol"][mine["nbytes"] == n], strict=True)}
            for n in SIZES}


def _log_picks(log: str) -> dict[int, tuple[Algorithm, Protocol]]:
    from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log

    return {p.nbytes: (p.algorithm, p.protocol) for p in parse_debug_log(log).distinct_picks()
            if p.collective == Collective.ALLREDUCE}


def _nccl_version() -> int:
    code = ctypes.c_int(0)
    assert ctypes.CDLL(str(NCCL)).ncclGetVersion(ctypes.byref(code)) == 0
    return code.value


def test_nccl_reports_each_collective_once_with_its_gpu_time_and_the_pair_it_ran(tmp_path, mps,
                                                                                  library):
    calls, log, abis = _all_reduce(tmp_path, "nccl", library)
    assert abis == {max(v for v, first in PROFILER_ABI_FIRST_NCCL.items() if _nccl_version() >= first)}
    for rank in range(HOSTS):
        mine = calls[(calls["rank"] == rank) & (calls["collective"] == Collective.ALLREDUCE)]
        counts = collections.Counter(int(n) for n in mine["nbytes"])
        assert {n: counts[n] for n in SIZES} == dict.fromkeys(SIZES, REPEATS), counts
        at_sizes = mine[[int(n) in SIZES for n in mine["nbytes"]]]
        assert (at_sizes["duration_us"] > 0).all(), "a call without its GPU time"
    picks, logged = _ring_picks(calls), _log_picks(log)
    assert {n: picks[n] for n in SIZES} == {n: {logged[n]} for n in SIZES}


def test_the_pair_recorded_is_the_pair_the_tuner_forced(tmp_path, mps, library):
    from dynamiccl.profiler.formats.nccl_debug_log import parse_debug_log

    baseline, log, _ = _all_reduce(tmp_path, "nccl", library)
    own = {n: next(iter(p)) for n, p in _ring_picks(baseline).items()}
    table = parse_debug_log(log).tables[0]  # what NCCL can run here
    usable = [(a, p) for a, p in ALTERNATIVES
              if table.bandwidth_GBps[Collective.ALLREDUCE, a, p] > 0 and (a, p) != own[OVERRIDDEN]]
    assert usable, f"NCCL can run none of {ALTERNATIVES} besides its own pick at {OVERRIDDEN} B"
    forced = usable[0]
    rule = pf.Rule(Collective.ALLREDUCE, OVERRIDDEN, 2 * OVERRIDDEN - 1, decision=pf.Decision(*forced))
    header = pf.Header("gpu-profiler-test", "2026-01-01T00:00:00Z", "emulated", "0123456789abcdef",
                       pf.DEFAULT_NCCL_RANGE, "cafe")
    policy = pf.write(pf.PolicyFile(header, (pf.Slice(rules=(rule,)),)), tmp_path / "gpu.dccl")
    tuned, _, _ = _all_reduce(tmp_path, "tuned", library, {"NCCL_TUNER_PLUGIN": str(library),
                                                            "DYNAMICCL_POLICY": str(policy)})
    for rank in range(HOSTS):
        picks = _ring_picks(tuned, rank)
        assert picks[OVERRIDDEN] == {forced}
        assert {n: picks[n] for n in SIZES if n != OVERRIDDEN} == \
            {n: {own[n]} for n in SIZES if n != OVERRIDDEN}


def test_gpu_times_agree_with_the_runners_within_ten_percent(tmp_path, mps, library):
    """The runner times each call from its launch to its end on the host; the profiler from the
    first channel's start to the last one's stop on the GPU: at sizes where the launch is a small
    part of the call they must agree."""
    from dynamiccl.profiler.measure.profile_reader import ProfileReader, consecutive_runs, join_ranks
    from dynamiccl.profiler.measure.runner import CollectiveSpec, measure_many

    specs = [CollectiveSpec("allreduce", n, "nccl", warmup=5, iters=20, runs=3)
             for n in (8 << 20, 32 << 20)]
    rings = tmp_path / "rings"
    results = measure_many(specs, HOSTS, timeout_s=300, emulate_hosts=True,
                           env=_profiled(library, rings))
    with ProfileReader(rings) as reader:
        joined = join_ranks(reader.poll())
    for spec, result in zip(specs, results, strict=True):
        runs = consecutive_runs(joined, int(Collective.ALLREDUCE), spec.nbytes,
                                [spec.warmup + spec.runs * spec.iters])
        assert runs is not None, f"the profiler did not record every call at {spec.nbytes} B"
        gpu_us = float(sorted(runs[0][spec.warmup:])[len(runs[0][spec.warmup:]) // 2])
        assert abs(gpu_us / result.time_us - 1) <= 0.10, (spec.nbytes, gpu_us, result.time_us)


def test_profile_job_lists_the_bench_real_ddp_jobs_buckets_and_counts_exactly(tmp_path, mps):
    from dynamiccl.cli.main import main
    from dynamiccl.profiler.formats import job_mix

    buckets, out = tmp_path / "buckets.json", tmp_path / "out"
    job = ("import json; from dynamiccl.profiler.measure.launcher import launch; "
           f"r = launch({str(TESTS / 'profiler_gpu_workers.py')!r} + ':ddp_buckets', {HOSTS}, "
           "dict(steps=8, width=512, layers=6, bucket_mb=0.25, seed=0), timeout_s=300, "
           f"emulate_hosts=True)[0]; json.dump(r, open({str(buckets)!r}, 'w'))")
    assert main(["profile", "job", "--emulated-hosts", "--out", str(out), "--",
                 sys.executable, "-c", job]) == 0
    ddp = json.loads(buckets.read_text())
    expected = collections.Counter(ddp["first"])
    for size in ddp["rebuilt"]:
        expected[size] += ddp["steps"] - 1
    entries = job_mix.read(out / "job.jsonl")
    found = collections.Counter()
    for e in entries:
        if e.record.collective == "allreduce":
            found[e.record.nbytes] += e.calls
            assert (e.record.nranks, e.record.emulated_hosts) == (HOSTS, True)
    assert found == expected
