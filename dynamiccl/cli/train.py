"""``dynamiccl train [OVERRIDES]``: the Hydra training app (``dynamiccl.agents.train``) on the CLI.

Everything after ``train`` is handed to Hydra unchanged, so every Hydra feature works here too:
``experiment=NAME``, ``agent=dqn``, ``trainer.total_timesteps=20000``, ``-m`` for multirun,
``--cfg job`` to print the composed config, ``hydra.run.dir=PATH`` to resume a run in PATH.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

EPILOG = """examples:
  dynamiccl train experiment=quickstart            train, then evaluate on the held-out suite
  dynamiccl train experiment=smoke logger=none     a tiny end-to-end run
  dynamiccl train agent=dqn trainer.total_timesteps=20000 hydra.run.dir=runs/dqn
                                                   run it again with the same hydra.run.dir to resume
  dynamiccl train -m agent=ppo,maskable_ppo        Hydra multirun over a grid
  dynamiccl train --cfg job                        print the composed config and exit
config groups (configs/): topology, workload, scenario, env, agent, logger, experiment,
hparams_search, debug"""


def run_hydra(app: Callable[[], object], prog: str, overrides: list[str]) -> int:
    """Runs a ``@hydra.main`` app as if it had been started as ``prog OVERRIDES``."""
    argv = sys.argv
    sys.argv = [prog, *overrides]
    try:
        app()
    finally:
        sys.argv = argv
    return 0


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.train import main as app

    return run_hydra(app, "dynamiccl train", list(args.overrides))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train a tuning policy (Hydra overrides follow: key=value ...)",
        description="Train a tuning policy on the simulator, checkpoint it, and evaluate it "
                    "against the baselines. Arguments are Hydra overrides.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=_run, accepts_overrides=True)
