"""How fast does an agent learn to match the oracle? ``python experiments/bench_training.py [--json]``.

Trains PPO and MaskablePPO (the configs in ``configs/agent/``) on the training distribution and,
every ``--eval-every`` steps, scores the current policy on the default training suite. Reported per
agent: training wall time (evaluation time excluded) until the policy first captures 98 % of the
oracle's log-speedup, and the oracle share it ends with. The top-level JSON keys describe
MaskablePPO (the default agent); ``runs`` holds every agent. Target: ≤ 10 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from hydra import compose, initialize_config_module

from dynamiccl.agents.callbacks import AtRolloutBoundary, Evaluate
from dynamiccl.agents.envs_factory import make_training_env
from dynamiccl.agents.evaluate import evaluate_policy
from dynamiccl.agents.sb3_agents import SB3Policy, build_model
from dynamiccl.envs.workloads import load_suite

TARGET = 0.98


def bench_agent(algo: str, args: argparse.Namespace) -> dict:
    overrides = [f"agent={algo}", f"scenario={args.scenario}", f"seed={args.seed}", "logger=none",
                 *args.overrides]
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.set_num_threads(int(cfg.trainer.torch_threads))
    env = make_training_env(cfg)
    model = build_model(cfg.agent, env, seed=args.seed)
    suite = load_suite(args.suite)
    policy = SB3Policy(model, algo)
    curve: list[dict] = []
    began = time.perf_counter()

    def evaluate(step: int) -> bool:
        """Scores the current policy; True (stop) once the target or the time budget is reached."""
        train_s = time.perf_counter() - began - evaluator.eval_seconds
        share = evaluate_policy(policy, suite).oracle_share
        curve.append({"step": step, "train_seconds": round(train_s, 2),
                      "oracle_share": round(share, 4)})
        if not args.json:
            print(f"{algo}: step {step:>7}  {train_s:7.1f}s  share {share:.4f}", file=sys.stderr,
                  flush=True)
        return share >= TARGET or train_s >= args.max_seconds

    evaluator = Evaluate(evaluate)
    # One learn() call over the whole budget, as a training run makes it, so learning-rate
    # schedules see the same horizon; evaluations at rollout boundaries, as in training.
    model.learn(args.max_steps, callback=AtRolloutBoundary(args.eval_every, evaluator))
    if not curve or curve[-1]["step"] != model.num_timesteps:
        evaluate(int(model.num_timesteps))
    env.close()
    reached = next((c["train_seconds"] for c in curve if c["oracle_share"] >= TARGET), None)
    return {"seconds_to_98pct_oracle": reached, "oracle_share": curve[-1]["oracle_share"] if curve
            else None, "best_oracle_share": max((c["oracle_share"] for c in curve), default=None),
            "steps": int(model.num_timesteps), "curve": curve}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--algos", default="maskable_ppo,ppo", help="agents, comma-separated")
    parser.add_argument("--scenario", default="train", help="training distribution")
    parser.add_argument("--suite", default="train", help="suite the oracle share is measured on")
    parser.add_argument("--eval-every", type=int, default=4096, help="steps between evaluations")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="training-time budget per agent (evaluation not counted)")
    parser.add_argument("--max-steps", type=int, default=600_000,
                        help="training horizon in steps (learning-rate schedules decay over it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. agent.model.gamma=0)")
    args = parser.parse_args(argv)
    runs = {algo: bench_agent(algo, args) for algo in args.algos.split(",")}
    main_run = runs.get("maskable_ppo") or next(iter(runs.values()))
    result = {"seconds_to_98pct_oracle": main_run["seconds_to_98pct_oracle"],
              "oracle_share": main_run["oracle_share"], "target_seconds": 600,
              "runs": {k: {kk: vv for kk, vv in v.items() if kk != "curve" or args.json}
                       for k, v in runs.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"training speed on the {args.suite} suite (target: 98% of the oracle "
                        "in <= 600 s)")
    for col in ("agent", "seconds to 98%", "final oracle share", "steps"):
        table.add_column(col, justify="right")
    for algo, run in runs.items():
        reached = run["seconds_to_98pct_oracle"]
        table.add_row(algo, "not reached" if reached is None else f"{reached:.1f}",
                      f"{run['oracle_share']:.4f}", str(run["steps"]))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
