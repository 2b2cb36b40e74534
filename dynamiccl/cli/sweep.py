"""``dynamiccl sweep [OVERRIDES]``: a Ray Tune hyperparameter sweep described by Hydra configs."""

from __future__ import annotations

import argparse

from dynamiccl.cli.train import run_hydra

EPILOG = """examples:
  dynamiccl sweep                                   the default search (hparams_search=maskable_ppo)
  dynamiccl sweep tune.num_samples=2 trainer.total_timesteps=2048
  dynamiccl sweep ray.address=auto                  run the trials on an existing Ray cluster
  dynamiccl sweep hydra.run.dir=sweeps/a            run again with the same folder to resume
results: <run folder>/results.csv and results.json (best first); trials log to wandb (offline)"""


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.sweep import main as app

    return run_hydra(app, "dynamiccl sweep", list(args.overrides))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="hyperparameter sweep on Ray Tune (Hydra overrides follow)",
        description="Run a hyperparameter search on Ray Tune (local Ray unless ray.address is "
                    "given). The search space comes from configs/hparams_search/. Arguments are "
                    "Hydra overrides.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=_run, accepts_overrides=True)
