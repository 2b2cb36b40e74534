"""Scenario distributions and evaluation suites: which systems, workloads and conditions episodes see.

A scenario file (``configs/scenario/*.yaml``, the Hydra group ``scenario``) lists the systems (a
topology preset and the node counts it runs at), the workloads whose traces episodes follow, the
range of compute-to-communication ratios, and how a straggler behaves during an episode. The same
file defines its evaluation suite: every (system, node count, workload) once, with c2c and the
straggler drawn from a fixed seed, so two evaluations of a suite see the same calls.

Straggler dynamics are a per-call Markov chain, so one appears, moves to another rank and vanishes
*during* an episode, as seed 004 observed persistent stragglers do across iterations:

* at the first call a straggler is present with probability ``initial``;
* while none is present, one appears with probability ``appear`` per call;
* while one is present, it vanishes with probability ``vanish`` and otherwise moves to another rank
  with probability ``move`` (keeping its delay).

Delays are log-uniform in ``delay_us`` and snapped to two steps per decade (the observation's delay
bins), and c2c to its ``step`` grid, so repeated conditions hit the simulator's cache.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from dynamiccl.config_loader import ConfigError, read_config
from dynamiccl.envs.config_files import check_keys, integer, number
from dynamiccl.envs.traces import Workload, load_workload
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology

__all__ = ["Episode", "ScenarioDistribution", "StragglerSpec", "SuiteEntry", "SystemSpec",
           "Workload", "distribution_from_dict", "load_scenario_distribution", "load_suite",
           "load_workload"]

DELAY_STEPS_PER_DECADE = 2
#: A suite repeated more often than this is a typo, not an evaluation (it would run for days).
MAX_SUITE_REPEATS = 100
_TOP_KEYS = {"name", "description", "systems", "workloads", "c2c", "straggler", "episode_length",
             "suite"}


@dataclass(frozen=True)
class SystemSpec:
    """A topology preset (or file) and the node counts episodes run it at."""

    topology: str
    nodes: tuple[int, ...]
    #: Workloads for this system only (None: the distribution's list).
    workloads: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StragglerSpec:
    initial: float = 0.0
    appear: float = 0.0
    move: float = 0.0
    vanish: float = 0.0
    delay_min_us: float = 1000.0
    delay_max_us: float = 10000.0


@dataclass(frozen=True)
class Episode:
    """One episode's calls in order, and where they come from."""

    name: str
    system: str
    #: Nodes the calls span (1 for a node-group workload, whatever the job's size).
    nodes: int
    workload: str
    scenarios: tuple[Scenario, ...]


#: A suite entry is a fixed, seeded episode.
SuiteEntry = Episode


@lru_cache(maxsize=512)
def _system(topology: str, nodes: int, group: str) -> Topology:
    """The topology calls of ``group`` run on (one node of it for ``group: node``), memoised so every
    episode on a system shares one object (cheap hashing, one NCCL-model build)."""
    topo = load_topology(topology, nodes=nodes)
    return topo.resized(nodes=1) if group == "node" else topo


@dataclass(frozen=True)
class ScenarioDistribution:
    name: str
    systems: tuple[SystemSpec, ...]
    workloads: tuple[str, ...]
    c2c_values: tuple[float, ...] = (0.0,)
    straggler: StragglerSpec = StragglerSpec()
    #: Calls per episode (None: one iteration of the workload).
    episode_length: int | None = None
    suite_seed: int = 0
    suite_episode_length: int | None = None
    suite_repeats: int = 1
    description: str = ""

    def workloads_of(self, system: SystemSpec) -> tuple[str, ...]:
        return system.workloads if system.workloads is not None else self.workloads

    def topologies(self) -> list[Topology]:
        """Every system a call of this distribution can run on, once each, by (name, nodes)."""
        systems = {(topo.name, topo.nodes): topo
                   for spec in self.systems for nodes in spec.nodes for w in self.workloads_of(spec)
                   for topo in [_system(spec.topology, nodes, load_workload(w).group)]}
        return [systems[key] for key in sorted(systems)]

    def system_keys(self) -> set[tuple[str, int]]:
        """Every (system name, node count) a call of this distribution can run on."""
        return {(topo.name, topo.nodes) for topo in self.topologies()}

    def sample(self, rng: np.random.Generator, length: int | None = None) -> Episode:
        """A random episode: system, node count and workload uniformly, then c2c and straggler."""
        spec = self.systems[int(rng.integers(len(self.systems)))]
        nodes = spec.nodes[int(rng.integers(len(spec.nodes)))]
        names = self.workloads_of(spec)
        workload = names[int(rng.integers(len(names)))]
        return self._episode(spec, nodes, workload, rng, length or self.episode_length)

    def suite(self) -> list[Episode]:
        """Every (system, node count, workload) ``suite_repeats`` times, each from its own seed.

        A node-group workload runs on one node whatever the system's node count, so it enters the
        suite once per system, not once per node count.
        """
        combos = {}
        for spec in self.systems:
            for nodes in spec.nodes:
                for w in self.workloads_of(spec):
                    topo = _system(spec.topology, nodes, load_workload(w).group)
                    combos.setdefault((topo, w), (spec, nodes, w))
        entries = []
        for index, ((spec, nodes, workload), repeat) in enumerate(
            (combo, r) for combo in combos.values() for r in range(self.suite_repeats)
        ):
            rng = np.random.default_rng([self.suite_seed, index])
            entry = self._episode(spec, nodes, workload, rng, self.suite_episode_length)
            if self.suite_repeats > 1:
                entry = replace(entry, name=f"{entry.name}#{repeat}")
            entries.append(entry)
        return entries

    def _episode(self, spec: SystemSpec, nodes: int, workload_name: str,
                 rng: np.random.Generator, length: int | None) -> Episode:
        workload = load_workload(workload_name)
        topo = _system(spec.topology, nodes, workload.group)
        length = length or len(workload)
        c2c = self.c2c_values[int(rng.integers(len(self.c2c_values)))]
        stragglers = self._stragglers(rng, length, topo.nranks)
        made: dict[tuple[tuple[Any, int], tuple[int, float] | None], Scenario] = {}
        scenarios = []
        for t in range(length):
            call = workload.calls[t % len(workload)]
            key = (call, stragglers[t])
            scenario = made.get(key)
            if scenario is None:
                rank, delay = stragglers[t] or (None, 0.0)
                scenario = made[key] = Scenario(topo, call[0], call[1], rank, delay, c2c)
            scenarios.append(scenario)
        name = f"{topo.name}x{topo.nodes}/{workload.name}"
        return Episode(name, topo.name, topo.nodes, workload.name, tuple(scenarios))

    def _stragglers(self, rng: np.random.Generator, length: int,
                    nranks: int) -> list[tuple[int, float] | None]:
        """The straggler (rank, delay µs) at every call, or None where there is none."""
        s = self.straggler
        u = rng.random(length)
        state: tuple[int, float] | None = None
        out: list[tuple[int, float] | None] = []
        for t in range(length):
            if state is None:
                if u[t] < (s.initial if t == 0 else s.appear):
                    state = (int(rng.integers(nranks)), self._delay(rng))
            elif u[t] < s.vanish:
                state = None
            elif u[t] < s.vanish + s.move and nranks > 1:
                rank = (state[0] + 1 + int(rng.integers(nranks - 1))) % nranks
                state = (rank, state[1])
            out.append(state)
        return out

    def _delay(self, rng: np.random.Generator) -> float:
        low, high = math.log10(self.straggler.delay_min_us), math.log10(self.straggler.delay_max_us)
        snapped = round(rng.uniform(low, high) * DELAY_STEPS_PER_DECADE) / DELAY_STEPS_PER_DECADE
        return float(np.clip(round(10**snapped, 1), self.straggler.delay_min_us,
                             self.straggler.delay_max_us))


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------


def _probability(data: Mapping[str, Any], key: str, source: str) -> float:
    p = number(data, key, source, 0.0, where="straggler.")
    if p > 1:
        raise ConfigError(f"{source}: 'straggler.{key}' is {p:g}; a probability is at most 1")
    return p


def _straggler(data: Any, source: str) -> StragglerSpec:
    if data is None:
        return StragglerSpec()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: 'straggler' must be a mapping (initial, appear, move, vanish, "
                          "delay_us)")
    check_keys(data, {"initial", "appear", "move", "vanish", "delay_us"}, "straggler.", source)
    p = {k: _probability(data, k, source) for k in ("initial", "appear", "move", "vanish")}
    if p["move"] + p["vanish"] > 1:
        raise ConfigError(f"{source}: 'straggler.move' + 'straggler.vanish' exceed 1")
    delay = data.get("delay_us") or {}
    if not isinstance(delay, Mapping):
        raise ConfigError(f"{source}: 'straggler.delay_us' must be {{min: 100, max: 20000}}")
    check_keys(delay, {"min", "max"}, "straggler.delay_us.", source)
    low = number(delay, "min", source, 1000.0, low=1e-3, where="straggler.delay_us.")
    high = number(delay, "max", source, max(low, 10000.0), low=low, where="straggler.delay_us.")
    return StragglerSpec(**p, delay_min_us=low, delay_max_us=high)


def _c2c_values(data: Any, source: str) -> tuple[float, ...]:
    if data is None:
        return (0.0,)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: 'c2c' must be a mapping like {{min: 0, max: 2, step: 0.25}}")
    check_keys(data, {"min", "max", "step"}, "c2c.", source)
    low = number(data, "min", source, 0.0, where="c2c.")
    high = number(data, "max", source, low, low=low, where="c2c.")
    step = number(data, "step", source, 0.25, low=1e-6, where="c2c.")
    count = int(math.floor((high - low) / step + 1e-9)) + 1
    return tuple(round(low + i * step, 6) for i in range(count))


def _systems(data: Any, source: str, known: set[str]) -> tuple[SystemSpec, ...]:
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{source}: 'systems' must be a non-empty list like "
                          "[{topology: dgx_h100, nodes: [1, 2, 4]}]")
    out = []
    for i, item in enumerate(data):
        where = f"systems[{i}]."
        if not isinstance(item, Mapping) or "topology" not in item:
            raise ConfigError(f"{source}: '{where[:-1]}' must be a mapping with topology and nodes")
        check_keys(item, {"topology", "nodes", "workloads"}, where, source)
        nodes = item.get("nodes", [1])
        nodes = nodes if isinstance(nodes, list) else [nodes]
        if not nodes or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                                for n in nodes):
            raise ConfigError(f"{source}: '{where}nodes' must be a list of positive whole numbers")
        workloads = item.get("workloads")
        if workloads is not None:
            workloads = tuple(_names(workloads, f"{where}workloads", source))
            known.update(workloads)
        out.append(SystemSpec(str(item["topology"]), tuple(nodes), workloads))
    return tuple(out)


def _names(data: Any, where: str, source: str) -> list[str]:
    if not isinstance(data, list) or not data or not all(isinstance(x, str) for x in data):
        raise ConfigError(f"{source}: '{where}' must be a non-empty list of workload names")
    return data


def _length(data: Mapping[str, Any], key: str, source: str, where: str = "") -> int | None:
    return None if data.get(key) is None else integer(data, key, source, where=where)


def distribution_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> ScenarioDistribution:
    """Validates a scenario document (workloads and topologies included) and builds it."""
    check_keys(data, _TOP_KEYS, "", source)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: 'name' is missing; give the distribution a name")
    workload_names = set(_names(data.get("workloads"), "workloads", source))
    systems = _systems(data.get("systems"), source, workload_names)
    suite = data.get("suite") or {}
    if not isinstance(suite, Mapping):
        raise ConfigError(f"{source}: 'suite' must be a mapping (seed, episode_length, repeats)")
    check_keys(suite, {"seed", "episode_length", "repeats"}, "suite.", source)
    dist = ScenarioDistribution(
        name=name,
        systems=systems,
        workloads=tuple(data["workloads"]),
        c2c_values=_c2c_values(data.get("c2c"), source),
        straggler=_straggler(data.get("straggler"), source),
        episode_length=_length(data, "episode_length", source),
        suite_seed=integer(suite, "seed", source, 0, low=0, where="suite."),
        suite_episode_length=_length(suite, "episode_length", source, "suite."),
        suite_repeats=integer(suite, "repeats", source, 1, where="suite."),
        description=str(data.get("description", "")).strip(),
    )
    if dist.suite_repeats > MAX_SUITE_REPEATS:
        raise ConfigError(f"{source}: 'suite.repeats' is {dist.suite_repeats}; at most "
                          f"{MAX_SUITE_REPEATS} (every repeat evaluates every episode again)")
    try:
        for w in sorted(workload_names):
            load_workload(w)
        dist.system_keys()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return dist


@lru_cache(maxsize=64)
def _load_named(spec: str) -> ScenarioDistribution:
    return distribution_from_dict(*read_config("scenario", spec))


def load_scenario_distribution(
    spec: str | Path | Mapping[str, Any] | ScenarioDistribution,
) -> ScenarioDistribution:
    """A distribution by name (``configs/scenario/<name>.yaml``), path, mapping, or as given."""
    if isinstance(spec, ScenarioDistribution):
        return spec
    if isinstance(spec, Mapping):
        return distribution_from_dict(*read_config("scenario", spec))
    return _load_named(str(spec))


@lru_cache(maxsize=16)
def _suite(spec: str) -> tuple[Episode, ...]:
    return tuple(_load_named(spec).suite())


def load_suite(spec: str | Path | Mapping[str, Any] | ScenarioDistribution) -> list[SuiteEntry]:
    """The fixed evaluation episodes of a scenario distribution (``train``, ``heldout``, …)."""
    if isinstance(spec, (str, Path)):
        return list(_suite(str(spec)))
    return load_scenario_distribution(spec).suite()
