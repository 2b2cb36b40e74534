"""Online black-box tuners: the comparison a skeptic asks for.

Both tuners learn only from the times they measure (``update``), as a tuner inside a real job
would; they never look at the simulator's cost tables. They keep one state per *context* – the
communicator's system, the collective and the message-size bin (a power of two) – because that is
what a tuner plugin can key on at call time.

* :class:`CoordinateDescentTuner` follows AutoCCL's idea: start from NCCL's own pick, then vary one
  knob at a time (algorithm/hierarchy, protocol, channels, scheduling/chunks) while holding the
  others, move to the best point found, and repeat until a full round brings no improvement or the
  call budget is spent.
* :class:`UcbBandit` treats every valid action as an arm and plays UCB1 on the negative log time
  per context: it needs no structure but pays for trying arms. With ``safety_gate`` (a bandit
  tuner plugin's "zero regressions" gate uses 5 %) it settles on its best arm only when that arm's
  mean time beats NCCL's own pick by that fraction, and keeps NCCL's pick otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.agents.policies.baselines import nccl_action
from dynamiccl.agents.policies.policy import allowed_actions, require_scenario, scenario_mask
from dynamiccl.envs.observation import size_bin
from dynamiccl.system.knobs import ALGO_HIERARCHY_PAIRS, ActionColumns

if TYPE_CHECKING:
    from dynamiccl.system.scenario import Scenario
    from dynamiccl.system.topology import Topology

_PAIR_ID = {pair: i for i, pair in enumerate(ALGO_HIERARCHY_PAIRS)}
#: The knob coordinates the descent walks, as one integer column each over the action table.
COORDINATES: dict[str, np.ndarray] = {
    "algorithm": np.array([_PAIR_ID[(a, h)] for a, h in zip(ActionColumns.algorithm,
                                                          ActionColumns.hierarchy, strict=True)]),
    "protocol": ActionColumns.protocol,
    "channels": ActionColumns.channels,
    "schedule": ActionColumns.schedule * 16 + ActionColumns.chunks,
}
_LOG_CHANNELS = np.log2(ActionColumns.channels)


def context_key(scenario: Scenario) -> tuple[str, int, int]:
    """(system, collective, size bin): what a tuner sees when NCCL asks it about a call."""
    return _fingerprint(scenario.topology), int(scenario.collective), size_bin(scenario.nbytes)


@lru_cache(maxsize=256)
def _fingerprint(topology: Topology) -> str:
    """The system's fingerprint, hashed once per system (online tuners ask at every call)."""
    return topology.fingerprint()


def _distance_to(action: int) -> np.ndarray:
    """How far every table entry is from ``action`` in knob space (used to fill in the other knobs
    when one coordinate changes and the old values are not valid with the new one)."""
    d = np.zeros(len(_LOG_CHANNELS))
    for name, col in COORDINATES.items():
        if name == "channels":
            d += 0.1 * np.abs(_LOG_CHANNELS - _LOG_CHANNELS[action])
        else:
            d += (col != col[action]).astype(float)
    return d


def coordinate_candidates(action: int, coordinate: str, mask: np.ndarray) -> list[int]:
    """One allowed action per value of ``coordinate``, each closest to ``action`` elsewhere."""
    col = COORDINATES[coordinate]
    dist = np.where(mask, _distance_to(action), np.inf)
    out = []
    for value in np.unique(col[mask]):
        if value == col[action]:
            continue
        cand = np.where(col == value, dist, np.inf)
        out.append(int(np.argmin(cand)))
    return out


@dataclass
class _DescentState:
    current: int
    measured: dict[int, float] = field(default_factory=dict)
    pending: list[int] = field(default_factory=list)
    coordinate: int = 0
    stale_coordinates: int = 0
    calls: int = 0
    done: bool = False

    def best(self) -> int:
        return min(self.measured, key=self.measured.__getitem__) if self.measured else self.current


class CoordinateDescentTuner:
    """AutoCCL-style per-context coordinate descent with a budget of measured calls."""

    name = "coordinate_descent"

    def __init__(self, budget: int = 64, deployable: bool = False) -> None:
        if budget < 1:
            raise ValueError(f"budget must be at least 1 call, got {budget}")
        self.budget = budget
        self.deployable = deployable
        self._states: dict[tuple, _DescentState] = {}

    def reset(self) -> None:
        self._states.clear()

    def _state(self, scenario: Scenario, mask: np.ndarray) -> _DescentState:
        key = context_key(scenario)
        if key not in self._states:
            self._states[key] = _DescentState(current=nccl_action(scenario, mask))
        return self._states[key]

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        mask = allowed_actions(scenario, action_mask, self.deployable)
        state = self._state(scenario, mask)
        if not state.measured:
            return state.current
        self._plan(state, mask)
        # Once done (budget spent or converged) keep the fastest measured point, even when the
        # budget ran out with candidates of a coordinate still pending: those were never measured.
        choice = state.best() if state.done or not state.pending else state.pending[0]
        return choice if mask[choice] else state.current

    def _plan(self, state: _DescentState, mask: np.ndarray) -> None:
        """Fills ``pending`` with the next coordinate's unmeasured points, or finishes."""
        names = list(COORDINATES)
        while not state.pending and not state.done:
            if state.calls >= self.budget or state.stale_coordinates >= len(names):
                state.done = True
                return
            candidates = coordinate_candidates(state.current, names[state.coordinate], mask)
            state.pending = [a for a in candidates if a not in state.measured]
            if not state.pending:
                self._finish_coordinate(state)

    def _finish_coordinate(self, state: _DescentState) -> None:
        best = state.best()
        state.stale_coordinates = 0 if best != state.current else state.stale_coordinates + 1
        state.current = best
        state.coordinate = (state.coordinate + 1) % len(COORDINATES)

    def update(self, scenario: Scenario, action: int, time_us: float) -> None:
        mask = scenario_mask(scenario, deployable=self.deployable)
        state = self._state(scenario, mask)
        state.calls += 1
        previous = state.measured.get(action, math.inf)
        state.measured[action] = min(previous, float(time_us))
        if action in state.pending:
            state.pending.remove(action)
            if not state.pending:
                self._finish_coordinate(state)
        if state.calls >= self.budget:
            state.done = True


@dataclass
class _ArmStats:
    counts: np.ndarray
    sums: np.ndarray
    order: np.ndarray
    #: NCCL's own pick (the arm the safety gate falls back to).
    nccl: int

    @property
    def total(self) -> int:
        return int(self.counts.sum())


class UcbBandit:
    """UCB1 per context over the allowed actions, reward = −log(measured time).

    The exploration bonus is scaled by the spread of log times seen in the context, so the same
    constant works for 8-byte and 4-GiB calls. Untried arms are tried first, NCCL's pick leading and
    the rest in a seeded random order; once the budget is spent the best mean is exploited.
    """

    name = "bandit"

    def __init__(self, budget: int = 64, exploration: float = 1.0, seed: int = 0,
                 deployable: bool = False, safety_gate: float | None = None) -> None:
        if budget < 1:
            raise ValueError(f"budget must be at least 1 call, got {budget}")
        self.budget = budget
        self.safety_gate = safety_gate
        self.exploration = exploration
        self.deployable = deployable
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._stats: dict[tuple, _ArmStats] = {}

    def reset(self) -> None:
        self._stats.clear()
        self._rng = np.random.default_rng(self.seed)

    def _arms(self, scenario: Scenario, mask: np.ndarray) -> _ArmStats:
        key = context_key(scenario)
        if key not in self._stats:
            n = len(mask)
            order = self._rng.permutation(n).astype(float)
            order[nccl_action(scenario, mask)] = -1.0
            self._stats[key] = _ArmStats(np.zeros(n), np.zeros(n), order,
                                         nccl_action(scenario, mask))
        return self._stats[key]

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        mask = allowed_actions(scenario, action_mask, self.deployable)
        arms = self._arms(scenario, mask)
        tried = mask & (arms.counts > 0)
        means = np.where(tried, arms.sums / np.maximum(arms.counts, 1), -np.inf)
        if arms.total >= self.budget and tried.any():
            return self._settle(arms, means)
        untried = mask & (arms.counts == 0)
        if untried.any():
            return int(np.argmin(np.where(untried, arms.order, np.inf)))
        spread = max(float(means[tried].max() - means[tried].min()), 0.05)
        bonus = self.exploration * spread * np.sqrt(2.0 * math.log(arms.total) / arms.counts[tried])
        scores = np.full(len(mask), -np.inf)
        scores[tried] = means[tried] + bonus
        return int(np.argmax(scores))

    def _settle(self, arms: _ArmStats, means: np.ndarray) -> int:
        """The arm to keep once the budget is spent: the best mean, gated against NCCL's."""
        best = int(np.argmax(means))
        if self.safety_gate is None or arms.counts[arms.nccl] == 0:
            return best
        gain = means[best] - means[arms.nccl]  # log-time advantage over NCCL's pick
        return best if gain > math.log1p(self.safety_gate) else arms.nccl

    def update(self, scenario: Scenario, action: int, time_us: float) -> None:
        arms = self._arms(scenario, scenario_mask(scenario, deployable=self.deployable))
        arms.counts[action] += 1
        arms.sums[action] += -math.log(max(float(time_us), 1e-9))
