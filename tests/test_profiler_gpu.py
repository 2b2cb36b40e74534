"""The profiler on real NVIDIA GPUs: NVML discovery, the NCCL runner, the live backend on NCCL and
the DDP probe with CUDA events. Skipped cleanly where no GPU and driver answer (conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.knobs import Config, action_id
from dynamiccl.nccl import Algorithm, Collective, Protocol
from dynamiccl.profiler.launcher import launch
from dynamiccl.profiler.nvml import RecordedNvml
from dynamiccl.profiler.runner import CollectiveSpec, measure_many
from dynamiccl.scenario import Scenario
from dynamiccl.topology import load_topology

WORKERS = str(Path(__file__).parent / "profiler_workers.py")
pytestmark = pytest.mark.gpu


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
def test_live_backend_on_nccl_applies_knobs_per_communicator():
    from dynamiccl.envs.backends.live import LiveBackend

    n = _gpus()
    topo = load_topology("dgx_h100", gpus_per_node=n)
    scenario = Scenario(topo, Collective.ALLREDUCE, 16 * 2**20)
    backend = LiveBackend(nprocs=n, dist_backend="nccl", warmup=3, iters=10)
    try:
        for channels in (2, 8):  # two knob settings: two communicators, each created once
            action = action_id(Config(Algorithm.RING, Protocol.SIMPLE, channels))
            m = backend.measure(scenario, action)
            print(channels, m)
            assert m.time_us > 0 and m.default_time_us > 0 and m.straggler_rank is None
    finally:
        backend.close()


@pytest.mark.multiproc
def test_ddp_probe_with_cuda_events():
    n = _gpus()
    out = launch(f"{WORKERS}:ddp_with_probe", n,
                 {"steps": 10, "late_rank": None, "late_ms": 0.0, "backend": "nccl"}, timeout_s=300)
    report = out[0]["report"]
    print(report.to_json())
    assert report.steps == 10
    rank0 = report.per_rank[0]
    assert rank0["step_us"] > 0 and rank0["comm_us"] > 0 and rank0["compute_us"] > 0
    for probed, plain in zip(out[0]["probed"], out[0]["plain"], strict=True):
        assert (probed - plain).abs().max() < 1e-5
