"""Online tuners playing a job: every call of a system, round after round, in a reality they do not know.

A tuner inside a job meets its calls the way a training step issues them: each round (step) runs
every call of the job once, and the tuner decides each from everything it has measured so far, on
any call of the system. A :class:`PerturbedJob` is one system in one hidden perturbed reality
(:mod:`dynamiccl.envs.backends.perturbed`, either profile) with one independent stream of noise
per call, so every tuner's k-th measurement of a call draws the same noise (common random numbers)
whatever it ran before; a :class:`ReplayJob` is one replay table under one launch split
(:class:`~dynamiccl.envs.backends.replay.LaunchSplit`): a tuner's k-th measurement of a choice is
the k-th launch the split shows (cycling), and it is scored on the held-out launch (or the in-place
timing where a choice had one launch); its choices are what was measured, nothing else.

Tuners are scored per call on the truth of what they ran (:class:`Score`; ``experiments/
bench_online.py`` documents the figures), and played by the players here: ``forced`` (a candidate
tuner pinning knobs, one tuner for the whole job, the way the runtime drives one), ``actions`` (an
action-id tuner, fresh per call: coordinate descent and the bandit keep one state per call anyway),
the sweep -> table and NCCL's default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policies.adaptive import CandidateTuner, Menu
from dynamiccl.agents.shipping.tune import candidate_pairs
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.perturbed import PerturbedBackend
from dynamiccl.envs.backends.replay import DEFAULT_CHOICE, LaunchSplit, ReplayTable, choice_of
from dynamiccl.envs.online_tuning import N_CALLS
from dynamiccl.system.knobs import Collective, Knobs, valid_mask
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology
from dynamiccl.system.units import format_size

#: A call more than this factor slower than NCCL's default counts as slower.
SLOWER = 1.02
#: "Within 2 %" of the best.
WITHIN = 1.02
#: Calls within which a tuner should be within 2 % of the best (the median context).
GOAL_CALLS = 10


@dataclass
class Trace:
    """The calls one tuner made at one call of a job: true times, whether each re-ran a choice,
    and what each ran (to find the held choice)."""

    times: list[float] = field(default_factory=list)
    repeat: list[bool] = field(default_factory=list)
    choices: list = field(default_factory=list)

    def add(self, choice: object, time_us: float) -> None:
        self.repeat.append(choice in self.choices)
        self.choices.append(choice)
        self.times.append(float(time_us))

    def held(self) -> int:
        """Calls in the trailing run of the final choice (the settled phase)."""
        last, n = self.choices[-1], 0
        for c in reversed(self.choices):
            if c != last:
                break
            n += 1
        return n


class PerturbedJob:
    """Every call (collective x size) of one system in one perturbed reality."""

    def __init__(self, seed: int, topology: Topology, collectives: Sequence[Collective],
                 sizes: Sequence[int], profile: str = "uniform") -> None:
        self.seed, self.profile = seed, profile
        self.name = f"seed {seed} {topology.name}x{topology.nodes}"
        self.scenarios = [Scenario(topology, c, n) for c in collectives
                          if valid_mask(topology, c, deployable=True).any() for n in sizes]
        self._exact = PerturbedBackend(seed, noisy=False, profile=profile)
        self._truth: dict[tuple[int, KnobConstraints], float] = {}
        self.nccl_us = [self.truth(i, KnobConstraints()) for i in range(len(self.scenarios))]
        self.best_us = [self._best(i) for i in range(len(self.scenarios))]
        self.start()

    def _best(self, i: int) -> float:
        """The fastest deployable choice: any table action, any pinned pair, NCCL's default."""
        s = self.scenarios[i]
        mask = valid_mask(s.topology, s.collective, deployable=True)
        actions = float(np.min(np.where(mask, self._exact.action_times(s), np.inf)))
        return min(self.nccl_us[i], actions, *(self.truth(i, p.constraints) for p in candidate_pairs(s)))

    def start(self) -> None:
        """Fresh noise streams: every tuner draws the same noise per call, in the same order."""
        self._noisy = [PerturbedBackend(self.seed, noisy=True, profile=self.profile, stream=i + 1)
                       for i in range(len(self.scenarios))]

    def truth(self, i: int, pinned: KnobConstraints) -> float:
        key = (i, pinned)
        if key not in self._truth:
            self._truth[key] = self._exact.measure_forced(self.scenarios[i], pinned).time_us
        return self._truth[key]

    def truth_action(self, i: int, action: int) -> float:
        return float(self._exact.action_times(self.scenarios[i])[action])

    def measure(self, i: int, pinned: KnobConstraints) -> float:
        return self._noisy[i].noisy_time(self.scenarios[i], self.truth(i, pinned))

    def measure_action(self, i: int, action: int) -> float:
        return self._noisy[i].noisy_time(self.scenarios[i], self.truth_action(i, action))

    def describe(self, i: int) -> str:
        s = self.scenarios[i]
        return f"{self.name} {s.collective.name.lower()} {format_size(s.nbytes)}"


def replay_tables(folder: str | Path) -> list[tuple[str, ReplayTable, dict, Topology]]:
    """(system, table, nodes per call, datasheet topology) of every replay table in ``folder``
    whose system has a topology (``<folder>/../<system>/topology.yaml``)."""
    from dynamiccl.profiler.formats.measurement_paths import load_paths

    folder = Path(folder)
    out = []
    for csv in sorted(folder.glob("*.csv")):
        topology = folder.parent / csv.stem / "topology.yaml"
        if topology.is_file():
            records = load_paths([csv]).records
            nodes = {(r.coll, r.nbytes, r.nranks): r.nnodes or 1 for r in records}
            out.append((csv.stem, ReplayTable(records), nodes, load_topology(topology)))
    return out


class ReplayJob:
    """Every scored call of one replay table (NCCL's default and a forced choice measured) under
    one launch split (module docstring)."""

    def __init__(self, system: str, table: ReplayTable, nodes: dict, model: Topology, split: int) -> None:
        self.name = f"{system} split {split}"
        self.split = LaunchSplit(table, split)
        self.scenarios: list[Scenario] = []
        self._menus: dict[Scenario, tuple[KnobConstraints, ...]] = {}
        for (coll, nbytes, nranks), measured in sorted(table.calls.items()):
            n = nodes[(coll, nbytes, nranks)]
            s = Scenario(model.resized(nodes=n, gpus_per_node=nranks // n), coll, nbytes)
            forced = sorted((c for c in measured if c != DEFAULT_CHOICE and _model_runs(s, c)), key=str)
            if DEFAULT_CHOICE not in measured or not forced or self.split.scoring(s) is None:
                continue
            self.scenarios.append(s)
            self._menus[s] = (KnobConstraints(), *(KnobConstraints(**c.given()) for c in forced))
        self.nccl_us = [self.truth(i, KnobConstraints()) for i in range(len(self.scenarios))]
        self.best_us = [min(self.truth(i, p) for p in self._menus[s]) for i, s in enumerate(self.scenarios)]
        self.start()

    def menu(self, scenario: Scenario) -> tuple[KnobConstraints, ...]:
        return self._menus[scenario]

    def start(self) -> None:
        self._shown: dict[tuple[int, KnobConstraints], int] = {}

    def truth(self, i: int, pinned: KnobConstraints) -> float:
        t = self.split.truth(self.scenarios[i], choice_of(pinned))
        if t is None:
            raise ValueError(f"{pinned} was not measured for {self.describe(i)}")
        return t

    def measure(self, i: int, pinned: KnobConstraints) -> float:
        """The next launch of ``pinned`` the split shows (cycling through them)."""
        seen = self.split.seen(self.scenarios[i], choice_of(pinned))
        k = self._shown.get((i, pinned), 0)
        self._shown[(i, pinned)] = k + 1
        return seen[k % len(seen)].time_us

    def describe(self, i: int) -> str:
        s = self.scenarios[i]
        return f"{self.name} {s.collective.name.lower()} {format_size(s.nbytes)} ({s.topology.nranks} ranks)"


def _model_runs(scenario: Scenario, choice: Knobs) -> bool:
    try:
        decisions.nccl_default(scenario, KnobConstraints(**choice.given()))
    except ValueError:
        return False
    return True


Job = PerturbedJob | ReplayJob
#: A tuner playing a whole job: one trace per call.
Player = Callable[[Job, int], list[Trace]]


def forced(make: Callable[[Menu | None], CandidateTuner]) -> Player:
    """One candidate tuner for the whole job, pinning knobs (NCCL's pick = nothing pinned), every
    call once per round; ``make(menu)`` builds it (the job's menu on a replay)."""
    def play(job: Job, n_calls: int) -> list[Trace]:
        tuner = make(job.menu if isinstance(job, ReplayJob) else None)
        tuner.reset()
        job.start()
        traces = [Trace() for _ in job.scenarios]
        for _ in range(n_calls):
            for i, s in enumerate(job.scenarios):
                pinned = tuner.force(s)
                tuner.record(s, job.measure(i, pinned))
                traces[i].add(pinned, job.truth(i, pinned))
        return traces
    return play


def actions(make: Callable[[Scenario], object]) -> Player:
    """An action-id tuner (``act`` / ``update``), a fresh one per call (perturbed jobs only)."""
    def play(job: Job, n_calls: int) -> list[Trace]:
        assert isinstance(job, PerturbedJob), "a replay table measured no table actions"
        job.start()
        traces = []
        obs = np.zeros(1, dtype=np.float32)
        for i, s in enumerate(job.scenarios):
            tuner, trace = make(s), Trace()
            mask = valid_mask(s.topology, s.collective, deployable=True)
            for _ in range(n_calls):
                a = int(tuner.act(obs, scenario=s, action_mask=mask))
                tuner.update(s, a, job.measure_action(i, a))
                trace.add(a, job.truth_action(i, a))
            traces.append(trace)
        return traces
    return play


def sweep_table(job: Job, n_calls: int) -> list[Trace]:
    """NVIDIA's sweep -> table, online: every choice (NCCL's default and every pinned pair; on a
    replay, every measured choice) once, then the fastest measured for the rest of the calls."""
    job.start()
    traces = []
    for i, s in enumerate(job.scenarios):
        menu = job.menu(s) if isinstance(job, ReplayJob) else \
            (KnobConstraints(), *(p.constraints for p in candidate_pairs(s)))
        measured: dict[KnobConstraints, float] = {}
        trace = Trace()
        for k in range(n_calls):
            pinned = menu[k] if k < len(menu) else min(measured, key=measured.__getitem__)
            if pinned not in measured:
                measured[pinned] = job.measure(i, pinned)
            trace.add(pinned, job.truth(i, pinned))
        traces.append(trace)
    return traces


def nccl_default(job: Job, n_calls: int) -> list[Trace]:
    traces = []
    for i in range(len(job.scenarios)):
        trace = Trace()
        for _ in range(n_calls):
            trace.add(KnobConstraints(), job.nccl_us[i])
        traces.append(trace)
    return traces


@dataclass
class Score:
    """One tuner's traces, accumulated (``experiments/bench_online.py`` documents the figures)."""

    regret: list[float] = field(default_factory=list)
    #: The part of ``regret`` the settled phase (the trailing run of the final choice) makes.
    held_regret: float = 0.0
    settle: list[int] = field(default_factory=list)
    slower_exploited: int = 0
    exploited: int = 0
    slower_held: int = 0
    held: int = 0
    worst_exploited: float = math.inf
    worst_call: float = math.inf
    worst_context: tuple[float, str] = (-math.inf, "")
    final_gain: float = 0.0
    headroom: float = 0.0
    final_slower: int = 0
    explored: int = 0
    log_speedup: float = 0.0
    calls: int = 0

    def add(self, nccl_us: float, best_us: float, trace: Trace, where: str = "") -> None:
        t = np.array(trace.times)
        repeat = np.array(trace.repeat)
        self.regret.append(float(np.sum(np.log(t / best_us))))
        if self.regret[-1] > self.worst_context[0]:
            self.worst_context = (self.regret[-1], where)
        bad = np.flatnonzero(t > WITHIN * best_us)
        self.settle.append(int(bad[-1]) + 2 if bad.size else 1)
        speedup = nccl_us / t
        self.exploited += int(repeat.sum())
        self.slower_exploited += int(np.sum(repeat & (t > SLOWER * nccl_us)))
        held = trace.held()
        self.held += held
        self.held_regret += float(np.sum(np.log(t[-held:] / best_us)))
        self.slower_held += int(np.sum(t[-held:] > SLOWER * nccl_us))
        if repeat.any():
            self.worst_exploited = min(self.worst_exploited, float(speedup[repeat].min()))
        self.worst_call = min(self.worst_call, float(speedup.min()))
        self.final_gain += math.log(nccl_us / t[-1])
        self.headroom += math.log(nccl_us / best_us)
        self.final_slower += int(t[-1] > SLOWER * nccl_us)
        self.explored += int((~repeat).sum())
        self.log_speedup += float(np.sum(np.log(speedup)))
        self.calls += len(t)

    def __add__(self, other: Score) -> Score:
        """Both scores' calls as one."""
        out = Score()
        for f in fields(Score):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in ("worst_exploited", "worst_call"):
                setattr(out, f.name, min(a, b))
            elif f.name == "worst_context":
                setattr(out, f.name, max(a, b))
            else:
                setattr(out, f.name, a + b)
        return out

    def add_job(self, job: Job, traces: list[Trace]) -> None:
        for i, trace in enumerate(traces):
            self.add(job.nccl_us[i], job.best_us[i], trace, job.describe(i))

    def summary(self) -> dict:
        settle = np.array(self.settle)
        n_calls = self.calls // len(self.regret)
        return {
            "contexts": len(self.regret),
            "regret_50": round(float(np.mean(self.regret)), 4),
            "regret_held": round(self.held_regret / len(self.regret), 4),
            "calls_to_2pct_median": float(np.median(settle)),
            "within_10_calls": round(float(np.mean(settle <= GOAL_CALLS)), 3),
            "never_within_2pct": int(np.sum(settle > n_calls)),
            "slower_after_exploration": self.slower_held,
            "held_calls": self.held,
            "slower_repeats": self.slower_exploited,
            "exploitation_calls": self.exploited,
            "worst_exploited": None if math.isinf(self.worst_exploited) else round(self.worst_exploited, 4),
            "worst_call": round(self.worst_call, 4),
            "final_headroom_share": (round(self.final_gain / self.headroom, 4)
                                     if self.headroom > 1e-9 else None),
            "final_slower_2pct": self.final_slower,
            "explored_per_context": round(self.explored / len(self.regret), 2),
            "speedup_50": round(math.exp(self.log_speedup / self.calls), 4),
            "worst_regret_context": self.worst_context[1],
        }


def score(jobs: Sequence[Job], players: dict[str, Player], n_calls: int = N_CALLS,
          progress: Callable[[str], None] | None = None) -> dict[str, Score]:
    """Every player on every job (each job's calls, ``n_calls`` rounds)."""
    scores = {name: Score() for name in players}
    for job in jobs:
        for name, play in players.items():
            scores[name].add_job(job, play(job, n_calls))
        if progress is not None:
            progress(job.name)
    return scores
