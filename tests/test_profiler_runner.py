"""The launcher and the gloo collective runner with real local processes (no GPU needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.cli.main import main
from dynamiccl.profiler.formats.records import read_jsonl
from dynamiccl.profiler.measure.launcher import LaunchError, launch, resolve
from dynamiccl.profiler.measure.runner import (
    STEERING_ENV,
    CollectiveSpec,
    measure_many,
    nccl_env,
    steered_env,
    summarize,
)
from dynamiccl.system.nccl import bus_factor

WORKERS = str(Path(__file__).parent / "profiler_workers.py")
pytestmark = pytest.mark.multiproc


def test_launcher_returns_each_ranks_result_with_one_thread_per_rank():
    out = launch(f"{WORKERS}:echo", 3, {"value": 7}, timeout_s=30)
    assert out == [{"rank": r, "world": 3, "value": 7, "omp": "1"} for r in range(3)]


def test_file_targets_load_like_modules_so_their_dataclasses_work_in_ranks_and_caller(monkeypatch):
    # issue 28: experiments/bench_real.py's dataclasses under `from __future__ import annotations`
    # crashed resolve() (AttributeError: 'NoneType' object has no attribute '__dict__')
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    ddp_rank = resolve("experiments/bench_real.py:ddp_rank")
    assert callable(ddp_rank) and resolve("experiments/bench_real.py:ddp_rank") is ddp_rank
    out = launch(f"{WORKERS}:echo_dataclass", 2, timeout_s=60)
    assert [(o.rank, o.world, type(o).__name__) for o in out] == [(0, 2, "Echoed"), (1, 2, "Echoed")]


def test_a_dying_rank_ends_the_run_and_frees_the_rank_blocked_on_it():
    # rank 0, blocked in all_reduce, was not waited for: the run ends naming the dead rank, not
    # at its 600 s deadline (which would say "did not finish within"), however loaded the machine
    with pytest.raises(LaunchError, match="^rank 1 exited with code 3 without a result"):
        launch(f"{WORKERS}:fail_on_rank", 2, {"bad_rank": 1, "mode": "exit"}, timeout_s=600)
    with pytest.raises(LaunchError, match="rank 0 failed: RuntimeError: injected failure"):
        launch(f"{WORKERS}:misbehave_without_torch", 2, {"bad_rank": 0, "mode": "raise"})


def test_a_hanging_rank_ends_the_run_after_the_timeout():
    # the run gives up at its deadline (the message names it) instead of waiting for the hour-long
    # sleep; on a loaded machine rank 0 (which imports torch first) may not have finished by then
    # either, and is named too
    with pytest.raises(LaunchError, match=r"^ranks? (0, )?1 did not finish within 5 s"):
        launch(f"{WORKERS}:misbehave_without_torch", 2, {"bad_rank": 1, "mode": "hang"},
               timeout_s=5)


def test_bad_targets_fail_in_the_caller():
    with pytest.raises(ValueError, match="has no function"):
        launch(f"{WORKERS}:nope", 2)
    with pytest.raises(ValueError, match="must look like"):
        launch("no_colon_here", 2)


def test_gloo_runner_times_every_collective_plausibly_on_two_ranks():
    sizes = {"allreduce": 2**18, "allgather": 2**18, "reducescatter": 2**18, "broadcast": 2**18,
             "reduce": 2**18}
    specs = [CollectiveSpec(c, n, warmup=3, iters=15, runs=3) for c, n in sizes.items()]
    specs.append(CollectiveSpec("allreduce", 2**22, warmup=2, iters=8, runs=3))
    results = measure_many(specs, 2, timeout_s=120)
    for r in results:
        assert r.nranks == 2 and len(r.time_us_runs) == 3
        assert 5.0 < r.time_us < 1e6  # a CPU collective takes µs to ms, never nothing or ages
        assert min(r.time_us_runs) <= r.time_us <= max(r.time_us_runs)
        assert r.algbw_GBps == pytest.approx(r.spec.nbytes / r.time_after_straggler_us / 1e3)
        assert r.busbw_GBps == pytest.approx(r.algbw_GBps * bus_factor(r.spec.coll, 2))
        assert r.straggler.iterations == r.spec.runs * r.spec.iters
        assert r.exec_us.shape[0] == 2
    small, big = results[0], results[-1]
    assert big.time_us > small.time_us  # 16x the bytes takes longer
    # one start-up of the ranks measured them all: one launch; another start-up is another
    assert len({r.launch for r in results}) == 1 and results[0].launch.startswith("runner-")
    again = measure_many(specs[:1], 2, timeout_s=120)[0]
    assert again.launch != results[0].launch
    assert again.to_record().launch == again.launch and again.to_record().gpu == ""  # CPU ranks


def test_only_the_measured_collective_runs_on_the_measured_group_gloo_standing_in_for_nccl():
    """NCCL_ALGO=Tree forces every collective of the communicator, and NCCL has no Tree all-gather
    (issue 28: the runner's own all-gather of the results failed). Barriers go over a gloo side
    group, results come back through the launcher: the measured group runs warmup + runs x iters
    calls and nothing else."""
    spec = CollectiveSpec("allreduce", 4096, warmup=2, iters=3, runs=2)
    for out in launch(f"{WORKERS}:calls_per_group", 2, {"spec": spec}, timeout_s=60):
        assert out == {"measured": 2 + 2 * 3, "control": 2 + 2 * 3, "shape": [2, 2, 3]}


@pytest.mark.parametrize("nprocs, cases", [
    (2, [("allreduce", 1, 40000.0), ("reducescatter", 0, 30000.0)]),
    (4, [("allgather", 2, 30000.0), ("broadcast", 3, 40000.0)]),
])
def test_injected_straggler_rank_and_delay_are_detected_within_20_percent(nprocs, cases):
    # delays of tens of ms: a heavily loaded 2-core machine adds several ms of scheduling noise to
    # any sleep, so only delays well above that are detected within 20 % whatever the load
    specs = [CollectiveSpec(coll, 2**14, warmup=3, iters=20, runs=2, straggler_rank=rank,
                            straggler_delay_us=delay) for coll, rank, delay in cases]
    for r, (_, rank, delay_us) in zip(measure_many(specs, nprocs, timeout_s=120), cases,
                                      strict=True):
        assert r.straggler.rank == rank
        assert r.straggler.delay_us == pytest.approx(delay_us, rel=0.2)
        assert r.time_us >= delay_us  # the punctual ranks waited for it
        assert r.to_json()["straggler_rank"] == rank


def test_nccl_knobs_become_nccl_environment_variables():
    spec = CollectiveSpec("allreduce", 2**20, backend="nccl", algorithm="nvls_tree",
                          protocol="ll128", channels=8)
    assert nccl_env(spec) == {"NCCL_ALGO": "NVLSTree", "NCCL_PROTO": "LL128",
                              "NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "8"}
    assert nccl_env(CollectiveSpec("allreduce", 8, backend="nccl")) == {}
    rec_spec = CollectiveSpec("allgather", 64, backend="gloo", algorithm="ring")
    assert not rec_spec.knobs_applied


def test_a_measurements_ranks_run_what_its_spec_says_whatever_the_callers_shell_steers(monkeypatch):
    """A user's exported NCCL_ALGO (or tuner plugin) must not reach ranks measuring NCCL's default
    or another choice: the record would name a choice NCCL never ran. Real spawned ranks."""
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.setenv("NCCL_PROTO", "LL")
    monkeypatch.setenv("NCCL_TUNER_PLUGIN", "/elsewhere/libtuner.so")
    default = CollectiveSpec("allreduce", 2**20, backend="nccl")
    forced = CollectiveSpec("allreduce", 2**20, backend="nccl", protocol="simple")
    plugin = {"NCCL_TUNER_PLUGIN": "/mine/libtuner.so"}
    seen = [launch(f"{WORKERS}:environment", 2, {"names": STEERING_ENV}, timeout_s=60,
                   env=steered_env(spec, extra))[1]
            for spec, extra in ((default, None), (forced, None), (default, plugin))]
    assert seen[0] == dict.fromkeys(STEERING_ENV)
    assert seen[1] == {**dict.fromkeys(STEERING_ENV), "NCCL_PROTO": "Simple"}
    assert seen[2] == {**dict.fromkeys(STEERING_ENV), **plugin}
    assert os.environ["NCCL_ALGO"] == "Tree"  # the caller's own environment is left as it was


def test_cli_collective_json_contract_and_record(tmp_path, capsys):
    record = tmp_path / "m.jsonl"
    rc = main(["profile", "collective", "--backend", "gloo", "--nprocs", "2", "--collective",
               "reducescatter", "--size", "64KB", "--inject-straggler", "0:30ms", "--warmup", "2",
               "--iters", "20", "--runs", "2", "--json", "--record", str(record)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out)[:5] == ["time_us", "algbw_GBps", "busbw_GBps", "straggler_rank",
                             "straggler_delay_us"]
    assert out["straggler_rank"] == 0
    # 30 ms: far above what a loaded 2-core machine adds by descheduling the punctual rank
    assert out["straggler_delay_us"] == pytest.approx(30_000.0, rel=0.2)
    (rec,) = read_jsonl(record)
    assert rec.collective == "reducescatter" and rec.nbytes == 65536 and rec.backend == "gloo"
    assert rec.straggler_rank == 0 and rec.time_us == pytest.approx(out["time_us"])
    assert rec.straggler_delay_us == 30_000.0  # what was injected; what was found beside it
    assert rec.detected_straggler_rank == 0 and rec.detected_straggler_delay_us > 0


def test_a_rank_found_late_where_none_was_injected_is_no_straggler_in_the_record():
    """Ranks of one host leave a barrier a little apart, and detection may name one late by tens of
    µs: the record keeps that as found, while its straggler (what tune leaves out) stays empty, as
    the measurement injected none (the H200 sweep lost its default at 1 MiB to this)."""
    spec = CollectiveSpec("allreduce", 1 << 20, "nccl", warmup=0, iters=10, runs=3)
    exec_us = np.full((4, 3, 10), 1000.0)
    exec_us[:3] += 70.0  # ranks 0-2 wait 70 µs for rank 3 in every call
    times = np.stack([exec_us, np.zeros_like(exec_us)], axis=1)
    rec = summarize(spec, times).to_record()
    assert rec.detected_straggler_rank == 3 and rec.detected_straggler_delay_us == pytest.approx(70, rel=0.1)
    assert rec.straggler_rank is None and rec.straggler_delay_us == 0.0


def test_cli_refuses_nccl_knobs_on_gloo(capsys):
    assert main(["profile", "collective", "--backend", "gloo", "--algorithm", "ring"]) == 2
    assert "NCCL knobs" in capsys.readouterr().err
