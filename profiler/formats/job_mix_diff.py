"""Two job mixes side by side: what a policy changed in a job, call kind by call kind.

``dynamiccl profile job`` writes a job's collectives as NCCL ran them (:mod:`job_mix`). Run once
with NCCL's default and once with a policy, the two mixes say per (collective, size, ranks, nodes)
what NCCL ran on each side (the pair and channels), the GPU time per call on each side (median,
with the p10..p90 spread) and how much of the job's collective time the kind holds; the totals say
what the policy did to the job's collective time as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynamiccl.profiler.formats.job_mix import MixEntry

Key = tuple[str, int, int, int]


@dataclass(frozen=True)
class DiffRow:
    collective: str
    nbytes: int
    nranks: int
    nnodes: int
    a: MixEntry | None
    b: MixEntry | None

    @property
    def ratio(self) -> float | None:
        """B's median time per call over A's (None where either side lacks the kind)."""
        if self.a is None or self.b is None or self.a.record.time_us <= 0:
            return None
        return self.b.record.time_us / self.a.record.time_us

    @property
    def beyond_spread(self) -> bool:
        """B's p10..p90 and A's do not overlap: the change is more than the calls' own spread."""
        if self.a is None or self.b is None:
            return False
        return self.b.p90_us < self.a.p10_us or self.b.p10_us > self.a.p90_us

    @staticmethod
    def choice(e: MixEntry | None) -> str:
        return "-" if e is None else f"{e.record.nccl_pick}/{e.nccl_channels}ch"

    def to_json(self) -> dict:
        def side(e: MixEntry | None) -> dict | None:
            return None if e is None else {
                "calls": e.calls, "time_us": round(e.record.time_us, 3), "p10_us": e.p10_us,
                "p90_us": e.p90_us, "total_us": round(e.total_us, 3), "nccl": self.choice(e)}
        return {"collective": self.collective, "nbytes": self.nbytes, "ranks": self.nranks,
                "nodes": self.nnodes, "a": side(self.a), "b": side(self.b),
                "ratio": None if self.ratio is None else round(self.ratio, 4),
                "beyond_spread": self.beyond_spread}


def _key(e: MixEntry) -> Key:
    r = e.record
    return (r.collective, r.nbytes, r.nranks, r.nnodes or 0)


def _merged(entries: list[MixEntry]) -> dict[Key, MixEntry]:
    """One entry per kind: a kind NCCL ran with several choices keeps the one with most time."""
    out: dict[Key, MixEntry] = {}
    for e in entries:
        k = _key(e)
        if k not in out or e.total_us > out[k].total_us:
            out[k] = e
    return out


def diff(a: list[MixEntry], b: list[MixEntry]) -> list[DiffRow]:
    """Every kind of call in either mix, ordered by collective, ranks and size."""
    ma, mb = _merged(a), _merged(b)
    return [DiffRow(*k, ma.get(k), mb.get(k)) for k in sorted(set(ma) | set(mb),
                                                              key=lambda k: (k[0], k[2], k[3], k[1]))]


def totals(a: list[MixEntry], b: list[MixEntry]) -> tuple[float, float]:
    """Each job's time in collectives, µs."""
    return sum(e.total_us for e in a), sum(e.total_us for e in b)
