"""``dynamiccl train [OVERRIDES]``: the Hydra training app (``dynamiccl.agents.train``) on the CLI.

Everything after ``train`` is handed to Hydra unchanged, so every Hydra feature works here too:
``experiment=NAME``, ``agent=dqn``, ``trainer.total_timesteps=20000``, ``-m`` for multirun,
``--cfg job`` to print the composed config, ``hydra.run.dir=PATH`` to resume a run in PATH.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from dynamiccl.cli.common import UserError

EPILOG = """examples:
  dynamiccl train experiment=quickstart            train, then evaluate on the held-out suite
  dynamiccl train experiment=smoke logger=none     a tiny end-to-end run
  dynamiccl train agent=dqn trainer.total_timesteps=20000 hydra.run.dir=runs/dqn
                                                   run it again with the same hydra.run.dir to resume
  dynamiccl train -m agent=ppo,maskable_ppo        Hydra multirun over a grid
  dynamiccl train --cfg job                        print the composed config and exit
resume: the same command with the same hydra.run.dir continues from the last checkpoint and ends
  exactly where an uninterrupted run would; Ctrl-C saves a checkpoint first. Other settings are
  refused by name unless resume.allow_changes=true. Searches (hparams_search=...) run with
  `dynamiccl sweep`.
config groups (configs/): topology, workload, scenario, env, agent, logger, experiment,
hparams_search, debug"""


def check_output_dirs(overrides: list[str]) -> None:
    """Hydra creates its run folder before the app starts and reports a failure with a traceback;
    a folder that cannot be created is refused here first, in one line."""
    given = {k: v for k, _, v in (o.partition("=") for o in overrides)}
    for key in ("hydra.run.dir", "hydra.sweep.dir"):
        path = Path(given.get(key, "outputs")).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"cannot create the run folder {path}: {existing} is not a writable "
                            f"directory; choose another with {key}=PATH")


def run_hydra(app: Callable[[], object], prog: str, overrides: list[str]) -> int:
    """Runs a ``@hydra.main`` app as if it had been started as ``prog OVERRIDES``."""
    check_output_dirs(overrides)
    argv = sys.argv
    sys.argv = [prog, *overrides]
    try:
        app()
    finally:
        sys.argv = argv
    return 0


def add_hydra_command(subparsers: argparse._SubParsersAction, name: str, app: str, *, summary: str,
                      description: str, epilog: str) -> None:
    """A subcommand whose arguments all go to the Hydra app ``app`` ("module:function"), which is
    imported only when the command runs (it pulls in torch)."""

    def run(args: argparse.Namespace) -> int:
        module, function = app.split(":")
        main = getattr(importlib.import_module(module), function)
        return run_hydra(main, f"dynamiccl {name}", list(args.overrides))

    parser = subparsers.add_parser(name, help=summary, description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=run, accepts_overrides=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    add_hydra_command(
        subparsers, "train", "dynamiccl.agents.train:main",
        summary="train a tuning policy (Hydra overrides follow: key=value ...)",
        description="Train a tuning policy on the simulator, checkpoint it, and evaluate it "
                    "against the baselines. Arguments are Hydra overrides.",
        epilog=EPILOG)
