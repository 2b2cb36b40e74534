"""StragglAR completion schedules for every world size, each verified before it is used.

Powers of two ≥ 4 use seed 004's Algorithm 1 exactly
(:func:`dynamiccl.simulator.stragglar_schedule.generate`, n + log2 n − 2 rounds, Theorem 1).
The paper leaves other n open (appendix C: a matching per round, no bound), so for them the
schedule is generated here greedily: round r pairs rank r with the straggler while r < n − 1 (the
same symmetry breaking as Algorithm 1), and the other free ranks are matched greedily, the exchanges
that spread the oldest fully reduced chunk first (its propagation deadline comes first), then those
useful in both directions. That gives at most one round more than n + ⌈log2 n⌉ − 1 for n ≤ 8
(3, 7, 8, 10 rounds for n = 3, 5, 6, 7), and more for larger n. Where the rounds move more bytes
than a ring all-reduce would once the straggler is there (n = 2, 3, 5), :func:`worthwhile` says so
and the runtime keeps NCCL's all-reduce (the stated fallback).

Either way :func:`dynamiccl.simulator.stragglar_schedule.check_schedule` replays the schedule (one
matching per rank per round; every chunk reaches every rank, reduced exactly once) and a schedule
that fails is never returned. Schedules depend on n only, so every rank computes the same one
without talking to the others.
"""

from __future__ import annotations

from functools import lru_cache

from dynamiccl.simulator.stragglar_schedule import Match, Matchings, check_schedule, generate


@lru_cache(maxsize=64)
def matchings_for(n: int) -> Matchings:
    """The verified completion schedule for ``n`` ranks, straggler = rank n − 1 (n ≥ 2)."""
    if n < 2:
        raise ValueError(f"StragglAR needs at least 2 ranks, got {n}")
    power_of_two = n >= 4 and n & (n - 1) == 0
    schedule = generate(n) if power_of_two else _greedy(n)
    check_schedule(n, schedule)
    return schedule


def _greedy(n: int) -> Matchings:
    sigma = n - 1
    full: list[set[int]] = [set() for _ in range(n)]
    schedule: Matchings = []
    r = 0
    while any(len(f) < n - 1 for f in full):
        matches: list[Match] = []
        busy: set[int] = set()
        if r < n - 1:
            matches.append(Match(r, sigma, r, r, reduce=True))
            busy |= {r, sigma}
        free = [g for g in range(n) if g not in busy]
        pairs = []
        for i, u in enumerate(free):
            for v in free[i + 1:]:
                a, b = _oldest(full[u] - full[v]), _oldest(full[v] - full[u])
                useful = [c for c in (a, b) if c is not None]
                if useful:
                    pairs.append((min(useful), -len(useful), u, v, a, b))
        for _, _, u, v, a, b in sorted(pairs):
            if u not in busy and v not in busy:
                matches.append(Match(u, v, a, b))
                busy |= {u, v}
        if len(matches) == 0:
            raise RuntimeError(f"the StragglAR schedule for n = {n} stalled in round {r}")
        for m in matches:
            arrivals = ([(m.a, m.send_a), (m.b, m.send_a)] if m.reduce
                        else [(m.b, m.send_a), (m.a, m.send_b)])
            for dst, chunk in arrivals:
                if chunk is not None:
                    full[dst].add(chunk)
        schedule.append(matches)
        r += 1
    return schedule


def _oldest(candidates: set[int]) -> int | None:
    return min(candidates) if candidates else None


def worthwhile(n: int) -> bool:
    """True when the completion rounds move less than a ring all-reduce once the straggler is there:
    rounds · S/(n−1) < 2(n−1)/n · S."""
    return n >= 2 and len(matchings_for(n)) * n < 2 * (n - 1) ** 2
