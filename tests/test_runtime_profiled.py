"""The runtime with NCCL's profiler loaded: per-call GPU times instead of its own bucket timing.

Rehearsed on gloo: each rank plays NCCL's part towards the real plugin (tests/runtime_profiler_workers.py,
a stand-in for NCCL), reporting synthetic GPU times milliseconds long where gloo's own take tenths,
so the numbers the runtime agreed on show where they came from. With NCCL itself on a GPU see
tests/test_profiler_gpu_nccl.py.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from dynamiccl.plugin import build as plugin
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.runtime.tuning import KEEP_DEFAULT, MEASURE_CANDIDATE, MEASURE_DEFAULT, PIN_WINNER

WORKERS = str(Path(__file__).parent / "runtime_profiler_workers.py")
pytestmark = pytest.mark.multiproc


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> list[dict]:
    """Three gloo ranks: the online tuner on one 64 KiB bin, then straggler detection with rank 1
    40 ms late (one launch for both)."""
    library = str(plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"))
    return launch(f"{WORKERS}:profiled_runtime", 3,
                  {"tune_steps": 22, "nbytes": 1 << 16, "detect_steps": 10, "late_rank": 1,
                   "late_ms": 40.0, "library": library, "rings": str(tmp_path_factory.mktemp("rings"))},
                  timeout_s=300)


def test_the_online_tuner_decides_from_the_profilers_gpu_times_and_repeats_its_trials(job):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from runtime_profiler_workers import BASE_US, FAST, JITTER, SLOW

    out = [o["tuning"] for o in job]
    assert all(o["profiled"] for o in out) and all(o["done"] for o in out)
    events = out[0]["events"]
    assert all(o["events"] == events for o in out)  # the same trials and decision on every rank
    trials: dict = {}
    for _, _, _, ended in events:
        if ended is not None:
            trials.setdefault(ended[1], []).append(ended[2])
    low, high = BASE_US * FAST * (1 - JITTER), BASE_US * SLOW * (1 + JITTER)
    assert all(low <= t <= high for ts in trials.values() for t in ts)  # the profiler's, not gloo's
    default = trials.pop(None)
    assert statistics.median(default) == pytest.approx(BASE_US, rel=JITTER)
    kinds = [k for _, k, _, _ in events]
    assert kinds.count(MEASURE_DEFAULT) >= 2 and MEASURE_CANDIDATE in kinds
    final_kind, final = events[-1][1], events[-1][2]
    if any(c.protocol == 2 for c in trials):  # a Simple candidate was proposed: 30 % faster
        assert final_kind == PIN_WINNER and final.protocol == 2 and len(trials[final]) >= 2
    else:
        assert final_kind == KEEP_DEFAULT


def test_straggler_detection_takes_the_ranks_gpu_times_from_the_profiler(job):
    """The runtime's own arrival timing is stubbed to see nothing: only the profiler's GPU times
    (matched across ranks by NCCL's seq) can find the late rank."""
    histories = [o["history"] for o in job]
    assert all(h == histories[0] for h in histories)
    step, straggler, delay_us = histories[0][-1]
    assert straggler == 1 and 30_000 < delay_us < 80_000, histories[0]
