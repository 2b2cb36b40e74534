"""A job's own time per size, which ``tune --workload job.jsonl`` weighs its report and plan by.

``dynamiccl profile job`` writes what a job spent in each collective and size
(:mod:`dynamiccl.profiler.formats.job_mix`). A tune decision covers a power-of-two size
(:data:`~dynamiccl.agents.shipping.tune.DECISION_SIZES`); each of the job's sizes counts at the
decision size nearest to it in log size, so :meth:`Workload.weight` is the share of the job's
collective time a decision governs. The plan multiplies what a launch is worth by it (a gain
where the job spends nothing is worth nothing to the job), and the report gives each row's share
and the saving the decisions predict for the job's collective time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from dynamiccl.agents.shipping.tune import DECISION_SIZES
from dynamiccl.profiler.formats.job_mix import MixEntry, read
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario

_LOW, _HIGH = int(math.log2(DECISION_SIZES[0])), int(math.log2(DECISION_SIZES[-1]))


def decision_size(nbytes: int) -> int:
    """The decision size nearest to ``nbytes`` in log size (clipped to the grid's ends)."""
    return 1 << min(max(round(math.log2(max(nbytes, 1))), _LOW), _HIGH)


class Workload:
    """The job's time per (collective, ranks, decision size), as shares of all its collective time."""

    def __init__(self, entries: Iterable[MixEntry], source: str = "") -> None:
        self.source = source
        entries = list(entries)
        #: The mix's lines as measurement records (what ``tune`` checks against the system).
        self.records = [e.record for e in entries]
        #: Why the mix lacks calls the job made ("" when it holds them all).
        self.partial = next((e.partial for e in entries if e.partial), "")
        time_us: dict[tuple[Collective, int, int], float] = defaultdict(float)
        self.shapes: set[tuple[int, int]] = set()
        self.collectives: set[Collective] = set()
        for e in entries:
            r = e.record
            time_us[(r.coll, r.nranks, decision_size(r.nbytes))] += e.total_us
            if r.nnodes:
                self.shapes.add((r.nnodes, r.nranks))
            self.collectives.add(r.coll)
        self.total_us = sum(time_us.values())
        self._share = {k: v / self.total_us for k, v in time_us.items()} if self.total_us else {}

    @classmethod
    def read(cls, path: str | Path) -> Workload:
        """The mix ``profile job`` wrote; ValueError (one line) for anything else."""
        return cls(read(path), str(path))  # not empty, and with time in its calls

    def weight(self, scenario: Scenario) -> float:
        """The share of the job's collective time the decision at ``scenario`` governs."""
        return self._share.get((scenario.collective, scenario.topology.nranks, scenario.nbytes), 0.0)

    def share(self, collective: Collective, nranks: int, low: int, high: int) -> float:
        """The share of the job's time in decision sizes ``low``..``high`` (a report row)."""
        return sum(v for (c, n, size), v in self._share.items()
                   if c == collective and n == nranks and low <= size <= high)

    def uncovered(self, scenarios: Iterable[Scenario]) -> float:
        """The share of the job's time no scenario decides (a shape or collective tune left out)."""
        covered = {(s.collective, s.topology.nranks, s.nbytes) for s in scenarios}
        return sum(v for k, v in self._share.items() if k not in covered)
