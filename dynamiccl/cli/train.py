"""``dynamiccl train [OVERRIDES]``: the Hydra training app (``dynamiccl.agents.training.train``) on the CLI.

Everything after ``train`` is handed to Hydra unchanged, so every Hydra feature works here too:
``experiment=NAME``, ``agent=dqn``, ``trainer.total_timesteps=20000``, ``-m`` for multirun,
``--cfg job`` to print the composed config, ``hydra.run.dir=PATH`` to resume a run in PATH.
"""

from __future__ import annotations

import argparse

from dynamiccl.cli.hydra_app import add_hydra_command

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


def register(subparsers: argparse._SubParsersAction) -> None:
    add_hydra_command(
        subparsers, "train", "dynamiccl.agents.training.train:main",
        summary="train a tuning policy (Hydra overrides follow: key=value ...)",
        description="Train a tuning policy on the simulator, checkpoint it, and evaluate it "
                    "against the baselines. Arguments are Hydra overrides.",
        epilog=EPILOG)
