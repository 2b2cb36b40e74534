"""StragglAR (seed 004): the schedule generator, Table 1's formulas and the simulator's cost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynamiccl.simulator import evaluate, simulate
from dynamiccl.simulator.alphabeta import (
    beta_us_per_byte,
    broadcast_baseline_us,
    rhd_allreduce_us,
    ring_allreduce_us,
    stragglar_allreduce_us,
)
from dynamiccl.simulator.stragglar_schedule import Match, check_schedule, generate, rounds
from dynamiccl.system.knobs import Config, ConfigBatch, Hierarchy
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import topology_from_dict

GIB = 2**30


@pytest.mark.parametrize("n", [4, 8, 16, 32, 64])
def test_generated_schedule_has_n_plus_log_n_minus_2_rounds_and_completes(n: int) -> None:
    schedule = generate(n)
    assert len(schedule) == n + int(math.log2(n)) - 2 == rounds(n)
    check_schedule(n, schedule)  # raises on a double-booked rank or a chunk that never arrives
    for matches in schedule:
        ranks = [r for m in matches for r in (m.a, m.b)]
        assert len(ranks) == len(set(ranks))
    # every round moves one chunk each way at most, so the β cost is rounds · s/(n−1)
    assert all(m.send_a is not None for matches in schedule for m in matches)


def test_schedule_starts_by_pairing_rank_r_with_the_straggler() -> None:
    schedule = generate(8)
    for r in range(7):
        assert Match(r, 7, r, r, reduce=True) in schedule[r]
    assert Match(0, 3, 0, None) in schedule[1]  # phase 1: rank r-1 -> rank r-1+log n


def test_checker_rejects_broken_schedules() -> None:
    schedule = generate(8)
    with pytest.raises(ValueError, match="never arrive"):
        check_schedule(8, schedule[:-1])
    doubled = [list(m) for m in schedule]
    doubled[3].append(Match(doubled[3][1].a, 6, 0, None))
    with pytest.raises(ValueError, match="two matchings"):
        check_schedule(8, doubled)
    forged = [list(m) for m in schedule]
    forged[0].append(Match(0, 1, 5, None))
    with pytest.raises(ValueError):
        check_schedule(8, forged)


def test_generator_refuses_non_powers_of_two() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        generate(12)
    assert rounds(100) == 100 + 7 - 1  # documented assumption where no schedule is built


def test_table1_formulas_exactly() -> None:
    n, s, a, b = 16, 1e6, 2.0, 1e-4
    assert ring_allreduce_us(n, s, a, b) == pytest.approx(2 * 15 * 2.0 + 2 * 15 / 16 * 1e6 * 1e-4)
    assert rhd_allreduce_us(n, s, a, b) == pytest.approx(2 * 4 * 2.0 + 2 * 15 / 16 * 100.0)
    assert stragglar_allreduce_us(n, s, a, b) == pytest.approx(18 * 2.0 + 18 / 15 * 100.0)
    assert broadcast_baseline_us(n, s, a, b) == pytest.approx(4 * 2.0 + 4 * 100.0)


def test_nearly_2x_over_ring_at_256_ranks_1gib_alpha_3us_450gbps() -> None:
    # seed 004 §4.3 (published_points s004_sim256): "nearly 2x".
    beta = beta_us_per_byte(450.0)
    speedup = ring_allreduce_us(256, GIB, 3.0, beta) / stragglar_allreduce_us(256, GIB, 3.0, beta)
    assert 1.9 < speedup < 2.0


def _scale_up_domain(n: int, gbps: float = 450.0, lat: float = 3.0):
    return topology_from_dict({"name": f"nvswitch{n}", "gpu": {"arch": "sm90", "sms": 132},
                               "tiers": [{"name": "nvlink", "size": n, "fabric": "switch",
                                          "bandwidth_GBps": gbps, "latency_us": lat,
                                          "link": "nvlink"}]})


RING = Config(Algorithm.RING, Protocol.SIMPLE, 16)
SAR = Config(Algorithm.STRAGGLAR, Protocol.SIMPLE, 16)


def test_simulator_reproduces_the_2x_when_the_delay_masks_the_precondition() -> None:
    topo = _scale_up_domain(256)
    res = simulate(topo, int(Collective.ALLREDUCE), float(GIB), ConfigBatch.from_configs([RING, SAR]),
                   straggler_delay_us=1e6)
    ring_after, sar_after = res.time_after_straggler_us[0]
    assert 1.85 < ring_after / sar_after < 2.0


def test_bulk_synchronous_waits_for_the_straggler_and_stragglar_overlaps_it() -> None:
    topo = _scale_up_domain(8, gbps=300.0, lat=0.7)
    batch = ConfigBatch.from_configs([RING, SAR])
    size = 4 * GIB
    quiet = simulate(topo, 4, size, batch)
    late = simulate(topo, 4, size, batch, straggler_delay_us=20_000.0)
    # ring: every rank waits for the late one, then runs the whole all-reduce
    assert late.time_us[0, 0] == pytest.approx(20_000.0 + quiet.time_us[0, 0])
    assert late.time_after_straggler_us[0, 0] == pytest.approx(quiet.time_us[0, 0])
    # without a straggler StragglAR pays its precondition and loses to ring
    assert quiet.time_us[0, 1] > quiet.time_us[0, 0]
    # a delay longer than the precondition hides it: StragglAR wins from the first arrival
    assert late.time_us[0, 1] < late.time_us[0, 0]


def test_critical_delay_exists_between_no_delay_and_full_masking() -> None:
    # seed 004 §4.2: below a critical delay ring wins, above it StragglAR wins.
    topo = _scale_up_domain(8, gbps=300.0, lat=0.7)
    delays = np.linspace(0, 40_000, 81)
    res = simulate(topo, 4, 4 * GIB, ConfigBatch.from_configs([RING, SAR]), straggler_delay_us=delays)
    sar_wins = res.time_us[:, 1] < res.time_us[:, 0]
    assert not sar_wins[0] and sar_wins[-1]
    first = int(np.argmax(sar_wins))
    assert np.all(sar_wins[first:])  # one crossover


def test_evaluate_rejects_stragglar_with_odd_ranks() -> None:
    topo = _scale_up_domain(7)
    with pytest.raises(ValueError, match="even"):
        evaluate(Scenario(topo, Collective.ALLREDUCE, 1 << 20), SAR)
    assert Config(Algorithm.STRAGGLAR, Protocol.SIMPLE, 16, Hierarchy.FLAT) == SAR
