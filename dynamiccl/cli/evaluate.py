"""``dynamiccl evaluate --policy NAME|PATH --suite heldout [--json]``: score policies on a suite.

Every built-in baseline works without training anything; a trained agent is given by the path of
its checkpoint (``model.zip``, or ``model.pt`` for the full-information learner) or its run
folder; a shipped file (``.dccl`` or NVIDIA's example-tuner CSV) is scored with the plugin's own
lookup, next to the policy it was exported from (the built-in policy or checkpoint its header
records) when that can still be loaded. Only what the tuner plugin can make NCCL do counts unless
``--all-actions`` is given. On a terminal a progress bar runs on stderr meanwhile (nothing when
stderr is piped). ``--json`` prints a list with one object per policy, always, with the keys
``policy, action_set, backend, geomean_speedup, oracle_share, slower_calls, worst_speedup,
worst_call, scenarios`` (plus ``calls_to_5pct``, ``reached_5pct``, ``exploration_calls``,
``exploration_speedup`` for online tuners).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dynamiccl.cli.common import (
    UserError,
    add_action_set_args,
    add_topology_args,
    int_between,
    non_negative_int,
    path_arg,
)
from dynamiccl.cli.policy_sniff import load_policy_arg

EPILOG = """policies: nccl_default, oracle, static_best, random, coordinate_descent, bandit, a
checkpoint path (model.zip or checkpoints/last.zip of an SB3 agent, model.pt of the
full-information learner, or a training run folder), or an exported policy file (policy.dccl, or
NVIDIA's example-tuner CSV)
suites: train, heldout, smoke (configs/scenario/) or a scenario YAML file
realities (--backend): sim (the simulator), perturbed (the simulator with the hidden
miscalibration of system --reality-seed; seeds >= 1000 are held out), replay (--replay LOGS: real
measurements only; calls or choices not measured cannot be scored)
examples:
  dynamiccl evaluate --policy oracle --suite heldout --json
  dynamiccl evaluate --policy nccl_default --policy static_best --policy outputs/quickstart/runs/X \\
      --suite heldout --out eval/ --plots
  dynamiccl evaluate --policy policy.dccl --suite heldout --backend perturbed --reality-seed 1003"""

#: The keys of ``--json`` (a contract: scripts read them).
JSON_KEYS = ("policy", "action_set", "backend", "geomean_speedup", "oracle_share", "slower_calls",
             "worst_speedup", "worst_call", "scenarios")
MAX_BUDGET = 10_000
#: The perturbed reality's system without --reality-seed (the first held-out seed).
DEFAULT_REALITY_SEED = 1000
ONLINE_KEYS = ("calls_to_5pct", "reached_5pct", "exploration_calls", "exploration_speedup")


def _source_policy(path: Path) -> str | None:
    """The policy a shipped file (``.dccl`` or NVIDIA's CSV) records it was exported from, where
    that can be loaded: a built-in policy, or a checkpoint that is still there."""
    from dynamiccl.agents.policies.deployed import is_policy_file, load_deployed
    from dynamiccl.agents.policies.registry import BUILTIN
    from dynamiccl.plugin import policy_file as pf

    try:
        source = load_deployed(path).source if is_policy_file(path) else None
    except (OSError, pf.PolicyFileError):
        return None
    if source is None or (source not in BUILTIN and not Path(source).exists()):
        return None
    return source


def _policy_names(items: list[str]) -> list[str]:
    names = [n for item in items for n in item.split(",") if n]
    if not names:
        raise UserError("give at least one --policy (e.g. --policy nccl_default)")
    for name in list(names):
        source = _source_policy(Path(name)) if Path(name).is_file() else None
        if source and source not in names:
            names.insert(names.index(name), source)  # the file next to the policy it came from
    return names


def _backend(args: argparse.Namespace) -> tuple[str, dict]:
    if args.backend == "perturbed":
        seed = DEFAULT_REALITY_SEED if args.reality_seed is None else args.reality_seed
        return "perturbed", {"seed": seed}
    if args.backend == "replay":
        if not args.replay:
            raise UserError("--backend replay needs --replay LOGS (nccl-tests logs or records)")
        from dynamiccl.envs.backends.replay import ReplayTable
        from dynamiccl.profiler.formats.measurement_paths import load_paths

        try:
            records = load_paths(args.replay).records
            return "replay", {"table": ReplayTable(records), "records": records}
        except ValueError as exc:
            raise UserError(f"--replay: {exc}") from None
    return "sim", {}


def _check_flags(args: argparse.Namespace) -> None:
    """Flags that do nothing in the mode asked for are refused, not ignored (a score of another
    reality or suite than the one the user meant reads as the one they meant)."""
    replay_suite = args.backend == "replay" and args.suite is None
    needs = (("--replay", bool(args.replay), args.backend == "replay", "--backend replay"),
             ("--reality-seed", args.reality_seed is not None, args.backend == "perturbed",
              "--backend perturbed"),
             *((flag, value is not None, replay_suite, "--backend replay without --suite (the "
                "system the logs were measured on; a suite names its own systems)")
               for flag, value in (("--topology", args.topology), ("--nodes", args.nodes),
                                   ("--gpus-per-node", args.gpus_per_node))))
    for flag, given, mode, what in needs:
        if given and not mode:
            raise UserError(f"{flag} only applies with {what}; add it or drop {flag}")


def _replay_suite(args: argparse.Namespace, table, records) -> list:
    """``--backend replay`` without ``--suite``: the measured calls themselves, on ``--topology``,
    which must be a system that could have produced them (``profiler.formats.system_fit``, as
    ``tune`` checks: another GPU, ranks per node it does not have, emulated hosts on a real one)."""
    from dynamiccl.cli.common import topology_from_args
    from dynamiccl.profiler.formats.system_fit import check_fits

    if not args.topology:
        raise UserError("--backend replay without --suite scores the calls the logs measured: give "
                        "--topology (the system they were measured on), or a --suite")
    topology = topology_from_args(args)
    try:
        check_fits(records, topology)
    except ValueError as exc:
        raise UserError(f"--replay {exc}") from None
    suite = table.suite(topology)
    other = next((e for e in suite if args.nodes is not None and e.nodes != args.nodes), None)
    if other is not None:  # each call is scored on the nodes it ran on: --nodes would be ignored
        call = other.scenarios[0]
        raise UserError(f"--nodes {args.nodes}, but the logs measured {call.collective.name.lower()} "
                        f"on {call.topology.nranks} ranks over {other.nodes} node(s); give the "
                        "logs of that system, or drop --nodes (each call is scored on the nodes it "
                        "ran on)")
    if not suite:
        raise UserError("the replay logs measure no call with NCCL's default beside another choice; "
                        "measure both (dynamiccl tune --plan), or give a --suite")
    return suite


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.shipping.evaluate import evaluate_policies, print_table, save_reports
    from dynamiccl.envs.workloads import load_suite

    _check_flags(args)
    deployable = not args.all_actions
    if args.budget is not None and not 1 <= args.budget <= MAX_BUDGET:
        raise UserError(f"--budget {args.budget}: give 1..{MAX_BUDGET} measured calls per context")
    names = _policy_names(args.policy)
    if args.plots and not args.out:
        raise UserError("--plots needs --out DIR to write the figures into")
    if args.out:
        from dynamiccl.agents.shipping.evaluate import claim_results
        from dynamiccl.agents.shipping.evaluation_plots import FIGURES

        claim_results(args.out, force=args.force, figures=FIGURES if args.plots else (),
                      inputs=[*names, *([args.suite] if args.suite else []), *(args.replay or [])])
    backend, backend_kwargs = _backend(args)
    records = backend_kwargs.pop("records", None)  # the replay's, checked against --topology
    if args.suite is None and backend == "replay":
        suite = _replay_suite(args, backend_kwargs["table"], records)
        args.suite = "replay (the measured calls)"
    else:
        args.suite = args.suite or "heldout"
        suite = load_suite(args.suite)
    if not suite:
        raise UserError(f"suite {args.suite!r} has no workloads; check configs/scenario/")
    try:
        policies = [load_policy_arg(n, deployable=deployable, seed=args.seed) for n in names]
    except PermissionError as exc:
        raise UserError(f"{exc.filename}: permission denied; make it readable") from None
    for name, policy in zip(names, policies, strict=True):
        if len(names) > 1 and Path(name).exists():
            policy.name = Path(name).name
        if args.budget is not None and hasattr(policy, "budget"):
            policy.budget = args.budget
    from dynamiccl.envs.backends import UnmeasuredChoice

    try:
        reports = evaluate_policies(policies, suite, deployable=deployable, backend=backend,
                                    backend_kwargs=backend_kwargs, progress=True)
    except UnmeasuredChoice as exc:
        raise UserError(f"{exc}; measure it, or evaluate a suite the replay table covers") from None
    _note_unlisted_calls(policies, reports)
    unused = _policy_files_that_apply_nowhere(policies, reports)
    if args.out:
        save_reports(reports, args.out, overwrite=True)
        if args.plots:
            from dynamiccl.agents.shipping.evaluation_plots import plot_reports

            plot_reports(reports, args.out, suite=str(args.suite), deployable=deployable)
    if args.json:
        print(json.dumps([contract(r.summary()) for r in reports], indent=2))
    else:
        print_table(reports, title=f"{args.suite} suite: {len(suite)} workloads, "
                                   f"{reports[0].scenarios} calls", unused=unused)
    return 0


def _note_unlisted_calls(policies: list, reports: list) -> None:
    """NVIDIA's example tuner runs calls of communicators its CSV does not list on one channel:
    say how many of the suite's calls that is, so a slow score is not mistaken for bad rules."""
    import sys

    from dynamiccl.agents.policies.deployed import NcclExampleCsvPolicy

    for policy, report in zip(policies, reports, strict=True):
        if isinstance(policy, NcclExampleCsvPolicy):
            unlisted = sum(not policy.lists(c.scenario) for c in report.calls)
            if unlisted:
                print(f"note: {policy.name} has no line for the system of {unlisted} of "
                      f"{len(report.calls)} calls; NVIDIA's example tuner runs them on 1 channel "
                      "(export every node count the job's communicators use)", file=sys.stderr)


def _policy_files_that_apply_nowhere(policies: list, reports: list) -> set[str]:
    """The reports of ``.dccl`` files no rule of which applies to any call of the suite (their
    score is NCCL's own): each said in one line naming the systems the file was written for."""
    import sys

    from dynamiccl.agents.policies.deployed import PolicyFilePolicy

    unused = set()
    for policy, report in zip(policies, reports, strict=True):
        if not isinstance(policy, PolicyFilePolicy):
            continue
        header = policy.policy.header
        pinned = [c for c in report.calls if policy.force(c.scenario).given()]
        elsewhere = sorted({c.scenario.topology.name for c in pinned
                            if c.scenario.topology.fingerprint() != header.fingerprint})
        if pinned and not elsewhere:
            continue
        if pinned:  # its rules meet calls of systems it was not written for: say which
            print(f"note: {policy.name} pins {len(pinned)} of the suite's {len(report.calls)} calls, "
                  f"on {_shown(elsewhere)}, not the {header.topology} it was written for (same node "
                  "and rank counts); the rest run NCCL's own choice", file=sys.stderr)
            continue
        systems = sorted({c.scenario.topology.name for c in report.calls})
        print(f"note: no rule of {policy.name} applies to any call of this suite: it was written for "
              f"{header.topology} (pinning {policy.policy.pinned_shapes()}), the suite "
              f"runs {_shown(systems)}; its score is NCCL's own", file=sys.stderr)
        unused.add(report.policy)
    return unused


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def contract(summary: dict) -> dict:
    """One policy's ``--json`` object: the contract keys, the online ones where they apply."""
    keys = list(JSON_KEYS)
    if any(summary.get(k) is not None for k in ONLINE_KEYS):
        keys += ONLINE_KEYS
    return {k: summary.get(k) for k in keys}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score policies against NCCL's default and the oracle on a suite",
        description="Score one or more policies on a scenario suite: geometric-mean speedup over "
                    "NCCL's default, share of the oracle's log-speedup captured, calls slower "
                    "than NCCL, worst call. Only actions the tuner plugin can make NCCL run count "
                    "unless --all-actions is given.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", action="append", required=True, metavar="NAME|PATH",
                        help="a built-in policy, a checkpoint or a policy file; repeat (or "
                             "comma-separate) for more")
    parser.add_argument("--suite", default=None, type=path_arg, metavar="NAME|FILE.yaml",
                        help="scenario suite (default: heldout; with --backend replay: the calls "
                             "the logs measured, on --topology)")
    add_topology_args(parser, required=False)
    add_action_set_args(parser, "every policy")
    parser.add_argument("--backend", choices=("sim", "perturbed", "replay"), default="sim",
                        help="the reality that times every call (default: sim)")
    parser.add_argument("--reality-seed", type=int_between(0, 2**32 - 1), default=None, metavar="SEED",
                        help=f"with --backend perturbed: its system (default {DEFAULT_REALITY_SEED}, "
                             "a held-out seed)")
    parser.add_argument("--replay", action="append", type=path_arg, metavar="LOGS",
                        help="measurements for --backend replay (files or folders; repeatable)")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed of random policies (default 0)")
    parser.add_argument("--budget", type=int, metavar="CALLS",
                        help="measured calls per context for online tuners (default 64)")
    parser.add_argument("--out", type=path_arg, metavar="DIR",
                        help="write summary.csv, summary.json, calls.csv")
    parser.add_argument("--force", action="store_true",
                        help="replace results already in --out")
    parser.add_argument("--plots", action="store_true",
                        help="also draw choices.png and speedup_vs_size.png into --out")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(func=_run, extra="train")  # the environments; a checkpoint's agent
