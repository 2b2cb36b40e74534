"""The DDP communication hook in a real (small) DDP job on two gloo processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dynamiccl.profiler.measure.launcher import launch

WORKERS = str(Path(__file__).parent / "profiler_workers.py")
#: Far above the several ms a loaded 2-core machine adds to any sleep or compute step.
LATE_US = 60_000.0


@pytest.mark.multiproc
def test_probe_hook_averages_like_ddp_and_finds_the_late_rank_and_c2c():
    out = launch(f"{WORKERS}:ddp_with_probe", 2, {"steps": 16, "late_rank": 1, "late_ms": LATE_US / 1e3},
                 timeout_s=120)
    for rank_out in out:  # identical training to DDP's own hook, on every rank
        for probed, plain in zip(rank_out["probed"], rank_out["plain"], strict=True):
            assert torch.allclose(probed, plain, atol=1e-6)
    report = out[0]["report"]
    assert report.steps == 16 and out[1]["report"].straggler == report.straggler
    assert report.straggler.rank == 1
    assert report.straggler.delay_us == pytest.approx(LATE_US, rel=0.2)
    punctual, late = report.per_rank
    # the punctual rank spends the straggler's delay waiting on exposed communication; the late
    # rank spends it "computing" (sleeping before backward)
    assert punctual["exposed_comm_us"] > 0.8 * LATE_US > late["exposed_comm_us"]
    assert late["compute_us"] > LATE_US > punctual["compute_us"]
    assert late["compute_to_comm"] > 1.0 > punctual["compute_to_comm"]
    assert report.to_json()["straggler"]["rank"] == 1


@pytest.mark.multiproc
def test_probe_with_stand_in_cuda_events_leaves_out_the_step_begun_on_another_clock():
    """No GPU here: the probe is told "cuda" (whose clock marks are stand-ins for CUDA events) while
    the buckets stay on the CPU, so the first step begins on one clock and its buckets are marked on
    the other, the mixed-clock situation of a GPU job's first step. The probe leaves that step out
    (it used to subtract across the two clocks: TypeError) and measures every later one."""
    out = launch(f"{WORKERS}:ddp_with_probe", 2, {"steps": 6, "late_rank": None, "late_ms": 0.0,
                                                   "fake_cuda_events": True}, timeout_s=120)
    for rank_out in out:
        for probed, plain in zip(rank_out["probed"], rank_out["plain"], strict=True):
            assert torch.allclose(probed, plain, atol=1e-6)
        report = rank_out["report"]
        assert report.steps == 5
        assert all(r["step_us"] > 0 and r["comm_us"] > 0 for r in report.per_rank)


@pytest.mark.multiproc
def test_probe_told_the_device_measures_from_the_first_step():
    out = launch(f"{WORKERS}:ddp_with_probe", 2, {"steps": 4, "late_rank": None, "late_ms": 0.0,
                                                   "tell_device": True}, timeout_s=120)
    assert out[0]["report"].steps == 4
