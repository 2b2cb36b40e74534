"""The simulator's contract: shapes, conventions, validity, straggler, overlap and noise."""

from __future__ import annotations

import numpy as np
import pytest

from dynamiccl.simulator import SimResult, Timing, config_valid_mask, evaluate, simulate
from dynamiccl.system.knobs import ACTIONS, Config, ConfigBatch, Hierarchy, invalid_reason, valid_mask
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

ALL = ConfigBatch.all_actions()
H100x4 = load_topology("dgx_h100", nodes=4)
RING16 = Config(Algorithm.RING, Protocol.SIMPLE, 16)


def test_shapes_broadcasting_and_invalid_entries() -> None:
    res = simulate(H100x4, np.array([0, 2, 4]), 1e6, ALL)
    assert isinstance(res, SimResult)
    for field in (res.time_us, res.time_after_straggler_us, res.algbw_GBps, res.busbw_GBps):
        assert field.shape == (3, len(ACTIONS)) and field.dtype == np.float64
    for row, collective in enumerate((0, 2, 4)):
        valid = valid_mask(H100x4, Collective(collective))
        assert np.all(np.isinf(res.time_us[row, ~valid])) and np.all(res.busbw_GBps[row, ~valid] == 0)
        assert np.all(np.isfinite(res.time_us[row, valid])) and np.all(res.busbw_GBps[row, valid] > 0)


def test_config_valid_mask_matches_knobs_rules() -> None:
    for topo in (H100x4, load_topology("pcie_cluster"), load_topology("switch")):
        for collective in Collective:
            assert np.array_equal(config_valid_mask(topo, collective, ALL), valid_mask(topo, collective))
    odd = ConfigBatch.from_configs([Config(Algorithm.RING, Protocol.SIMPLE, 24),
                                    Config(Algorithm.NVLS, Protocol.LL, 24)])
    assert config_valid_mask(H100x4, Collective.ALLREDUCE, odd).tolist() == [True, False]


def test_vectorized_equals_a_per_pair_scalar_loop() -> None:
    rng = np.random.default_rng(3)
    coll = rng.integers(0, 5, 12)
    size = 2.0 ** rng.integers(3, 33, 12)
    delay = rng.choice([0.0, 500.0], 12)
    c2c = rng.choice([0.0, 1.5], 12)
    batch = simulate(H100x4, coll, size, ALL, delay, c2c)
    for b in range(12):
        for a in rng.choice(len(ACTIONS), 20, replace=False):
            one = simulate(H100x4, int(coll[b]), float(size[b]), ALL.take(np.array([a])),
                           float(delay[b]), float(c2c[b]))
            assert one.time_us[0, 0] == batch.time_us[b, a] or (
                np.isinf(one.time_us[0, 0]) and np.isinf(batch.time_us[b, a]))


def test_nccl_tests_bandwidth_definitions() -> None:
    n = H100x4.nranks
    res = simulate(H100x4, np.array([4, 2, 0]), 1e8, ConfigBatch.from_configs([RING16]))
    algbw = 1e8 / (res.time_after_straggler_us[:, 0] * 1e3)
    assert np.allclose(res.algbw_GBps[:, 0], algbw)
    assert np.allclose(res.busbw_GBps[:, 0] / res.algbw_GBps[:, 0], [2 * (n - 1) / n, (n - 1) / n, 1.0])


def test_allgather_size_is_the_whole_gathered_buffer() -> None:
    # nccl-tests' size column: an all-gather of S moves (n-1)/n S per rank, like half an all-reduce
    t = simulate(load_topology("dgx_h100"), np.array([2, 4]), 1e9, ConfigBatch.from_configs([RING16]))
    ratio = t.time_us[1, 0] / t.time_us[0, 0]
    assert 1.9 < ratio < 2.05


def test_straggler_semantics() -> None:
    res = simulate(H100x4, 4, 1e8, ALL, straggler_delay_us=np.array([0.0, 2000.0]))
    valid = valid_mask(H100x4, Collective.ALLREDUCE)
    bulk = valid & np.array([c.algorithm != Algorithm.STRAGGLAR for c in ACTIONS])
    assert np.array_equal(res.time_us[0], res.time_after_straggler_us[0])
    assert np.allclose(res.time_us[1, bulk], res.time_us[0, bulk] + 2000.0)
    assert np.allclose(res.time_after_straggler_us[1, bulk], res.time_us[0, bulk])


def test_best_channel_count_depends_on_compute_overlap() -> None:
    topo = load_topology("dgx_h100", nodes=2)
    rings = [Config(Algorithm.RING, Protocol.SIMPLE, ch) for ch in (1, 2, 4, 8, 16, 32, 64)]
    res = simulate(topo, 4, 256e6, ConfigBatch.from_configs(rings), c2c=np.array([0.0, 4.0]))
    quiet, busy = res.time_us
    assert quiet[-1] == pytest.approx(quiet.min())           # alone: 64 channels are (among) the best
    assert busy[-1] > 1.05 * busy.min()                      # beside compute they steal too many SMs
    assert rings[int(np.argmin(busy))].channels < 64
    assert np.all(res.time_us[1] > res.time_us[0])  # overlap only ever costs the collective time


def test_evaluate_matches_simulate_and_rejects_invalid() -> None:
    scen = Scenario(H100x4, Collective.ALLREDUCE, 1 << 24, straggler_rank=3, straggler_delay_us=100.0,
                    c2c=0.5)
    timing = evaluate(scen, RING16)
    assert isinstance(timing, Timing)
    res = simulate(H100x4, 4, float(1 << 24), ConfigBatch.from_configs([RING16]), 100.0, 0.5)
    assert timing.time_us == res.time_us[0, 0] and timing.busbw_GBps == res.busbw_GBps[0, 0]
    bad = Config(Algorithm.PAT, Protocol.SIMPLE, 8)
    with pytest.raises(ValueError) as err:
        evaluate(scen, bad)
    assert str(err.value) == invalid_reason(H100x4, Collective.ALLREDUCE, bad)
    # a straggler rank with no delay is no straggler
    assert evaluate(Scenario(H100x4, Collective.ALLREDUCE, 1 << 24, straggler_rank=1), RING16).time_us == \
        evaluate(Scenario(H100x4, Collective.ALLREDUCE, 1 << 24), RING16).time_us


def test_noise_is_off_by_default_and_seeded() -> None:
    a = simulate(H100x4, 4, 1e7, ALL).time_us
    assert np.array_equal(a, simulate(H100x4, 4, 1e7, ALL).time_us)
    n1 = simulate(H100x4, 4, 1e7, ALL, noise_sigma=0.1, rng=np.random.default_rng(7)).time_us
    n2 = simulate(H100x4, 4, 1e7, ALL, noise_sigma=0.1, rng=np.random.default_rng(7)).time_us
    finite = np.isfinite(a)
    assert np.array_equal(n1, n2) and not np.allclose(n1[finite], a[finite])
    assert 0.7 < np.median(n1[finite] / a[finite]) < 1.3


def test_bad_inputs_raise_readable_errors() -> None:
    with pytest.raises(ValueError, match="negative"):
        simulate(H100x4, 4, -1.0, ALL)
    with pytest.raises(ValueError, match="collective"):
        simulate(H100x4, 9, 1.0, ALL)
    assert Config(Algorithm.RING, Protocol.SIMPLE, 16, Hierarchy.FLAT) == RING16
