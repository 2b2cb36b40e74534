"""Entry point of the ``dynamiccl`` console command.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds its
parser and sets ``func``; heavy libraries (torch, ray, wandb) are imported inside the command that
needs them, so ``dynamiccl --help`` stays fast.

Errors are sorted here, once: the user's mistakes (``UserError``, the input-validation errors the
layers define, a file the user named that cannot be opened) are one line and exit code 2, and so is a
command that needs an extra this install lacks (naming the extra, :mod:`dynamiccl.cli.extras`);
anything else is a bug in dynamiccl and says so in one line with exit code 1 (``DYNAMICCL_DEBUG=1``
shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from importlib.metadata import PackageNotFoundError, version

from dynamiccl.cli.common import (
    DEBUG_ENV,
    ArgumentParser,
    UsageError,
    describe_input_error,
    internal_error_line,
    is_input_error,
)
from dynamiccl.cli.extras import missing_extra
from dynamiccl.files import forget_claims, outputs_so_far

#: Subcommand modules under ``dynamiccl.cli``, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "simulate",
    "explain",
    "train",
    "evaluate",
    "sweep",
    "export",
    "tune",
    "label",
    "show",
    "plugin",
    "profile",
    "calibrate",
    "check_model",
    "ab",
)

def _version() -> str:
    try:
        return version("dynamiccl")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="dynamiccl",
        description="Learn better NCCL algorithm/protocol/channel choices and ship them into jobs.",
    )
    parser.add_argument("--version", action="version", version=f"dynamiccl {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"dynamiccl.cli.{name}").register(sub)
    return parser


def _prog(args: argparse.Namespace) -> str:
    words = ["dynamiccl", args.command, getattr(args, "what", None)]
    return " ".join(w for w in words if w)


def console() -> int:
    """The ``dynamiccl`` console command: :func:`main` in a process of its own, where piping into
    ``head`` ends quietly as it does for any Unix tool (SIGPIPE's default action). Only here: a
    caller running :func:`main` in its own process (tests, benchmarks) keeps its signal handling."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return main()


def main(argv: list[str] | None = None) -> int:
    forget_claims()  # a process that runs several commands (tests): each claims its own outputs
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_overrides", False):
            raise UsageError(_prog(args), f"unrecognized arguments: {' '.join(extra)}")
    except UsageError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    except KeyboardInterrupt:  # Ctrl-C while the commands load (a quarter of a second)
        print("dynamiccl: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    if getattr(args, "accepts_overrides", False):
        args.overrides = extra
    prog = _prog(args)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{_outputs_so_far()}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        line = missing_extra(exc, getattr(args, "extra", None))
        if line is None:
            return _failed(prog, exc)
        print(f"{prog}: error: {line}", file=sys.stderr)
        return 2
    except Exception as exc:
        return _failed(prog, exc)


def _outputs_so_far() -> str:
    """What an interrupted command leaves: the files it wrote (each whole, as every file is written
    atomically) and the outputs it claimed and did not write."""
    written, not_written = outputs_so_far()
    said = f" after writing {_some(written)} (each whole)" if written else ""
    if not_written:
        said += f"; not written: {_some(not_written)}"
    return said


def _some(paths: list) -> str:
    shown = ", ".join(map(str, paths[:5]))
    return shown + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _failed(prog: str, exc: Exception) -> int:
    """A user's input error (2) or a bug in dynamiccl (1), in one line."""
    if is_input_error(exc):
        print(f"{prog}: error: {describe_input_error(exc)}", file=sys.stderr)
        return 2
    if os.environ.get(DEBUG_ENV):
        raise exc
    print(f"{prog}: {internal_error_line(exc)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(console())
