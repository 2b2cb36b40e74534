"""StragglAR and hierarchical all-reduce against all_reduce, in real gloo processes (no GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.runtime.matchings import matchings_for, worthwhile
from dynamiccl.runtime.stragglar import _chunked
from dynamiccl.simulator.stragglar_schedule import check_schedule, rounds

WORKERS = str(Path(__file__).parent / "runtime_workers.py")
#: Relative error allowed for a float sum added up in another order (bfloat16 keeps 8 bits).
TOLERANCE = {"torch.float32": 1e-5, "torch.bfloat16": 3e-2}


@pytest.mark.parametrize("n", range(2, 17))
def test_every_schedule_is_verified_and_powers_of_two_take_the_papers_rounds(n):
    schedule = matchings_for(n)
    check_schedule(n, schedule)
    assert len(schedule) == rounds(n)  # the simulator charges the rounds the runtime runs
    if n >= 4 and n & (n - 1) == 0:
        assert len(schedule) == n + n.bit_length() - 3


def test_no_schedule_is_built_where_building_it_would_stall_the_job_start():
    assert len(matchings_for(63)) == rounds(63)
    assert len(matchings_for(128)) == rounds(128) == 128 + 7 - 2
    assert not worthwhile(96)  # a non-power of two above 64: answered without building anything
    with pytest.raises(ValueError, match="no StragglAR schedule is built for 96 ranks"):
        matchings_for(96)


def test_schedules_that_move_more_than_a_ring_are_not_used():
    assert [n for n in range(2, 9) if not worthwhile(n)] == [2, 3, 5]


def test_a_bucket_no_chunk_count_divides_is_reduced_in_its_own_memory_on_gloo():
    bucket = torch.arange(4_198_400, dtype=torch.float32)  # the benchmark's 16 MiB: not a multiple of 3
    buf, chunks = _chunked(bucket, 3, equal=False)
    assert buf.data_ptr() == bucket.data_ptr()  # no padded copy of 16 MiB and no copy back
    assert [c.numel() for c in chunks] == [1_399_467, 1_399_467, 1_399_466]
    assert torch.equal(torch.cat(chunks), bucket)
    transposed = bucket.view(2, -1).t()  # another layout (a copy) is cut at the same places
    assert [c.numel() for c in _chunked(transposed, 3, equal=False)[1]] == [c.numel() for c in chunks]
    padded, equal = _chunked(bucket, 3, equal=True)  # NCCL's reduce-scatter wants equal chunks
    assert padded.data_ptr() != bucket.data_ptr() and {c.numel() for c in equal} == {1_399_467}


#: World size -> hierarchical layouts (ranks per node, chunks). The sizes cover StragglAR's punctual
#: ranks odd and even (2, 3, 4, 5, 7) and nodes of one rank, of all ranks, and of 2, 3 and 4 ranks
#: with one chunk or several (7 ranks added nothing 5 does not: 6 punctual ranks, the same layouts).
LAYOUTS = {3: [(1, 1), (3, 2)], 4: [(2, 1), (2, 3)], 5: [(1, 2), (5, 1)], 6: [(2, 1), (3, 2)],
           8: [(4, 1), (2, 2)]}


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("n", sorted(LAYOUTS))
def test_stragglar_and_hierarchical_equal_all_reduce(n):
    stragglers = sorted({0, n // 2, n - 1})
    results = launch(f"{WORKERS}:compare_with_all_reduce", n,
                     {"stragglers": stragglers, "layouts": LAYOUTS[n]}, timeout_s=300)[0]
    # 11 cases summed by each op, the 7 floating ones also averaged (StragglAR and each layout)
    assert len(results) == 11 * (len(stragglers) + 2) + 7 * (1 + len(LAYOUTS[n]))
    assert sum("average" in r["case"] for r in results) == 7 * 3
    sizes = {(r["size"], r["dtype"]) for r in results}
    assert {(1 << 20, "torch.float32"), ((1 << 18) + 3, "torch.int64")} <= sizes  # DDP-sized buckets
    for r in results:
        assert r["identical"], r["case"]  # every rank holds the same bits (DDP replicas agree)
        if r["float"]:
            assert r["rel_err"] <= TOLERANCE[r["dtype"]], r
        else:
            assert r["exact"], r["case"]
