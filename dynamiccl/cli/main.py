"""Entry point of the ``dynamiccl`` console command.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds its
parser and sets ``func``; heavy libraries (torch, ray, wandb) are imported inside the command that
needs them, so ``dynamiccl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

#: Subcommand modules under ``dynamiccl.cli``, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "simulate",
    "explain",
    "train",
    "evaluate",
    "sweep",
    "export",
    "tune",
    "show",
    "plugin",
    "profile",
    "calibrate",
)


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynamiccl",
        description="Learn better NCCL algorithm/protocol/channel choices and ship them into jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"dynamiccl.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Piping into `head` must end quietly, as it does for any Unix tool.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "accepts_overrides", False):
        args.overrides = extra
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, FileNotFoundError) as exc:
        print(f"dynamiccl {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
