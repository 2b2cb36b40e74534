"""What NCCL would pick, what the best pick is, and how long each takes on the simulator.

This is where NCCL's own cost model (``dynamiccl.nccl_model``: what NCCL *believes*) meets the
physical simulator (``dynamiccl.simulator``: what it *costs*). Every baseline and every reward in
the project is computed here, so the NCCL default is judged by the same simulator as every other
choice and no policy gets a weakened baseline.

Knob constraints behave like NCCL's environment variables: a given algorithm/protocol restricts the
choice as ``NCCL_ALGO``/``NCCL_PROTO`` do, a given channel count pins the channel count as
``NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS`` would. Knobs NCCL has no variable for (hierarchy,
scheduling policy, active chunks, the simulator-only StragglAR) are applied on top of NCCL's pick.

Every answer is cached per call; :func:`prefetch` fills those caches for many calls with one
vectorized computation per system, so a batch of requests costs little more than its lookups.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields, make_dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from dynamiccl.nccl_model import NcclModel
from dynamiccl.nccl_model.select import cost_tables
from dynamiccl.simulator import evaluate, simulate
from dynamiccl.system.knobs import (
    ACTIONS,
    KNOBS,
    NCCL_ALGORITHM_HIERARCHY,
    NCCL_KNOBS,
    Config,
    ConfigBatch,
    Hierarchy,
    invalid_reason,
    nccl_config,
    valid_mask,
)
from dynamiccl.system.nccl import Algorithm, Collective, Protocol, nccl_stand_in
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

#: The size whose time stands for a configuration's latency floor: a modelled time splits into that
#: floor and the rest (the Hockney alpha/beta split NCCL's own tuning tables use).
FLOOR_BYTES = 8


def latency_split(scenario: Scenario, config: Config) -> tuple[float, float]:
    """``config``'s simulated time of the call as (latency floor, the rest), µs: the floor is its
    time at :data:`FLOOR_BYTES` (never above the call's own)."""
    t = evaluate(scenario, config).time_us
    floor = min(evaluate(replace(scenario, nbytes=FLOOR_BYTES), config).time_us, t)
    return floor, t - floor


#: One optional field per knob of the table (None leaves it free), in its order.
_Pinned = make_dataclass("_Pinned", [(k.name, f"{k.kind.__name__} | None", field(default=None))
                                     for k in KNOBS], frozen=True)
_Pinned.__module__ = __name__


@dataclass(frozen=True)
class KnobConstraints(_Pinned):
    """Knobs the user pinned, one field per knob of :data:`~dynamiccl.system.knobs.KNOBS`; None
    leaves the knob free."""

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


class NcclCannotRun(ValueError):
    """NCCL's own model has no usable algorithm/protocol for the call under the pinned knobs, so
    NCCL would fail it (with knobs pinned, the user's choice; without, a gap in the model)."""


class _Memo:
    """A bounded least-recently-used cache that, unlike ``lru_cache``, :func:`prefetch` can fill in
    bulk: many calls answered by one vectorized computation, then looked up one by one."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> Any:
        self._data[key] = value
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data


_ACTION_TIMES = _Memo(65536)
_DECISIONS = _Memo(65536)
_NCCL_CHOICES = _Memo(65536)
_NCCL_TABLES = _Memo(65536)
_CANDIDATE_TIMES = _Memo(65536)


@dataclass(frozen=True)
class TimedConfig:
    """A configuration with what the simulator says it costs: NCCL's pick or the best pick.

    (What a policy file makes NCCL do is :class:`dynamiccl.plugin.policy_file.Decision`.)
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


def _action_times(scenario: Scenario) -> np.ndarray:
    hit = _ACTION_TIMES.get(scenario)
    if hit is not None:
        return hit
    valid, batch = _valid_actions(scenario.topology, scenario.collective)
    return _ACTION_TIMES.put(scenario, _times_row(valid, _simulated_times(scenario, batch)))


@lru_cache(maxsize=4096)
def _valid_actions(topology: Topology, collective: Collective) -> tuple[np.ndarray, ConfigBatch]:
    """Only valid actions reach the simulator: an action a system cannot run may have no cost model
    there at all (a hierarchical ring on one rank has no phase to time)."""
    valid = np.flatnonzero(valid_mask(topology, collective))
    return valid, ConfigBatch.all_actions().take(valid)


def _times_row(valid: np.ndarray, simulated: np.ndarray) -> np.ndarray:
    times = np.full(len(ACTIONS), np.inf)
    times[valid] = simulated
    times.setflags(write=False)
    return times


def _decision(scenario: Scenario, config: Config) -> TimedConfig:
    """Times ``config`` on the simulator and asks NCCL's model what it would have predicted."""
    return _timed_decision(_timing_key(scenario), config)


def _timed_decision(scenario: Scenario, config: Config) -> TimedConfig:
    hit = _DECISIONS.get((scenario, config))
    if hit is not None:
        return hit
    reason = invalid_reason(scenario.topology, scenario.collective, config)
    if reason:
        raise ValueError(f"{config.label()} cannot run {scenario.collective.name.lower()} on "
                         f"{scenario.topology.name}: {reason}")
    timing = evaluate(scenario, config)
    return _DECISIONS.put((scenario, config), _make_decision(
        scenario, config, timing.time_us, timing.time_after_straggler_us, timing.algbw_GBps,
        timing.busbw_GBps))


def _make_decision(scenario: Scenario, config: Config, time_us: float, after_us: float,
                   algbw: float, busbw: float) -> TimedConfig:
    predicted = None
    if config.exportable:
        table = _nccl_cost_table(scenario.topology, scenario.collective, scenario.nbytes)
        value = float(table[config.algorithm, config.protocol])
        predicted = value if value >= 0 else None  # NCCL marks what it cannot run with -1
    return TimedConfig(config, float(time_us), float(after_us), float(algbw), float(busbw), predicted)


def _nccl_cost_table(topology: Topology, collective: Collective, nbytes: int) -> np.ndarray:
    """NCCL's predicted µs per (algorithm, protocol) for one call: NCCL's pick and the best pick of
    the same call read their predictions from one table."""
    key = (topology, collective, nbytes)
    hit = _NCCL_TABLES.get(key)
    return hit if hit is not None else _NCCL_TABLES.put(
        key, nccl_model_for(topology).cost_table(collective, nbytes))


def _nccl_algorithms(constraints: KnobConstraints) -> set[Algorithm] | None:
    """The NCCL algorithms NCCL_ALGO would have to allow for the pinned knobs to make sense.

    NCCL cannot run a simulator-only algorithm (StragglAR) or a scheduled ring-over-ring; their
    nearest NCCL relative (its entry's ``stand_in``; the ring) sets the protocol and channels NCCL
    would use and the pinned knobs are applied on top.
    """
    algo = constraints.algorithm
    if algo is not None:
        return {nccl_stand_in(algo)}
    if constraints.hierarchy is not None:
        return {a for a, h in NCCL_ALGORITHM_HIERARCHY.items() if h == constraints.hierarchy} | {
            Algorithm.RING}
    return None


def why_impossible(scenario: Scenario, constraints: KnobConstraints) -> str | None:
    """The most common reason no configuration satisfies ``constraints`` (None if some does)."""
    return _why_impossible(scenario.topology, scenario.collective, constraints)


@lru_cache(maxsize=4096)
def _why_impossible(topology: Topology, collective: Collective,
                    constraints: KnobConstraints) -> str | None:
    """Validity depends on the system, the collective and the knobs only, so it is cached on them."""
    reasons = [invalid_reason(topology, collective, c) for c in candidate_configs(constraints)]
    if not reasons:  # the pinned knobs contradict each other (e.g. a flat tree)
        sketch = Config(constraints.algorithm or Algorithm.RING, constraints.protocol or Protocol.SIMPLE,
                        constraints.channels or 1)
        return invalid_reason(topology, collective, constraints.apply(sketch))
    if any(r is None for r in reasons):
        return None
    return max(dict.fromkeys(reasons), key=reasons.count)  # ties: the first candidate's reason


def nccl_default(scenario: Scenario, constraints: KnobConstraints = NO_CONSTRAINTS) -> TimedConfig:
    """NCCL's own pick under ``constraints``, timed by the simulator."""
    reason = why_impossible(scenario, constraints) if constraints.given() else None
    if reason:
        raise ValueError(reason)
    config = _nccl_choice(scenario.topology, scenario.collective, scenario.nbytes, constraints)
    return _decision(scenario, config)


def _nccl_choice(topology: Topology, collective: Collective, nbytes: int,
                 constraints: KnobConstraints) -> Config:
    """NCCL's pick depends only on what its cost model sees: the system, the call and the knobs."""
    key = (topology, collective, nbytes, constraints)
    hit = _NCCL_CHOICES.get(key)
    return hit if hit is not None else _NCCL_CHOICES.put(
        key, _nccl_choose(topology, collective, nbytes, constraints))


def _nccl_choose(topology: Topology, collective: Collective, nbytes: int,
                 constraints: KnobConstraints) -> Config:
    algorithms, protocols = _nccl_allowed(topology, collective, constraints)
    try:
        choice = nccl_model_for(topology).choose(collective, nbytes, algorithms=algorithms,
                                                 protocols=protocols, channels=constraints.channels)
    except ValueError as exc:  # NCCL's model has nothing usable: NCCL would fail the call
        raise NcclCannotRun(str(exc)) from None
    return constraints.apply(choice.config)


@lru_cache(maxsize=4096)
def _nccl_allowed(topology: Topology, collective: Collective, constraints: KnobConstraints
                  ) -> tuple[frozenset[Algorithm] | None, frozenset[Protocol] | None]:
    """What NCCL_ALGO / NCCL_PROTO would allow so that NCCL's pick, with the pinned knobs applied
    on top, can run here: pinning the hierarchy on one node must not yield a ring-over-ring, nor
    pinning StragglAR a protocol it does not run."""
    algorithms = _nccl_algorithms(constraints)
    protocols = None if constraints.protocol is None else frozenset({constraints.protocol})
    if not constraints.given():
        return algorithms, protocols
    runnable, _ = _valid_candidates(topology, collective, constraints, False)
    if not runnable:
        return algorithms, protocols
    nccl_algorithms = {nccl_stand_in(c.algorithm) for c in runnable}
    if algorithms is not None:
        algorithms = frozenset(algorithms & nccl_algorithms)
    return algorithms, frozenset(c.protocol for c in runnable)


#: Knobs whose pinned value replaces the action table's (NCCL accepts any channel count 1..64;
#: the table keeps the knobs decided per choice at NCCL's own value).
_REPLACED = ("channels", *(k.name for k in KNOBS if not k.in_action_table))


def candidate_configs(constraints: KnobConstraints = NO_CONSTRAINTS) -> tuple[Config, ...]:
    """The actions that agree with every pinned knob; a pinned channel count or chunk size replaces
    the table's. Order kept, duplicates removed."""
    given = constraints.given()
    pinned = {k: v for k, v in given.items() if k not in _REPLACED}
    matching = [c for c in ACTIONS if all(getattr(c, k) == v for k, v in pinned.items())]
    replaced = {k: v for k, v in given.items() if k in _REPLACED}
    if replaced:
        matching = [replace(c, **replaced) for c in matching]
    return tuple(dict.fromkeys(matching))


@lru_cache(maxsize=4096)
def _valid_candidates(topology: Topology, collective: Collective, constraints: KnobConstraints,
                      deployable: bool) -> tuple[tuple[Config, ...], ConfigBatch | None]:
    """The configurations ``best`` chooses among (and their simulator batch): they depend on the
    system and the knobs, not on the size, so a sweep over sizes builds them once."""
    configs = tuple(c for c in candidate_configs(constraints)
                    if invalid_reason(topology, collective, c) is None and (c.exportable or not deployable))
    return configs, ConfigBatch.from_configs(configs) if configs else None


def _candidate_times(scenario: Scenario, constraints: KnobConstraints, deployable: bool,
                     batch: ConfigBatch) -> np.ndarray:
    """Simulated times of the configurations ``best`` chooses among under pinned knobs."""
    key = (scenario, constraints, deployable)
    hit = _CANDIDATE_TIMES.get(key)
    return hit if hit is not None else _CANDIDATE_TIMES.put(key, _simulated_times(scenario, batch))


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
        candidates, batch = _valid_candidates(scenario.topology, scenario.collective, constraints,
                                              deployable)
        if batch is None:
            raise ValueError(why_impossible(scenario, constraints)
                             or "no exportable configuration satisfies the given knobs")
        times = _candidate_times(_timing_key(scenario), constraints, deployable, batch)
        config = candidates[int(np.argmin(times))]
    found = _decision(scenario, config)
    default = nccl_default(scenario, constraints)
    if default.time_us < found.time_us and (default.config.exportable or not deployable):
        return default
    return found


def refined(scenario: Scenario, config: Config) -> TimedConfig:
    """``config`` with each NCCL knob the joint action table leaves at NCCL's own value (the chunk
    size: ``Knob.in_action_table``) set to its fastest level on the simulator, one knob after the
    other; NCCL's own value wins every tie."""
    best_config = config
    for knob in (k for k in NCCL_KNOBS if not k.in_action_table):
        variants = [best_config, *(replace(best_config, **{knob.name: v}) for v in knob.levels)]
        variants = [c for c in variants
                    if invalid_reason(scenario.topology, scenario.collective, c) is None]
        times = _simulated_times(_timing_key(scenario), ConfigBatch.from_configs(variants))
        best_config = variants[int(np.argmin(times))]
    return _decision(scenario, best_config)


def prefetch(calls: Sequence[tuple[Scenario, KnobConstraints]]) -> None:
    """Answers many calls at once so that ``nccl_default`` and ``best`` then only look them up: one
    vectorized simulator and NCCL-model call per system, collective and set of pinned knobs instead
    of a few per call (what ``dynamiccl simulate --batch`` needs to answer thousands per second).

    The numbers are the very ones the one-call path computes: the same functions on the same rows.
    Calls that cannot be answered are left alone; asking for them raises as it always does.
    """
    groups: dict[tuple, list[Scenario]] = {}
    for scenario, constraints in dict.fromkeys((_timing_key(s), c) for s, c in calls):
        cached = (scenario in _ACTION_TIMES if not constraints.given()
                  else (scenario, constraints, False) in _CANDIDATE_TIMES)
        if not cached:
            key = (scenario.topology, scenario.collective, scenario.straggler_rank,
                   scenario.straggler_delay_us, scenario.c2c, constraints)
            groups.setdefault(key, []).append(scenario)
    for (topology, collective, _, _, c2c, constraints), group in groups.items():
        if not constraints.given() or _why_impossible(topology, collective, constraints) is None:
            _prefetch_group(topology, collective, c2c, constraints, group)


def _prefetch_group(topology: Topology, collective: Collective, c2c: float,
                    constraints: KnobConstraints, group: list[Scenario]) -> None:
    sizes = np.array([s.nbytes for s in group], dtype=np.int64)
    delay = group[0].straggler_delay_us if group[0].has_straggler else 0.0
    model = nccl_model_for(topology)
    colls = np.full(len(group), int(collective))
    algorithms, protocols = _nccl_allowed(topology, collective, constraints)
    try:
        algo, proto, channels, _ = model.choose_many(colls, sizes, algorithms=algorithms,
                                                     protocols=protocols, channels=constraints.channels)
    except ValueError:  # NCCL has nothing usable: the one-call path says so for each call
        return
    if constraints.given():
        candidates, batch = _valid_candidates(topology, collective, constraints, False)
        if batch is None:
            return
    else:
        valid, batch = _valid_actions(topology, collective)
    tables = cost_tables(model.system, model.tables, colls, sizes)
    sim = simulate(topology, colls, sizes.astype(np.float64), batch, straggler_delay_us=delay, c2c=c2c)
    wanted: dict[Config, list[int]] = {}
    for i, scenario in enumerate(group):
        _NCCL_TABLES.put((topology, collective, scenario.nbytes), tables[i])
        if constraints.given():
            _CANDIDATE_TIMES.put((scenario, constraints, False), sim.time_us[i])
            top = candidates[int(np.argmin(sim.time_us[i]))]
        else:
            top = ACTIONS[int(np.argmin(_ACTION_TIMES.put(scenario, _times_row(valid, sim.time_us[i]))))]
        default = constraints.apply(nccl_config(Algorithm(int(algo[i])), Protocol(int(proto[i])),
                                                int(channels[i])))
        _NCCL_CHOICES.put((topology, collective, scenario.nbytes, constraints), default)
        for config in (default, top):
            if invalid_reason(topology, collective, config) is None:
                wanted.setdefault(config, []).append(i)
    for config, rows in wanted.items():
        res = simulate(topology, colls[rows], sizes[rows].astype(np.float64),
                       ConfigBatch.from_configs([config]), straggler_delay_us=delay, c2c=c2c)
        for j, i in enumerate(rows):
            _DECISIONS.put((group[i], config), _make_decision(
                group[i], config, res.time_us[j, 0], res.time_after_straggler_us[j, 0],
                res.algbw_GBps[j, 0], res.busbw_GBps[j, 0]))
