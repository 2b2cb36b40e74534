"""Zero-shot learning benchmark: the full-information learner against the simple baselines.

Trains :class:`dynamiccl.agents.policies.full_info.FullInfoLearner` on random systems for a sample budget,
then scores it and the baselines on the held-out suite with the deployable observation and the
deployable actions (only what the tuner plugin can make NCCL do). Per policy: the share of the
deployable oracle's gain captured, the calls slower than NCCL by more than 2 %, the worst call, and
per system the same share. Goals (issue 12): share >= 0.97, slower calls <= 1 %, worst >= 0.97x.
``--suite unseen_kinds`` scores instead on system kinds no training system is (GB200 NVL72 racks,
GH200 quads, one-GPU instances on TCP, ...; ``configs/scenario/unseen_kinds.yaml``).

The held-out suite has few distinct calls, and they offer 1-8 % each, so it ranks learners poorly.
Next to it the learner is scored in distribution: on fresh random systems (the same ones for every
learner) the share of the oracle's gain it takes, split by how large that gain is. A learner that
takes 0.98 of the gains above 30 % and 0.36 of those of 1-3 % scores 0.94 overall there and about
0.6 on the held-out suite; the small-gain bands are what a better learner must raise.

Both band tables also give the share behind a *perfect gate*: the learner's first-ranked action
pinned exactly where it beats NCCL. It separates ranking from caution: a learner whose perfect-gate
share is below the goal cannot reach it by daring more, only by ranking better. And the suite's
table says where its oracle gain lies by the runtime's overlapped-compute context (c2c): a gain found
only under overlap is a gain of the simulator's model of SM and memory sharing.

    python experiments/bench_learning.py [--samples N] [--seed S] [--seeds K] [--suite NAME]
                                         [--validation-systems N] [--json]
                                         [--save PATH | --load PATH]

Learners trained with different seeds differ (the held-out suite has few distinct calls, so one
decision moves the share); ``--seeds K`` trains and scores K of them side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

import numpy as np
from rich.table import Table

from dynamiccl.agents.policies.full_info import FullInfoConfig, FullInfoLearner, FullInfoPolicy
from dynamiccl.agents.policies.registry import load_policy
from dynamiccl.agents.shipping.evaluate import PolicyReport, evaluate_policy, oracle_share
from dynamiccl.agents.shipping.progress import progress_bar
from dynamiccl.console import console as table_console
from dynamiccl.envs.action_values import ActionValues, action_values
from dynamiccl.envs.system_sampler import CallBatch, random_calls, random_topology
from dynamiccl.envs.workloads import SuiteEntry, load_suite
from dynamiccl.plugin.policy_file import C2C_BUCKETS, context_buckets
from dynamiccl.system.topology import Topology

SLOWER = 1.02
BASELINES = ("nccl_default", "oracle", "static_best", "coordinate_descent", "bandit")
#: The in-distribution score's systems: their own seed (no learner trained with a seed below it
#: draws them), the same for every learner so that seeds are compared on the same calls.
VALIDATION_SEED = 987_654
VALIDATION_CALLS = 64
#: Bands of the oracle's gain over NCCL (relative) that the in-distribution score is split into.
GAIN_BANDS = ((0.0, 0.01), (0.01, 0.03), (0.03, 0.10), (0.10, 0.30), (0.30, math.inf))


def _row(report: PolicyReport) -> dict[str, object]:
    calls = report.calls
    slower = [c for c in calls if c.t_policy > SLOWER * c.t_default]
    per_system: dict[str, list] = defaultdict(list)
    for c in calls:
        per_system[f"{c.scenario.topology.name}x{c.scenario.topology.nodes}"].append(c)
    shares = {}
    for name, group in sorted(per_system.items()):
        pol = sum(math.log(c.t_default / c.t_policy) for c in group)
        orc = sum(math.log(c.t_default / c.t_oracle) for c in group)
        share = oracle_share(pol, orc)
        shares[name] = None if math.isnan(share) else round(share, 3)
    return {"policy": report.policy, "geomean_speedup": report.geomean_speedup,
            "oracle_share": None if math.isnan(report.oracle_share) else report.oracle_share,
            "slower_than_nccl_2pct": len(slower) / len(calls), "worst_speedup": report.worst_speedup,
            "worst_call": report.worst_call, "calls": len(calls), "per_system_share": shares}


def _band_name(low: float, high: float) -> str:
    return f"> {low:.0%}" if math.isinf(high) else f"{low:.0%}-{high:.0%}"


Batch = tuple[ActionValues, np.ndarray, np.ndarray]  # (values, how often each call is made, c2c)


def validation_calls(systems: int) -> Iterator[Batch]:
    """The in-distribution score's calls: ``systems`` fresh random systems of the training
    distribution, :data:`VALIDATION_CALLS` calls each, the same for every learner."""
    rng = np.random.default_rng(VALIDATION_SEED)
    for index in range(systems):
        topology, calls = random_topology(rng, index), random_calls(rng, VALIDATION_CALLS)
        yield action_values(topology, calls), np.ones(VALIDATION_CALLS), calls.c2c


def suite_calls(suite: list[SuiteEntry]) -> list[Batch]:
    """The suite's distinct calls by system, each weighted by how often the suite makes it."""
    counts: dict[Topology, Counter] = defaultdict(Counter)
    for entry in suite:
        for s in entry.scenarios:
            delay = s.straggler_delay_us if s.has_straggler else 0.0
            counts[s.topology][(int(s.collective), s.nbytes, delay, s.c2c)] += 1
    batches = []
    for topology, calls in counts.items():
        colls, sizes, delays, c2c = (np.array(column) for column in zip(*calls, strict=True))
        batch = CallBatch(colls.astype(np.int64), sizes.astype(np.int64), delays.astype(np.float64),
                          c2c.astype(np.float64))
        batches.append((action_values(topology, batch), np.array(list(calls.values()), dtype=float),
                        batch.c2c))
    return batches


def band_scores(policy: FullInfoPolicy, batches: Iterable[Batch]) -> dict[str, dict[str, float | int | None]]:
    """Per band of the oracle's gain (and ``all``): calls, the share of that gain the policy takes,
    the share its first-ranked actions would take behind a perfect gate (pinned exactly where they
    beat NCCL: what ranking alone allows, caution aside), and the fraction of calls it makes > 2 %
    slower than NCCL."""
    taken, ranked, best, weights = [], [], [], []
    for values, weight, _ in batches:
        rows = np.arange(len(weight))
        first, gain = policy.preferred(values.observations, values.allowed)
        picks = policy.gate(first, gain)
        taken.append(np.where(picks >= 0, values.gains[rows, np.maximum(picks, 0)], 0.0))
        ranked.append(np.where(first >= 0, np.maximum(values.gains[rows, np.maximum(first, 0)], 0.0), 0.0))
        best.append(np.maximum(values.gains.max(axis=1), 0.0))  # -inf where an action is not allowed
        weights.append(weight)
    got, gate, oracle, w = (np.concatenate(x) for x in (taken, ranked, best, weights))
    bands = [(_band_name(lo, hi), (oracle >= math.log1p(lo)) & (oracle < math.log1p(hi)))
             for lo, hi in GAIN_BANDS] + [("all", np.ones(len(oracle), dtype=bool))]

    def share(gains: np.ndarray, m: np.ndarray) -> float | None:
        value = oracle_share(float((w * gains)[m].sum()), float((w * oracle)[m].sum()))
        return None if math.isnan(value) else value

    return {name: {"calls": int(w[m].sum()), "share": share(got, m), "perfect_gate_share": share(gate, m),
                   "slower_than_nccl_2pct": float(w[m] @ (got[m] < -math.log(SLOWER)) / w[m].sum())
                   if m.any() else 0.0}
            for name, m in bands}


def in_distribution(policy: FullInfoPolicy, systems: int) -> dict[str, dict[str, float | int | None]]:
    """:func:`band_scores` on :func:`validation_calls`."""
    return band_scores(policy, validation_calls(systems))


def gain_by_overlap(batches: list[Batch]) -> dict[str, float]:
    """Which share of the oracle's gain lies in calls of each bucket of overlapped compute (the
    runtime's c2c context): how much of what there is to win is the simulator's model of a
    collective sharing SMs and memory with compute."""
    gain = dict.fromkeys(C2C_BUCKETS, 0.0)
    for values, weight, c2c in batches:
        best = np.maximum(values.gains.max(axis=1), 0.0) * weight
        for g, ratio in zip(best, c2c, strict=True):
            gain[context_buckets(0.0, float(ratio))[1]] += float(g)
    total = sum(gain.values())
    return {name: (g / total if total > 0 else 0.0) for name, g in gain.items()}


def _bands_table(title: str, scores: dict[str, dict[str, dict]]) -> Table:
    """One row per band of the oracle's gain; per learner its share, the share behind a perfect
    gate, and its calls > 2 % slower."""
    table = Table(title=title)
    table.add_column("oracle's gain")
    table.add_column("calls", justify="right")
    for name in scores:
        for column in (f"{name}: share", "perfect gate", "slower >2 %"):
            table.add_column(column, justify="right")
    for band, cell in next(iter(scores.values())).items():
        cells = []
        for bands in scores.values():
            cells += [_share(bands[band]["share"]), _share(bands[band]["perfect_gate_share"]),
                      f"{100 * bands[band]['slower_than_nccl_2pct']:.1f} %"]
        table.add_row(band, str(cell["calls"]), *cells)
    return table


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _trained(args: argparse.Namespace, seed: int) -> FullInfoLearner:
    if args.load:
        learner = FullInfoLearner.load(args.load)
        learner.config.min_gain = args.min_gain
        return learner
    learner = FullInfoLearner(FullInfoConfig(seed=seed, min_gain=args.min_gain))
    done = 0
    with progress_bar(f"training full_info (seed {seed})", args.samples) as advance:
        def shown(samples: int, _loss: float) -> None:
            nonlocal done
            advance(min(samples, args.samples) - done)
            done = min(samples, args.samples)

        return learner.learn(args.samples, callback=shown)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=400_000, help="training calls (default 400000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1,
                        help="train this many learners (seeds SEED, SEED+1, ...) and score each: how "
                             "far they differ is part of the result (default 1)")
    parser.add_argument("--min-gain", type=float, default=FullInfoConfig.min_gain,
                        help="deviate from NCCL only above this predicted gain "
                             f"(default {FullInfoConfig.min_gain})")
    parser.add_argument("--suite", default="heldout",
                        help="scenario suite to score on (default heldout; unseen_kinds: system "
                             "kinds never trained on)")
    parser.add_argument("--validation-systems", type=int, default=150,
                        help="fresh random systems the learner is also scored on, by the size of "
                             f"the oracle's gain ({VALIDATION_CALLS} calls each; 0: skip; "
                             "default 150)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--save", help="write the trained learner here (.pt; one seed)")
    parser.add_argument("--load", help="score this saved learner instead of training one (.pt)")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be a positive number of training calls")
    if args.seeds < 1:
        parser.error("--seeds must be a positive number of learners")
    if args.validation_systems < 0:
        parser.error("--validation-systems must be 0 (skip) or a positive number of systems")
    if args.seeds > 1 and (args.load or args.save):
        parser.error("--seeds trains several learners; --load and --save take one (drop --seeds)")

    try:
        suite = load_suite(args.suite)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(f"--suite {args.suite!r}: {exc}")
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.seeds)
    learners = {seed: _trained(args, seed) for seed in seeds}
    train_s = None if args.load else (time.perf_counter() - start) / len(learners)
    if args.save:
        learners[args.seed].save(args.save)
    policies = [load_policy(name, deployable=True, seed=args.seed) for name in BASELINES]
    learned = [learner.policy("full_info" if len(learners) == 1 else f"full_info seed={seed}")
               for seed, learner in learners.items()]
    rows = [_row(evaluate_policy(p, suite, deployable=True)) for p in policies + learned]
    scored_calls = suite_calls(suite)
    on_suite = {p.name: band_scores(p, scored_calls) for p in learned}
    validation = {p.name: in_distribution(p, args.validation_systems) for p in learned} \
        if args.validation_systems else {}
    samples = next(iter(learners.values())).samples_seen
    report = {"suite": args.suite, "actions": "deployable", "observation": "deployable",
              "training_samples": samples, "training_seconds": train_s, "policies": rows,
              "suite_bands": on_suite, "suite_gain_by_c2c": gain_by_overlap(scored_calls),
              "in_distribution": validation}
    if args.json:
        print(json.dumps(report))
        return report
    trained = (f"loaded from {args.load}, trained on {samples} calls" if train_s is None
               else f"trained on {samples} calls in {train_s:.0f} s per seed")
    table = Table(title=f"{args.suite} suite, deployable actions and observation (full_info {trained})")
    for col in ("policy", "geomean", "oracle share", "slower >2 %", "worst", "worst call"):
        table.add_column(col, justify="left" if col in ("policy", "worst call") else "right")
    for r in rows:
        share = "n/a" if r["oracle_share"] is None else f"{r['oracle_share']:.3f}"
        table.add_row(str(r["policy"]), f"{r['geomean_speedup']:.4f}x", share,
                      f"{100 * r['slower_than_nccl_2pct']:.1f} %", f"{r['worst_speedup']:.3f}x",
                      str(r["worst_call"]))
    console = table_console()
    console.print(table)
    systems = Table(title=f"oracle share per {args.suite} system")
    systems.add_column("policy")
    names = list(rows[-1]["per_system_share"])
    for name in names:
        systems.add_column(name, justify="right")
    for r in rows[2:]:
        systems.add_row(str(r["policy"]), *("n/a" if r["per_system_share"][n] is None
                                            else f"{r['per_system_share'][n]:.2f}" for n in names))
    console.print(systems)
    overlap = ", ".join(f"c2c {name} {share:.0%}" for name, share in report["suite_gain_by_c2c"].items())
    console.print(_bands_table(f"{args.suite} suite: share of the oracle's gain taken, by the size of "
                               f"that gain (where the gain lies: {overlap})", on_suite))
    if validation:
        console.print(_bands_table(f"in distribution: the same on {args.validation_systems} fresh "
                                   "random systems", validation))
    return report


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
