"""The honest reference points every learned policy is judged against.

* ``nccl_default`` – what NCCL picks by itself (its cost model, timed by the simulator).
* ``oracle`` – the exhaustive best action per state on the simulator: the ceiling.
* ``static_best`` – the one configuration best on average over the training suite (geometric
  mean of its speedup over NCCL), i.e. what a careful engineer setting ``NCCL_ALGO``/``NCCL_PROTO``
  once for the whole cluster would get. Where that configuration cannot run, NCCL's own choice
  stands, as it would in real life.
* ``random`` – a uniformly random valid action (seeded): the floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policy import (
    Choice,
    allowed_actions,
    nearest_valid_action,
    require_scenario,
    scenario_mask,
)
from dynamiccl.knobs import ACTION_INDEX, ACTIONS, EXPORTABLE_MASK

if TYPE_CHECKING:
    from dynamiccl.scenario import Scenario
    from dynamiccl.topology import Topology


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

    def choose(self, scenario: Scenario, *, deployable: bool = False) -> Choice:
        d = decisions.nccl_default(scenario)
        return Choice(d.config, d.time_us)


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


def static_best_action(scenarios: Iterable[Scenario], *, deployable: bool = False) -> int:
    """The action with the best geometric-mean speedup over NCCL across ``scenarios``.

    A scenario where the action is invalid counts as NCCL's own time (speedup 1), because that is
    what a fixed ``NCCL_ALGO``/``NCCL_PROTO`` setting falls back to there.
    """
    total = np.zeros(len(ACTIONS))
    count = 0
    for scenario in scenarios:
        times = decisions.action_times(scenario)
        t_def = decisions.nccl_default(scenario).time_us
        with np.errstate(divide="ignore"):
            gain = np.where(np.isfinite(times), np.log(t_def / times), 0.0)
        total += gain
        count += 1
    if count == 0:
        raise ValueError("static_best needs at least one training scenario")
    if deployable:
        total = np.where(EXPORTABLE_MASK, total, -np.inf)
    return int(np.argmax(total))


def training_scenarios(suite: str = "train", topology: Topology | None = None) -> list[Scenario]:
    """Every call of the training suite, optionally moved onto ``topology``."""
    from dynamiccl.envs.workloads import load_suite

    scenarios = [s for entry in load_suite(suite) for s in entry.scenarios]
    if topology is not None:
        scenarios = [_retarget(s, topology) for s in scenarios]
    return scenarios


class StaticBestPolicy:
    """One fixed configuration everywhere it is valid; NCCL's own choice elsewhere."""

    name = "static_best"

    def __init__(self, action: int, deployable: bool = False) -> None:
        self.action = int(action)
        self.deployable = deployable

    @classmethod
    def fit(cls, scenarios: Iterable[Scenario], *, deployable: bool = False) -> StaticBestPolicy:
        return cls(static_best_action(scenarios, deployable=deployable), deployable)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        mask = allowed_actions(scenario, action_mask, self.deployable)
        return self.action if mask[self.action] else nccl_action(scenario, mask)

    def choose(self, scenario: Scenario, *, deployable: bool = False) -> Choice:
        if scenario_mask(scenario, deployable=deployable)[self.action]:
            return Choice(ACTIONS[self.action], float(decisions.action_times(scenario)[self.action]))
        d = decisions.nccl_default(scenario)
        return Choice(d.config, d.time_us)


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
