"""``dynamiccl evaluate --policy NAME|PATH --suite heldout [--json]``: score policies on a suite.

Every built-in baseline works without training anything; a trained agent is given by the path of
its checkpoint (``model.zip``) or its run folder. ``--json`` prints one object per policy with the
keys ``policy, geomean_speedup, oracle_share, worst_speedup, scenarios`` (plus ``worst_call`` and,
for online tuners, ``calls_to_5pct`` / ``reached_5pct``); several policies print a JSON list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamiccl.cli.common import UserError, load_policy_arg, non_negative_int

EPILOG = """policies: nccl_default, oracle, static_best, random, coordinate_descent, bandit, or a
checkpoint path (model.zip, checkpoints/last.zip, or a training run folder)
suites: train, heldout, smoke (configs/scenario/) or a scenario YAML file
examples:
  dynamiccl evaluate --policy oracle --suite heldout --json
  dynamiccl evaluate --policy nccl_default --policy static_best --policy outputs/quickstart/runs/X \\
      --suite heldout --out eval/ --plots"""


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.evaluate import evaluate_policies, print_table, save_reports
    from dynamiccl.envs.workloads import load_suite

    names = [n for item in args.policy for n in item.split(",") if n]
    if not names:
        raise UserError("give at least one --policy (e.g. --policy nccl_default)")
    if args.plots and not args.out:
        raise UserError("--plots needs --out DIR to write the figures into")
    suite = load_suite(args.suite)
    if not suite:
        raise UserError(f"suite {args.suite!r} has no workloads; check configs/scenario/")
    policies = [load_policy_arg(n, deployable=args.deployable, seed=args.seed) for n in names]
    for name, policy in zip(names, policies, strict=True):
        if len(names) > 1 and Path(name).exists():
            policy.name = Path(name).stem
        if args.budget is not None and hasattr(policy, "budget"):
            policy.budget = args.budget
    reports = evaluate_policies(policies, suite, deployable=args.deployable)
    if args.out:
        save_reports(reports, args.out)
        if args.plots:
            from dynamiccl.agents.evaluation_plots import plot_reports

            plot_reports(reports, args.out, suite=str(args.suite), deployable=args.deployable)
    if args.json:
        rows = [_contract(r.summary()) for r in reports]
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
    else:
        print_table(reports, title=f"{args.suite} suite: {len(suite)} workloads, "
                                   f"{reports[0].scenarios} calls")
    return 0


def _contract(summary: dict) -> dict:
    keys = ["policy", "geomean_speedup", "oracle_share", "worst_speedup", "scenarios", "worst_call"]
    if summary.get("calls_to_5pct") is not None or summary.get("reached_5pct") is not None:
        keys += ["calls_to_5pct", "reached_5pct"]
    return {k: summary.get(k) for k in keys}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score policies against NCCL's default and the oracle on a suite",
        description="Score one or more policies on a scenario suite: geometric-mean speedup over "
                    "NCCL's default, share of the oracle's log-speedup captured, worst call.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", action="append", required=True, metavar="NAME|PATH",
                        help="a built-in policy or a checkpoint; repeat (or comma-separate) for more")
    parser.add_argument("--suite", default="heldout", metavar="NAME|FILE.yaml",
                        help="scenario suite (default: heldout)")
    parser.add_argument("--deployable", action="store_true",
                        help="restrict every policy and the oracle to exportable actions")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed of random policies (default 0)")
    parser.add_argument("--budget", type=int, metavar="CALLS",
                        help="measured calls per context for online tuners (default 64)")
    parser.add_argument("--out", metavar="DIR", help="write summary.csv, summary.json, calls.csv")
    parser.add_argument("--plots", action="store_true",
                        help="also draw choices.png and speedup_vs_size.png into --out")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=_run)
