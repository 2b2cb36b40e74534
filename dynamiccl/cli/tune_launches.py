"""``tune --plan``'s output: the launches a person runs, as lines or as a script for their launcher.

The plan (:mod:`dynamiccl.agents.shipping.tune_plan`) picks measurements; this module turns them
into launches (:mod:`dynamiccl.agents.shipping.launchers`), prints them with the plan's shape, its
estimated wall time and node-hours, writes the runnable script (``--script``), and reads
``--budget`` as measurements (a number) or node-hours (``2.5node-hours``, ``2.5nh``). A launch
pinned through the plugin (a chunk size) needs its pin policy beside its log: the script writes it
just before the launch; a printed plan's lines read it from ``--logs``, where this module writes it
at once, with the sidecar that labels the log the line will write.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import sys
from dataclasses import dataclass

from dynamiccl.cli.common import UserError, path_arg

#: Measurements a plan may use without --budget.
DEFAULT_BUDGET = 64
MAX_BUDGET = 100_000
#: The largest node-hours budget taken at its word (a year of a 100-node cluster).
MAX_NODE_HOURS = 1e6
_NODE_HOURS = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*(?:nh|node-?hours?)\s*$", re.I)
_COUNT = re.compile(r"^\s*(\d+)\s*(?:measurements?)?\s*$", re.I)
PLAN_SCRIPT_MAGIC = b"#!/usr/bin/env bash\n# DynamICCL measurement plan"


@dataclass(frozen=True)
class Budget:
    """What a plan may spend: ``measurements`` (one choice at one size, NCCL's default counted) or
    ``node_hours`` (its launches' estimated node-hours)."""

    measurements: int | None = None
    node_hours: float | None = None

    def __str__(self) -> str:
        return (f"{self.node_hours:g} node-hours" if self.node_hours is not None
                else f"{self.measurements} measurements")


def budget_arg(text: str) -> Budget:
    """``--budget``: ``40`` (measurements) or ``2.5node-hours`` / ``2.5nh``."""
    if m := _NODE_HOURS.match(text):
        hours = float(m.group(1))
        if not 0 < hours <= MAX_NODE_HOURS:
            raise argparse.ArgumentTypeError(f"{text!r}: give more than 0 and at most "
                                             f"{MAX_NODE_HOURS:g} node-hours")
        return Budget(node_hours=hours)
    if m := _COUNT.match(text):
        count = int(m.group(1))
        if not 1 <= count <= MAX_BUDGET:
            raise argparse.ArgumentTypeError(f"{text!r}: give 1..{MAX_BUDGET} measurements")
        return Budget(measurements=count)
    raise argparse.ArgumentTypeError(f"{text!r} is neither a number of measurements (40) nor "
                                     "node-hours (2.5node-hours, 2.5nh)")


def add_plan_args(parser: argparse.ArgumentParser) -> None:
    from dynamiccl.agents.shipping.launchers import LAUNCHERS

    parser.add_argument("--budget", type=budget_arg, default=None, metavar="N|Xnode-hours",
                        help=f"with --plan: what the plan may spend, measurements (one choice at one "
                             f"size, default {DEFAULT_BUDGET}) or node-hours as the launches are "
                             "estimated to take (e.g. 4node-hours)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default=None,
                        help="with --plan: the launches for this launcher (default: local on one "
                             "node; across nodes a line for openmpi and one for mpich)")
    parser.add_argument("--script", type=path_arg, metavar="FILE",
                        help="with --plan: write the plan as a bash script for --launcher (resumable, "
                             "Ctrl-C safe, --dry-run prints the launches; each launch writes its log "
                             "and its sidecar under --logs)")
    parser.add_argument("--logs", type=path_arg, default="logs", metavar="DIR",
                        help="with --plan: the folder the launches write their logs to (default logs); "
                             "a printed plan writes a chunk-size launch's pin policy and sidecar "
                             "there at once")


def plan_fits(budget: Budget, gpus_per_node: int, call_us):
    """The ``fits`` bound of :func:`~dynamiccl.agents.shipping.tune_plan.plan` for a node-hours
    budget (None for a count)."""
    if budget.node_hours is None:
        return None
    from dynamiccl.agents.shipping.launchers import estimate, launches

    def fits(planned: list) -> bool:
        return estimate(launches(planned, gpus_per_node, call_us))[1] <= budget.node_hours
    return fits


def cached_call_us(topology):
    from dynamiccl.agents.shipping.launchers import model_call_us

    return functools.lru_cache(maxsize=None)(model_call_us(topology))


def emit(args: argparse.Namespace, planned: list, topology, call_us, made_by: str) -> None:
    """Prints the plan (JSON, or a line per launch and launcher) with its summary on stderr, and
    writes ``--script``."""
    from dynamiccl.agents.shipping import launchers as L
    from dynamiccl.files import write_text_atomic

    runs = L.with_pins(L.launches(planned, topology.gpus_per_node, call_us), topology)
    names = (args.launcher,) if args.launcher else L.default_launchers(runs)
    if args.script and len(names) > 1:
        raise UserError(f"--script writes the plan for one launcher and this one spans several "
                        f"nodes: add --launcher {' or '.join(n for n in L.LAUNCHERS if n != 'local')}")
    for name in names:
        problem = L.check_launcher(name, runs)
        if problem:
            raise UserError(f"--launcher {name}: {problem}")
    if not args.script and not args.run:  # the printed lines read them: written before they show
        _write_pins(runs, names, args.logs, made_by)
    if args.json:
        of = {(x.collective, x.nodes, x.ranks_per_node, x.choice, x.round, n): x
              for x in runs for n in x.sizes}
        rows = []
        for m in planned:
            nodes = m.nodes or max(1, m.nranks // topology.gpus_per_node)
            x = of[(m.collective, nodes, m.nranks // nodes, m.choice, m.launch, m.nbytes)]
            rows.append({"collective": m.collective.name.lower(), "ranks": m.nranks,
                         "nodes": x.nodes, "ranks_per_node": x.ranks_per_node,
                         "choice": m.choice.label(), "nbytes": m.nbytes, "launch": m.launch,
                         "log": f"{x.name}.txt", "value": round(m.value, 5), "reason": m.reason,
                         **({"pin_policy": x.pin_file, "pin_sha256": x.pin_sha256} if x.pinned
                            else {})})
        print(json.dumps(rows, indent=1))
    elif not args.script:
        for text in L.plan_lines(runs, names, args.logs):
            print(text)
        if runs:
            print(f"note: each line writes its log into {args.logs}/ (create it first: mkdir -p "
                  f"{args.logs}); --script writes a script that does, labels every log and resumes",
                  file=sys.stderr)
    print(L.summary(runs, "/".join(names)), file=sys.stderr)
    if args.script:
        then = shlex.join(["dynamiccl", "tune", *topology_words(args), "--measurements", args.logs,
                           "-o", "tuned.dccl"])
        text = L.script(runs, names[0], logs=args.logs, made_by=made_by, then=then,
                        name=args.script)
        try:
            write_text_atomic(args.script, text)
        except OSError as exc:
            raise UserError(f"cannot write {args.script}: {exc.strerror or exc}") from None
        print(f"wrote {args.script} ({names[0]}): run it with `bash {args.script}` (`--dry-run` "
              f"prints the launches); each launch writes {args.logs}/<name>.txt and its sidecar",
              file=sys.stderr)


def _write_pins(runs: list, launchers: tuple[str, ...], logs: str, made_by: str) -> None:
    """For a printed plan: each launch pinned through the plugin gets its pin policy and its
    sidecar in ``logs`` now (the line reads the one and its log needs the other), each written
    atomically and never over a file that is not that launch's (an earlier plan's is replaced)."""
    from pathlib import Path

    from dynamiccl.agents.shipping import launchers as L
    from dynamiccl.files import write_text_atomic

    pinned = [x for x in runs if x.pinned]
    if not pinned:
        return
    folder = Path(logs)  # a folder or none yet: check_logs saw to it before any work
    for x in pinned:
        policy, label = folder / x.pin_file, folder / f"{x.name}.yaml"
        for path, ours in ((policy, L.is_pin_policy_of), (label, _is_label_of)):
            if (path.exists() or path.is_symlink()) and not ours(path, x):
                raise UserError(f"{path} is there and is not what this plan writes for "
                                f"{x.name}; move it away, or give --logs another folder")
        if label.exists() and (folder / f"{x.name}.txt").is_file():  # _is_label_of read the label
            continue  # measured already: its label and policy stay as they were
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(policy, x.pin, encoding="ascii")
            write_text_atomic(label, L.sidecar(x, launchers[0], made_by, printed_logs=logs,
                                               also=launchers[1:]))
        except OSError as exc:
            raise UserError(f"cannot write {exc.filename or folder}: {exc.strerror or exc}") from None
    print(f"wrote the pin policies and sidecars of {len(pinned)} launch(es) pinned through the "
          f"plugin into {logs}/ ({pinned[0].pin_file} ...): their lines read them from there",
          file=sys.stderr)


def _is_label_of(path, launch) -> bool:
    """Whether ``path`` is the sidecar of ``launch``'s log (what a printed plan wrote before)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            meta = yaml.safe_load(fh.read(1 << 16))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(meta, dict) and meta.get("log") == f"{launch.name}.txt"


def topology_words(args: argparse.Namespace) -> list[str]:
    """The topology as the command line gave it (``--topology X [--nodes N] [--gpus-per-node G]``)."""
    words = ["--topology", args.topology]
    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)):
        if value is not None:
            words += [flag, str(value)]
    return words


def claim_script(args: argparse.Namespace, inputs: list[str]) -> None:
    """``--script`` checked before any work: never an input, and --force replaces only a plan script;
    ``--logs`` a folder the launches can make and write to (:func:`check_logs`)."""
    from dynamiccl.files import FileKind, claim_output, starts_with

    check_logs(args.logs)
    if args.script:
        claim_output(args.script, FileKind("a plan script tune --plan wrote",
                                           starts_with(PLAN_SCRIPT_MAGIC)),
                     inputs=inputs, force=args.force, flag="--script")


def check_logs(logs: str) -> None:
    """``--logs``: a folder the plan's launches write into (made by the script, or by hand for the
    printed lines) must be able to be one: not an existing file, under a folder (the nearest that
    exists) that can be written to. The launches may run elsewhere, but on a shared file system
    what cannot be made here cannot be made there either."""
    from pathlib import Path

    from dynamiccl.files import takes_files

    path = Path(logs)
    if path.exists() and not path.is_dir():
        raise UserError(f"--logs {logs} is a file; give a folder for the launches' logs")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise UserError(f"--logs {logs}: {existing} is a file, so the folder cannot be made; give "
                        "another --logs")
    if not takes_files(existing):
        raise UserError(f"--logs {logs}: {existing} is not writable, so the launches could not "
                        "write their logs there; give another --logs")
