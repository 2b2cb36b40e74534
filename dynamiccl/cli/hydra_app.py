"""``dynamiccl train`` and ``dynamiccl sweep``: a Hydra app started from the command line.

Left to itself, Hydra reports a config it cannot compose (a misspelt key, a value of the wrong
type, a config group option that does not exist) in 7-12 lines ending in "Set the environment
variable HYDRA_FULL_ERROR=1…" with exit code 1, and it creates the run folder and its log file
before the app can refuse a setting. So the config is composed here first: a mistake in it is one
line naming the key and the fix, exit code 2, before anything is created; and a run the app refuses
(exit code 2) takes back the folder and log Hydra made for it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dynamiccl.cli.common import UserError

if TYPE_CHECKING:
    from omegaconf.errors import OmegaConfBaseException

#: Hydra prints exceptions itself unless this is set; then they reach us and become one line.
FULL_ERROR_ENV = "HYDRA_FULL_ERROR"
#: What Hydra and the run-folder lock put into a run folder before the app does any work.
_SCAFFOLDING = re.compile(r"(.*\.log|\.lock)")


def check_output_dirs(overrides: list[str]) -> None:
    """Hydra creates its run folder before the app starts and reports a failure with a traceback;
    a folder that cannot be created is refused here first, in one line."""
    given = {k: v for k, _, v in (o.partition("=") for o in overrides)}
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        if key in given and not given[key].strip(" '\""):
            raise UserError(f"{key} is empty (an unset shell variable?), which would write the run "
                            f"into the current folder; give a run folder, e.g. {key}=runs/mine")
        path = Path(given.get(key, "outputs")).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"cannot create the run folder {path}: {existing} is not a writable "
                            f"directory; choose another with {key}=PATH")


def config_error_line(exc: BaseException, prog: str, overrides: list[str]) -> str | None:
    """One line for a config Hydra cannot compose (None for any other exception)."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, MissingConfigException) and "/" in (exc.missing_cfg_file or ""):
        group, _, name = exc.missing_cfg_file.rpartition("/")
        options = list(exc.options or [])
        return (f"{group}={name}: the config group '{group}' has no option '{name}'"
                f"{_did_you_mean(name, options)}; choose one of {', '.join(options)}")
    if isinstance(exc, OverrideParseException):
        bad = next((o for o in overrides if not _parses(o)), None)
        where = f"cannot read the override {bad!r}" if bad else "cannot read an override"
        return f"{where}: {_first_line(exc)}; write key=value, quoting a value with spaces or brackets"
    if not isinstance(exc, ConfigCompositionException):
        return None
    if isinstance(exc.__cause__, OmegaConfBaseException) and exc.__cause__.full_key:
        return omegaconf_line(exc.__cause__, prog)
    return f"{_first_line(exc)}; `{prog} --cfg job` prints the composed config"


def omegaconf_line(exc: OmegaConfBaseException, prog: str) -> str:
    """An override OmegaConf refused: an unknown key (with the nearest known one) or a value of
    the wrong type (with the type wanted)."""
    from omegaconf import DictConfig
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    listing = f"`{prog} --cfg job` prints every key with its value"
    if isinstance(exc, ConfigAttributeError | ConfigKeyError):
        parent = exc.parent_node
        known = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
        return f"unknown config key '{exc.full_key}'{_did_you_mean(str(exc.key), known)}; {listing}"
    expected = re.search(r"could not be converted to (\w+)", str(exc))
    fix = f"give a value of type {expected.group(1)}" if expected else listing
    value = "" if exc.value is None else f"={exc.value}"
    return f"{exc.full_key}{value}: {_first_line(exc)}; {fix}"


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _parses(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        OverridesParser.create().parse_overrides([override])
    except OverrideParseException:
        return False
    return True


def _composed_run_dir(config_name: str, prog: str, overrides: list[str]) -> Path:
    """Composes the config as the app will see it (so a mistake in it is one line, before Hydra
    creates anything) and returns the run folder it names."""
    from hydra import compose, initialize_config_module
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module("dynamiccl.configs", version_base="1.3"):
            cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
            return Path(str(cfg.hydra.run.dir))
    except OmegaConfBaseException as exc:  # e.g. hydra.run.dir=${nosuch}
        raise UserError(omegaconf_line(exc, prog)) from None
    except Exception as exc:
        line = config_error_line(exc, prog, overrides)
        if line is None:
            raise
        raise UserError(line) from None


@contextmanager
def _hydra_raises() -> Iterator[None]:
    """Hydra re-raises instead of printing its multi-line report; restored afterwards."""
    before = os.environ.get(FULL_ERROR_ENV)
    os.environ[FULL_ERROR_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[FULL_ERROR_ENV]
        else:
            os.environ[FULL_ERROR_ENV] = before


@contextmanager
def _taken_back_if_refused(run_dir: Path | None) -> Iterator[None]:
    """A refused run (exit code 2) removes what it added to ``run_dir`` when that is only Hydra's
    log and the lock file, and the folders Hydra created for it (``outputs/train/runs/…``);
    anything else means work was done, and it stays."""
    if run_dir is None:
        yield
        return
    run_dir = run_dir.absolute()
    missing = [d for d in (run_dir, *run_dir.parents) if not d.exists()]
    before = set() if missing else set(os.listdir(run_dir))
    try:
        yield
    except SystemExit as exc:
        if exc.code == 2 and run_dir.is_dir():
            added = set(os.listdir(run_dir)) - before
            if all(_SCAFFOLDING.fullmatch(name) for name in added):
                for name in added:
                    (run_dir / name).unlink(missing_ok=True)
                for folder in missing:  # the run folder first, then the parents made for it
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
        raise


def run_hydra(app: Callable[[], object], prog: str, config_name: str, overrides: list[str]) -> int:
    """Runs the ``@hydra.main`` app ``app`` (config ``config_name``) as ``prog OVERRIDES``."""
    run_dir = None
    if not any(arg.startswith("-") for arg in overrides):  # a plain run, no -m/--cfg/-cn flags
        run_dir = _composed_run_dir(config_name, prog, overrides)
    check_output_dirs(overrides)
    if run_dir is not None and not any(o.startswith("hydra.run.dir=") for o in overrides):
        # the default folder is named by the time: pinned, so the folder watched is the one made
        overrides = [*overrides, "hydra.run.dir='{}'".format(str(run_dir).replace("'", "\\'"))]
    argv = sys.argv
    sys.argv = [prog, *overrides]
    try:
        with _taken_back_if_refused(run_dir), _hydra_raises():
            app()
    except Exception as exc:
        line = config_error_line(exc, prog, overrides)
        if line is None:
            raise
        raise UserError(line) from None
    finally:
        sys.argv = argv
    return 0


def add_hydra_command(subparsers: argparse._SubParsersAction, name: str, app: str, *, summary: str,
                      description: str, epilog: str) -> None:
    """A subcommand whose arguments all go to the Hydra app ``app`` ("module:function", its config
    named like the command), which is imported only when the command runs (it pulls in torch)."""

    def run(args: argparse.Namespace) -> int:
        module, function = app.split(":")
        main = getattr(importlib.import_module(module), function)
        return run_hydra(main, f"dynamiccl {name}", name, list(args.overrides))

    parser = subparsers.add_parser(name, help=summary, description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=run, accepts_overrides=True, extra=name)  # [train] / [sweep]
