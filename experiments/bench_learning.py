"""Zero-shot learning benchmark: the full-information learner against the simple baselines.

Trains :class:`dynamiccl.agents.full_info.FullInfoLearner` on random systems for a sample budget,
then scores it and the baselines on the held-out suite with the deployable observation and the
deployable actions (only what the tuner plugin can make NCCL do). Per policy: the share of the
deployable oracle's gain captured, the calls slower than NCCL by more than 2 %, the worst call, and
per system the same share. Goals (issue 12): share >= 0.97, slower calls <= 1 %, worst >= 0.97x.
``--suite unseen_kinds`` scores instead on system kinds no training system is (GB200 NVL72 racks,
GH200 quads, one-GPU instances on TCP, ...; ``configs/scenario/unseen_kinds.yaml``).

    python experiments/bench_learning.py [--samples N] [--seed S] [--seeds K] [--suite NAME]
                                         [--json] [--save PATH | --load PATH]

Learners trained with different seeds differ (the held-out suite has few distinct calls, so one
decision moves the share); ``--seeds K`` trains and scores K of them side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict

import numpy as np

from dynamiccl.agents.evaluate import PolicyReport, evaluate_policy, oracle_share
from dynamiccl.agents.full_info import FullInfoConfig, FullInfoLearner
from dynamiccl.agents.progress import progress_bar
from dynamiccl.agents.registry import load_policy
from dynamiccl.envs.workloads import load_suite

SLOWER = 1.02
BASELINES = ("nccl_default", "oracle", "static_best", "coordinate_descent", "bandit")


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


def _trained(args: argparse.Namespace, seed: int) -> FullInfoLearner:
    if args.load:
        learner = FullInfoLearner.load(args.load)
        learner.config.margin = args.margin
        return learner
    learner = FullInfoLearner(FullInfoConfig(seed=seed, margin=args.margin))
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
    parser.add_argument("--margin", type=float, default=FullInfoConfig.margin,
                        help="deviate from NCCL only above this predicted gain "
                             f"(default {FullInfoConfig.margin})")
    parser.add_argument("--suite", default="heldout",
                        help="scenario suite to score on (default heldout; unseen_kinds: system "
                             "kinds never trained on)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--save", help="write the trained learner here (.pt; one seed)")
    parser.add_argument("--load", help="score this saved learner instead of training one (.pt)")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be a positive number of training calls")
    if args.seeds < 1:
        parser.error("--seeds must be a positive number of learners")
    if args.seeds > 1 and (args.load or args.save):
        parser.error("--seeds trains several learners; --load and --save take one (drop --seeds)")

    try:
        suite = load_suite(args.suite)
    except (FileNotFoundError, ValueError) as exc:
        parser.error(f"--suite {args.suite!r}: {exc}")
    start = time.perf_counter()
    seeds = range(args.seed, args.seed + args.seeds)
    learners = {seed: _trained(args, seed) for seed in seeds}
    train_s = (time.perf_counter() - start) / len(learners)
    if args.save:
        learners[args.seed].save(args.save)
    policies = [load_policy(name, deployable=True, seed=args.seed) for name in BASELINES]
    policies += [learner.policy("full_info" if len(learners) == 1 else f"full_info seed={seed}")
                 for seed, learner in learners.items()]
    rows = [_row(evaluate_policy(p, suite, deployable=True)) for p in policies]
    samples = next(iter(learners.values())).samples_seen
    report = {"suite": args.suite, "actions": "deployable", "observation": "deployable",
              "training_samples": samples, "training_seconds": train_s, "policies": rows}
    if args.json:
        print(json.dumps(report))
        return report
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.suite} suite, deployable actions and observation "
                        f"(full_info trained on {samples} calls in {train_s:.0f} s per seed)")
    for col in ("policy", "geomean", "oracle share", "slower >2 %", "worst", "worst call"):
        table.add_column(col, justify="left" if col in ("policy", "worst call") else "right")
    for r in rows:
        share = "n/a" if r["oracle_share"] is None else f"{r['oracle_share']:.3f}"
        table.add_row(str(r["policy"]), f"{r['geomean_speedup']:.4f}x", share,
                      f"{100 * r['slower_than_nccl_2pct']:.1f} %", f"{r['worst_speedup']:.3f}x",
                      str(r["worst_call"]))
    console = Console(width=200)
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
    return report


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
