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
from dynamiccl.scenario import Scenario


class SimBackend:
    """Times collectives on the simulator; ``cache_size`` bounds the NCCL-default memo."""

    name = "sim"

    def __init__(self, cache_size: int = 65536) -> None:
        self._default_us: OrderedDict[Scenario, float] = OrderedDict()
        self._cache_size = cache_size

    def action_times(self, scenario: Scenario) -> np.ndarray:
        return decisions.action_times(scenario)

    def default_time_us(self, scenario: Scenario) -> float:
        """NCCL's own pick timed by the simulator (memoised: NCCL's model is not vectorised)."""
        cached = self._default_us.get(scenario)
        if cached is None:
            cached = decisions.nccl_default(scenario).time_us
            self._default_us[scenario] = cached
            if len(self._default_us) > self._cache_size:
                self._default_us.popitem(last=False)
        return cached

    def measure(self, scenario: Scenario, action: int) -> Measurement:
        default_us = self.default_time_us(scenario)
        time_us = float(decisions.action_times(scenario)[action])
        if not math.isfinite(time_us):
            time_us = default_us  # an invalid choice: NCCL falls back to its own pick
        straggler = scenario.straggler_rank if scenario.has_straggler else None
        delay = scenario.straggler_delay_us if scenario.has_straggler else 0.0
        return Measurement(time_us, default_us, straggler, delay)
