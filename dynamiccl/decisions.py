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
    Algorithm,
    Config,
    ConfigBatch,
    Hierarchy,
    Protocol,
    Schedule,
    invalid_reason,
    valid_mask,
)
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

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def apply(self, config: Config) -> Config:
        return replace(config, **self.given())


NO_CONSTRAINTS = KnobConstraints()


@dataclass(frozen=True)
class Decision:
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


@lru_cache(maxsize=65536)
def action_times(scenario: Scenario) -> np.ndarray:
    """Simulated time (µs, first arrival to completion) of every action; inf where invalid."""
    result = simulate(
        scenario.topology,
        np.array([int(scenario.collective)]),
        np.array([scenario.nbytes], dtype=np.float64),
        ConfigBatch.all_actions(),
        straggler_delay_us=scenario.straggler_delay_us if scenario.has_straggler else 0.0,
        c2c=scenario.c2c,
    )
    times = np.where(valid_mask(scenario.topology, scenario.collective), result.time_us[0], np.inf)
    times.setflags(write=False)
    return times


def _decision(scenario: Scenario, config: Config) -> Decision:
    """Times ``config`` on the simulator and asks NCCL's model what it would have predicted."""
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
    return Decision(config, timing.time_us, timing.time_after_straggler_us, timing.algbw_GBps,
                    timing.busbw_GBps, predicted)


def nccl_default(scenario: Scenario, constraints: KnobConstraints = NO_CONSTRAINTS) -> Decision:
    """NCCL's own pick under ``constraints``, timed by the simulator."""
    model = nccl_model_for(scenario.topology)
    algo = constraints.algorithm
    nccl_algos = None
    if algo is not None:
        # NCCL cannot be told to run StragglAR; its nearest relative, a flat ring, sets the
        # protocol and channels NCCL would use, and the pinned algorithm is applied on top.
        nccl_algos = {Algorithm.RING if algo == Algorithm.STRAGGLAR else algo}
    choice = model.choose(
        scenario.collective,
        scenario.nbytes,
        algorithms=nccl_algos,
        protocols=None if constraints.protocol is None else {constraints.protocol},
        channels=constraints.channels,
    )
    return _decision(scenario, constraints.apply(choice.config))


def candidate_configs(constraints: KnobConstraints = NO_CONSTRAINTS) -> tuple[Config, ...]:
    """The action table with pinned knobs substituted, duplicates removed, order kept."""
    if not constraints.given():
        return ACTIONS
    return tuple(dict.fromkeys(constraints.apply(c) for c in ACTIONS))


def best(
    scenario: Scenario,
    constraints: KnobConstraints = NO_CONSTRAINTS,
    *,
    deployable: bool = False,
) -> Decision:
    """The fastest valid configuration under ``constraints`` (the oracle when unconstrained)."""
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
            raise ValueError("no valid configuration satisfies the given knobs: "
                             + (invalid_reason(scenario.topology, scenario.collective,
                                               constraints.apply(ACTIONS[0])) or "none left"))
        batch = ConfigBatch.from_configs(candidates)
        result = simulate(
            scenario.topology, np.array([int(scenario.collective)]),
            np.array([scenario.nbytes], dtype=np.float64), batch,
            straggler_delay_us=scenario.straggler_delay_us if scenario.has_straggler else 0.0,
            c2c=scenario.c2c,
        )
        config = candidates[int(np.argmin(result.time_us[0]))]
    return _decision(scenario, config)
