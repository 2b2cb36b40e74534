"""Straggler analysis and the C2C step breakdown on synthetic timings with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.profiler.measure import straggler_detection
from dynamiccl.profiler.measure.c2c import simulator_c2c, step_breakdown
from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import load_topology


def _exec_times(rng, iters=200, ranks=4, t=500.0, late=2, delay=3000.0, persist=0.98):
    """Each rank's arrival→completion time when ``late`` arrives ``delay`` late ``persist`` of the time."""
    arrivals = rng.normal(0.0, 5.0, size=(iters, ranks))
    lateness = np.where(rng.random(iters) < persist, late, rng.integers(0, ranks, iters))
    arrivals[np.arange(iters), lateness] += delay
    done = arrivals.max(axis=1, keepdims=True) + t
    return done - arrivals, arrivals


def test_persistent_straggler_found_from_exec_times_and_from_arrivals():
    exec_us, arrivals = _exec_times(np.random.default_rng(0))
    for report in (straggler_detection.from_exec_times(exec_us),
                   straggler_detection.from_arrivals(arrivals, 500.0)):
        assert report.rank == 2 and report.last_fraction > 0.95
        assert report.delay_us == pytest.approx(3000.0, rel=0.02)
        assert report.delay_p10_us <= report.delay_us <= report.delay_p90_us
        assert sum(report.last_counts) == report.iterations == 200


def test_no_straggler_when_lateness_is_random_or_negligible():
    rng = np.random.default_rng(1)
    random_last, _ = _exec_times(rng, persist=0.0)
    assert straggler_detection.from_exec_times(random_last).rank is None
    tiny, _ = _exec_times(rng, delay=10.0)  # persistent but 2 % of a 500 µs collective
    report = straggler_detection.from_exec_times(tiny)
    assert report.rank is None and report.candidate == 2


def test_straggler_input_is_checked():
    with pytest.raises(ValueError, match=">= 2 ranks"):
        straggler_detection.from_exec_times(np.ones((10, 1)))


def test_step_breakdown_of_overlapping_buckets():
    # step 0..1000 µs; buckets in flight 300-500, 450-600 and 800-950; the last handed over at 800
    b = step_breakdown(0.0, 1000.0, [(300, 500, 10), (450, 600, 20), (800, 950, 30)])
    assert b.comm_us == pytest.approx(450.0)  # union: 300-600 and 800-950
    assert b.exposed_comm_us == pytest.approx(150.0)
    assert b.compute_us == pytest.approx(850.0) and b.comm_bytes == 60
    assert b.compute_to_comm == pytest.approx(850 / 450)
    assert b.comm_to_compute == pytest.approx(450 / 850)
    assert b.overlap_fraction == pytest.approx(1 - 150 / 450)
    idle = step_breakdown(0.0, 100.0, [])
    assert idle.compute_us == 100.0 and idle.compute_to_comm == float("inf")


def test_simulator_c2c_is_compute_in_units_of_the_simulators_reference_time():
    from dynamiccl.simulator.overlap import reference_time_us

    topo = load_topology("dgx_h100")
    nbytes = 256 * 2**20
    ref = float(reference_time_us(topo, np.array([int(Collective.ALLREDUCE)]),
                                  np.array([float(nbytes)]))[0])
    assert 100.0 < ref < 10_000.0  # 256 MiB over NVLink: hundreds of µs
    assert simulator_c2c(2 * ref, topo, Collective.ALLREDUCE, nbytes) == pytest.approx(2.0)
    assert simulator_c2c(0.0, topo, Collective.ALLREDUCE, nbytes) == 0.0
