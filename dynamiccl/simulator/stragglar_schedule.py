"""StragglAR's schedule generator (seed 004, Algorithm 1) and a checker.

Setting (seed 004 §3.1): n = 2^k ranks, rank σ = n−1 is the persistent straggler, the buffer is cut
into n−1 chunks c_0 … c_{n−2}. Precondition: the punctual ranks have reduce-scattered among
themselves, so rank g < n−1 holds c_g reduced over everyone but σ.

Rounds (each rank in at most one matching per round, one chunk each way):

* straggler pairing: in round r < n−1 rank r and σ exchange c_r, which makes c_r fully reduced on
  both;
* phase 1 (0 < r < log n): rank r−1 sends the chunk it just completed to rank r−1+log n, every
  other holder of a completed chunk hands it to a rank above 2(log n − 1) that holds nothing, so
  that after round log n − 1 every punctual rank holds exactly one *active* chunk (completed, not yet
  everywhere) and c_j is held by 2^{log n − 1 − j} ranks;
* phase 2 (r ≥ log n): P_r = available holders of the oldest active chunk c_{r−log n}, Q_r = the
  holders of the others; P_r∖{r} and Q_r are matched one to one and exchange their active chunks,
  which completes c_{r−log n} and doubles every other active chunk. Ranks of the critical window
  (the next log n straggler partners g ∈ [r+1, r+log n−1] that are in P_r) are matched first, to a
  holder of c_{g−log n}, so that each of them is in P_g when its turn comes (the paper's invariant).
  From round n−1 on σ holds every chunk and joins Q_r sending c_{n−2}.

Theorem 1 of the paper: n + log2 n − 2 rounds. ``check_schedule`` replays a schedule and verifies
the matching property and that every chunk reaches every rank fully reduced.

The paper leaves other n open (appendix C: a matching per round, no bound), so for them
:func:`greedy` builds one: round r pairs rank r with the straggler while r < n − 1 (the same
symmetry breaking as Algorithm 1), and the other free ranks are matched greedily, the exchanges that
spread the oldest fully reduced chunk first (its propagation deadline comes first), then those useful
in both directions. That gives at most one round more than n + ⌈log2 n⌉ − 1 for n ≤ 8 (3, 7, 8, 10
rounds for n = 3, 5, 6, 7) and about 1.5 n beyond. Its cost grows as n^4 (0.4 s at 63 ranks,
minutes at a few hundred), so it is built only up to :data:`GREEDY_MAX_RANKS`. :func:`schedule` is
the one schedule per n that the runtime runs, and :func:`rounds` charges its length, so that the
simulator's StragglAR time is the runtime's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

#: The largest non-power-of-two world size a schedule is built for (see the module docstring).
GREEDY_MAX_RANKS = 64


@dataclass(frozen=True)
class Match:
    """Ranks ``a`` and ``b`` exchange chunks in one round (None: that side sends nothing).

    ``reduce``: the straggler pairing, where both sides combine their parts of one chunk.
    """

    a: int
    b: int
    send_a: int | None
    send_b: int | None
    reduce: bool = False


Matchings = list[list[Match]]


def rounds(n: int) -> int:
    """Rounds after the precondition: n + log2 n − 2 for power-of-two n (seed 004 Theorem 1), the
    length of :func:`schedule` for other n up to :data:`GREEDY_MAX_RANKS`.

    Beyond that no schedule is built (the runtime keeps NCCL's all-reduce); the simulator's research
    action charges n + ceil(log2 n) − 1 there, one round more than the power-of-two formula would
    give with the next exponent — a documented assumption, not a proven bound.
    """
    k = math.log2(n)
    if k.is_integer():
        return n + int(k) - 2
    if n <= GREEDY_MAX_RANKS:
        return len(greedy(n))
    return n + math.ceil(k) - 1


def has_schedule(n: int) -> bool:
    """Whether :func:`schedule` builds one for ``n`` ranks (without building it)."""
    return n >= 2 and (_power_of_two(n) or n <= GREEDY_MAX_RANKS)


def schedule(n: int) -> Matchings | None:
    """The completion schedule for ``n`` ranks (straggler = rank n − 1), verified; None where none
    is built (a non-power-of-two n above :data:`GREEDY_MAX_RANKS`)."""
    if n < 2:
        raise ValueError(f"StragglAR needs at least 2 ranks, got {n}")
    if not has_schedule(n):
        return None
    matchings = generate(n) if _power_of_two(n) else greedy(n)
    check_schedule(n, matchings)
    return matchings


def _power_of_two(n: int) -> bool:
    return n >= 4 and n & (n - 1) == 0


@lru_cache(maxsize=GREEDY_MAX_RANKS)
def greedy(n: int) -> Matchings:
    """A schedule for any n (see the module docstring); Algorithm 1 is shorter for powers of two."""
    sigma = n - 1
    full: list[set[int]] = [set() for _ in range(n)]
    out: Matchings = []
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
        if not matches:
            raise RuntimeError(f"the StragglAR schedule for n = {n} stalled in round {r}")
        for m in matches:
            arrivals = ([(m.a, m.send_a), (m.b, m.send_a)] if m.reduce
                        else [(m.b, m.send_a), (m.a, m.send_b)])
            for dst, chunk in arrivals:
                if chunk is not None:
                    full[dst].add(chunk)
        out.append(matches)
        r += 1
    return out


def _oldest(candidates: set[int]) -> int | None:
    return min(candidates) if candidates else None


def _log2_exact(n: int) -> int:
    k = n.bit_length() - 1
    if n < 4 or 1 << k != n:
        raise ValueError(f"the StragglAR generator needs a power-of-two n >= 4, got {n}")
    return k


def generate(n: int) -> Matchings:
    """The round-by-round matchings of Algorithm 1 for power-of-two ``n``."""
    logn = _log2_exact(n)
    holders: dict[int, set[int]] = {}   # active chunk -> punctual ranks holding it fully reduced
    schedule: Matchings = []
    for r in range(n + logn - 2):
        busy: set[int] = set()
        matches: list[Match] = []
        if r < n - 1:
            matches.append(Match(r, n - 1, r, r, reduce=True))
            busy |= {r, n - 1}
        if 0 < r < logn:
            matches += _phase1(r, logn, n, holders, busy)
        elif r >= logn:
            matches += _phase2(r, logn, n, holders, busy)
        schedule.append(matches)
        _apply(matches, holders, n)
    return schedule


def _active_of(holders: dict[int, set[int]]) -> dict[int, int]:
    return {h: c for c, hs in holders.items() for h in hs}


def _phase1(r: int, logn: int, n: int, holders: dict[int, set[int]], busy: set[int]) -> list[Match]:
    out = [Match(r - 1, r - 1 + logn, r - 1, None)]
    busy |= {r - 1, r - 1 + logn}
    have = _active_of(holders)
    fresh = [g for g in range(2 * (logn - 1) + 1, n - 1) if g not in have and g not in busy]
    for chunk in sorted(holders):
        for h in sorted(holders[chunk] - busy):
            g = fresh.pop(0)
            out.append(Match(h, g, chunk, None))
            busy |= {h, g}
    return out


def _phase2(r: int, logn: int, n: int, holders: dict[int, set[int]], busy: set[int]) -> list[Match]:
    sigma, last = n - 1, n - 2
    active = _active_of(holders)
    if r >= n - 1 and last in holders:  # sigma now holds everything and sends only c_{n-2}
        active[sigma] = last
    oldest = min(holders)
    p = sorted(h for h, c in active.items() if c == oldest and h not in busy)
    q = sorted(h for h, c in active.items() if c != oldest and h not in busy)
    out: list[Match] = []
    taken: set[int] = set()
    for g in p:  # critical window first: g must end up holding c_{g - log n} for its own turn
        if r < g < min(r + logn, n - 1):
            partner = next(h for h in q if h not in taken and active[h] == g - logn)
            out.append(Match(g, partner, oldest, g - logn))
            taken |= {g, partner}
    rest_p = [g for g in p if g not in taken]
    rest_q = [h for h in q if h not in taken]
    if len(rest_p) != len(rest_q):
        raise RuntimeError(f"round {r}: |P| = {len(rest_p)} but |Q| = {len(rest_q)}")
    out += [Match(g, h, oldest, active[h]) for g, h in zip(rest_p, rest_q, strict=True)]
    return out


def _apply(matches: list[Match], holders: dict[int, set[int]], n: int) -> None:
    for m in matches:
        if m.reduce:
            holders[m.send_a] = {m.a}
            continue
        for chunk, dst in ((m.send_a, m.b), (m.send_b, m.a)):
            if chunk is not None and dst != n - 1:
                holders[chunk].add(dst)
    for chunk in [c for c, hs in holders.items() if len(hs) == n - 1]:
        del holders[chunk]


def check_schedule(n: int, schedule: Matchings) -> None:
    """Replays ``schedule`` from the precondition; raises ValueError on the first violation."""
    sigma = n - 1
    full: list[set[int]] = [set() for _ in range(n)]
    for r, matches in enumerate(schedule):
        seen: set[int] = set()
        incoming: list[tuple[int, int]] = []
        for m in matches:
            if m.a in seen or m.b in seen or m.a == m.b:
                raise ValueError(f"round {r}: rank {m.a} or {m.b} is in two matchings")
            seen |= {m.a, m.b}
            if m.reduce:
                if sigma not in (m.a, m.b) or m.send_a != m.send_b:
                    raise ValueError(f"round {r}: a reduction pairs one rank with the straggler on one chunk")
                owner = m.a if m.b == sigma else m.b
                if m.send_a != owner:
                    raise ValueError(f"round {r}: rank {owner} reduces chunk {m.send_a} it does not own")
                incoming += [(m.a, m.send_a), (m.b, m.send_a)]
                continue
            for src, chunk, dst in ((m.a, m.send_a, m.b), (m.b, m.send_b, m.a)):
                if chunk is None:
                    continue
                if chunk not in full[src]:
                    raise ValueError(f"round {r}: rank {src} sends chunk {chunk} it does not hold reduced")
                incoming.append((dst, chunk))
        for dst, chunk in incoming:
            full[dst].add(chunk)
    missing = [(rank, c) for rank in range(n) for c in range(n - 1) if c not in full[rank]]
    if missing:
        raise ValueError(f"{len(missing)} (rank, chunk) pairs never arrive fully reduced, e.g. {missing[0]}")
