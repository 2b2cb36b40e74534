"""What every subcommand shares: the user-error type, argument types and the shared argument groups.

``UserError`` is defined here, once, so ``python -m dynamiccl.cli.main`` (where ``main`` is the
``__main__`` module) and the subcommands raise and catch the same class. Argument types validate at
the boundary: a value the user typed is checked where it is parsed, and the layers below can treat
any exception they raise as a bug.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN, check_margin
from dynamiccl.config_loader import ConfigError
from dynamiccl.files import not_regular_message
from dynamiccl.system.knobs import parse_enum
from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import Topology, load_topology
from dynamiccl.system.units import parse_size


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2, no traceback."""


#: Exceptions the layers raise only for bad input (a malformed file, an unknown name), by module,
#: so they are reported as the user's mistake without importing those modules up front.
INPUT_ERRORS = (
    ("dynamiccl.config_loader", "ConfigError"),
    ("dynamiccl.plugin.policy_file", "PolicyFileError"),
    ("dynamiccl.agents.training.config_checks", "ConfigCheckError"),
    ("dynamiccl.profiler.formats.nccl_tests", "NcclTestsParseError"),
    ("dynamiccl.profiler.fit.calibrate", "CalibrationError"),
    ("dynamiccl.files", "OutputRefused"),
)

DEBUG_ENV = "DYNAMICCL_DEBUG"


def is_input_error(exc: BaseException) -> bool:
    """True for the layers' own bad-input exceptions and for files the user named that cannot be used."""
    if isinstance(exc, UserError):
        return True
    if isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and exc.filename is not None):
        return True  # a path the user named (a missing one may be reported by message only)
    for module, name in INPUT_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    return False


def describe_input_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, UserError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


def internal_error_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"internal error: {type(exc).__name__}: {first}. This is a bug in dynamiccl, not in your "
            f"input; please report it with the command line ({DEBUG_ENV}=1 shows the traceback)")


class UsageError(UserError):
    """A command line argparse rejected; ``prog`` is the (sub)command whose arguments were wrong."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{message} (see `{prog} --help`)")
        self.prog = prog


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage block), exit code 2.

    The usage block buries the one line that says what is wrong; ``--help`` still shows it.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.endswith("expected one argument"):  # argparse took a value like -3ms for an option
            message += "; values cannot be negative, and one starting with '-' is written --option=VALUE"
        raise UsageError(self.prog, message)


def add_topology_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--topology", required=required, type=path_arg, metavar="NAME|FILE.yaml",
                        help="a preset (see `dynamiccl topologies`) or a topology YAML file")
    parser.add_argument("--nodes", type=positive_int, metavar="N", help="resize the preset to N nodes")
    parser.add_argument("--gpus-per-node", type=positive_int, metavar="G",
                        help="resize the preset to G GPUs per node")


def topology_from_args(args: argparse.Namespace) -> Topology:
    try:
        return load_topology(args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    except ConfigError as exc:
        raise UserError(str(exc)) from None


def collective_arg(text: str) -> Collective:
    try:
        return Collective(parse_enum(Collective, text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type for a whole number in ``low..high``: the upper bound keeps a slip (an extra
    zero) from turning into hours of work or a machine out of memory."""

    def parse(text: str) -> int:
        value = _int_at_least(text, low)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {value}")
        return value

    return parse


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < low:
        word = "positive" if low == 1 else f"at least {low}"
        raise argparse.ArgumentTypeError(f"must be {word}, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number ≥ 0 (``nan`` and ``inf`` parse as floats but mean nothing as a ratio or time)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def float_up_to(high: float, unit: str = "") -> Callable[[str], float]:
    """An argparse type for a finite number in ``0..high`` (``unit`` follows the bound in the
    message, e.g. " s"): as for :func:`int_between`, the bound keeps a slip from meaning hours or an
    overflow."""

    def parse(text: str) -> float:
        value = non_negative_float(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:g}{unit}, got {text}")
        return value

    return parse


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def add_action_set_args(parser: argparse.ArgumentParser, who: str) -> None:
    """``--all-actions`` / ``--deployable``: whether ``who`` may also use the simulator-only actions;
    ``args.all_actions`` is False (deployable, the default) unless asked."""
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--all-actions", action="store_true",
                         help=f"let {who} also use the simulator-only ring-over-ring and StragglAR (no "
                              "real job can run them)")
    actions.add_argument("--deployable", action="store_true",
                         help=f"only what the tuner plugin can make NCCL run, for {who} (the default)")


def add_gate_margin_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--margin``: the safety gate's margin (``agents.shipping.gate.DEFAULT_MARGIN`` unless given), checked
    where it is parsed by the gate's own range check."""
    parser.add_argument("--margin", type=_gate_margin, default=DEFAULT_MARGIN, metavar="FRACTION",
                        help=f"{what} (default {DEFAULT_MARGIN:g} = {100 * DEFAULT_MARGIN:g}%%)")


def _gate_margin(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    try:
        return check_margin(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def path_arg(text: str) -> str:
    """A file or folder name (or a preset's name) the user typed. An empty one (often an unset
    shell variable) is refused: some commands would read it as the current folder, others as
    "not given" and silently skip the output. So is one with a control character: a name is
    written into logs, sidecars and scripts a line at a time, and a line break in it would end a
    comment line of a plan's script and run the rest as a command."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty; give a name or a path (is a shell variable unset?)")
    if any(ord(c) < 32 or c == "\x7f" for c in text):  # it would break the lines it is written in
        raise argparse.ArgumentTypeError(f"{text!r} holds a control character (a line break?); give "
                                         "a name without one")
    return text


def read_text(path: str | Path, what: str) -> str:
    """The text of a file the user named, or one UserError saying why it cannot be read."""
    with _reading(path, what):
        return Path(path).read_text(encoding="utf-8-sig")  # past a byte-order mark, if any


def read_head(path: str | Path, what: str, size: int, missing: str = "check the path") -> bytes:
    """The first ``size`` bytes of a file the user named, or one UserError saying why they cannot
    be read (``missing``: the fix for a file that does not exist)."""
    with _reading(path, what, missing), Path(path).open("rb") as fh:
        return fh.read(size)


@contextmanager
def _reading(path: str | Path, what: str, missing: str = "check the path") -> Iterator[None]:
    """Why a file the user named cannot be read, as one UserError: the ladder every reader shares.
    A FIFO or a device is named, never opened: reading one blocks or never ends."""
    special = not_regular_message(path, what)
    if special:
        raise UserError(special)
    try:
        yield
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}; {missing}") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a folder, not a {what}; give the file inside it") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied reading the {what}; check its permissions") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text {what} (it is not UTF-8)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None


def job_command(words: list[str], example: str, *, must_exist: bool = True) -> list[str]:
    """The job's command a command runs (the words after ``--``), or one UserError: none given
    (``example`` shows one), or, with ``must_exist``, a program that is not on PATH or not
    executable (a job that cannot start is said before any folder or file is made for it)."""
    import os
    import shutil

    cmd = words[1:] if words[:1] == ["--"] else list(words)
    if not cmd:
        raise UserError(f"no command given; write the job's command after --, e.g. {example}")
    if must_exist and not shutil.which(cmd[0]):
        if os.sep in cmd[0] and Path(cmd[0]).is_file():
            raise UserError(f"{cmd[0]} is not executable; chmod +x it, or give its interpreter "
                            f"first (e.g. python {cmd[0]})")
        raise UserError(f"{cmd[0]}: command not found; give the job's command after --")
    return cmd


#: The file names that say which policy format a file holds: writing the other under them would
#: leave a file a person (or NCCL's example tuner, given a .csv) reads as what it is not.
_FORMAT_SUFFIXES = {"dccl": (".dccl",), "nccl-example-csv": (".csv", ".conf")}
_FORMAT_NAMES = {"dccl": "a .dccl (the DynamICCL plugin's file)",
                 "nccl-example-csv": "a CSV (NVIDIA's example tuner's file)"}


def check_output_format(output: str, fmt: str) -> None:
    """``-o`` of a policy (tune, export): a name whose suffix says the other ``--format`` is refused
    before any work (``-o tuned.csv`` would otherwise hold a .dccl, which NCCL's example tuner
    cannot read); a name with another suffix, or none, is the user's to choose."""
    suffix = Path(output).suffix.lower()
    for other, suffixes in _FORMAT_SUFFIXES.items():
        if other != fmt and suffix in suffixes:
            raise UserError(f"-o {output} names {_FORMAT_NAMES[other]}, but --format is {fmt}, "
                            f"{_FORMAT_NAMES[fmt]}; add --format {other}, or name it "
                            f"{_FORMAT_SUFFIXES[fmt][0]}")


def nccl_version_arg(text: str):
    """``--nccl-version``: an NCCL release as major.minor.patch (``2.26.2``; a tag's ``v`` and a
    package's ``-1`` suffix are read past), as a :class:`~dynamiccl.system.nccl_versions.NcclVersion`."""
    from dynamiccl.system.nccl_versions import parse_version

    version = parse_version(text)
    if version is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an NCCL release; give major.minor.patch, "
                                         "e.g. 2.26.2")
    return version
