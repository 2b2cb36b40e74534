"""The project's online tuners behind the runtime's tuner protocol (``dynamiccl.runtime.tuning``).

The runtime knows size bins and NCCL ids, the tuners know scenarios and action ids; this adapter
translates. The scenario of a bin is the job's system (a topology of the job's size) at the bin's
lower edge, so the tuner keys one state per bin, as it would per call in the plugin. Only
deployable actions are offered (what NCCL can run when pinned). Exploration ends when the tuner
proposes an action it has already measured — it has moved on to exploiting — or after ``budget``
proposals.
"""

from __future__ import annotations

import numpy as np

from dynamiccl.runtime.tuning import Candidate, SizeBin
from dynamiccl.system.knobs import ACTIONS, Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology


class RuntimeTunerAdapter:
    """``propose``/``observe`` over a :class:`CoordinateDescentTuner` or :class:`UcbBandit`."""

    def __init__(self, tuner, topology: Topology, budget: int = 16) -> None:
        if not getattr(tuner, "deployable", False):
            raise ValueError("give the runtime a tuner built with deployable=True: a pinned choice must "
                             "be one NCCL can run")
        self.tuner, self.topology, self.budget = tuner, topology, budget
        self._measured: dict[SizeBin, set[int]] = {}
        self._proposed: dict[tuple[SizeBin, Candidate], int] = {}

    def _scenario(self, size_bin: SizeBin) -> Scenario:
        return Scenario(self.topology, Collective(size_bin.collective), size_bin.min_bytes)

    def propose(self, size_bin: SizeBin) -> Candidate | None:
        seen = self._measured.setdefault(size_bin, set())
        if len(seen) >= self.budget:
            return None
        action = int(self.tuner.act(np.zeros(0), scenario=self._scenario(size_bin)))
        if action in seen:
            return None
        config = ACTIONS[action]
        candidate = Candidate.of(config)
        self._proposed[(size_bin, candidate)] = action
        return candidate

    def observe(self, size_bin: SizeBin, candidate: Candidate, time_us: float) -> None:
        action = self._proposed[(size_bin, candidate)]
        self._measured.setdefault(size_bin, set()).add(action)
        self.tuner.update(self._scenario(size_bin), action, time_us)
