"""``dynamiccl sweep [OVERRIDES]``: a Ray Tune hyperparameter sweep described by Hydra configs."""

from __future__ import annotations

import argparse

from dynamiccl.cli.hydra_app import add_hydra_command

EPILOG = """examples:
  dynamiccl sweep                                   the default search (hparams_search=maskable_ppo)
  dynamiccl sweep tune.num_samples=2 trainer.total_timesteps=2048
  dynamiccl sweep ray.address=auto                  run the trials on an existing Ray cluster
  dynamiccl sweep hparams_search=smoke              a two-trial search in about a minute
  dynamiccl sweep hydra.run.dir=sweeps/a            run again with the same folder (and the same
                                                    tune.num_samples) to resume
results: <run folder>/results.csv, results.json (best first) and sweep_results.png; trials report
every evaluation (ASHA stops weak ones early) and log to wandb (offline), grouped by tune.name"""


def register(subparsers: argparse._SubParsersAction) -> None:
    add_hydra_command(
        subparsers, "sweep", "dynamiccl.agents.training.sweep:main",
        summary="hyperparameter sweep on Ray Tune (Hydra overrides follow)",
        description="Run a hyperparameter search on Ray Tune (local Ray unless ray.address is "
                    "given). The search space comes from configs/hparams_search/. Arguments are "
                    "Hydra overrides.",
        epilog=EPILOG)
