"""The honest reference points every learned policy is judged against.

* ``nccl_default`` – what NCCL picks by itself (its cost model, timed by the simulator).
* ``oracle`` – the exhaustive best action per state on the simulator: the ceiling.
* ``static_best`` – the one (algorithm, protocol) pair best on average over the training suite
  (geometric mean of its speedup over NCCL), i.e. what a careful engineer setting ``NCCL_ALGO`` and
  ``NCCL_PROTO`` once for the whole cluster gets: NCCL keeps choosing the channel count, and where
  the pair cannot run (tree for an allgather, LL128 where NCCL disables it) NCCL's own choice
  stands, as with ``NCCL_ALGO``'s per-collective form (``allreduce:tree``). Only NCCL algorithms
  qualify: no environment variable selects the simulator's ring-over-ring or StragglAR.
* ``random`` – a uniformly random valid action (seeded): the floor.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policies.policy import (
    allowed_actions,
    forced_action,
    nearest_valid_action,
    require_scenario,
    scenario_mask,
)
from dynamiccl.decisions import KnobConstraints
from dynamiccl.system.knobs import (
    ACTION_INDEX,
    NCCL_ALGORITHM_HIERARCHY,
    Algorithm,
    Config,
    Protocol,
    invalid_reason,
)

if TYPE_CHECKING:
    from dynamiccl.system.scenario import Scenario
    from dynamiccl.system.topology import Topology


def nccl_action(scenario: Scenario, mask: np.ndarray) -> int:
    """NCCL's pick as an action id: exact when the table has it, else the nearest allowed entry."""
    config = decisions.nccl_default(scenario).config
    index = ACTION_INDEX.get(config)
    if index is not None and mask[index]:
        return index
    return nearest_valid_action(config, mask)


class NcclDefaultPolicy:
    """NCCL's own choice. Scored through :meth:`choose`, so an off-table channel count is kept."""

    name = "nccl_default"

    def __init__(self, deployable: bool = False) -> None:
        self.deployable = deployable

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        return nccl_action(scenario, allowed_actions(scenario, action_mask, self.deployable))

    def force(self, scenario: Scenario) -> KnobConstraints:
        return KnobConstraints()


class OraclePolicy:
    """Exhaustive best valid action per state on the simulator (restricted to exportable actions
    in deployable mode): the ceiling no policy can beat on the simulator."""

    name = "oracle"

    def __init__(self, deployable: bool = False) -> None:
        self.deployable = deployable

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        if action_mask is None:
            return ACTION_INDEX[decisions.best(scenario, deployable=self.deployable).config]
        times = np.where(action_mask, decisions.action_times(scenario), np.inf)
        return int(np.argmin(times))


def _retarget(scenario: Scenario, topology: Topology) -> Scenario:
    """The same call on another system (the straggler keeps its relative position)."""
    if scenario.topology == topology:
        return scenario
    rank = scenario.straggler_rank
    if rank is not None:
        rank = rank * topology.nranks // scenario.topology.nranks
    return dataclasses.replace(scenario, topology=topology, straggler_rank=rank)


#: What NCCL_ALGO x NCCL_PROTO can express: every NCCL algorithm with every protocol.
NCCL_PAIRS: tuple[tuple[Algorithm, Protocol], ...] = tuple(
    (a, p) for a in sorted(NCCL_ALGORITHM_HIERARCHY) for p in Protocol)


def pair_constraints(scenario: Scenario, pair: tuple[Algorithm, Protocol]) -> KnobConstraints:
    """NCCL_ALGO/NCCL_PROTO pinned to ``pair`` where it can run this call, else nothing pinned."""
    algo, proto = pair
    probe = Config(algo, proto, 1, NCCL_ALGORITHM_HIERARCHY[algo])
    if invalid_reason(scenario.topology, scenario.collective, probe) is not None:
        return KnobConstraints()
    return KnobConstraints(algorithm=algo, protocol=proto)


def static_best_pair(scenarios: Iterable[Scenario]) -> tuple[Algorithm, Protocol] | None:
    """The (algorithm, protocol) pair with the best geometric-mean speedup over NCCL; None when no
    pair beats leaving both variables unset (which is what an engineer would then do).

    A call where the pair cannot run counts as NCCL's own time (speedup 1), because that is what a
    fixed ``NCCL_ALGO``/``NCCL_PROTO`` setting falls back to there.
    """
    counts = Counter(scenarios)
    if not counts:
        raise ValueError("static_best needs at least one training scenario")
    total = np.zeros(len(NCCL_PAIRS))
    for scenario, n in counts.items():
        t_def = decisions.nccl_default(scenario).time_us
        for i, pair in enumerate(NCCL_PAIRS):
            pinned = pair_constraints(scenario, pair)
            if pinned.given():
                total[i] += n * math.log(t_def / decisions.nccl_default(scenario, pinned).time_us)
    best = int(np.argmax(total))
    return NCCL_PAIRS[best] if total[best] > 0 else None


def training_scenarios(suite: str = "train", topology: Topology | None = None) -> list[Scenario]:
    """Every call of the training suite, optionally moved onto ``topology``."""
    from dynamiccl.envs.workloads import load_suite

    scenarios = [s for entry in load_suite(suite) for s in entry.scenarios]
    if topology is not None:
        scenarios = [_retarget(s, topology) for s in scenarios]
    return scenarios


class StaticBestPolicy:
    """``NCCL_ALGO``/``NCCL_PROTO`` set once to one pair; NCCL's own choice where it cannot run."""

    name = "static_best"

    def __init__(self, pair: tuple[Algorithm, Protocol] | None, deployable: bool = True) -> None:
        self.pair = None if pair is None else (Algorithm(pair[0]), Protocol(pair[1]))
        self.deployable = deployable

    @classmethod
    def fit(cls, scenarios: Iterable[Scenario], *, deployable: bool = True) -> StaticBestPolicy:
        return cls(static_best_pair(scenarios), deployable)

    @property
    def description(self) -> str:
        if self.pair is None:
            return "no NCCL_ALGO/NCCL_PROTO setting beat NCCL's own choice on the fit calls: none set"
        algo, proto = self.pair
        return f"NCCL_ALGO={algo.name.lower()} NCCL_PROTO={proto.name.lower()}"

    def force(self, scenario: Scenario) -> KnobConstraints:
        return KnobConstraints() if self.pair is None else pair_constraints(scenario, self.pair)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        mask = allowed_actions(scenario, action_mask, self.deployable)
        return forced_action(scenario, self.force(scenario), mask)


class RandomPolicy:
    """A uniformly random allowed action from a seeded generator."""

    name = "random"

    def __init__(self, seed: int = 0, deployable: bool = False) -> None:
        self.rng = np.random.default_rng(seed)
        self.deployable = deployable

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        if action_mask is None:
            action_mask = scenario_mask(require_scenario(self.name, scenario),
                                        deployable=self.deployable)
        allowed = np.flatnonzero(action_mask)
        if allowed.size == 0:
            raise ValueError("the action mask allows no action")
        return int(self.rng.choice(allowed))
