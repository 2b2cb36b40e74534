"""The profiler on real NVIDIA GPUs: NVML discovery, the NCCL runner, the live backend on NCCL and
the DDP probe with CUDA events. Multi-rank tests run on emulated hosts, so one GPU is enough (with
the CUDA MPS daemon, which the ``mps`` fixture finds or starts). Skipped cleanly where no GPU and
driver answer (conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.profiler.formats.records import read_jsonl
from dynamiccl.profiler.measure.emulation import local_emulated_topology
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.profiler.measure.nvml import RecordedNvml
from dynamiccl.profiler.measure.runner import CollectiveSpec, measure_many
from dynamiccl.system.knobs import Config, action_id
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

WORKERS = str(Path(__file__).parent / "profiler_workers.py")
pytestmark = pytest.mark.gpu
#: Ranks of the multi-rank tests: emulated hosts sharing the GPUs present.
HOSTS = 4


def _gpus() -> int:
    import torch

    return torch.cuda.device_count()


def test_profile_topology_reads_the_real_gpus(tmp_path, capsys):
    import torch

    out, raw = tmp_path / "t.yaml", tmp_path / "answers.yaml"
    assert main(["profile", "topology", "-o", str(out), "--record", str(raw)]) == 0
    topo = load_topology(out)
    gpus = RecordedNvml.from_file(raw).snapshot().gpus
    assert topo.gpus_per_node == len(gpus) == _gpus()
    props = torch.cuda.get_device_properties(0)
    assert gpus[0].compute_capability == (props.major, props.minor)
    assert gpus[0].sms == props.multi_processor_count == topo.gpu.sms
    print(out.read_text(), capsys.readouterr().err)


@pytest.mark.multiproc
def test_nccl_runner_times_the_gpus_present():
    n, size = _gpus(), 64 * 2**20
    specs = [CollectiveSpec("allreduce", size, backend="nccl", warmup=5, iters=20, runs=3),
             CollectiveSpec("allgather", size, backend="nccl", warmup=5, iters=20, runs=3),
             CollectiveSpec("allreduce", size, backend="nccl", warmup=5, iters=20, runs=3,
                            algorithm="ring", protocol="simple", channels=4)]
    if n > 1:
        specs.append(CollectiveSpec("allreduce", 2**20, backend="nccl", warmup=5, iters=30,
                                    runs=2, straggler_rank=n - 1, straggler_delay_us=2000.0))
    results = measure_many(specs, n, timeout_s=300)
    for r in results:
        print(r.spec.collective, r.to_record().config_label, f"{r.time_us:.1f} us",
              f"algbw {r.algbw_GBps:.1f} GB/s", f"busbw {r.busbw_GBps:.1f} GB/s")
        assert 1.0 < r.time_us < 1e5
        assert r.algbw_GBps > 5.0  # a GPU moves 64 MiB far faster than any CPU path
    if n > 1:
        assert results[-1].straggler.rank == n - 1
        assert results[-1].straggler.delay_us == pytest.approx(2000.0, rel=0.2)


@pytest.mark.multiproc
def test_nccl_runner_on_emulated_hosts_times_forced_choices_and_finds_the_late_host(mps):
    specs = [CollectiveSpec("allreduce", 64 << 10, backend="nccl", warmup=5, iters=20, runs=3),
             CollectiveSpec("allreduce", 64 << 10, backend="nccl", warmup=5, iters=20, runs=3,
                            algorithm="tree", protocol="simple"),
             CollectiveSpec("allreduce", 1 << 20, backend="nccl", warmup=5, iters=30, runs=2,
                            straggler_rank=HOSTS - 1, straggler_delay_us=5000.0)]
    results = measure_many(specs, HOSTS, timeout_s=300, emulate_hosts=True)
    for r in results:
        print(r.to_record().config_label, f"{r.time_us:.1f} us", f"busbw {r.busbw_GBps:.2f} GB/s")
        # with MPS a 64 KiB all-reduce over loopback sockets takes ~0.3 ms; time-slicing ~13-40 ms
        assert 5.0 < r.time_after_straggler_us < 10_000.0
        record = r.to_record()
        assert record.emulated_hosts and record.nnodes == record.nranks == HOSTS
    assert results[-1].straggler.rank == HOSTS - 1
    assert results[-1].straggler.delay_us == pytest.approx(5000.0, rel=0.2)


@pytest.mark.multiproc
def test_profile_collective_on_emulated_hosts_records_what_it_ran(tmp_path, capsys, mps):
    record = tmp_path / "r.jsonl"
    assert main(["profile", "collective", "--backend", "nccl", "--nprocs", str(HOSTS),
                 "--emulate-hosts", "--size", "256K", "--iters", "20", "--runs", "3",
                 "--algorithm", "ring", "--protocol", "simple", "--record", str(record),
                 "--json"]) == 0
    print(capsys.readouterr().out)
    (rec,) = read_jsonl(record)
    assert rec.emulated_hosts and rec.nnodes == HOSTS and rec.config_label == "ring/simple/auto-ch"


@pytest.mark.multiproc
def test_live_backend_on_emulated_hosts_applies_knobs_per_communicator(mps):
    from dynamiccl.envs.backends.live import LiveBackend

    scenario = Scenario(local_emulated_topology(HOSTS), Collective.ALLREDUCE, 4 * 2**20)
    backend = LiveBackend(nprocs=HOSTS, dist_backend="nccl", warmup=3, iters=10, emulate_hosts=True)
    try:
        for channels in (1, 2):  # two knob settings: two communicators, each created once
            action = action_id(Config(Algorithm.RING, Protocol.SIMPLE, channels))
            m = backend.measure(scenario, action)
            print(channels, m)
            assert m.time_us > 0 and m.default_time_us > 0 and m.straggler_rank is None
    finally:
        backend.close()


@pytest.mark.multiproc
def test_an_online_agent_steps_the_environment_on_real_multi_rank_nccl_timings(mps):
    """The gymnasium environment's live backend on emulated hosts: coordinate descent chooses each
    call's configuration from the mask, NCCL runs it on every rank, the measured time comes back
    as the step's reward and the observed straggler as the next observation."""
    import numpy as np

    from dynamiccl.agents.policies.online import CoordinateDescentTuner
    from dynamiccl.envs.backends.live import LiveBackend
    from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
    from dynamiccl.envs.observation import OBSERVATION_FIELDS

    field = {f.name: f.index for f in OBSERVATION_FIELDS}
    topo = local_emulated_topology(HOSTS)
    late = Scenario(topo, Collective.ALLREDUCE, 1 << 20, straggler_rank=HOSTS - 1,
                    straggler_delay_us=30_000.0)
    episode = [Scenario(topo, Collective.ALLREDUCE, 256 << 10)] * 6 + [late]
    backend = LiveBackend(nprocs=HOSTS, dist_backend="nccl", warmup=2, iters=10, emulate_hosts=True)
    env = CollectiveTuningEnv(scenario="smoke", backend=backend)
    tuner = CoordinateDescentTuner(budget=8, deployable=True)
    try:
        obs, _ = env.reset(seed=0, options={"episode": episode})
        actions = []
        for scenario in episode:
            action = int(tuner.act(obs, scenario=scenario, action_mask=env.action_masks()))
            obs, reward, _, _, info = env.step(action)
            tuner.update(scenario, action, info["time_us"])
            actions.append(action)
            print(scenario.nbytes, info["time_us"], info["default_time_us"], reward)
            assert info["valid"] and np.isfinite(reward) and 0 < info["time_us"] < 1e6
        assert len(set(actions[:6])) >= 2  # it explored on the repeated call
        assert info["time_us"] >= 30_000.0 and obs[field["straggler_present"]] == 1.0
    finally:
        backend.close()


@pytest.mark.multiproc
def test_ddp_probe_with_cuda_events_on_emulated_hosts(mps):
    out = launch(f"{WORKERS}:ddp_with_probe", 2,
                 {"steps": 10, "late_rank": 1, "late_ms": 20.0, "backend": "nccl",
                  "tell_device": True}, timeout_s=300, emulate_hosts=True)
    report = out[0]["report"]
    print(report.to_json())
    assert report.steps == 10 and report.straggler.rank == 1
    rank0 = report.per_rank[0]
    assert rank0["step_us"] > 0 and rank0["comm_us"] > 0 and rank0["compute_us"] > 0
    for probed, plain in zip(out[0]["probed"], out[0]["plain"], strict=True):
        assert (probed - plain).abs().max() < 1e-5


@pytest.mark.multiproc
def test_ddp_probe_learns_the_cuda_clock_from_the_first_bucket():
    """Not told the device, the probe leaves out the step begun before it saw a CUDA bucket."""
    out = launch(f"{WORKERS}:ddp_with_probe", 1,
                 {"steps": 5, "late_rank": None, "late_ms": 0.0, "backend": "nccl"}, timeout_s=300)
    assert out[0]["report"].steps == 4
