"""Which StragglAR completion schedule the runtime runs for a world size, and whether it pays.

The schedules themselves (Algorithm 1 for powers of two, a greedy construction for other n up to
:data:`~dynamiccl.simulator.stragglar_schedule.GREEDY_MAX_RANKS`) live with the simulator, which
charges their rounds, so the runtime's decision table and the job agree on StragglAR's cost. Every
schedule is replayed by ``check_schedule`` before use, and depends on n only, so every rank computes
the same one without talking to the others. Where the rounds would move more bytes than a ring
all-reduce once the straggler is there (n = 2, 3, 5), or no schedule is built (a non-power-of-two
world above that bound), :func:`worthwhile` says so and the runtime keeps NCCL's all-reduce (the
stated fallback).
"""

from __future__ import annotations

from functools import lru_cache

from dynamiccl.simulator.stragglar_schedule import GREEDY_MAX_RANKS, Matchings, has_schedule, schedule


@lru_cache(maxsize=64)
def matchings_for(n: int) -> Matchings:
    """The verified completion schedule for ``n`` ranks, straggler = rank n − 1 (n ≥ 2)."""
    matchings = schedule(n)
    if matchings is None:
        raise ValueError(f"no StragglAR schedule is built for {n} ranks (a non-power-of-two world "
                         f"above {GREEDY_MAX_RANKS} ranks); the runtime keeps NCCL's all-reduce there")
    return matchings


def worthwhile(n: int) -> bool:
    """True when a schedule exists and its rounds move less than a ring all-reduce once the
    straggler is there: rounds · S/(n−1) < 2(n−1)/n · S."""
    return has_schedule(n) and len(matchings_for(n)) * n < 2 * (n - 1) ** 2
