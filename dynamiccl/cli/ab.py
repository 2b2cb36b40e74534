"""``dynamiccl ab run --policy P -- CMD`` / ``dynamiccl ab diff A.jsonl B.jsonl``: verify a policy on
the cluster, and see what it changed.

``run`` launches the job's own command again and again under the user's launcher, NCCL's default and
the policy interleaved (:mod:`~dynamiccl.profiler.measure.ab`: the same command, only the variables
that load the policy toggled), and prints each side's median with its spread, the pairs' ratios and
a verdict: faster, slower, or no difference beyond the spread. ``--dry-run`` prints the launches.
Every launch's output goes to ``--out`` (``launch_NN_<side>.log``), ``--keep-output`` MiB of it at
most (default 16): its first and its last half, with one line between saying how many bytes and
lines were left out (:mod:`~dynamiccl.profiler.measure.kept_output`). The score and the plugin's
warnings are read from all of it as it is printed, so they are the same whatever the log keeps.
``ab.json`` is rewritten atomically after each launch. Each launch runs in a session of its own and
every signal that ends a command (Ctrl-C, ``kill``, ``timeout``, a closed ssh session) is passed on
to all of it, SIGTERM follows shortly (``srun`` only reports its tasks at one Ctrl-C, and hands
SIGTERM to every task), then SIGKILL after a grace or at a second signal
(:mod:`~dynamiccl.profiler.measure.job_process`): nothing of a launch outlives dynamiccl, and
ab.json keeps what was measured and how the last launch was stopped. A second ``ab run`` into the
same ``--out`` is refused while the first runs. Where the policy does not hold for this
environment's NCCL, or the plugin warned in a policy launch's output (it defers then), the A/B says
so: both sides would have run NCCL's default. Rolling back is running without the policy: the
default side of every pair is exactly that command.

``diff`` lays two job mixes (``dynamiccl profile job``'s ``job.jsonl``, one run with NCCL's
default, one with the policy) side by side: per collective, size and communicator what NCCL ran and
the GPU time per call on each side (:mod:`~dynamiccl.profiler.formats.job_mix_diff`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from dynamiccl.cli.common import UserError, int_between, job_command, path_arg, positive_float

EPILOG = """examples:
  dynamiccl ab run --policy tuned.dccl --dry-run -- srun --nodes 16 --ntasks-per-node 8 python train.py
  dynamiccl ab run --policy tuned.dccl --pairs 5 --metric 'step time ([0-9.]+) ms' --out ab -- \\
      torchrun --nproc-per-node 8 train.py
  dynamiccl ab run --policy tuned.dccl --launcher openmpi -- mpirun -np 16 -N 8 python train.py
  dynamiccl ab diff default/job.jsonl policy/job.jsonl"""

MAX_PAIRS = 50
#: How much of a file NCCL reads its variables from is looked at (such files are a few lines).
CONF_HEAD_BYTES = 1 << 20
AB_FILE = "ab.json"
#: --keep-output's range in MiB: the upper bound keeps a slip from holding gigabytes (the tail half
#: is held in memory until the launch ends).
MAX_KEEP_MIB = 1024


def _command(args: argparse.Namespace) -> list[str]:
    return job_command(args.cmd, "dynamiccl ab run --policy tuned.dccl -- torchrun "
                       "--nproc-per-node 8 train.py", must_exist=not args.dry_run)


def _policy_vars(args: argparse.Namespace) -> dict[str, str]:
    """The variables that load the policy (checked as the plugin checks the file)."""
    from dynamiccl.cli.policy_sniff import policy_file_kind
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.policy_format import POLICY_ENV, POLICY_SHA256_ENV
    from dynamiccl.profiler.measure.ab import policy_env
    from dynamiccl.system.nccl import TUNER_PLUGIN_ENV

    give = "give the .dccl `dynamiccl tune` or `dynamiccl export` wrote"
    if policy_file_kind(args.policy, give) != "dccl":
        raise UserError(f"{args.policy}: the A/B loads a .dccl through the DynamICCL plugin; {give}")
    pf.read(args.policy)  # a damaged file is one line here, not a job that silently defers
    plugin = _plugin(args)
    return policy_env(plugin, args.policy, pf.file_hash(args.policy), policy_var=POLICY_ENV,
                      sha_var=POLICY_SHA256_ENV, plugin_var=TUNER_PLUGIN_ENV)


def _plugin(args: argparse.Namespace) -> str:
    """The plugin the policy side loads: --plugin (checked to be a tuner library NCCL can load,
    made absolute as the ranks may start elsewhere), else `dynamiccl plugin path`."""
    from dynamiccl.plugin import build as plugin

    if args.plugin is not None:
        if args.dry_run:  # the lines are for the cluster, where the path may differ
            return args.plugin
        problem = plugin.tuner_library_problem(args.plugin)
        if problem:  # NCCL would run without it, silently: both sides alike
            raise UserError(f"--plugin {args.plugin}: {problem}; give the library `dynamiccl plugin "
                            "path` names (NCCL ignores a plugin it cannot load, and both sides "
                            "would run its default)")
        return str(Path(args.plugin).resolve())
    try:
        return str(plugin.library_path(build_if_missing=not args.dry_run))
    except plugin.PluginError as exc:
        if args.dry_run:
            return "$(dynamiccl plugin path)"
        raise UserError(f"{exc}; or give --plugin PATH") from None


def _refuse_forcing(env: dict[str, str]) -> None:
    """NCCL_ALGO/NCCL_PROTO in the environment pin NCCL on both sides: the plugin would change
    nothing, and the comparison would say so falsely."""
    from dynamiccl.system.nccl import ALGO_ENV, PROTO_ENV

    set_ = [v for v in (ALGO_ENV, PROTO_ENV) if env.get(v)]
    if set_:
        raise UserError(f"{', '.join(set_)} set in the environment: NCCL then ignores the tuner "
                        "plugin, so both sides would run the same; unset it for the A/B")


def _note_nccl_window(policy: str) -> None:
    """The policy holds for the NCCL releases it was measured on; the plugin defers under any
    other, and both sides then run NCCL's default. Said where this environment's NCCL (the one a
    job started from it loads) is outside them."""
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.build import installed_nccl_version
    from dynamiccl.system.nccl_versions import in_window

    window = pf.read(policy).header.nccl
    here = installed_nccl_version()
    if here is not None and in_window(here, window) is False:
        print(f"note: {policy} holds for NCCL {window}, and this environment's NCCL is {here}: a job "
              "that loads it runs with the plugin deferring every call, so both sides run NCCL's "
              "default (NCCL_DEBUG=WARN shows the plugin saying so)", file=sys.stderr)


def _note_nccl_conf(env: dict[str, str]) -> None:
    """A variable that loads a policy, set in a file NCCL reads its variables from, loads it on the
    default side too: that side runs without the variable, so NCCL takes the file's. Said for this
    machine's files (the nodes' may differ)."""
    from dynamiccl.plugin.policy_format import POLICY_ENV, POLICY_SHA256_ENV
    from dynamiccl.system.nccl import (
        CONF_FILE_ENV,
        SYSTEM_CONF_FILE,
        TUNER_PLUGIN_ENV,
        USER_CONF_FILE,
    )

    for path in (Path(env.get(CONF_FILE_ENV) or USER_CONF_FILE).expanduser(), Path(SYSTEM_CONF_FILE)):
        try:
            with path.open("rb") as fh:
                text = fh.read(CONF_HEAD_BYTES).decode(errors="replace")
        except OSError:
            continue
        named = {line.split("=", 1)[0].strip() for line in text.splitlines() if "=" in line}
        found = sorted(named & {TUNER_PLUGIN_ENV, POLICY_ENV, POLICY_SHA256_ENV})
        if found:
            print(f"note: {path} sets {', '.join(found)}, which NCCL takes where the environment "
                  "does not set it: the default side loads it too, so it is not NCCL's default; "
                  "remove it there for the A/B (and to roll back)", file=sys.stderr)


def _note_debug_file(env: dict[str, str]) -> None:
    """With NCCL's debug lines sent to a file, the jobs' output holds none of the plugin's warnings
    (that it defers, and why) that the A/B reads and reports."""
    from dynamiccl.system.nccl import DEBUG_FILE_ENV

    if env.get(DEBUG_FILE_ENV):
        print(f"note: {DEBUG_FILE_ENV}={env[DEBUG_FILE_ENV]} sends NCCL's lines, the tuner "
              "plugin's warnings among them, to that file: the A/B cannot report a policy the "
              f"plugin deferred; unset it (or set it empty) to have them read", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    import os

    from dynamiccl.files import claimed_folder
    from dynamiccl.plugin.policy_format import POLICY_ENV, POLICY_SHA256_ENV
    from dynamiccl.profiler.measure import ab
    from dynamiccl.profiler.measure.job_process import Stops, signal_name
    from dynamiccl.system.nccl import TUNER_PLUGIN_ENV

    cmd = _command(args)
    _refuse_forcing(dict(os.environ))
    metric = _metric(args.metric)
    policy_vars = _policy_vars(args)
    # the default side drops every variable that would load a policy; a tuner of the user's own
    # (another NCCL_TUNER_PLUGIN) stays: that is what the job runs without DynamICCL
    drop = [POLICY_ENV, POLICY_SHA256_ENV] + (
        [TUNER_PLUGIN_ENV] if "dynamiccl" in os.environ.get(TUNER_PLUGIN_ENV, "") else [])
    launches = ab.plan(cmd, args.pairs, policy_vars, args.launcher, drop)
    _note_nccl_conf(dict(os.environ))
    _note_debug_file(dict(os.environ))
    if args.dry_run:
        for launch in launches:
            print(f"# launch {launch.index + 1}/{len(launches)}: {launch.side} (pair {launch.pair + 1})")
            print(launch.shell())
        return 0
    _note_nccl_window(args.policy)
    doc = {"written_by": WRITTEN_BY, "command": cmd, "policy": str(Path(args.policy).resolve()),
           "sha256": policy_vars[POLICY_SHA256_ENV], "launcher": args.launcher,
           "metric": args.metric or "wall seconds", "pairs": args.pairs,
           "keep_output_mib": args.keep_output, "launches": [],
           "summary": None, "interrupted": False}
    results: list = []
    # every signal that ends a command (Ctrl-C, kill, timeout, a closed ssh session) from here on
    # stops the running launch's whole process tree, and what was measured is kept
    with Stops() as stops, claimed_folder(args.out, flag="--out", holds=f"the A/B's logs and "
                                          f"{AB_FILE}", command="dynamiccl ab run") as out:
        _claim_ab_file(args, out)

        def save(so_far: list) -> None:
            results[:] = so_far
            doc["launches"] = [vars(r) for r in so_far]
            doc["summary"] = ab.summarize(so_far, not args.higher_is_better).to_json()
            if stops.received:
                doc["interrupted"], doc["stopped_by"] = True, signal_name(stops.received[0])
            write_ab_file(out, doc)

        save([])  # ab.json is there from the start: what was measured, even nothing yet
        try:
            ab.run_all(launches, dict(os.environ), out, stops, timeout_s=args.timeout, metric=metric,
                       done=save, progress=lambda line: _say(line), keep_bytes=args.keep_output << 20)
        except ab.CannotStart as exc:
            raise UserError(str(exc)) from None
        if stops.received and not doc["interrupted"]:
            save(results)  # a signal between two launches: none started after it
    try:  # the terminal may have gone (a closed ssh session): ab.json holds it all the same
        _print_summary(ab.summarize(results, not args.higher_is_better), doc)
        _print_plugin_warnings(results)
    except OSError:
        pass
    if stops.received:
        signum = stops.received[0]
        stopped = next((r for r in results if r.stopped), None)
        _say(f"dynamiccl ab run: interrupted ({signal_name(signum)}) after "
             f"{sum(r.stopped == '' for r in results)} launch(es)"
             + (f"; launch {stopped.index + 1} ({stopped.side}) {stopped.stopped}, its output in "
                f"{stopped.log}" if stopped else "")
             + f"; what was measured is in {out / AB_FILE}")
        return 128 + signum
    failed = [r for r in results if r.status != 0 or r.score is None]
    if failed:
        r = failed[0]
        why = (r.stopped if r.stopped else f"exited with status {r.status}" if r.status
               else "printed no number --metric matches")
        _say(f"dynamiccl ab run: launch {r.index + 1} ({r.side}) {why}: the A/B stopped there (its "
             f"output: {r.log})")
        return 1
    return 0


def _say(line: str) -> None:
    """A progress line on stderr; a terminal that has gone (a closed ssh session) loses nothing:
    the launches go on and ab.json is written all the same."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


#: The first key of ab.json: what tells an A/B's result from any other JSON file of that name.
WRITTEN_BY = "dynamiccl ab run"


def write_ab_file(out: Path, doc: dict) -> None:
    from dynamiccl.files import write_text_atomic

    write_text_atomic(out / AB_FILE, json.dumps(doc, indent=1))


def _claim_ab_file(args: argparse.Namespace, out: Path) -> None:
    """ab.json and the launches' logs in --out: an earlier A/B's are replaced only with --force
    (its logs then removed first, so none is left beside the new ab.json), a file of the same
    name that no A/B wrote never."""
    from dynamiccl.files import FileKind, claim_output, starts_with

    kind = FileKind("an A/B result (dynamiccl ab run)",
                    starts_with(f'{{\n "written_by": "{WRITTEN_BY}"'.encode()))
    claim_output(out / AB_FILE, kind, force=args.force, flag="--out")
    stale = sorted(p for p in out.glob("launch_*.log") if LAUNCH_LOG.fullmatch(p.name))
    if stale and not args.force:
        raise UserError(f"--out {out} holds the logs of an earlier A/B ({stale[0].name}, ...); pass "
                        "--force to replace them or pick another folder")
    for path in stale:
        path.unlink(missing_ok=True)


#: The name of a launch's log in --out (``launch_03_policy.log``).
LAUNCH_LOG = re.compile(r"launch_\d{2,}_(default|policy)\.log")


def _print_plugin_warnings(results: list) -> None:
    warned = [r for r in results if r.plugin_warnings]
    if warned:
        lines = list(dict.fromkeys(w for r in warned for w in r.plugin_warnings))
        _say(f"warning: the plugin warned in {len(warned)} policy launch(es), so the policy side may "
             f"have run NCCL's default: {lines[0]}"
             + (f" (and {len(lines) - 1} more in the logs)" if len(lines) > 1 else ""))


def _metric(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise UserError(f"--metric {text!r} is not a regular expression ({exc})") from None
    if pattern.groups < 1:
        raise UserError(f"--metric {text!r} has no group: put the number in parentheses, e.g. "
                        "'step time ([0-9.]+) ms'")
    return pattern


def _print_summary(summary, doc: dict) -> None:
    unit = doc["metric"]

    def side(name: str, s) -> str:
        if s is None:
            return f"{name:>8}: no scored launch"
        return f"{name:>8}: median {s.median:.6g} ({s.low:.6g} .. {s.high:.6g}) {unit}, {s.launches} launches"

    print(side("default", summary.default))
    print(side("policy", summary.policy))
    if summary.ratios:
        print(f"   pairs: policy / default {', '.join(f'{r:.4f}' for r in summary.ratios)}")
    print(f" verdict: {summary.verdict}")


def _diff(args: argparse.Namespace) -> int:
    from rich.table import Table

    from dynamiccl.cli.common import read_head
    from dynamiccl.console import console
    from dynamiccl.profiler.formats import job_mix
    from dynamiccl.profiler.formats.job_mix_diff import DiffRow, diff, totals
    from dynamiccl.system.units import format_size

    mixes = []
    for path in (args.a, args.b):
        read_head(path, "job mix", 1, job_mix.FIX)  # missing, a folder, unreadable: said so
        try:
            mixes.append(job_mix.read(path))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    rows = diff(*mixes)
    if not any(r.a is not None and r.b is not None for r in rows):
        raise UserError(f"{args.a} and {args.b} share no kind of call (collective, size, ranks, "
                        "nodes), so they are not two runs of one job; give the mixes of the same "
                        "job run with NCCL's default and with the policy")
    total_a, total_b = totals(*mixes)
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, "total_us": [round(total_a, 3), round(total_b, 3)],
                          "rows": [r.to_json() for r in rows]}, indent=1))
        return 0
    table = Table(title=f"A = {args.a}, B = {args.b}", title_justify="left")
    for col in ("collective", "size", "ranks", "nodes", "calls A/B", "NCCL ran A", "NCCL ran B",
                "µs/call A", "µs/call B", "B/A", "beyond spread"):
        table.add_column(col)
    for r in rows:
        calls = f"{r.a.calls if r.a else 0}/{r.b.calls if r.b else 0}"
        per_call = [f"{e.record.time_us:.1f}" if e else "-" for e in (r.a, r.b)]
        table.add_row(r.collective, format_size(r.nbytes), str(r.nranks), str(r.nnodes), calls,
                      DiffRow.choice(r.a), DiffRow.choice(r.b), *per_call,
                      "-" if r.ratio is None else f"{r.ratio:.3f}", "yes" if r.beyond_spread else "")
    console().print(table)
    change = (total_b / total_a - 1) * 100 if total_a else float("nan")
    print(f"collective time: A {total_a / 1e3:.3f} ms, B {total_b / 1e3:.3f} ms ({change:+.1f}%)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from dynamiccl.profiler.measure.ab import KEEP_BYTES, LAUNCHERS

    p = subparsers.add_parser(
        "ab", help="A/B a policy on the cluster (interleaved launches), or diff two job mixes",
        description="Verify a policy where it runs: the job's own command launched with NCCL's "
                    "default and with the policy, interleaved; or what it changed in a job's "
                    "collective mix.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    r = kinds.add_parser(
        "run", help="interleaved default/policy launches of a command: medians, spread, verdict",
        description="Launch CMD in pairs, NCCL's default and the policy (NCCL_TUNER_PLUGIN, "
                    "DYNAMICCL_POLICY, DYNAMICCL_POLICY_SHA256 set), the order alternating; score "
                    "each launch by its wall time or --metric; print each side's median with its "
                    "spread, the pairs' ratios and a verdict. Exits 1 if a launch fails.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--policy", required=True, type=path_arg, metavar="FILE.dccl",
                   help="the policy the policy side loads")
    r.add_argument("--pairs", type=int_between(1, MAX_PAIRS), default=5,
                   help=f"pairs of launches, 1..{MAX_PAIRS} (default 5; a verdict needs 3)")
    r.add_argument("--launcher", choices=LAUNCHERS, default="env",
                   help="how the policy's variables reach every rank: env (the command inherits "
                        "them: srun --export=ALL, torchrun, a script; default), openmpi (mpirun -x), "
                        "mpich (mpirun -genv)")
    r.add_argument("--metric", metavar="REGEX",
                   help="score a launch by the last number this finds in its output (its first "
                        "group), e.g. 'step time ([0-9.]+) ms' (default: the launch's wall seconds)")
    r.add_argument("--higher-is-better", action="store_true",
                   help="the metric is a rate (samples/s): higher wins")
    r.add_argument("--timeout", type=positive_float, metavar="S",
                   help="stop a launch after S seconds (it then counts as failed)")
    r.add_argument("--plugin", type=path_arg, metavar="LIB",
                   help="the tuner plugin to load (default: `dynamiccl plugin path`)")
    r.add_argument("--out", type=path_arg, default="dynamiccl-ab", metavar="DIR",
                   help=f"folder for the launches' logs and {AB_FILE} (default dynamiccl-ab)")
    r.add_argument("--keep-output", type=int_between(1, MAX_KEEP_MIB), default=KEEP_BYTES >> 20,
                   metavar="MIB",
                   help="MiB of each launch's output its log keeps: the first and the last half, "
                        "with a line between saying how much was left out (default "
                        f"{KEEP_BYTES >> 20}; 1..{MAX_KEEP_MIB}). The score and the plugin's warnings are "
                        "read from all of it")
    r.add_argument("--force", action="store_true", help="replace an earlier A/B's files in --out")
    r.add_argument("--dry-run", action="store_true", help="print the launches, run nothing")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the job's command, as it is launched on the cluster")
    r.set_defaults(func=_run)
    d = kinds.add_parser(
        "diff", help="two job mixes (profile job) side by side",
        description="Per collective, size and communicator: what NCCL ran and the GPU time per call "
                    "in mix A and in mix B (job.jsonl of `dynamiccl profile job`), and the jobs' "
                    "collective time.")
    d.add_argument("a", type=path_arg, metavar="A.jsonl", help="e.g. the run with NCCL's default")
    d.add_argument("b", type=path_arg, metavar="B.jsonl", help="e.g. the run with the policy")
    d.add_argument("--json", action="store_true", help="print the rows as JSON")
    d.set_defaults(func=_diff)
