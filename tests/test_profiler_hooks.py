"""The DDP communication hook in a real (small) DDP job on two gloo processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dynamiccl.profiler.launcher import launch

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
