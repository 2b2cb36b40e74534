"""``dynamiccl sweep [OVERRIDES]``: a Ray Tune hyperparameter sweep described by Hydra configs."""

from __future__ import annotations

import argparse

from dynamiccl.cli.train import add_hydra_command

EPILOG = """examples:
  dynamiccl sweep                                   the default search (hparams_search=maskable_ppo)
  dynamiccl sweep tune.num_samples=2 trainer.total_timesteps=2048
  dynamiccl sweep ray.address=auto                  run the trials on an existing Ray cluster
  dynamiccl sweep hydra.run.dir=sweeps/a            run again with the same folder to resume
results: <run folder>/results.csv and results.json (best first); trials log to wandb (offline)"""


def register(subparsers: argparse._SubParsersAction) -> None:
    add_hydra_command(
        subparsers, "sweep", "dynamiccl.agents.sweep:main",
        summary="hyperparameter sweep on Ray Tune (Hydra overrides follow)",
        description="Run a hyperparameter search on Ray Tune (local Ray unless ray.address is "
                    "given). The search space comes from configs/hparams_search/. Arguments are "
                    "Hydra overrides.",
        epilog=EPILOG)
