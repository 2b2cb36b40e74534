"""The ``replay`` backend: answers from a table of real measurements, and only from it.

A table is what nccl-tests runs with each alternative forced (``NCCL_ALGO``/``NCCL_PROTO``, maybe
``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``) next to NCCL's default run give: per call (collective,
size, ranks) a measured time per choice. A choice nobody measured is *unavailable* — the backend
raises :class:`~dynamiccl.envs.backends.base.UnmeasuredChoice` rather than guess, and its
``available`` mask tells the environment which actions it can answer. Times are the median of all
out-of-place measurements of the same call and choice (in-place ones only where no out-of-place
exists). There is no noise to add: the numbers are what the hardware did.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.base import Measurement, UnmeasuredChoice
from dynamiccl.knobs import ACTIONS, Algorithm, Collective, Protocol, parse_enum
from dynamiccl.profiler.records import MeasurementRecord
from dynamiccl.scenario import Scenario
from dynamiccl.units import format_size

#: (algorithm, protocol, channels) as NCCL was told; None = NCCL chose that knob.
Choice = tuple[Algorithm | None, Protocol | None, int | None]
DEFAULT_CHOICE: Choice = (None, None, None)
CallKey = tuple[Collective, int, int]


def choice_of(constraints: KnobConstraints) -> Choice:
    return (constraints.algorithm, constraints.protocol, constraints.channels)


def choice_label(choice: Choice) -> str:
    if choice == DEFAULT_CHOICE:
        return "NCCL default"
    a, p, c = choice
    return "/".join([a.name.lower() if a is not None else "auto",
                     p.name.lower() if p is not None else "auto", f"{c}ch" if c else "auto-ch"])


def _record_choice(rec: MeasurementRecord) -> Choice:
    algo = parse_enum(Algorithm, rec.algorithm) if rec.algorithm else None
    proto = parse_enum(Protocol, rec.protocol) if rec.protocol else None
    return (algo, proto, rec.channels)


class ReplayTable:
    """Measured times per call and choice."""

    def __init__(self, records: Iterable[MeasurementRecord]) -> None:
        grouped: dict[tuple[CallKey, Choice, bool], list[float]] = defaultdict(list)
        for rec in records:
            if rec.backend != "nccl" or rec.straggler_delay_us > 0:
                continue
            key = (rec.coll, rec.nbytes, rec.nranks)
            grouped[(key, _record_choice(rec), rec.in_place)].append(rec.time_us)
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
        if not self.calls:
            raise ValueError("the replay table is empty: give nccl-tests logs or measurement "
                             "records of NCCL runs (forced choices next to NCCL's default)")

    @classmethod
    def load(cls, paths: str | Path | Sequence[str | Path]) -> ReplayTable:
        """Measurements from files or folders (:func:`~dynamiccl.profiler.measurement_paths.load_paths`:
        the files of a folder that hold no measurements are skipped, published runs' sidecars
        applied)."""
        from dynamiccl.profiler.measurement_paths import load_paths

        return cls(load_paths([paths] if isinstance(paths, str | Path) else paths).records)

    def choices(self, scenario: Scenario) -> dict[Choice, float]:
        """Every measured choice of this call (empty when the call was never measured)."""
        return self.calls.get(_call(scenario), {})

    def timed_again(self, scenario: Scenario) -> dict[Choice, float]:
        """The choices of this call that were also timed in place, with that second time."""
        return self.again.get(_call(scenario), {})


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
            known = ", ".join(choice_label(c) for c in measured) or "nothing"
            raise UnmeasuredChoice(
                f"{choice_label(choice)} was not measured for {_describe(scenario)} (measured: "
                f"{known}); the replay backend answers only measured choices")
        return measured[choice]

    def available(self, scenario: Scenario) -> np.ndarray:
        """Actions whose exact (algorithm, protocol, channels) was measured."""
        measured = self.table.choices(scenario)
        return np.array([(c.algorithm, c.protocol, c.channels) in measured and c.exportable
                         for c in ACTIONS], dtype=bool)

    def action_times(self, scenario: Scenario) -> np.ndarray:
        measured = self.table.choices(scenario)
        return np.array([measured.get((c.algorithm, c.protocol, c.channels), math.inf)
                         if c.exportable else math.inf for c in ACTIONS])

    def measure(self, scenario: Scenario, action: int) -> Measurement:
        c = ACTIONS[action]
        if not c.exportable:
            raise UnmeasuredChoice(f"{c.label()} cannot run on real NCCL, so no replay table has it")
        return Measurement(self.time(scenario, (c.algorithm, c.protocol, c.channels)),
                           self.time(scenario, DEFAULT_CHOICE))

    def measure_forced(self, scenario: Scenario, constraints: KnobConstraints) -> Measurement:
        return Measurement(self.time(scenario, choice_of(constraints)),
                           self.time(scenario, DEFAULT_CHOICE))
