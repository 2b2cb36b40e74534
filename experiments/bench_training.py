"""How fast does each learner learn to match the oracle? ``python experiments/bench_training.py [--json]``.

Trains every learner of ``--algos`` (default: PPO and MaskablePPO, the configs in ``configs/agent/``,
and the full-information learner, ``configs/agent/full_info.yaml``) and, every ``--eval-every``
steps (calls learned from), scores the current policy on the default training suite. Reported per
learner: training wall time (evaluation time excluded) until the policy first captures 98 % of the
oracle's log-speedup, and the oracle share it ends with. The full-information learner trains on
random systems unless ``--full-info-systems scenario`` gives it the SB3 agents' training systems.
The top-level JSON keys describe MaskablePPO (the default agent); ``runs`` holds every learner.
Target: ≤ 10 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch
from hydra import compose, initialize_config_module

from dynamiccl.agents.policies.sb3_agents import SB3Policy, build_model
from dynamiccl.agents.shipping.evaluate import evaluate_policy
from dynamiccl.agents.training import full_info_agent
from dynamiccl.agents.training.callbacks import AtRolloutBoundary, Evaluate
from dynamiccl.agents.training.envs_factory import make_training_env
from dynamiccl.envs.workloads import load_suite

TARGET = 0.98
ALGOS = "maskable_ppo,ppo,full_info"


class Curve:
    """The oracle share over training time; says when to stop (target or time budget reached)."""

    def __init__(self, algo: str, args: argparse.Namespace) -> None:
        self.algo, self.args, self.points = algo, args, []
        self.suite = load_suite(args.suite)

    def score(self, policy: Any, step: int, train_s: float) -> bool:
        """Scores ``policy``; True (stop) once the target or the time budget is reached."""
        share = evaluate_policy(policy, self.suite).oracle_share
        self.points.append({"step": step, "train_seconds": round(train_s, 2),
                            "oracle_share": round(share, 4)})
        if not self.args.json:
            print(f"{self.algo}: step {step:>7}  {train_s:7.1f}s  share {share:.4f}", file=sys.stderr,
                  flush=True)
        return share >= TARGET or train_s >= self.args.max_seconds

    def summary(self, steps: int) -> dict:
        points = self.points
        reached = next((c["train_seconds"] for c in points if c["oracle_share"] >= TARGET), None)
        return {"seconds_to_98pct_oracle": reached,
                "oracle_share": points[-1]["oracle_share"] if points else None,
                "best_oracle_share": max((c["oracle_share"] for c in points), default=None),
                "steps": steps, "curve": points}


def _config(algo: str, args: argparse.Namespace, *extra: str) -> Any:
    overrides = [f"agent={algo}", f"scenario={args.scenario}", f"seed={args.seed}", "logger=none",
                 *extra, *args.overrides]
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.set_num_threads(int(cfg.trainer.torch_threads))
    return cfg


def bench_sb3(algo: str, args: argparse.Namespace) -> dict:
    cfg = _config(algo, args)
    env = make_training_env(cfg)
    model = build_model(cfg.agent, env, seed=args.seed)
    policy = SB3Policy(model, algo)
    curve = Curve(algo, args)
    began = time.perf_counter()

    def evaluate(step: int) -> bool:
        return curve.score(policy, step, time.perf_counter() - began - evaluator.eval_seconds)

    evaluator = Evaluate(evaluate)
    # One learn() call over the whole budget, as a training run makes it, so learning-rate
    # schedules see the same horizon; evaluations at rollout boundaries, as in training.
    model.learn(args.max_steps, callback=AtRolloutBoundary(args.eval_every, evaluator))
    if not curve.points or curve.points[-1]["step"] != model.num_timesteps:
        evaluate(int(model.num_timesteps))
    env.close()
    return curve.summary(int(model.num_timesteps))


def bench_full_info(algo: str, args: argparse.Namespace) -> dict:
    """The full-information learner, round by round, scored at the first round boundary past
    each multiple of ``--eval-every`` calls."""
    systems = args.scenario if args.full_info_systems == "scenario" else "random"
    learner = full_info_agent.AGENT.build(_config(algo, args, f"agent.model.systems={systems}").agent,
                                    args.seed)
    curve = Curve(algo, args)
    train_s, due = 0.0, args.eval_every
    while learner.samples_seen < args.max_steps:
        began = time.perf_counter()
        learner.train_round(learner.draw_round())
        train_s += time.perf_counter() - began
        step = learner.samples_seen
        if step >= due or step >= args.max_steps:
            due = step - step % args.eval_every + args.eval_every
            if curve.score(learner.policy(name=algo), step, train_s):
                break
    return curve.summary(learner.samples_seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--algos", default=ALGOS, help=f"learners, comma-separated (default {ALGOS})")
    parser.add_argument("--scenario", default="train", help="training distribution of the SB3 agents")
    parser.add_argument("--suite", default="train", help="suite the oracle share is measured on")
    parser.add_argument("--full-info-systems", choices=("random", "scenario"), default="random",
                        help="the full-information learner's training systems: random ones around "
                             "physical ranges (default, as bench_learning) or the --scenario "
                             "distribution's, the SB3 agents' own")
    parser.add_argument("--eval-every", type=int, default=4096, help="steps between evaluations")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="training-time budget per learner (evaluation not counted)")
    parser.add_argument("--max-steps", type=int, default=600_000,
                        help="training horizon in steps (learning-rate schedules decay over it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. agent.model.gamma=0)")
    args = parser.parse_args(argv)
    runs = {algo: (bench_full_info if algo == full_info_agent.NAME else bench_sb3)(algo, args)
            for algo in args.algos.split(",")}
    main_run = runs.get("maskable_ppo") or next(iter(runs.values()))
    result = {"seconds_to_98pct_oracle": main_run["seconds_to_98pct_oracle"],
              "oracle_share": main_run["oracle_share"], "target_seconds": 600,
              "runs": {k: {kk: vv for kk, vv in v.items() if kk != "curve" or args.json}
                       for k, v in runs.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from rich.table import Table

    from dynamiccl.console import console as table_console

    table = Table(title=f"training speed on the {args.suite} suite (target: 98% of the oracle "
                        "in <= 600 s)")
    for col in ("learner", "seconds to 98%", "final oracle share", "steps"):
        table.add_column(col, justify="right")
    for algo, run in runs.items():
        reached = run["seconds_to_98pct_oracle"]
        table.add_row(algo, "not reached" if reached is None else f"{reached:.1f}",
                      f"{run['oracle_share']:.4f}", str(run["steps"]))
    table_console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
