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
  timings are what the hardware did, without noise added; ``tune`` gets each with the same log's
  in-place time of the call, as an nccl-tests run gives both, and reads its noise from the pairs.
  The A3 Mega table compares runs of two clusters (its README): kept, and listed per system.

Per tuner and reality, over all decisions:

* ``headroom_share``: Σ log(t_default / t_pick) / Σ log(t_default / t_best), t_best the fastest
  choice in the reality (NCCL's default included; perturbed: any deployable action, channels too)
  -- the share of the reality's headroom captured;
* ``slower_2pct``: decisions more than 2 % slower than NCCL's default, and ``worst`` decision;
* ``measurements``: timed calls the tuner used (online tuners: their exploration calls, whose cost
  ``exploration_speedup`` reports; they see noisy timings like everyone who measures);
* ``unavailable``: decisions where the tuner picked a choice the reality never measured (replay).

Tuners: NCCL's default; the model oracle (what the uncalibrated simulator predicts fastest,
ungated); the model behind the export gate; NVIDIA's sweep -> table (every choice at every size,
the fastest measured wins; and the same at every other size, half the budget); AutoCCL-style
coordinate descent and a UCB bandit with a 5 % safety gate (online, the sweep's budget per
decision); ``tune`` with half and with the same budget as the sweep; learned policies when given
(``--adaptive MODEL.zip``: the online adaptive policy of ``agents.adaptive``; ``--policy PATH``:
anything ``agents.registry.load_policy`` loads -- a checkpoint, a policy file -- scored per call).
The online tuners and the adaptive policy pick exact table actions (algorithm, protocol and
channels), which no replay table measured: they are not applicable there. Goals for ``tune``:
zero decisions > 2 % slower than NCCL, >= 80 % of the headroom with half the sweep's
measurements, >= 95 % with the same budget.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynamiccl.agents.online import CoordinateDescentTuner, UcbBandit
from dynamiccl.agents.tune import (
    DEFAULT,
    Choice,
    Measurements,
    Tuner,
    _model_time,
    calibrated_topology,
    candidate_pairs,
    model_can_run,
    plan,
)
from dynamiccl.decisions import nccl_default
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.envs.backends.replay import ReplayTable
from dynamiccl.envs.observation import encode
from dynamiccl.knobs import ACTIONS, Collective, valid_mask
from dynamiccl.profiler.measurement_paths import load_paths
from dynamiccl.profiler.records import MeasurementRecord, bandwidths
from dynamiccl.scenario import Scenario
from dynamiccl.topology import Topology, load_topology
from dynamiccl.units import format_size

SYSTEMS = (("dgx_h100", 1), ("dgx_h100", 2), ("dgx_a100", 2))
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)
SIZES = tuple(1 << k for k in range(10, 31))
SLOWER = 1.02
TUNE_ROUNDS = 4
REPLAY_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real" / "replay"
NOT_ON_REPLAY = ("picks exact table actions (algorithm, protocol and channels); the replay tables "
                 "measured NCCL_ALGO/NCCL_PROTO runs only, so none of its choices was measured")


class Unmeasured(LookupError):
    """The reality never measured this choice for this call."""


class PerturbedReality:
    """One perturbed system: noisy measurements for tuners, noise-free truth for scoring."""

    name = "perturbed"
    #: The online tuners' action table can be timed here.
    times_actions = True

    def __init__(self, seed: int, system: tuple[str, int]) -> None:
        self.seed = seed
        self.noisy = PerturbedBackend(seed, noisy=True)
        self.truth_backend = PerturbedBackend(seed, noisy=False)
        self.model = load_topology(system[0], nodes=system[1])
        self.scenarios = [Scenario(self.model, c, n) for c in COLLECTIVES for n in SIZES]
        self.calls = 0

    def menu(self, s: Scenario) -> list[Choice]:
        return [DEFAULT, *candidate_pairs(s)]

    def truth(self, s: Scenario, choice: Choice) -> float:
        return self.truth_backend.measure_forced(s, choice.constraints).time_us

    def measure(self, s: Scenario, choice: Choice) -> float:
        self.calls += 1
        return self.noisy.measure_forced(s, choice.constraints).time_us

    def measured_again(self, s: Scenario, choice: Choice) -> None:
        """One timing per measurement here, as the tuners' noise assumption expects."""
        return None

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
    """One system's replay table: the measured choices of every call measured with NCCL's default
    and at least one forced run; anything else is unavailable."""

    name = "replay"
    times_actions = False

    def __init__(self, system: str, records: list[MeasurementRecord], model: Topology) -> None:
        self.system = system
        self.model = model
        self.table = ReplayTable(records)
        shapes = {(r.coll, r.nbytes, r.nranks): r.nnodes or 1 for r in records}
        self.scenarios: list[Scenario] = []
        for (coll, nbytes, nranks), measured in sorted(self.table.calls.items(),
                                                       key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
            if (None, None, None) in measured and len(measured) > 1:
                nodes = shapes[(coll, nbytes, nranks)]
                topo = model.resized(nodes=nodes, gpus_per_node=nranks // nodes)
                self.scenarios.append(Scenario(topo, coll, nbytes))
        self.calls = 0

    def menu(self, s: Scenario) -> list[Choice]:
        return sorted((Choice(*c) for c in self.table.choices(s)),
                      key=lambda c: (not c.is_default, c.label()))

    def truth(self, s: Scenario, choice: Choice) -> float:
        measured = self.table.choices(s)
        key = (choice.algorithm, choice.protocol, choice.channels)
        if key not in measured:
            raise Unmeasured(f"{choice.label()} for {self.describe(s)}")
        return measured[key]

    def measure(self, s: Scenario, choice: Choice) -> float:
        self.calls += 1
        return self.truth(s, choice)

    def measured_again(self, s: Scenario, choice: Choice) -> float | None:
        """The same run's in-place time of the call (nccl-tests times every size twice)."""
        return self.table.timed_again(s).get((choice.algorithm, choice.protocol, choice.channels))

    def best(self, s: Scenario) -> float:
        return min(self.truth(s, c) for c in self.menu(s))

    def describe(self, s: Scenario) -> str:
        return f"{s.collective.name.lower()} {format_size(s.nbytes)} on {self.system} " \
               f"({s.topology.nranks} ranks)"


Reality = PerturbedReality | ReplayReality


@dataclass
class Score:
    logs: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)
    worst: tuple[float, str] = (math.inf, "")
    slower: int = 0
    measurements: int = 0
    unavailable: int = 0
    exploration: list[float] = field(default_factory=list)

    def add(self, where: str, t_default: float, t_best: float, t_pick: float | None) -> None:
        if t_pick is None:
            self.unavailable += 1
            return
        self.logs.append(math.log(t_default / t_pick))
        self.best.append(math.log(t_default / t_best))
        speedup = t_default / t_pick
        if t_pick > SLOWER * t_default:
            self.slower += 1
        if speedup < self.worst[0]:
            self.worst = (speedup, where)

    def summary(self) -> dict:
        headroom = sum(self.best)
        scored = bool(self.logs)
        out = {"headroom_share": round(sum(self.logs) / headroom, 4) if headroom > 1e-9 else None,
               "geomean_speedup": round(math.exp(float(np.mean(self.logs))), 4) if scored else None,
               "slower_2pct": self.slower, "decisions": len(self.logs),
               "worst_speedup": round(self.worst[0], 4) if scored else None,
               "worst_decision": self.worst[1], "measurements": self.measurements}
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
        return {s: _truth_or_none(reality, s, picks[s]) for s in reality.scenarios}, used, []
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


def sweep_table(every: int) -> Callable:
    """NVIDIA's optimize_config: measure every choice at every ``every``-th size, keep the fastest
    measured per size; a size not measured takes the rule of the measured size below it."""
    def decide(reality: Reality):
        picks: dict[Scenario, Choice] = {}
        used = 0
        last: dict[tuple, Choice] = {}
        index = _size_series(reality.scenarios)
        for s in sorted(reality.scenarios, key=lambda x: (x.collective, x.topology.nranks,
                                                          x.nbytes)):
            series = (s.collective, s.topology.nranks)
            if index[s] % every == 0:
                measured = {c: reality.measure(s, c) for c in reality.menu(s)}
                used += len(measured)
                last[series] = min(measured, key=measured.__getitem__)
            picks[s] = last[series] if last.get(series) in reality.menu(s) else DEFAULT
        return picks, used
    return decide


def sweep_budget(reality: Reality) -> int:
    return sum(len(reality.menu(s)) for s in reality.scenarios)


def online(make: Callable[[int], object]) -> Picker:
    """An online tuner with the sweep's per-decision budget, on deployable actions, noisy times."""
    def run(reality: Reality) -> Outcome:
        times: dict[Scenario, float | None] = {}
        used = 0
        exploration: list[float] = []
        for s in reality.scenarios:
            tuner = make(len(reality.menu(s)))
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
    """The trained online adaptive policy (``agents.adaptive``), one context per decision."""
    from dynamiccl.agents.adaptive import load_adaptive

    tuner = load_adaptive(path)

    def make(budget: int) -> object:
        tuner.reset()
        tuner.budget = budget
        return tuner
    return online(make)


def static_policy(path: str) -> Picker:
    """A per-call policy ``agents.registry`` loads (a checkpoint, a policy file, ...): its action
    at each decision; NCCL's own configuration counts as leaving NCCL alone (export defers there)."""
    from dynamiccl.agents.registry import load_policy

    policy = load_policy(path, deployable=True)

    def run(reality: Reality) -> Outcome:
        times: dict[Scenario, float | None] = {}
        for s in reality.scenarios:
            mask = valid_mask(s.topology, s.collective, deployable=True)
            action = int(policy.act(encode(s), scenario=s, action_mask=mask))
            config = ACTIONS[action]
            if config == nccl_default(s).config:
                times[s] = reality.truth(s, DEFAULT)
            elif reality.times_actions:
                times[s] = reality.truth_action(s, action)
            else:
                times[s] = _truth_or_none(reality, s, Choice(config.algorithm, config.protocol,
                                                             config.channels))
        return times, 0, []
    return run


def tune(fraction: float, calibrate: bool) -> Callable:
    """``dynamiccl tune``'s loop: plan, measure, refit, in rounds, within ``fraction`` of the
    sweep's budget, weighing the choices the reality offers."""
    def decide(reality: Reality):
        budget = int(fraction * sweep_budget(reality))
        at = {(s.collective, s.topology.nranks, s.nbytes): s for s in reality.scenarios}
        records: list[MeasurementRecord] = []
        model = reality.model

        def tuner_for(records: list[MeasurementRecord], model: Topology) -> Tuner:
            return Tuner(model, Measurements(records), calibrated=model is not reality.model,
                         candidates=lambda s: model_menu(reality, s))

        tuner = tuner_for(records, model)
        for r in range(TUNE_ROUNDS):
            share = budget // TUNE_ROUNDS if r < TUNE_ROUNDS - 1 else budget - _runs(records)
            for m in plan(tuner, reality.scenarios, share):
                s = at[(m.collective, m.nranks, m.nbytes)]
                records.append(_record(s, m.choice, reality.measure(s, m.choice)))
                again = reality.measured_again(s, m.choice)
                if again is not None:  # the run's in-place column: tune reads its noise from it
                    records.append(_record(s, m.choice, again, in_place=True))
            if calibrate:
                model, _ = calibrated_topology(records, reality.model)
            tuner = tuner_for(records, model)
        return {s: tuner.decide(s).chosen for s in reality.scenarios}, _runs(records)
    return decide


def _runs(records: list[MeasurementRecord]) -> int:
    """Measurements spent: a run's in-place timing comes with it, free."""
    return sum(not r.in_place for r in records)


def _record(s: Scenario, choice: Choice, time_us: float, in_place: bool = False) -> MeasurementRecord:
    algbw, busbw = bandwidths(s.collective, s.nbytes, s.topology.nranks, time_us)
    return MeasurementRecord(
        s.collective.name.lower(), s.nbytes, s.topology.nranks, time_us, algbw, busbw,
        algorithm=None if choice.algorithm is None else choice.algorithm.name.lower(),
        protocol=None if choice.protocol is None else choice.protocol.name.lower(),
        channels=choice.channels, nnodes=s.topology.nodes, in_place=in_place, source="bench_tuning")


def tuners(calibrate: bool, adaptive_model: str | None = None,
           policies: tuple[str, ...] = ()) -> dict[str, Picker]:
    out = {
        "nccl_default": _choices_picker(nccl_default_tuner),
        "model_oracle_export": _choices_picker(model_oracle),
        "model_gated_export": _choices_picker(model_gated),
        "sweep_table": _choices_picker(sweep_table(1)),
        "sweep_table_half": _choices_picker(sweep_table(2)),
        "coordinate_descent": online(lambda b: CoordinateDescentTuner(b, deployable=True)),
        "bandit_5pct_gate": online(lambda b: UcbBandit(b, deployable=True, safety_gate=0.05)),
        "tune_half_budget": _choices_picker(tune(0.5, calibrate)),
        "tune_same_budget": _choices_picker(tune(1.0, calibrate)),
    }
    if adaptive_model:
        out["adaptive"] = adaptive(adaptive_model)
    for path in policies:
        out[f"policy:{Path(path).name}"] = static_policy(path)
    return out


#: Tuners that time the online action table (not applicable to a replay table).
ACTION_TUNERS = ("coordinate_descent", "bandit_5pct_gate", "adaptive")


def score(realities: list[Reality], pickers: dict[str, Picker],
          progress: Callable[[Reality], None] | None = None) -> dict:
    scores = {name: Score() for name in pickers}
    for reality in realities:
        t_def = {s: reality.truth(s, DEFAULT) for s in reality.scenarios}
        t_best = {s: reality.best(s) for s in reality.scenarios}
        for name, pick in pickers.items():
            if name in ACTION_TUNERS and not reality.times_actions:
                continue
            times, used, exploration = pick(reality)
            scores[name].measurements += used
            scores[name].exploration += exploration
            for s in reality.scenarios:
                scores[name].add(reality.describe(s), t_def[s], t_best[s], times[s])
        if progress:
            progress(reality)
    return {name: s.summary() for name, s in scores.items()
            if s.logs or s.unavailable}


def run(seeds: list[int], systems, calibrate: bool, progress: bool,
        adaptive_model: str | None = None, policies: tuple[str, ...] = ()) -> dict:
    """Every tuner on the perturbed realities of ``seeds`` x ``systems``."""
    realities = [PerturbedReality(seed, system) for seed in seeds for system in systems]
    done = (lambda r: print(f"seed {r.seed} {r.model.name}x{r.model.nodes} done", file=sys.stderr,
                            flush=True)) if progress else None
    return score(realities, tuners(calibrate, adaptive_model, policies), done)


def replay_realities(folder: Path) -> list[ReplayReality]:
    """One reality per replay table with at least one decision; its system's datasheet topology
    is the fixture folder's ``<system>/topology.yaml``."""
    out = []
    for table in sorted(folder.glob("*.csv")):
        topology = folder.parent / table.stem / "topology.yaml"
        if not topology.is_file():
            continue
        reality = ReplayReality(table.stem, load_paths([table]).records, load_topology(topology))
        if reality.scenarios:
            out.append(reality)
    return out


def run_replay(folder: Path, calibrate: bool, adaptive_model: str | None = None,
               policies: tuple[str, ...] = ()) -> dict:
    realities = replay_realities(folder)
    pickers = tuners(calibrate, adaptive_model, policies)
    return {"tables": str(folder),
            "systems": {r.system: len(r.scenarios) for r in realities},
            "not_applicable": {name: NOT_ON_REPLAY for name in pickers if name in ACTION_TUNERS},
            "tuners": score(realities, pickers)}


def _print(title: str, results: dict) -> None:
    print(title)
    print(f"{'tuner':24} {'share':>7} {'geomean':>8} {'>2% slower':>10} {'worst':>7} "
          f"{'measurements':>12}  worst decision")
    for name, r in results.items():
        share = "n/a" if r["headroom_share"] is None else f"{r['headroom_share']:.3f}"
        worst = "n/a" if r["worst_speedup"] is None else f"{r['worst_speedup']:.3f}x"
        geomean = "n/a" if r["geomean_speedup"] is None else f"{r['geomean_speedup']:.3f}x"
        missing = f" ({r['unavailable']} picks unmeasured)" if r.get("unavailable") else ""
        print(f"{name:24} {share:>7} {geomean:>8} {r['slower_2pct']:>10} {worst:>7} "
              f"{r['measurements']:>12}  {r['worst_decision']}{missing}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="held-out realities (default 5)")
    parser.add_argument("--calibrate", action="store_true",
                        help="tune also fits the topology (profiler.calibrate) each round")
    parser.add_argument("--replay", type=Path, default=REPLAY_DIR, metavar="DIR",
                        help="folder of replay tables (default: tests/fixtures/real/replay)")
    parser.add_argument("--adaptive", metavar="MODEL.zip",
                        help="also score the trained adaptive online policy (agents.adaptive)")
    parser.add_argument("--policy", action="append", default=[], metavar="PATH",
                        help="also score a policy agents.registry loads (checkpoint, policy "
                             "file); repeatable")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.seeds <= 100:
        parser.error("--seeds takes 1..100")
    if not args.replay.is_dir():
        parser.error(f"--replay {args.replay}: no such folder of replay tables")
    for path in [args.adaptive, *args.policy]:
        if path and not Path(path).exists():
            parser.error(f"{path}: no such model or policy file")
    began = time.perf_counter()
    seeds = list(range(HELDOUT_SEED_START, HELDOUT_SEED_START + args.seeds))
    learned = {"adaptive_model": args.adaptive, "policies": tuple(args.policy)}
    perturbed = run(seeds, SYSTEMS, args.calibrate, progress=not args.json, **learned)
    replay = run_replay(args.replay, args.calibrate, **learned)
    doc = {"action_set": "deployable", "calibrate": args.calibrate,
           "perturbed": {"reality": f"perturbed, held-out seeds {seeds[0]}..{seeds[-1]}",
                         "systems": [f"{t}x{n}" for t, n in SYSTEMS],
                         "sizes": "1KiB..1GiB (powers of two)",
                         "collectives": [c.name.lower() for c in COLLECTIVES],
                         "tuners": perturbed},
           "replay": replay, "seconds": round(time.perf_counter() - began, 1)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    p = doc["perturbed"]
    _print(f"{p['reality']}; {', '.join(p['systems'])}; {p['sizes']}; deployable actions",
           perturbed)
    systems = ", ".join(f"{k} ({v})" for k, v in replay["systems"].items())
    print()
    _print(f"replay: {systems} decisions; measured choices only", replay["tuners"])
    for name, why in replay["not_applicable"].items():
        print(f"{name}: not applicable on replay ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
