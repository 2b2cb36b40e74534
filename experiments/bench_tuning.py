"""Every tuner scored against a reality that is not its model: ``python experiments/bench_tuning.py``.

Realities:

* ``perturbed``: the simulator with a hidden, seeded per-system miscalibration (per
  algorithm/protocol bandwidth within ±40 %, latency floors within 3x, 1-5 % measurement noise;
  held-out seeds from 1000 on) on a few systems. Decisions: per system, collective (allreduce,
  allgather, reducescatter) and message size (1 KiB to 1 GiB, powers of two), pin one
  ``NCCL_ALGO``/``NCCL_PROTO`` pair or leave NCCL alone (online tuners: any deployable action of
  the table, channels included).
* ``replay``: the replay tables of real forced-algorithm nccl-tests runs
  (``tests/fixtures/real/replay/*.csv``, ``--replay DIR``; each system's datasheet topology is
  ``<DIR>/../<system>/topology.yaml``). A decision is a measured call (collective, ranks, size)
  with NCCL's default and at least one forced run; its choices are exactly what was measured there
  (mostly ``NCCL_ALGO`` or ``NCCL_PROTO`` alone) -- a choice nobody measured is unavailable. The
  timings are what the hardware did, without noise added. Each log is one launch, and tuners
  decide from some launches and are scored on another (``envs.backends.replay.LaunchSplit``):
  where every choice of a call was timed in two launches or more, split k holds out each choice's
  k-th launch and shows the others, one launch per measurement (the 8xH100 node's allreduce from
  1 MiB: 10 and 11 launches); where a choice was timed once, the call is scored on that launch's
  in-place column (the same call timed again within the launch), and a call with neither (a
  summary table) is decided but not scored. Every split is scored; the figures are the median
  split's share (interquartile range), the share pooled over splits, and the slower decisions of
  the median split / the worst split. tune assumes the launch noise the split's shown launches
  give (:func:`history_noise`: the shipped NVSwitch default is the same computation on every
  launch, the scoring launch included). The A3 Mega table compares runs of two clusters (its
  README): kept, and listed per system.
* ``replay, every other size held out``: per replay table and (collective, ranks), the tuners see
  every launch of every choice at every other size (the first, third, ...; out-of-place) and decide
  the sizes between, scored there on the split's held-out launch, or on the out-of-place timing of
  a size nobody saw.

Next to each table, the spread between the timings: ``perturbed``: the measurement noise's sigma;
``replay``: the median |log(median of the launches tuners saw / the timing scored on)| over the
scored choices; and each replayed system's launch noise per size band (core spread and one
launch's tail) next to the system kind's default.

Per tuner and reality, over all scored decisions:

* ``headroom_share``: Σ log(t_default / t_pick) / Σ log(t_default / t_best), t_best the fastest
  choice in the scored timing (NCCL's default included; perturbed: any deployable action, channels
  too) -- the share of the reality's headroom captured (where the scored timing is one launch's
  noise, so is that headroom: ``sweep_every_launch`` shows what measuring everything takes of it);
* ``slower_2pct`` (held-out sizes: ``slower_3pct``): decisions more than 2 % (3 %) slower than
  NCCL's default, and ``worst`` decision;
* ``measurements``: timed calls the tuner used (online tuners: their exploration calls, whose cost
  ``exploration_speedup`` reports; they see noisy timings like everyone who measures);
* ``unavailable``: decisions where the tuner picked a choice the reality never measured (replay).

Besides, on the replay tables, the two rules a user writes by hand from a sweep
(``SIMPLE_RULES``): ``sweep_noise_gate`` (the fastest measured choice where it beats NCCL's default
by 3 %, held up to the next measured size) and ``neighbour_rule`` (between two measured sizes, the
choice that beat NCCL's default by 3 % at both); and next to each share the ``beyond_noise_share``:
gains and headroom at the decisions whose fastest choice beats NCCL's default by 5 % or more
(:data:`BEYOND_NOISE`), where the headroom is not one launch's noise.

Tuners, each at half and at the same measurement budget as the sweep: NVIDIA's sweep -> table
(every choice at every size, the fastest measured wins; ``_half``: every other size);
AutoCCL-style coordinate descent and a UCB bandit with a 5 % safety gate (online, the sweep's
budget per decision or half of it); ``tune`` (on a replay table, one launch per measurement: the
sweep launches every choice once) with the shipped learned prior as ``dynamiccl tune --prior`` runs
(it pins a call only on a calibrated model: ``--calibrate``; otherwise it ranks the plan), and
without it (``_no_prior``, ``dynamiccl tune``'s default); besides, NCCL's default, the model oracle
(what the uncalibrated simulator predicts fastest, ungated), the model behind the export gate, and
on the replay tables the sweep of every launch a split shows (``sweep_every_launch``, a
reference); learned policies when given
(``--adaptive MODEL.zip``: the online adaptive policy of ``agents.adaptive``; ``--policy PATH``:
anything ``agents.registry.load_policy`` loads -- a checkpoint, a policy file -- scored per call).
The online tuners and the adaptive policy pick exact table actions (algorithm, protocol and
channels), which no replay table measured: they are not applicable there. With sizes held out,
every tuner gets the same measurements (every launch of every choice at the kept sizes): NCCL's
default, the model, the sweep's table (the median of the launches; the rule of the measured size
below) and ``tune`` with and without the prior. Every tuner on a perturbed reality draws the same
measurement noise in the same order (common random numbers), whichever ran before it. Goals for
``tune``: replay, zero decisions > 2 % slower than NCCL, >= 80 % of the headroom with half the
sweep's measurements, >= 95 % with the same budget; sizes held out, >= 60 % of the headroom, zero
decisions > 3 % slower; perturbed, the learned prior beats ``tune`` without it at equal budget.

``--validation`` scores the perturbed realities only, on validation seeds (from 900) and other
systems: how tune uses the learned prior was chosen there, never on the held-out seeds or the
replay tables. ``experiments/bench_prior.py`` scores the prior itself (its errors and calibration,
and decisions at fixed budgets), with this script's :class:`Score`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from dynamiccl.agents.policies.online import CoordinateDescentTuner, UcbBandit
from dynamiccl.agents.shipping.prior import LearnedPrior
from dynamiccl.agents.shipping.tune import (
    Prior,
    Tuner,
    _model_time,
    calibrated_topology,
    candidate_pairs,
    model_can_run,
)
from dynamiccl.agents.shipping.tune_measurements import (
    DEFAULT,
    MIN_TAIL_DEVIATIONS,
    Choice,
    Measurements,
)
from dynamiccl.agents.shipping.tune_plan import plan
from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource
from dynamiccl.agents.training.prior_learner import VALIDATION_SEED_START
from dynamiccl.decisions import nccl_default
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.envs.backends.replay import HELD_OUT_LAUNCH, LaunchSplit, LaunchTiming, ReplayTable
from dynamiccl.envs.observation import encode
from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths
from dynamiccl.system.knobs import ACTIONS, Collective, Knobs, valid_mask
from dynamiccl.system.launch_noise import NOISE_BANDS, BandNoise, default_launch_noise
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology
from dynamiccl.system.units import format_size

SYSTEMS = (("dgx_h100", 1), ("dgx_h100", 2), ("dgx_a100", 2))
#: ``--validation``: other systems in validation realities (seeds from VALIDATION_SEED_START), where
#: tune's use of the learned prior was chosen; the evaluation's systems and seeds never decided it.
VALIDATION_SYSTEMS = (("dgx_h100", 4), ("dgx_a100", 1), ("pcie_cluster", 2))
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)
SIZES = tuple(1 << k for k in range(10, 31))
SLOWER = 1.02
#: Slower than NCCL by this much counts against a decision made at a size nothing measured.
SLOWER_HELD_OUT = 1.03
#: A decision's headroom is beyond noise where the fastest choice in the scored timing beats NCCL's
#: default by this much: below it, one launch's noise can make a choice "fastest" (the NVSwitch
#: node's launches stray by up to 4-9 % of the time: ``NVSWITCH_NODE_LAUNCH_NOISE``). The
#: beyond-noise share counts gains and headroom at those decisions only.
BEYOND_NOISE = 1.05
#: What the simple rules a user writes by hand ask of a measured gain over NCCL's default (the
#: gate's margin, ``DEFAULT_MARGIN``).
RULE_MARGIN = 0.03
TUNE_ROUNDS = 4
REPLAY_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real" / "replay"
NOT_ON_REPLAY = ("picks exact table actions (algorithm, protocol and channels); the replay tables "
                 "measured NCCL_ALGO/NCCL_PROTO runs only, so none of its choices was measured")


@lru_cache(maxsize=1)
def shipped_prior() -> LearnedPriorSource:
    """The learned prior ``dynamiccl tune --prior`` uses (loaded once)."""
    return LearnedPriorSource()


class Unmeasured(LookupError):
    """The reality never measured this choice for this call."""


def history_noise(reality, scenarios: list[Scenario]) -> tuple[BandNoise, ...] | None:
    """The launch noise per size band tune assumes for a replayed system, as its shipped default
    would be computed from this system's launch history without the launches the evaluation scores
    on: :meth:`Measurements.launch_spread` of every launch of ``scenarios`` the reality shows, where
    a band has :data:`MIN_TAIL_DEVIATIONS`, else the system kind's default. None where no band has
    (no call launched twice): tune then assumes what ``dynamiccl tune`` does, per system shape."""
    records = [_record(s, c, t.time_us, t.launch) for s in scenarios for c in reality.menu(s)
               for t in reality.seen(s, c)]
    kind = default_launch_noise(reality.model)
    measured = Measurements(records).launch_spread()
    if all(len(m.deviations) < MIN_TAIL_DEVIATIONS for m in measured):
        return None
    return tuple(BandNoise(m.core, m.tail) if len(m.deviations) >= MIN_TAIL_DEVIATIONS else d
                 for m, d in zip(measured, kind, strict=True))


class PerturbedReality:
    """One perturbed system: noisy measurements for tuners, noise-free truth for scoring."""

    name = "perturbed"
    #: The online tuners' action table can be timed here.
    times_actions = True
    #: Every measurement is a fresh noisy draw: a launch of its own, repeatable at will.
    launch_cap = None
    #: tune assumes the system kind's launch noise (:func:`default_launch_noise`).
    noise_defaults = None

    def __init__(self, seed: int, system: tuple[str, int]) -> None:
        self.seed = seed
        self.truth_backend = PerturbedBackend(seed, noisy=False)
        self.model = load_topology(system[0], nodes=system[1])
        self.scenarios = [Scenario(self.model, c, n) for c in COLLECTIVES for n in SIZES]
        self.restart()

    def restart(self) -> None:
        """A fresh stream of measurement noise: every tuner draws the same noise in the same order
        (common random numbers), whichever tuners ran before it."""
        self.noisy = PerturbedBackend(self.seed, noisy=True)
        self.calls = 0

    def menu(self, s: Scenario) -> list[Choice]:
        return [DEFAULT, *candidate_pairs(s)]

    def truth(self, s: Scenario, choice: Choice) -> float:
        return self.truth_backend.measure_forced(s, choice.constraints).time_us

    def measure(self, s: Scenario, choice: Choice, nth: int = 0) -> float:
        self.calls += 1
        return self.noisy.measure_forced(s, choice.constraints).time_us

    def scored(self, s: Scenario) -> bool:
        return True

    def spread(self) -> float:
        """The measurement noise's sigma (of log time)."""
        return self.noisy.truth.noise

    def best(self, s: Scenario) -> float:
        """The fastest deployable action of the table or pair (channels pinned too)."""
        times = self.truth_backend.action_times(s)
        actions = float(np.min(np.where(valid_mask(s.topology, s.collective, deployable=True),
                                        times, np.inf)))
        return min(min(self.truth(s, c) for c in self.menu(s)), actions)

    def truth_action(self, s: Scenario, action: int) -> float:
        return float(self.truth_backend.action_times(s)[action])

    def measure_action(self, s: Scenario, action: int) -> float:
        self.calls += 1
        return self.noisy.measure(s, action).time_us

    def describe(self, s: Scenario) -> str:
        return f"{s.collective.name.lower()} {format_size(s.nbytes)} on {s.topology.name}x" \
               f"{s.topology.nodes}"


class ReplayReality:
    """One system's replay table under one launch split (:class:`LaunchSplit`): the measured
    choices of every call measured with NCCL's default and at least one forced run; anything else
    is unavailable. Tuners measure launch by launch what the split lets them see (out-of-place
    timings); they are scored on the split's held-out launch, or on the in-place timing where a
    choice was timed in one launch only."""

    name = "replay"
    times_actions = False

    def __init__(self, system: str, records: list[MeasurementRecord], model: Topology,
                 split: int = 0) -> None:
        self.system = system
        self.model = model
        self.table = ReplayTable(records)
        self.split = LaunchSplit(self.table, split)
        shapes = {(r.coll, r.nbytes, r.nranks): r.nnodes or 1 for r in records}
        self.scenarios: list[Scenario] = []
        for (coll, nbytes, nranks), measured in sorted(self.table.calls.items(),
                                                       key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
            if Knobs() in measured and len(measured) > 1:
                nodes = shapes[(coll, nbytes, nranks)]
                topo = model.resized(nodes=nodes, gpus_per_node=nranks // nodes)
                self.scenarios.append(Scenario(topo, coll, nbytes))
        self.calls = 0

    def menu(self, s: Scenario) -> list[Choice]:
        return sorted((Choice.of(c) for c in self.table.choices(s)),
                      key=lambda c: (not c.is_default, c.label()))

    def seen(self, s: Scenario, choice: Choice) -> tuple[LaunchTiming, ...]:
        return self.split.seen(s, Knobs.of(choice))

    @cached_property
    def noise_defaults(self) -> tuple[BandNoise, ...]:
        """The launch noise tune assumes for this system: :func:`history_noise` of every launch
        this split shows."""
        return history_noise(self, self.scenarios)

    def launch_cap(self, s: Scenario, choice: Choice) -> int:
        """How many launches of ``choice`` at ``s`` a tuner can see."""
        return len(self.seen(s, choice))

    def measure(self, s: Scenario, choice: Choice, nth: int = 0) -> float:
        """The ``nth`` launch (from 0) of ``choice`` a tuner may see: its out-of-place timing."""
        seen = self.seen(s, choice)
        if nth >= len(seen):
            raise Unmeasured(f"{choice.label()} for {self.describe(s)}: {len(seen)} launches to see")
        self.calls += 1
        return seen[nth].time_us

    def truth(self, s: Scenario, choice: Choice) -> float:
        """The timing ``choice`` is scored on (the split's held-out launch, or in place)."""
        t = self.split.truth(s, Knobs.of(choice))
        if t is None:
            raise Unmeasured(f"{choice.label()} for {self.describe(s)} (no timing to score on)")
        return t

    def scored(self, s: Scenario) -> bool:
        return self.split.scoring(s) is not None

    def scoring_of(self, s: Scenario) -> str | None:
        """How this decision is scored (:class:`LaunchSplit`), None: not at all."""
        return self.split.scoring(s)

    def scoring(self) -> dict[str, int]:
        """How many decisions are scored how (held-out launch, in-place timing, not scored)."""
        out: dict[str, int] = defaultdict(int)
        for s in self.scenarios:
            out[self.scoring_of(s) or "not scored"] += 1
        return dict(out)

    def spread(self) -> float | None:
        """Median |log(what tuners see / the timing scored on)| over the scored decisions'
        choices, what they see being the median of their launches' out-of-place timings."""
        logs = [abs(math.log(float(np.median([t.time_us for t in self.seen(s, c)])) / self.truth(s, c)))
                for s in self.scenarios if self.scored(s) for c in self.menu(s)]
        return float(np.median(logs)) if logs else None

    def best(self, s: Scenario) -> float:
        return min(self.truth(s, c) for c in self.menu(s))

    def describe(self, s: Scenario) -> str:
        return f"{s.collective.name.lower()} {format_size(s.nbytes)} on {self.system} " \
               f"({s.topology.nranks} ranks)"


#: A held-out size scored on a launch the tuners saw at other sizes (no second launch exists).
UNSEEN_SIZE = "out-of-place timing of a size nobody saw"


def every_other_size(scenarios: list[Scenario]) -> set[Scenario]:
    """The first, third, ... size of each (collective, ranks) series."""
    index = _size_series(scenarios)
    return {s for s in scenarios if index[s] % 2 == 0}


def random_half_of_sizes(draw: int) -> Callable[[list[Scenario]], set[Scenario]]:
    """A seeded random half of each (collective, ranks) series' sizes (rounded up), draw ``draw``:
    the same sizes for every tuner, split and run."""
    def keep(scenarios: list[Scenario]) -> set[Scenario]:
        series: dict[tuple, list[Scenario]] = defaultdict(list)
        for s in scenarios:
            series[(s.collective, s.topology.nranks)].append(s)
        kept: set[Scenario] = set()
        for (collective, nranks), group in series.items():
            group.sort(key=lambda x: x.nbytes)
            rng = np.random.default_rng([draw, int(collective), nranks])
            kept.update(group[i] for i in rng.permutation(len(group))[:(len(group) + 1) // 2])
        return kept
    return keep


class HeldOutSizes:
    """A replay table with some sizes of each (collective, ranks) series held out (``keep`` says
    which are kept: by default every other size, the first, third, ...): tuners see every choice
    in every launch the split shows at the kept sizes and are scored at the held-out ones, on the
    split's held-out launch where each choice had two launches or more, else on the out-of-place
    timing of the launch the split picks (nobody saw anything at that size)."""

    name = "replay, sizes held out"
    times_actions = False

    def __init__(self, replay: ReplayReality,
                 keep: Callable[[list[Scenario]], set[Scenario]] = every_other_size) -> None:
        self.replay = replay
        self.system = replay.system
        self.model = replay.model
        self.scenarios = replay.scenarios
        kept = keep(replay.scenarios)
        self.kept = [s for s in replay.scenarios if s in kept]
        self.calls = 0

    def menu(self, s: Scenario) -> list[Choice]:
        return self.replay.menu(s)

    def seen(self, s: Scenario, choice: Choice) -> tuple[LaunchTiming, ...]:
        return self.replay.seen(s, choice) if s in self.kept else ()

    def launch_cap(self, s: Scenario, choice: Choice) -> int:
        return len(self.seen(s, choice))

    def measure(self, s: Scenario, choice: Choice, nth: int = 0) -> float:
        if s not in self.kept:
            raise Unmeasured(f"{self.describe(s)} is held out")
        self.calls += 1
        return self.replay.measure(s, choice, nth)

    @cached_property
    def noise_defaults(self) -> tuple[BandNoise, ...]:
        """:func:`history_noise` of the launches this split shows at the kept sizes."""
        return history_noise(self, self.kept)

    def truth(self, s: Scenario, choice: Choice) -> float:
        if self.replay.split.scoring(s) == HELD_OUT_LAUNCH:
            return self.replay.truth(s, choice)
        seen = self.replay.seen(s, choice)
        if not seen:
            raise Unmeasured(f"{choice.label()} for {self.describe(s)}")
        return seen[0].time_us

    def scored(self, s: Scenario) -> bool:
        return s not in self.kept and all(self.replay.seen(s, c) for c in self.menu(s))

    def scoring_of(self, s: Scenario) -> str | None:
        if not self.scored(s):
            return None
        return HELD_OUT_LAUNCH if self.replay.split.scoring(s) == HELD_OUT_LAUNCH else UNSEEN_SIZE

    def scoring(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for s in self.scenarios:
            out[self.scoring_of(s) or "kept or not scored"] += 1
        return dict(out)

    def spread(self) -> float | None:
        return self.replay.spread()

    def best(self, s: Scenario) -> float:
        return min(self.truth(s, c) for c in self.menu(s))

    def describe(self, s: Scenario) -> str:
        return self.replay.describe(s)


Reality = PerturbedReality | ReplayReality | HeldOutSizes


@dataclass
class Score:
    #: A decision slower than NCCL's default by more than this factor counts as slower.
    slower_than: float = SLOWER
    logs: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)
    worst: tuple[float, str] = (math.inf, "")
    slower: int = 0
    measurements: int = 0
    unavailable: int = 0
    exploration: list[float] = field(default_factory=list)
    #: The decisions whose headroom is beyond noise (:data:`BEYOND_NOISE`): their log gains and
    #: log headrooms.
    beyond_logs: list[float] = field(default_factory=list)
    beyond_best: list[float] = field(default_factory=list)
    #: Decisions more than 2 % slower than NCCL's default (:data:`SLOWER`), whatever ``slower_than``.
    slower_2pct: int = 0

    def add(self, where: str, t_default: float, t_best: float, t_pick: float | None) -> None:
        if t_pick is None:
            self.unavailable += 1
            return
        self.logs.append(math.log(t_default / t_pick))
        self.best.append(math.log(t_default / t_best))
        if t_default >= BEYOND_NOISE * t_best:
            self.beyond_logs.append(self.logs[-1])
            self.beyond_best.append(self.best[-1])
        speedup = t_default / t_pick
        if t_pick > self.slower_than * t_default:
            self.slower += 1
        self.slower_2pct += t_pick > SLOWER * t_default
        if speedup < self.worst[0]:
            self.worst = (speedup, where)

    def summary(self) -> dict:
        headroom = sum(self.best)
        scored = bool(self.logs)
        beyond = sum(self.beyond_best)
        out = {"headroom_share": round(sum(self.logs) / headroom, 4) if headroom > 1e-9 else None,
               "beyond_noise_share": round(sum(self.beyond_logs) / beyond, 4) if beyond > 1e-9
               else None, "beyond_noise_decisions": len(self.beyond_logs),
               "log_gain_beyond_noise": round(sum(self.beyond_logs), 6),
               "log_headroom_beyond_noise": round(beyond, 6),
               "geomean_speedup": round(math.exp(float(np.mean(self.logs))), 4) if scored else None,
               f"slower_{round(100 * (self.slower_than - 1))}pct": self.slower,
               "decisions": len(self.logs),
               "worst_speedup": round(self.worst[0], 4) if scored else None,
               "worst_decision": self.worst[1], "measurements": self.measurements,
               "log_gain": round(sum(self.logs), 6), "log_headroom": round(headroom, 6)}
        if self.slower_than != SLOWER:
            out["slower_than_nccl_2pct"] = self.slower_2pct
        if self.unavailable:
            out["unavailable"] = self.unavailable
        if self.exploration:
            out["exploration_speedup"] = round(math.exp(float(np.mean(self.exploration))), 4)
        return out


#: A tuner run on one reality: per decision the truth of its pick (None: not measured), the
#: measurements it used, and the log-speedups of its exploration calls.
Outcome = tuple[dict[Scenario, float | None], int, list[float]]
Picker = Callable[[Reality], Outcome]


def _truth_or_none(reality: Reality, s: Scenario, choice: Choice) -> float | None:
    try:
        return reality.truth(s, choice)
    except Unmeasured:
        return None


def _choices_picker(decide: Callable[[Reality], tuple[dict[Scenario, Choice], int]]) -> Picker:
    """A tuner that picks choices, scored by the truth of its picks."""
    def run(reality: Reality) -> Outcome:
        picks, used = decide(reality)
        return {s: _truth_or_none(reality, s, picks[s]) for s in reality.scenarios
                if reality.scored(s)}, used, []
    return run


def model_menu(reality: Reality, s: Scenario) -> list[Choice]:
    """What the model can weigh: the reality's choices the model can run."""
    return [c for c in reality.menu(s) if model_can_run(s, c)]


def nccl_default_tuner(reality: Reality):
    return {s: DEFAULT for s in reality.scenarios}, 0


def model_oracle(reality: Reality):
    return {s: min(model_menu(reality, s), key=lambda c: _model_time(s, c))
            for s in reality.scenarios}, 0


def model_gated(reality: Reality):
    tuner = Tuner(reality.model, Measurements([]), candidates=lambda s: model_menu(reality, s))
    return {s: tuner.decide(s).chosen for s in reality.scenarios}, 0


def _size_series(scenarios: list[Scenario]) -> dict[Scenario, int]:
    """Each decision's index among the sizes of its (collective, ranks) series, smallest first."""
    series: dict[tuple, list[Scenario]] = defaultdict(list)
    for s in scenarios:
        series[(s.collective, s.topology.nranks)].append(s)
    return {s: i for group in series.values()
            for i, s in enumerate(sorted(group, key=lambda x: x.nbytes))}


def sweep_table(every: int, every_launch: bool = False) -> Callable:
    """NVIDIA's optimize_config: measure every choice at every ``every``-th size, keep the fastest
    measured per size; a size not measured takes the rule of the measured size below it. With
    ``every_launch`` it measures every launch the reality shows and compares their medians."""
    def measure(reality: Reality, s: Scenario, c: Choice) -> list[float]:
        launches = reality.launch_cap(s, c) if every_launch and reality.launch_cap else 1
        return [reality.measure(s, c, nth) for nth in range(launches)]

    def decide(reality: Reality):
        picks: dict[Scenario, Choice] = {}
        used = 0
        last: dict[tuple, Choice] = {}
        index = _size_series(reality.scenarios)
        for s in sorted(reality.scenarios, key=lambda x: (x.collective, x.topology.nranks,
                                                          x.nbytes)):
            series = (s.collective, s.topology.nranks)
            if index[s] % every == 0:
                timed = {c: measure(reality, s, c) for c in reality.menu(s)}
                used += sum(map(len, timed.values()))
                medians = {c: float(np.median(t)) for c, t in timed.items()}
                last[series] = min(medians, key=medians.__getitem__)
            picks[s] = last[series] if last.get(series) in reality.menu(s) else DEFAULT
        return picks, used
    return decide


def _measured_gains(reality: Reality, s: Scenario) -> dict[Choice, float]:
    """Every choice's measured gain over NCCL's default at a size the reality shows (the median of
    every launch shown), t_default / t_choice - 1; empty where NCCL's default was not measured."""
    medians = {c: float(np.median([reality.measure(s, c, nth) for nth in range(n)]))
               for c in reality.menu(s) if (n := reality.launch_cap(s, c))}
    t_default = medians.pop(DEFAULT, None)
    return {} if t_default is None else {c: t_default / t - 1 for c, t in medians.items()}


def _shown(reality: Reality) -> dict[tuple, dict[int, dict[Choice, float]]]:
    """Per (collective, ranks) series, the measured gains at every size the reality shows."""
    shown = set(getattr(reality, "kept", reality.scenarios))
    out: dict[tuple, dict[int, dict[Choice, float]]] = defaultdict(dict)
    for s in reality.scenarios:
        if s in shown:
            out[(s.collective, s.topology.nranks)][s.nbytes] = _measured_gains(reality, s)
    return out


def _gated_best(gains: dict[Choice, float], margin: float) -> Choice:
    """The choice measured fastest, where it beats NCCL's default by ``margin``, else NCCL's."""
    best = max(gains, key=gains.__getitem__, default=None)
    return best if best is not None and gains[best] >= margin else DEFAULT


def sweep_noise_gate(margin: float = RULE_MARGIN) -> Callable:
    """A rule a user writes by hand from a sweep: at each measured size, the fastest measured choice
    where it beats NCCL's default there by ``margin`` (else NCCL's); a size not measured takes the
    rule of the measured size below it (NVIDIA's optimize_config, gated)."""
    def decide(reality: Reality):
        series = _shown(reality)
        picks: dict[Scenario, Choice] = {}
        for s in reality.scenarios:
            measured = series.get((s.collective, s.topology.nranks), {})
            below = [n for n in measured if n <= s.nbytes]
            pick = _gated_best(measured[max(below)], margin) if below else DEFAULT
            picks[s] = pick if pick in reality.menu(s) else DEFAULT
        return picks, _used(reality)
    return decide


def neighbour_rule(margin: float = RULE_MARGIN) -> Callable:
    """The other rule a user writes by hand: at a measured size, the fastest measured choice where
    it beats NCCL's default by ``margin``; at a size between two measured ones, the choice that beat
    NCCL's default by ``margin`` at both (of several, the one whose smaller gain is largest); else
    NCCL's."""
    def decide(reality: Reality):
        series = _shown(reality)
        picks: dict[Scenario, Choice] = {}
        for s in reality.scenarios:
            measured = series.get((s.collective, s.topology.nranks), {})
            if s.nbytes in measured:
                pick = _gated_best(measured[s.nbytes], margin)
            else:
                below = [n for n in measured if n < s.nbytes]
                above = [n for n in measured if n > s.nbytes]
                pick = DEFAULT
                if below and above:
                    lo, hi = measured[max(below)], measured[min(above)]
                    both = {c: min(g, hi[c]) for c, g in lo.items()
                            if c in hi and min(g, hi[c]) >= margin}
                    pick = max(both, key=both.__getitem__, default=DEFAULT)
            picks[s] = pick if pick in reality.menu(s) else DEFAULT
        return picks, _used(reality)
    return decide


def _used(reality: Reality) -> int:
    """Timed calls a rule reading every launch the reality shows uses."""
    shown = getattr(reality, "kept", reality.scenarios)
    return sum(reality.launch_cap(s, c) for s in shown for c in reality.menu(s))


#: The simple rules, as the benchmarks list them.
SIMPLE_RULES: dict[str, Callable] = {"sweep_noise_gate": sweep_noise_gate(),
                                     "neighbour_rule": neighbour_rule()}


def sweep_budget(reality: Reality) -> int:
    return sum(len(reality.menu(s)) for s in reality.scenarios)


def online(make: Callable[[int], object], fraction: float = 1.0) -> Picker:
    """An online tuner with ``fraction`` of the sweep's per-decision budget, on deployable actions,
    noisy times."""
    def run(reality: Reality) -> Outcome:
        times: dict[Scenario, float | None] = {}
        used = 0
        exploration: list[float] = []
        for s in reality.scenarios:
            tuner = make(max(1, int(fraction * len(reality.menu(s)))))
            mask = valid_mask(s.topology, s.collective, deployable=True)
            t_def = reality.truth(s, DEFAULT)
            obs = np.zeros(1, dtype=np.float32)
            for _ in range(tuner.budget):
                a = int(tuner.act(obs, scenario=s, action_mask=mask))
                tuner.update(s, a, reality.measure_action(s, a))
                exploration.append(math.log(t_def / reality.truth_action(s, a)))
                used += 1
            times[s] = reality.truth_action(s, int(tuner.act(obs, scenario=s, action_mask=mask)))
        return times, used, exploration
    return run


def adaptive(path: str) -> Picker:
    """The trained online adaptive policy (``agents.policies.adaptive``), one context per decision."""
    from dynamiccl.agents.policies.adaptive import load_adaptive

    tuner = load_adaptive(path)

    def make(budget: int) -> object:
        tuner.reset()
        tuner.budget = budget
        return tuner
    return online(make)


def static_policy(path: str) -> Picker:
    """A per-call policy ``agents.policies.registry`` loads (a checkpoint, a policy file, ...): its action
    at each decision; NCCL's own configuration counts as leaving NCCL alone (export defers there)."""
    from dynamiccl.agents.policies.registry import load_policy

    policy = load_policy(path, deployable=True)

    def run(reality: Reality) -> Outcome:
        times: dict[Scenario, float | None] = {}
        for s in filter(reality.scored, reality.scenarios):
            mask = valid_mask(s.topology, s.collective, deployable=True)
            action = int(policy.act(encode(s), scenario=s, action_mask=mask))
            config = ACTIONS[action]
            if config == nccl_default(s).config:
                times[s] = reality.truth(s, DEFAULT)
            elif reality.times_actions:
                times[s] = reality.truth_action(s, action)
            else:
                times[s] = _truth_or_none(reality, s, Choice.of(config))
        return times, 0, []
    return run


def tuner_for(reality: Reality, records: list[MeasurementRecord], model: Topology,
              prior: Prior | None) -> Tuner:
    """``dynamiccl tune``'s tuner on ``records``, weighing the choices the reality offers."""
    return Tuner(model, Measurements(records), calibrated=model is not reality.model,
                 candidates=lambda s: model_menu(reality, s), noise_defaults=reality.noise_defaults,
                 prior=prior)


def tune(fraction: float, calibrate: bool, prior: Prior | None) -> Callable:
    """``dynamiccl tune``'s loop: plan, measure, refit, in rounds, within ``fraction`` of the
    sweep's budget, weighing the choices the reality offers (with the learned prior, ``--prior``, or
    without)."""
    def decide(reality: Reality):
        budget = int(fraction * sweep_budget(reality))
        at = {(s.collective, s.topology.nranks, s.nbytes): s for s in reality.scenarios}
        records: list[MeasurementRecord] = []
        launches: Counter[tuple[Scenario, Choice]] = Counter()
        model = reality.model
        tuner = tuner_for(reality, records, model, prior)
        for r in range(TUNE_ROUNDS):
            share = budget // TUNE_ROUNDS if r < TUNE_ROUNDS - 1 else budget - len(records)
            for m in plan(tuner, reality.scenarios, share, max_launches=reality.launch_cap):
                s = at[(m.collective, m.nranks, m.nbytes)]
                time_us = reality.measure(s, m.choice, launches[(s, m.choice)])
                launches[(s, m.choice)] += 1
                records.append(_record(s, m.choice, time_us, len(records)))
            if calibrate:
                model, _ = calibrated_topology(records, reality.model)
            tuner = tuner_for(reality, records, model, prior)
        return {s: tuner.decide(s).chosen for s in reality.scenarios}, len(records)
    return decide


def kept_records(reality: HeldOutSizes) -> list[MeasurementRecord]:
    """Every launch of every choice at the kept sizes of a held-out reality, as records."""
    shown = [(s, c, nth) for s in reality.kept for c in reality.menu(s)
             for nth in range(reality.launch_cap(s, c))]
    return [_record(s, c, reality.measure(s, c, nth), i) for i, (s, c, nth) in enumerate(shown)]


def tune_on_kept(calibrate: bool, prior: Prior | None) -> Callable:
    """``dynamiccl tune`` given every launch of every choice at the kept sizes of a held-out
    reality."""
    def decide(reality: HeldOutSizes):
        records = kept_records(reality)
        model = calibrated_topology(records, reality.model)[0] if calibrate else reality.model
        tuner = tuner_for(reality, records, model, prior)
        return {s: tuner.decide(s).chosen for s in reality.scenarios}, len(records)
    return decide


def _record(s: Scenario, choice: Choice, time_us: float, launch: int | str) -> MeasurementRecord:
    """One measurement as a record: a launch of its own (``bench-<n>``), or the named one."""
    algbw, busbw = bandwidths(s.collective, s.nbytes, s.topology.nranks, time_us)
    return MeasurementRecord(
        s.collective.name.lower(), s.nbytes, s.topology.nranks, time_us, algbw, busbw,
        **choice.record(), nnodes=s.topology.nodes, source="bench_tuning",
        launch=launch if isinstance(launch, str) else f"bench-{launch}")


def tuners(calibrate: bool, adaptive_model: str | None = None,
           policies: tuple[str, ...] = (), prior: Prior | None = None) -> dict[str, Picker]:
    """Every tuner at half and at the sweep's budget; ``tune`` with ``prior`` (default: the shipped
    learned prior) and without."""
    prior = prior if prior is not None else shipped_prior()

    def descent(budget: int) -> CoordinateDescentTuner:
        return CoordinateDescentTuner(budget, deployable=True)

    def bandit(budget: int) -> UcbBandit:
        return UcbBandit(budget, deployable=True, safety_gate=0.05)

    out = {
        "nccl_default": _choices_picker(nccl_default_tuner),
        "model_oracle_export": _choices_picker(model_oracle),
        "model_gated_export": _choices_picker(model_gated),
        "sweep_table": _choices_picker(sweep_table(1)),
        "sweep_table_half": _choices_picker(sweep_table(2)),
        "coordinate_descent_half_budget": online(descent, 0.5),
        "bandit_5pct_gate_half_budget": online(bandit, 0.5),
        "tune_half_budget": _choices_picker(tune(0.5, calibrate, prior)),
        "tune_half_budget_no_prior": _choices_picker(tune(0.5, calibrate, None)),
        "coordinate_descent": online(descent),
        "bandit_5pct_gate": online(bandit),
        "tune_same_budget": _choices_picker(tune(1.0, calibrate, prior)),
        "tune_same_budget_no_prior": _choices_picker(tune(1.0, calibrate, None)),
    }
    if adaptive_model:
        out["adaptive"] = adaptive(adaptive_model)
    for path in policies:
        out[f"policy:{Path(path).name}"] = static_policy(path)
    return out


#: Tuners that time the online action table (not applicable to a replay table).
ACTION_TUNERS = ("coordinate_descent", "bandit_5pct_gate", "coordinate_descent_half_budget",
                 "bandit_5pct_gate_half_budget", "adaptive")


def score(realities: list[Reality], pickers: dict[str, Picker],
          progress: Callable[[Reality], None] | None = None, slower_than: float = SLOWER,
          by_system: dict[str, dict] | None = None, by_scoring: dict[str, dict] | None = None,
          cache: dict | None = None) -> dict:
    """Every picker on every reality, over the scored decisions; per system and per way of
    scoring too where ``by_system`` / ``by_scoring`` are given (filled in place; the latter
    without measurement counts, which belong to a reality, not to a decision). ``cache`` keeps
    each picker's outcome on a reality by the reality's ``key`` (a replay split that repeats
    another: a system with fewer launches than the most launched one)."""
    scores = {name: Score(slower_than) for name in pickers}
    groups: dict[str, dict[str, dict[str, Score]]] = {"system": defaultdict(dict),
                                                      "scoring": defaultdict(dict)}
    for reality in realities:
        scored = [s for s in reality.scenarios if reality.scored(s)]
        t_def = {s: reality.truth(s, DEFAULT) for s in scored}
        t_best = {s: reality.best(s) for s in scored}
        system = getattr(reality, "system", None)
        kind = getattr(reality, "scoring_of", lambda s: None)
        key = getattr(reality, "key", None)
        for name, pick in pickers.items():
            if name in ACTION_TUNERS and not reality.times_actions:
                continue
            if cache is not None and key is not None and (key, name) in cache:
                times, used, exploration = cache[(key, name)]
            else:
                getattr(reality, "restart", lambda: None)()
                times, used, exploration = pick(reality)
                if cache is not None and key is not None:
                    cache[(key, name)] = (times, used, exploration)
            mine = groups["system"][system].setdefault(name, Score(slower_than)) if system else None
            for target in filter(None, (scores[name], mine)):
                target.measurements += used
                target.exploration += exploration
            for s in scored:
                where = reality.describe(s)
                how = kind(s)
                targets = [scores[name], mine,
                           groups["scoring"][how].setdefault(name, Score(slower_than)) if how else None]
                for target in filter(None, targets):
                    target.add(where, t_def[s], t_best[s], times[s])
        if progress:
            progress(reality)
    for wanted, grouped, drop in ((by_system, groups["system"], ()),
                                  (by_scoring, groups["scoring"], ("measurements",))):
        if wanted is not None:
            for label, per_tuner in grouped.items():
                wanted[label] = {name: {k: v for k, v in s.summary().items() if k not in drop}
                                 for name, s in per_tuner.items() if s.logs or s.unavailable}
    return {name: s.summary() for name, s in scores.items()
            if s.logs or s.unavailable}


def run(seeds: list[int], systems, calibrate: bool, progress: bool,
        adaptive_model: str | None = None, policies: tuple[str, ...] = (),
        prior: Prior | None = None) -> dict:
    """Every tuner on the perturbed realities of ``seeds`` x ``systems``."""
    realities = [PerturbedReality(seed, system) for seed in seeds for system in systems]
    done = (lambda r: print(f"seed {r.seed} {r.model.name}x{r.model.nodes} done", file=sys.stderr,
                            flush=True)) if progress else None
    return score(realities, tuners(calibrate, adaptive_model, policies, prior), done)


@dataclass(frozen=True)
class ReplaySystem:
    """One replay table: its system, records, datasheet topology and number of launch splits."""

    name: str
    records: list[MeasurementRecord]
    model: Topology
    splits: int

    def reality(self, split: int) -> ReplayReality:
        """Split ``split`` (taken modulo this table's own number of splits)."""
        reality = ReplayReality(self.name, self.records, self.model, split % self.splits)
        reality.key = (self.name, split % self.splits)
        return reality


def replay_systems(folder: Path) -> list[ReplaySystem]:
    """One per replay table with at least one decision; its system's datasheet topology is the
    fixture folder's ``<system>/topology.yaml``."""
    out = []
    for table in sorted(folder.glob("*.csv")):
        topology = folder.parent / table.stem / "topology.yaml"
        if not topology.is_file():
            continue
        records = load_paths([table]).records
        reality = ReplayReality(table.stem, records, load_topology(topology))
        if reality.scenarios:
            out.append(ReplaySystem(table.stem, records, reality.model,
                                    LaunchSplit.count(reality.table)))
    return out


def launch_noise_report(system: ReplaySystem) -> dict[str, dict]:
    """Per size band: the launch-to-launch noise every repeated launch of the table shows
    (:meth:`Measurements.launch_spread`; deviations counted) next to the system kind's default tune
    assumes without them (:func:`default_launch_noise`)."""
    measured = Measurements(system.records).launch_spread()
    kind = default_launch_noise(system.model)
    return {band: {"deviations": len(m.deviations), "core": round(m.core, 4),
                   "tail": round(m.tail, 4), "default_core": d.core, "default_tail": d.tail}
            for band, m, d in zip(NOISE_BANDS, measured, kind, strict=True)}


def replay_realities(folder: Path, split: int = 0) -> list[ReplayReality]:
    """Every replay table's reality under launch split ``split``."""
    return [system.reality(split) for system in replay_systems(folder)]


def over_splits(summaries: list[dict]) -> dict:
    """One tuner's summaries over the launch splits: the median split's share with the
    interquartile range of all (a split whose scoring launch left little headroom has a share
    far from the rest), the share pooled over all splits (their gains over their headroom), the
    most decisions slower in any split, the median split's, and the worst decision of all."""
    shares = [r["headroom_share"] for r in summaries if r["headroom_share"] is not None]
    slower = next(k for k in summaries[0] if k.startswith("slower_"))
    worst = min((r for r in summaries if r["worst_speedup"] is not None),
                key=lambda r: r["worst_speedup"], default=summaries[0])
    headroom = sum(r["log_headroom"] for r in summaries)
    beyond = sum(r["log_headroom_beyond_noise"] for r in summaries)
    out = {"headroom_share": round(float(np.median(shares)), 4) if shares else None,
           "share_iqr": [round(float(q), 4) for q in np.quantile(shares, [0.25, 0.75])]
           if shares else None,
           "pooled_share": round(sum(r["log_gain"] for r in summaries) / headroom, 4)
           if headroom > 1e-9 else None,
           "beyond_noise_share": round(sum(r["log_gain_beyond_noise"] for r in summaries) / beyond, 4)
           if beyond > 1e-9 else None,
           "beyond_noise_decisions": summaries[0]["beyond_noise_decisions"],
           "geomean_speedup": None if worst["geomean_speedup"] is None else round(float(np.median(
               [r["geomean_speedup"] for r in summaries])), 4),
           slower: max(r[slower] for r in summaries),
           f"{slower}_median_split": int(np.median([r[slower] for r in summaries])),
           "splits_with_slower": sum(r[slower] > 0 for r in summaries),
           "decisions": summaries[0]["decisions"],
           "worst_speedup": worst["worst_speedup"], "worst_decision": worst["worst_decision"],
           "splits": len(summaries)}
    if "measurements" in summaries[0]:
        out["measurements"] = int(np.median([r["measurements"] for r in summaries]))
    if any(r.get("unavailable") for r in summaries):
        out["unavailable"] = max(r.get("unavailable", 0) for r in summaries)
    if "slower_than_nccl_2pct" in summaries[0]:
        out["slower_than_nccl_2pct"] = max(r["slower_than_nccl_2pct"] for r in summaries)
    return out


def _spreads(per_split: list[list]) -> dict:
    """The spread between the timing decided on and the one scored on, per system (the median
    over splits) and overall (the median of the systems')."""
    systems = [r.system for r in per_split[0]]
    per: dict[str, float | None] = {}
    for i, name in enumerate(systems):
        known = [v for split in per_split if (v := split[i].spread()) is not None]
        per[name] = float(np.median(known)) if known else None
    known = [v for v in per.values() if v is not None]
    return {"median_abs_log": round(float(np.median(known)), 4) if known else None,
            "by_system": {k: None if v is None else round(v, 4) for k, v in per.items()}}


def score_splits(systems: list[ReplaySystem], pickers: dict[str, Picker],
                 held_out: bool = False, slower_than: float = SLOWER) -> dict:
    """Every picker on every launch split of the replay tables (:class:`LaunchSplit`): each split
    scored on its own, then summarised over the splits (:func:`over_splits`)."""
    splits = max((s.splits for s in systems), default=1)
    cache: dict = {}
    tuned, per_system, per_scoring, realities = [], [], [], []
    for k in range(splits):
        split = [system.reality(k) for system in systems]
        if held_out:
            split = [_held_out(r) for r in split]
        by_system: dict[str, dict] = {}
        by_scoring: dict[str, dict] = {}
        tuned.append(score(split, pickers, slower_than=slower_than, by_system=by_system,
                           by_scoring=by_scoring, cache=cache))
        per_system.append(by_system)
        per_scoring.append(by_scoring)
        realities.append(split)
    names = [name for name in pickers if name in tuned[0]]
    kinds = sorted({kind for b in per_scoring for kind in b})
    return {"splits": splits, "splits_by_system": {s.name: s.splits for s in systems},
            "scoring": {r.system: r.scoring() for r in realities[0]},
            "spread": _spreads(realities),
            "tuners": {name: over_splits([t[name] for t in tuned]) for name in names},
            "by_scoring": {kind: {name: over_splits([b[kind][name] for b in per_scoring])
                                  for name in names if name in per_scoring[0].get(kind, {})}
                           for kind in kinds},
            "by_system": {s.name: {name: over_splits([b[s.name][name] for b in per_system])
                                   for name in names if name in per_system[0].get(s.name, {})}
                          for s in systems}}


def _held_out(replay: ReplayReality) -> HeldOutSizes:
    held = HeldOutSizes(replay)
    held.key = ("held out", *replay.key)
    return held


def run_replay(folder: Path, calibrate: bool, adaptive_model: str | None = None,
               policies: tuple[str, ...] = (), prior: Prior | None = None) -> dict:
    systems = replay_systems(folder)
    pickers = {**tuners(calibrate, adaptive_model, policies, prior),
               "sweep_every_launch": _choices_picker(sweep_table(1, every_launch=True)),
               **{name: _choices_picker(rule) for name, rule in SIMPLE_RULES.items()}}
    first = [s.reality(0) for s in systems]
    return {"tables": str(folder),
            "launch_noise": {s.name: launch_noise_report(s) for s in systems},
            "systems": {r.system: len(r.scenarios) for r in first},
            "scored": {r.system: sum(map(r.scored, r.scenarios)) for r in first},
            "decided_on": "out-of-place timings of the launches each split shows",
            "scored_on": "each split's held-out launch (every choice timed in 2+ launches), else "
                         "the in-place timing of the launch the split picks",
            "not_applicable": {name: NOT_ON_REPLAY for name in pickers if name in ACTION_TUNERS},
            **score_splits(systems, pickers)}


def run_held_out(folder: Path, calibrate: bool, prior: Prior | None = None) -> dict:
    """The replay tables with every other size held out (:class:`HeldOutSizes`), per launch split."""
    systems = replay_systems(folder)
    pickers = {"nccl_default": _choices_picker(nccl_default_tuner),
               "model_oracle_export": _choices_picker(model_oracle),
               "model_gated_export": _choices_picker(model_gated),
               "sweep_table_half": _choices_picker(sweep_table(2, every_launch=True)),
               "tune": _choices_picker(tune_on_kept(calibrate, prior or shipped_prior())),
               "tune_no_prior": _choices_picker(tune_on_kept(calibrate, None)),
               **{name: _choices_picker(rule) for name, rule in SIMPLE_RULES.items()}}
    first = [HeldOutSizes(s.reality(0)) for s in systems]
    return {"tables": str(folder),
            "held_out": {r.system: sum(map(r.scored, r.scenarios)) for r in first},
            "decided_on": "out-of-place timing at the kept sizes (one launch per choice)",
            "scored_on": "at the held-out sizes: each split's held-out launch, else the out-of-place "
                         "timing of the launch the split picks",
            **score_splits(systems, pickers, held_out=True, slower_than=SLOWER_HELD_OUT)}


def _share(r: dict | None) -> str:
    """A share with its interquartile range over launch splits where they differ:
    ``0.812 (0.70..0.90)``."""
    if r is None or r["headroom_share"] is None:
        return "n/a"
    lo, hi = r.get("share_iqr") or (r["headroom_share"], r["headroom_share"])
    return f"{r['headroom_share']:.3f}" + (f" ({lo:.2f}..{hi:.2f})" if hi - lo > 5e-4 else "")


def _print(title: str, results: dict, by_system: dict | None = None,
           by_scoring: dict | None = None) -> None:
    print(title)
    slower = next((k for r in results.values() for k in r if k.startswith("slower_")), "slower_2pct")
    column = f">{slower.split('_')[1].removesuffix('pct')}% slower"
    pooled = any("pooled_share" in r for r in results.values())
    print(f"{'tuner':30} {'share':>19}" + (f" {'pooled':>7}" if pooled else "")
          + f" {'beyond':>7} {'geomean':>8} {column:>10} {'worst':>7} {'measurements':>12}  worst decision")
    for name, r in results.items():
        worst = "n/a" if r["worst_speedup"] is None else f"{r['worst_speedup']:.3f}x"
        geomean = "n/a" if r["geomean_speedup"] is None else f"{r['geomean_speedup']:.3f}x"
        missing = f" ({r['unavailable']} picks unmeasured)" if r.get("unavailable") else ""
        share = "n/a" if r.get("pooled_share") is None else f"{r['pooled_share']:.3f}"
        beyond = "n/a" if r.get("beyond_noise_share") is None else f"{r['beyond_noise_share']:.3f}"
        print(f"{name:30} {_share(r):>19}" + (f" {share:>7}" if pooled else "")
              + f" {beyond:>7} {geomean:>8} {_slower(r, slower):>10} {worst:>7} {r['measurements']:>12}  "
              f"{r['worst_decision']}{missing}")
    for label, groups in (("system", by_system), ("scoring", by_scoring)):
        if not groups:
            continue
        keys = list(groups)
        print(f"  share by {label}: {'tuner':30} " + " ".join(f"{k[:30]:>30}" for k in keys))
        for name in results:
            cells = []
            for k in keys:
                r = groups[k].get(name)
                cells.append("n/a" if r is None or r["headroom_share"] is None else
                             f"{_share(r)} {_slower(r, slower)}sl")
            print(f"  {'':17}{name:30} " + " ".join(f"{c:>30}" for c in cells))


def _slower(r: dict, key: str) -> str:
    """Slower decisions: the median split's / the most in any split, where splits differ."""
    median = r.get(f"{key}_median_split")
    return str(r[key]) if median is None or median == r[key] else f"{median}/{r[key]}"


def _noise_lines(noise: dict) -> str:
    """Per system with repeated launches: each size band's launch noise (core 1-sigma / one
    launch's tail, and how many launch deviations say so) against the system kind's default."""
    lines = []
    for system, bands in noise.items():
        cells = [f"{band} {100 * b['core']:.2f}%/{100 * b['tail']:.1f}% ({b['deviations']}; "
                 f"default {100 * b['default_core']:.2f}%/{100 * b['default_tail']:.1f}%)"
                 for band, b in bands.items() if b["deviations"]]
        if cells:
            lines.append(f"launch noise of {system} (core/tail from its repeated launches; tune "
                         f"recomputes it per split without the scoring launch): " + "; ".join(cells))
    return "\n".join(lines) or "launch noise: no replay table has repeated launches"


def _scoring_line(replay: dict) -> str:
    """Per system: its decisions and how they are scored."""
    def how(system: str) -> str:
        return ", ".join(f"{n} on {kind}" for kind, n in replay["scoring"][system].items())
    return "; ".join(f"{k} {v} decisions ({how(k)})" for k, v in replay["systems"].items())


def _spread_line(spread: dict, what: str) -> str:
    per = ", ".join(f"{k} {'n/a' if v is None else f'{100 * v:.1f}%'}"
                    for k, v in spread["by_system"].items())
    overall = spread["median_abs_log"]
    return f"spread ({what}): median {'n/a' if overall is None else f'{100 * overall:.1f}%'}; {per}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="held-out realities (default 5)")
    parser.add_argument("--calibrate", action="store_true",
                        help="tune also fits the topology (profiler.fit.calibrate) each round")
    parser.add_argument("--replay", type=Path, default=REPLAY_DIR, metavar="DIR",
                        help="folder of replay tables (default: tests/fixtures/real/replay)")
    parser.add_argument("--adaptive", metavar="MODEL.zip",
                        help="also score the trained adaptive online policy (agents.policies.adaptive)")
    parser.add_argument("--policy", action="append", default=[], metavar="PATH",
                        help="also score a policy agents.policies.registry loads (checkpoint, policy "
                             "file); repeatable")
    parser.add_argument("--prior", metavar="FILE",
                        help="tune's learned prior (default: the shipped one)")
    parser.add_argument("--validation", action="store_true",
                        help="perturbed realities only, on validation seeds (from "
                             f"{VALIDATION_SEED_START}) and other systems: where choices about tune "
                             "are made, never on the held-out seeds or the replay tables")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.seeds <= 100:
        parser.error("--seeds takes 1..100")
    if not args.replay.is_dir():
        parser.error(f"--replay {args.replay}: no such folder of replay tables")
    for path in [args.adaptive, *args.policy]:
        if path and not Path(path).exists():
            parser.error(f"{path}: no such model or policy file")
    try:
        prior = LearnedPriorSource(LearnedPrior.load(args.prior))
    except ValueError as exc:
        parser.error(str(exc))
    began = time.perf_counter()
    first, systems = (VALIDATION_SEED_START, VALIDATION_SYSTEMS) if args.validation else \
        (HELDOUT_SEED_START, SYSTEMS)
    seeds = list(range(first, first + args.seeds))
    learned = {"adaptive_model": args.adaptive, "policies": tuple(args.policy), "prior": prior}
    realities = [PerturbedReality(seed, system) for seed in seeds for system in systems]
    noise = [r.spread() for r in realities]
    perturbed = run(seeds, systems, args.calibrate, progress=not args.json, **learned)
    replay = None if args.validation else run_replay(args.replay, args.calibrate, **learned)
    held_out = None if args.validation else run_held_out(args.replay, args.calibrate, prior)
    kind = "validation" if args.validation else "held-out"
    doc = {"action_set": "deployable", "calibrate": args.calibrate,
           "prior": prior.learned.meta.get("command", args.prior or "shipped"),
           "perturbed": {"reality": f"perturbed, {kind} seeds {seeds[0]}..{seeds[-1]}",
                         "systems": [f"{t}x{n}" for t, n in systems],
                         "sizes": "1KiB..1GiB (powers of two)",
                         "collectives": [c.name.lower() for c in COLLECTIVES],
                         "decided_on": "noisy measurements", "scored_on": "noise-free truth",
                         "spread": {"noise_sigma_median": round(float(np.median(noise)), 4),
                                    "noise_sigma_range": [round(min(noise), 4), round(max(noise), 4)]},
                         "tuners": perturbed},
           **({} if replay is None else {"replay": replay, "replay_sizes_held_out": held_out}),
           "seconds": round(time.perf_counter() - began, 1)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    p = doc["perturbed"]
    _print(f"{p['reality']}; {', '.join(p['systems'])}; {p['sizes']}; deployable actions",
           perturbed)
    lo, hi = p["spread"]["noise_sigma_range"]
    print(f"spread (noisy measurement vs truth): noise sigma {100 * lo:.1f}-{100 * hi:.1f}% "
          f"(median {100 * p['spread']['noise_sigma_median']:.1f}%)")
    print()
    if replay is None:
        return 0
    _print(f"replay: {_scoring_line(replay)}; measured choices only; {replay['splits']} launch "
           "splits (share: the median split's (interquartile range); pooled: all splits' gains "
           "over their headroom; slower: the median split's/the most in any split)",
           replay["tuners"], replay["by_system"], replay["by_scoring"])
    print(_spread_line(replay["spread"], "what tuners saw vs the timing scored on"))
    print(_noise_lines(replay["launch_noise"]))
    for name, why in replay["not_applicable"].items():
        print(f"{name}: not applicable on replay ({why})")
    print()
    held = ", ".join(f"{k} ({v})" for k, v in held_out["held_out"].items())
    _print(f"replay, every other size held out: {held} held-out decisions; every choice measured "
           f"in every launch shown at the kept sizes; {held_out['splits']} launch splits",
           held_out["tuners"], held_out["by_system"], held_out["by_scoring"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
