"""The ``replay`` backend: answers from a table of real measurements, and only from it.

A table is what nccl-tests runs with each alternative forced (``NCCL_ALGO``/``NCCL_PROTO``, maybe
``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``) next to NCCL's default run give: per call (collective,
size, ranks) a measured time per choice. A choice nobody measured is *unavailable* — the backend
raises :class:`~dynamiccl.envs.backends.base.UnmeasuredChoice` rather than guess, and its
``available`` mask tells the environment which actions it can answer. Times are the median of all
out-of-place measurements of the same call and choice (in-place ones only where no out-of-place
exists). There is no noise to add: the numbers are what the hardware did.

The table also keeps each launch's timings apart (:class:`LaunchTiming`: one nccl-tests log, one
runner start-up of ranks), so an evaluation can decide from some launches and score on another
(:class:`LaunchSplit`): two launches of the same call differ by far more than the two timings
within one launch, and a decision is only worth what it does in a launch it did not see.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.decisions import KnobConstraints, nccl_default
from dynamiccl.envs.backends.base import Measurement, UnmeasuredChoice
from dynamiccl.profiler.formats.records import MeasurementRecord, knob_label
from dynamiccl.system.knobs import ACTIONS, Algorithm, Collective, Knobs, Protocol, parse_enum
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology
from dynamiccl.system.units import format_size

if TYPE_CHECKING:
    from dynamiccl.envs.workloads import Episode

#: NCCL's knobs as NCCL was told them; None = NCCL chose that knob.
Choice = Knobs
DEFAULT_CHOICE: Choice = Knobs()
CallKey = tuple[Collective, int, int]


def choice_of(constraints: KnobConstraints) -> Choice:
    return Knobs.of(constraints)


def choice_label(choice: Choice) -> str:
    return knob_label(choice)


def _record_choice(rec: MeasurementRecord) -> Choice:
    return Knobs.of(rec)


@dataclass(frozen=True)
class LaunchTiming:
    """One launch's timing of a call and choice: the out-of-place time (the median of that launch's
    runs) and the in-place time of the same launch, where the log has one (the call timed again
    within that launch)."""

    launch: str
    time_us: float
    again_us: float | None = None


class ReplayTable:
    """Measured times per call and choice, and per launch (records of unknown launch are one)."""

    def __init__(self, records: Iterable[MeasurementRecord]) -> None:
        records = list(records)
        grouped: dict[tuple[CallKey, Choice, bool], list[float]] = defaultdict(list)
        by_launch: dict[tuple[CallKey, Choice, str], dict[bool, list[float]]] = defaultdict(
            lambda: defaultdict(list))
        for rec in records:
            if rec.backend != "nccl" or rec.straggler_delay_us > 0:
                continue
            key = (rec.coll, rec.nbytes, rec.nranks)
            grouped[(key, _record_choice(rec), rec.in_place)].append(rec.time_us)
            by_launch[(key, _record_choice(rec), rec.launch)][rec.in_place].append(rec.time_us)
        table: dict[CallKey, dict[Choice, float]] = defaultdict(dict)
        again: dict[CallKey, dict[Choice, float]] = defaultdict(dict)
        for (call, choice, in_place), times in sorted(grouped.items(), key=lambda kv: kv[0][2]):
            if in_place and choice in table[call]:  # out-of-place sorted first and preferred
                again[call][choice] = float(np.median(times))
                continue
            table[call][choice] = float(np.median(times))
        self.calls: dict[CallKey, dict[Choice, float]] = dict(table)
        #: The in-place timings of calls whose answer is out-of-place: the same call timed again.
        self.again: dict[CallKey, dict[Choice, float]] = dict(again)
        launches: dict[CallKey, dict[Choice, list[LaunchTiming]]] = defaultdict(lambda: defaultdict(list))
        for (call, choice, launch), timed in sorted(by_launch.items(), key=lambda kv: kv[0][2]):
            if timed[False]:
                again_us = float(np.median(timed[True])) if timed[True] else None
                launches[call][choice].append(
                    LaunchTiming(launch, float(np.median(timed[False])), again_us))
        #: Per call and choice, each launch's timings, in launch-id order.
        self.launches: dict[CallKey, dict[Choice, tuple[LaunchTiming, ...]]] = {
            call: {c: tuple(t) for c, t in per.items()} for call, per in launches.items()}
        if not self.calls:
            raise ValueError("the replay table is empty: give nccl-tests logs or measurement "
                             "records of NCCL runs (forced choices next to NCCL's default)")
        #: The nodes each measured rank count spanned (where the records say it), and the pair
        #: NCCL logged it ran for a call and choice (its TUNING lines, where the logs have them).
        self.nodes: dict[int, int] = {}
        self.logged: dict[tuple[CallKey, Choice], str] = {}
        for rec in records:
            if rec.nnodes:
                self.nodes.setdefault(rec.nranks, rec.nnodes)
            if rec.nccl_pick:
                self.logged.setdefault(((rec.coll, rec.nbytes, rec.nranks), _record_choice(rec)),
                                       rec.nccl_pick)

    def suite(self, topology: Topology) -> list[Episode]:
        """The measured calls as an evaluation suite on ``topology`` (resized to each measured
        shape): per collective and rank count one episode of the sizes NCCL's default was measured
        at beside at least one other choice, smallest first. What ``evaluate --backend replay``
        scores without a suite: every call the logs can answer, none they cannot."""
        from dynamiccl.envs.workloads import Episode

        groups: dict[tuple[Collective, int], list[int]] = defaultdict(list)
        for (coll, nbytes, nranks), measured in self.calls.items():
            if DEFAULT_CHOICE in measured and len(measured) > 1:
                groups[(coll, nranks)].append(nbytes)
        episodes = []
        for (coll, nranks), sizes in sorted(groups.items()):
            nodes = self.nodes.get(nranks, max(1, nranks // topology.gpus_per_node))
            if nranks % nodes:
                continue
            system = topology.resized(nodes=nodes, gpus_per_node=nranks // nodes)
            episodes.append(Episode(f"replay/{coll.name.lower()}/{nranks}r", system.name, nodes,
                                    "measured calls", tuple(Scenario(system, coll, n)
                                                            for n in sorted(sizes))))
        return episodes

    @classmethod
    def load(cls, paths: str | Path | Sequence[str | Path]) -> ReplayTable:
        """Measurements from files or folders
        (:func:`~dynamiccl.profiler.formats.measurement_paths.load_paths`: the files of a folder
        that hold no measurements are skipped, published runs' sidecars applied)."""
        from dynamiccl.profiler.formats.measurement_paths import load_paths

        return cls(load_paths([paths] if isinstance(paths, str | Path) else paths).records)

    def choices(self, scenario: Scenario) -> dict[Choice, float]:
        """Every measured choice of this call (empty when the call was never measured)."""
        return self.calls.get(_call(scenario), {})

    def timed_again(self, scenario: Scenario) -> dict[Choice, float]:
        """The choices of this call that were also timed in place, with that second time."""
        return self.again.get(_call(scenario), {})

    def launch_timings(self, scenario: Scenario) -> dict[Choice, tuple[LaunchTiming, ...]]:
        """Every out-of-place-timed choice of this call, with each launch's timings."""
        return self.launches.get(_call(scenario), {})


#: How a call of a :class:`LaunchSplit` is scored.
HELD_OUT_LAUNCH, IN_PLACE = "held-out launch", "in-place timing"


class LaunchSplit:
    """Split ``split`` of a replay table's launches: per call and choice, the timing a tuner is
    scored on and the launches it may see.

    * A call whose every choice was timed in two launches or more is scored on a launch held out:
      each choice's ``split``-th launch (modulo its number of launches, in launch-id order). Tuners
      see the others, the one after the held-out launch first, so each split shows a different
      launch first.
    * A call with a choice timed in one launch only is scored on the in-place timing of the launch
      the split picks (the one second timing there is; it shares its launch's state, so it flatters
      a decision) and tuners see every launch's out-of-place timing, that launch's first.
    * A call without an in-place timing of that launch is not scored (a summary table).
    """

    def __init__(self, table: ReplayTable, split: int) -> None:
        if split < 0:
            raise ValueError(f"a launch split is numbered from 0, got {split}")
        self.table = table
        self.split = split

    @staticmethod
    def count(table: ReplayTable) -> int:
        """How many splits differ: the most launches a choice has at a call scored on a held-out
        launch (1 where none is)."""
        held = [len(t) for per in table.launches.values() if min(map(len, per.values())) >= 2
                for t in per.values()]
        return max(held, default=1)

    def scoring(self, scenario: Scenario) -> str | None:
        """How this call is scored (:data:`HELD_OUT_LAUNCH`, :data:`IN_PLACE`), or None."""
        timed = self.table.launch_timings(scenario)
        if not timed:
            return None
        if min(map(len, timed.values())) >= 2:
            return HELD_OUT_LAUNCH
        return IN_PLACE if all(self._held(t).again_us is not None for t in timed.values()) else None

    def _held(self, timings: tuple[LaunchTiming, ...]) -> LaunchTiming:
        return timings[self.split % len(timings)]

    def seen(self, scenario: Scenario, choice: Choice) -> tuple[LaunchTiming, ...]:
        """The launches of ``choice`` a tuner may see here, in the order it is shown them."""
        timings = self.table.launch_timings(scenario).get(choice, ())
        if not timings:
            return ()
        k = self.split % len(timings)
        rotated = timings[k:] + timings[:k]
        return rotated[1:] if self.scoring(scenario) == HELD_OUT_LAUNCH else rotated

    def truth(self, scenario: Scenario, choice: Choice) -> float | None:
        """The timing ``choice`` is scored on here (None: not scored, or not measured)."""
        how = self.scoring(scenario)
        timings = self.table.launch_timings(scenario).get(choice)
        if how is None or not timings:
            return None
        held = self._held(timings)
        return held.time_us if how == HELD_OUT_LAUNCH else held.again_us


def _call(scenario: Scenario) -> CallKey:
    return (scenario.collective, scenario.nbytes, scenario.topology.nranks)


def _describe(scenario: Scenario) -> str:
    return (f"{scenario.collective.name.lower()} {format_size(scenario.nbytes)} on "
            f"{scenario.topology.nranks} ranks")


class ReplayBackend:
    """Replays ``table`` (a :class:`ReplayTable`, or paths of logs / records to load one from)."""

    name = "replay"

    def __init__(self, table: ReplayTable | str | Path | Sequence[str | Path]) -> None:
        self.table = table if isinstance(table, ReplayTable) else ReplayTable.load(table)

    def time(self, scenario: Scenario, choice: Choice) -> float:
        measured = self.table.choices(scenario)
        if choice not in measured:
            found = self._ran_as(scenario, choice, measured)
            if found is not None:
                return measured[found]
            known = ", ".join(choice_label(c) for c in measured) or "nothing"
            raise UnmeasuredChoice(
                f"{choice_label(choice)} was not measured for {_describe(scenario)} (measured: "
                f"{known}); the replay backend answers only measured choices")
        return measured[choice]

    def _ran_as(self, scenario: Scenario, choice: Choice, measured: dict[Choice, float]
                ) -> Choice | None:
        """A measured run forced with fewer knobs that ran ``choice``'s pair: a run told only
        ``NCCL_ALGO=Ring`` measured the protocol NCCL picked with it, as its TUNING log says or,
        where it has none, as NCCL's cost model on the scenario's system picks (what ``tune``
        counts it as). Only for a pair with NCCL's own value of every other knob."""
        pair = (choice.algorithm, choice.protocol)
        if None in pair or replace(choice, algorithm=None, protocol=None) != DEFAULT_CHOICE:
            return None
        for c in measured:
            if c == DEFAULT_CHOICE or replace(c, algorithm=None, protocol=None) != DEFAULT_CHOICE \
                    or c.algorithm not in (None, choice.algorithm) \
                    or c.protocol not in (None, choice.protocol):
                continue
            logged = self.table.logged.get((_call(scenario), c))
            if logged:
                ran = tuple(parse_enum(e, n) for e, n in zip((Algorithm, Protocol),
                                                             logged.split("/"), strict=True))
            else:
                try:
                    config = nccl_default(scenario, KnobConstraints(algorithm=c.algorithm,
                                                                    protocol=c.protocol)).config
                except ValueError:
                    continue
                ran = (config.algorithm, config.protocol)
            if ran == pair:
                return c
        return None

    def available(self, scenario: Scenario) -> np.ndarray:
        """Actions whose exact NCCL knobs (algorithm, protocol, channels, ...) were measured."""
        measured = self.table.choices(scenario)
        return np.array([c.exportable and Knobs.of(c) in measured for c in ACTIONS], dtype=bool)

    def action_times(self, scenario: Scenario) -> np.ndarray:
        measured = self.table.choices(scenario)
        return np.array([measured.get(Knobs.of(c), math.inf) if c.exportable else math.inf
                         for c in ACTIONS])

    def measure(self, scenario: Scenario, action: int) -> Measurement:
        c = ACTIONS[action]
        if not c.exportable:
            raise UnmeasuredChoice(f"{c.label()} cannot run on real NCCL, so no replay table has it")
        return Measurement(self.time(scenario, Knobs.of(c)), self.time(scenario, DEFAULT_CHOICE))

    def measure_forced(self, scenario: Scenario, constraints: KnobConstraints) -> Measurement:
        return Measurement(self.time(scenario, choice_of(constraints)),
                           self.time(scenario, DEFAULT_CHOICE))
