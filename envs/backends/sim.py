"""The simulator as a backend: every call is timed by :mod:`dynamiccl.decisions`.

The simulator is deterministic, so the backend is a pure function of (scenario, action) and can hand
the environment the whole action-time vector; that is what makes the oracle and 20 k steps/s
possible. NCCL's default is timed by the same simulator as every other choice (``decisions``
guarantees it), so the reward compares like with like.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from dynamiccl import decisions
from dynamiccl.envs.backends.base import Measurement
from dynamiccl.system.scenario import Scenario


def forced_decision(scenario: Scenario, constraints: decisions.KnobConstraints
                    ) -> decisions.TimedConfig:
    """What NCCL runs with these knobs pinned, timed by the simulator. A pin NCCL cannot honour in
    this call (an algorithm the collective lacks) leaves NCCL's own choice, as the tuner plugin's
    cost table does: NCCL ignores an entry it has marked unusable."""
    try:
        return decisions.nccl_default(scenario, constraints)
    except ValueError:
        return decisions.nccl_default(scenario)


class SimBackend:
    """Times collectives on the simulator; ``cache_size`` bounds the per-scenario memo."""

    name = "sim"

    def __init__(self, cache_size: int = 65536) -> None:
        self._memo: OrderedDict[Scenario, tuple[np.ndarray, float]] = OrderedDict()
        #: id(scenario) -> (scenario, entry): episodes reuse one Scenario object per repeated call,
        #: and an identity check is much cheaper than hashing the whole topology every step.
        self._by_id: dict[int, tuple[Scenario, tuple[np.ndarray, float]]] = {}
        self._cache_size = cache_size

    def _timed(self, scenario: Scenario) -> tuple[np.ndarray, float]:
        """(every action's time, NCCL default's time) of ``scenario``."""
        known = self._by_id.get(id(scenario))
        if known is not None and known[0] is scenario:  # the memo keeps it alive: id not reused
            return known[1]
        entry = self._memo.get(scenario)
        if entry is None:
            entry = (decisions.action_times(scenario), decisions.nccl_default(scenario).time_us)
            self._memo[scenario] = entry
            if len(self._memo) > self._cache_size:
                self._memo.popitem(last=False)
        if len(self._by_id) >= self._cache_size:
            self._by_id.clear()
        self._by_id[id(scenario)] = (scenario, entry)
        return entry

    def action_times(self, scenario: Scenario) -> np.ndarray:
        return self._timed(scenario)[0]

    def measure(self, scenario: Scenario, action: int) -> Measurement:
        times, default_us = self._timed(scenario)
        time_us = float(times[action])
        if not math.isfinite(time_us):
            time_us = default_us  # an invalid choice: NCCL falls back to its own pick
        return observed(scenario, time_us, default_us)

    def measure_forced(self, scenario: Scenario, constraints: decisions.KnobConstraints
                       ) -> Measurement:
        _, default_us = self._timed(scenario)
        return observed(scenario, forced_decision(scenario, constraints).time_us, default_us)


def observed(scenario: Scenario, time_us: float, default_us: float) -> Measurement:
    """A model sees the scenario's straggler exactly as it is."""
    straggler = scenario.straggler_rank if scenario.has_straggler else None
    delay = scenario.straggler_delay_us if scenario.has_straggler else 0.0
    return Measurement(time_us, default_us, straggler, delay)
