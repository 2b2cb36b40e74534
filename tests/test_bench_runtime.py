"""experiments/bench_runtime.py run as a user would: the JSON contract of the runtime issue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.multiproc
@pytest.mark.slow
def test_bench_runtime_prints_step_times_and_the_simulators_prediction_per_delay():
    done = subprocess.run([sys.executable, "experiments/bench_runtime.py", "--json", "--nprocs", "2",
                           "--delays", "0,30", "--width", "256", "--block", "1", "--blocks", "2",
                           "--collective-reps", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ranks"] == 2 and [c["straggler_delay_ms"] for c in out["cases"]] == [0.0, 30.0]
    assert out["backend"] == "gloo" and not out["emulated_hosts"] and out["allreduce_ms"] > 0
    for case in out["cases"]:
        assert case["plain_step_ms"] > 0 and case["hook_step_ms"] > 0
        assert case["alone_allreduce_ms"] > 0 and case["alone_stragglar_ms"] > 0
        assert 0.0 <= case["stragglar_share"] <= 1.0
    # without a straggler the runtime never leaves the plain path, so nothing is predicted saved
    assert out["cases"][0]["stragglar_share"] == 0.0 and out["cases"][0]["predicted_saving_ms"] == 0.0
    # a straggler 30 ms late makes the punctual rank wait in both collectives alone
    assert out["cases"][1]["alone_allreduce_ms"] > 20.0


def test_bench_runtime_refuses_a_bad_delay_list_in_one_line():
    done = subprocess.run([sys.executable, "experiments/bench_runtime.py", "--delays", "0,soon"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--delays must be comma-separated numbers of ms" in done.stderr


def test_bench_runtime_on_nccl_without_a_gpu_says_so_in_one_line():
    done = subprocess.run([sys.executable, "experiments/bench_runtime.py", "--backend", "nccl",
                           "--emulate-hosts", "--nprocs", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "need a GPU" in done.stderr


@pytest.mark.gpu
@pytest.mark.multiproc
def test_bench_runtime_on_nccl_emulated_hosts_gives_the_same_json(mps):
    """The runtime on NCCL: 4 emulated hosts on the GPUs present, the straggler a late host."""
    done = subprocess.run([sys.executable, "experiments/bench_runtime.py", "--json", "--backend",
                           "nccl", "--emulate-hosts", "--nprocs", "4", "--delays", "0,20",
                           "--block", "1", "--blocks", "4", "--collective-reps", "4"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    print(json.dumps(out, indent=1))
    assert out["backend"] == "nccl" and out["emulated_hosts"] and out["ranks"] == 4
    gloo_keys = {"plain_step_ms", "hook_step_ms", "measured_saving_ms", "stragglar_share",
                 "alone_allreduce_ms", "alone_stragglar_ms", "predicted_saving_ms",
                 "predicted_alone_saving_ms"}
    for case in out["cases"]:
        assert gloo_keys <= set(case) and case["plain_step_ms"] > 0 and case["hook_step_ms"] > 0
    assert out["cases"][0]["stragglar_share"] == 0.0
    assert out["cases"][1]["alone_allreduce_ms"] > 15.0  # everyone waited for the late host
    # the runtime times arrival on the GPU (CUDA events): a host timestamp in an NCCL callback is
    # taken when the work is queued, and saw no straggler at all (issue 28)
    assert out["cases"][1]["detected_delay_ms"] > 10.0 and out["cases"][1]["stragglar_share"] > 0
