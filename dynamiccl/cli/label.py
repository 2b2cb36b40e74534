"""``dynamiccl label LOG... --nodes N --gpus-per-node G [--forced VAR=VALUE ...]``: say how logs ran.

nccl-tests' text output records no environment, so a run forced with ``NCCL_ALGO=RING`` reads
exactly like NCCL's default, and ``tune`` refuses such a log rather than guess. Whoever ran it
knows: this command writes the sidecar ``<log stem>.yaml`` beside each log
(:func:`~dynamiccl.profiler.formats.published.sidecar_text`: the nodes, the ranks per node, the launch
mode and the variables that forced NCCL, ``{}`` for its default), which ``tune``, ``calibrate``
and the replay read with the log. A sidecar there already is replaced only with ``--force``, and
only if it is one; any other file of that name is never touched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamiccl.cli.common import UserError, nccl_version_arg, path_arg, positive_int

EPILOG = """examples:
  dynamiccl label logs/all_reduce_default.txt --nodes 16 --gpus-per-node 8
  dynamiccl label logs/all_reduce_ring_*.txt --nodes 16 --gpus-per-node 8 --forced NCCL_ALGO=Ring
then: dynamiccl tune --topology T --measurements logs/ -o tuned.dccl"""

#: The variables a label may name as having forced NCCL.
FORCING_VARIABLES = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")


def _forced(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not value or name not in FORCING_VARIABLES:
        raise argparse.ArgumentTypeError(f"{text!r}: give VAR=VALUE with VAR one of "
                                         f"{', '.join(FORCING_VARIABLES)} (e.g. NCCL_ALGO=Ring)")
    return name, value


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.files import FileKind, claim_output, write_text_atomic
    from dynamiccl.profiler.formats.measurements import MeasurementFormatError, detect_format
    from dynamiccl.profiler.formats.nccl_tests import parse_nccl_tests_file
    from dynamiccl.profiler.formats.published import (
        PublishedRunError,
        check_against_log,
        sidecar_log,
        sidecar_text,
    )
    from dynamiccl.system.topology import LAUNCH_MODES

    forced = _forced_once(args.forced or [])
    # every log checked and every sidecar claimed before any is written: a mistake in the third
    # log leaves the first two as they were, not half the batch labelled
    pending: dict[Path, str] = {}
    for log in map(Path, args.logs):
        try:
            kind = detect_format(log)
        except MeasurementFormatError as exc:
            raise UserError(str(exc)) from None
        if kind != "nccl-tests":
            raise UserError(f"{log}: {kind} output says how it ran already; label nccl-tests' text "
                            "output only")
        runs = parse_nccl_tests_file(log)
        if len({run.collective for run in runs}) != 1:
            raise UserError(f"{log}: holds runs of several collectives; label one run per file")
        sidecar = log.with_suffix(".yaml")
        if sidecar in pending:
            raise UserError(f"{log} is given twice (its sidecar {sidecar} once); give each log once")
        kind_of = FileKind(f"the sidecar of {log.name}",
                           lambda p, log=log: (sidecar_log(p) or Path()).resolve() == log.resolve())
        claim_output(sidecar, kind_of, inputs=[log], force=args.force, flag="")
        launch = args.launch or (LAUNCH_MODES[1] if args.nodes == 1 and runs[0].header.get(
            "ngpus", 1) == args.gpus_per_node > 1 else LAUNCH_MODES[0])
        try:
            text = sidecar_text(log.name, runs[0].collective, args.nodes, args.gpus_per_node, launch,
                                forced, nccl_version=str(args.nccl_version or "unknown"),
                                source={"labelled_by": "dynamiccl label"},
                                notes="labelled by hand: forced is what the run was started with")
            check_against_log(text, log, [rec for run in runs for rec in run.records])
        except PublishedRunError as exc:
            raise UserError(f"{log}: {exc}") from None
        pending[sidecar] = text
    for sidecar, text in pending.items():
        write_text_atomic(sidecar, text)
    what = "NCCL's default" if not forced else " ".join(f"{k}={v}" for k, v in forced.items())
    print(f"labelled {len(pending)} log(s) as {what} on {args.nodes} node(s) x "
          f"{args.gpus_per_node} rank(s) per node: {', '.join(map(str, pending))}", file=sys.stderr)
    return 0


def _forced_once(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The --forced variables; one given twice is refused (which of the two did the run use?)."""
    forced: dict[str, str] = {}
    for name, value in pairs:
        if name in forced and forced[name] != value:
            raise UserError(f"--forced {name} is given twice ({forced[name]} and {value}); a run "
                            "was started with one value: give it once")
        forced[name] = value
    return forced


def register(subparsers: argparse._SubParsersAction) -> None:
    from dynamiccl.system.topology import LAUNCH_MODES

    parser = subparsers.add_parser(
        "label", help="write the sidecar that says how nccl-tests logs ran (nodes, forcing)",
        description="Write <log>.yaml beside each nccl-tests text log: the nodes and ranks per node "
                    "it ran on, its launch mode, and the NCCL variables that forced it ({} = NCCL's "
                    "default). nccl-tests' text records no environment, and tune refuses a log "
                    "that does not say whether NCCL_ALGO/NCCL_PROTO were set.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=path_arg, metavar="LOG",
                        help="nccl-tests text logs, all run the same way")
    parser.add_argument("--nodes", type=positive_int, required=True, help="nodes the run spanned")
    parser.add_argument("--gpus-per-node", type=positive_int, required=True,
                        help="ranks (GPUs) per node")
    parser.add_argument("--forced", type=_forced, action="append", metavar="VAR=VALUE",
                        help="a variable that forced NCCL (repeatable; none: NCCL's default)")
    parser.add_argument("--launch", choices=LAUNCH_MODES, default=None,
                        help="one process per GPU, or one process driving every GPU of the node "
                             "(default: single_process where one node's log shows nGpus = its GPUs)")
    parser.add_argument("--nccl-version", type=nccl_version_arg, default=None, metavar="X.Y.Z",
                        help="the NCCL release it ran (default: what the log says, if anything)")
    parser.add_argument("--force", action="store_true", help="replace a sidecar written before")
    parser.set_defaults(func=_run)
