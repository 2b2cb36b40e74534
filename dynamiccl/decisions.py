"""What NCCL would pick, what the best pick is, and how long each takes on the simulator.

This is where NCCL's own cost model (``dynamiccl.nccl_model``: what NCCL *believes*) meets the
physical simulator (``dynamiccl.simulator``: what it *costs*). Every baseline and every reward in
the project is computed here, so the NCCL default is judged by the same simulator as every other
choice and no policy gets a weakened baseline.

Knob constraints behave like NCCL's environment variables: a given algorithm/protocol restricts the
choice as ``NCCL_ALGO``/``NCCL_PROTO`` do, a given channel count pins the channel count as
``NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS`` would. Knobs NCCL has no variable for (hierarchy,
scheduling policy, active chunks, the simulator-only StragglAR) are applied on top of NCCL's pick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np

from dynamiccl.knobs import (
    ACTIONS,
    NCCL_ALGORITHM_HIERARCHY,
    Config,
    ConfigBatch,
    Hierarchy,
    Schedule,
    invalid_reason,
    valid_mask,
)
from dynamiccl.nccl import Algorithm, Collective, Protocol
from dynamiccl.nccl_model import NcclModel
from dynamiccl.scenario import Scenario
from dynamiccl.simulator import evaluate, simulate
from dynamiccl.topology import Topology


@dataclass(frozen=True)
class KnobConstraints:
    """Knobs the user pinned; None leaves the knob free."""

    algorithm: Algorithm | None = None
    protocol: Protocol | None = None
    channels: int | None = None
    hierarchy: Hierarchy | None = None
    schedule: Schedule | None = None
    chunks: int | None = None

    def __post_init__(self) -> None:
        # A scheduling policy or active chunks only exist for the hierarchical ring, so asking for
        # one implies it (an explicit contrary choice is kept and reported as invalid later).
        if self.schedule is not None or self.chunks is not None:
            if self.hierarchy is None:
                object.__setattr__(self, "hierarchy", Hierarchy.HIERARCHICAL)
            if self.algorithm is None:
                object.__setattr__(self, "algorithm", Algorithm.RING)

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def apply(self, config: Config) -> Config:
        return replace(config, **self.given())


NO_CONSTRAINTS = KnobConstraints()


@dataclass(frozen=True)
class TimedConfig:
    """A configuration with what the simulator says it costs: NCCL's pick or the best pick.

    (What a policy file makes NCCL do is :class:`dynamiccl.policy_file.Decision`.)
    """

    config: Config
    time_us: float
    time_after_straggler_us: float
    algbw_GBps: float
    busbw_GBps: float
    #: NCCL's own predicted time for this configuration (None where NCCL cannot run it).
    nccl_model_us: float | None = None


@lru_cache(maxsize=256)
def nccl_model_for(topology: Topology) -> NcclModel:
    """NCCL builds its tables once per communicator; so do we, once per system."""
    return NcclModel(topology)


def _timing_key(scenario: Scenario) -> Scenario:
    """The scenario as the simulator sees it: which rank is late does not change any time, only
    how late it is, so scenarios that differ in the straggler's rank share one cache entry."""
    if scenario.straggler_rank in (None, 0):
        return scenario
    return replace(scenario, straggler_rank=0)


def action_times(scenario: Scenario) -> np.ndarray:
    """Simulated time (µs, first arrival to completion) of every action; inf where invalid."""
    return _action_times(_timing_key(scenario))


def _simulated_times(scenario: Scenario, configs: ConfigBatch) -> np.ndarray:
    """One scenario, many configurations, one vectorized simulator call."""
    result = simulate(
        scenario.topology,
        np.array([int(scenario.collective)]),
        np.array([scenario.nbytes], dtype=np.float64),
        configs,
        straggler_delay_us=scenario.straggler_delay_us if scenario.has_straggler else 0.0,
        c2c=scenario.c2c,
    )
    return result.time_us[0]


@lru_cache(maxsize=65536)
def _action_times(scenario: Scenario) -> np.ndarray:
    all_times = _simulated_times(scenario, ConfigBatch.all_actions())
    times = np.where(valid_mask(scenario.topology, scenario.collective), all_times, np.inf)
    times.setflags(write=False)
    return times


def _decision(scenario: Scenario, config: Config) -> TimedConfig:
    """Times ``config`` on the simulator and asks NCCL's model what it would have predicted."""
    return _timed_decision(_timing_key(scenario), config)


@lru_cache(maxsize=65536)
def _timed_decision(scenario: Scenario, config: Config) -> TimedConfig:
    reason = invalid_reason(scenario.topology, scenario.collective, config)
    if reason:
        raise ValueError(f"{config.label()} cannot run {scenario.collective.name.lower()} on "
                         f"{scenario.topology.name}: {reason}")
    timing = evaluate(scenario, config)
    predicted = None
    if config.exportable:
        model = nccl_model_for(scenario.topology)
        predicted = model.predicted_us(scenario.collective, scenario.nbytes, config)
        predicted = predicted if math.isfinite(predicted) else None
    return TimedConfig(config, timing.time_us, timing.time_after_straggler_us, timing.algbw_GBps,
                    timing.busbw_GBps, predicted)


def _nccl_algorithms(constraints: KnobConstraints) -> set[Algorithm] | None:
    """The NCCL algorithms NCCL_ALGO would have to allow for the pinned knobs to make sense.

    NCCL cannot run StragglAR or a scheduled ring-over-ring; their nearest NCCL relative, the ring,
    sets the protocol and channels NCCL would use and the pinned knobs are applied on top.
    """
    algo = constraints.algorithm
    if algo is not None:
        return {Algorithm.RING if algo == Algorithm.STRAGGLAR else algo}
    if constraints.hierarchy is not None:
        return {a for a, h in NCCL_ALGORITHM_HIERARCHY.items() if h == constraints.hierarchy} | {
            Algorithm.RING}
    return None


def why_impossible(scenario: Scenario, constraints: KnobConstraints) -> str | None:
    """The most common reason no configuration satisfies ``constraints`` (None if some does)."""
    reasons = [invalid_reason(scenario.topology, scenario.collective, c)
               for c in candidate_configs(constraints)]
    if not reasons:  # the pinned knobs contradict each other (e.g. a flat tree)
        sketch = Config(constraints.algorithm or Algorithm.RING, constraints.protocol or Protocol.SIMPLE,
                        constraints.channels or 1)
        return invalid_reason(scenario.topology, scenario.collective, constraints.apply(sketch))
    if any(r is None for r in reasons):
        return None
    return max(set(reasons), key=reasons.count)


def nccl_default(scenario: Scenario, constraints: KnobConstraints = NO_CONSTRAINTS) -> TimedConfig:
    """NCCL's own pick under ``constraints``, timed by the simulator."""
    reason = why_impossible(scenario, constraints) if constraints.given() else None
    if reason:
        raise ValueError(reason)
    config = _nccl_choice(scenario.topology, scenario.collective, scenario.nbytes, constraints)
    return _decision(scenario, config)


@lru_cache(maxsize=65536)
def _nccl_choice(topology: Topology, collective: Collective, nbytes: int,
                 constraints: KnobConstraints) -> Config:
    """NCCL's pick depends only on what its cost model sees: the system, the call and the knobs."""
    choice = nccl_model_for(topology).choose(
        collective,
        nbytes,
        algorithms=_nccl_algorithms(constraints),
        protocols=None if constraints.protocol is None else {constraints.protocol},
        channels=constraints.channels,
    )
    return constraints.apply(choice.config)


def candidate_configs(constraints: KnobConstraints = NO_CONSTRAINTS) -> tuple[Config, ...]:
    """The actions that agree with every pinned knob; a pinned channel count replaces the table's
    levels (NCCL accepts any count 1..64). Order kept, duplicates removed."""
    pinned = {k: v for k, v in constraints.given().items() if k != "channels"}
    matching = [c for c in ACTIONS if all(getattr(c, k) == v for k, v in pinned.items())]
    if constraints.channels is not None:
        matching = [replace(c, channels=constraints.channels) for c in matching]
    return tuple(dict.fromkeys(matching))


def best(
    scenario: Scenario,
    constraints: KnobConstraints = NO_CONSTRAINTS,
    *,
    deployable: bool = False,
) -> TimedConfig:
    """The fastest valid configuration under ``constraints`` (the oracle when unconstrained).

    NCCL's own pick is a candidate too: its channel count need not be one of the action table's
    levels, and the best choice must never be slower than doing nothing.
    """
    if not constraints.given():
        times = action_times(scenario)
        if deployable:
            times = np.where(valid_mask(scenario.topology, scenario.collective, deployable=True),
                             times, np.inf)
        index = int(np.argmin(times))
        if not math.isfinite(times[index]):
            raise ValueError(f"no valid configuration for {scenario.collective.name.lower()} on "
                             f"{scenario.topology.name}")
        config = ACTIONS[index]
    else:
        candidates = [
            c for c in candidate_configs(constraints)
            if invalid_reason(scenario.topology, scenario.collective, c) is None
            and (c.exportable or not deployable)
        ]
        if not candidates:
            raise ValueError(why_impossible(scenario, constraints)
                             or "no exportable configuration satisfies the given knobs")
        times = _simulated_times(scenario, ConfigBatch.from_configs(candidates))
        config = candidates[int(np.argmin(times))]
    found = _decision(scenario, config)
    default = nccl_default(scenario, constraints)
    if default.time_us < found.time_us and (default.config.exportable or not deployable):
        return default
    return found
