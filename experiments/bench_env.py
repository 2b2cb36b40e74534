"""Environment throughput: steps per second, single process and vectorized (SB3 DummyVecEnv).

Every step picks a random *valid* action (what a masked policy does) on the ``train`` distribution
with the simulator backend, through ``gymnasium.make``'s wrappers. Three single-process passes:

* cold: a fresh process, so every system's NCCL model and simulator tables are built on the way;
* steady (the headline ``steps_per_s``): new episodes after the cold pass, as a long training run
  sees them; calls never seen before (a new straggler rank or delay) still cost a simulation;
* warm: the steady pass's episodes replayed, every call cached: the environment's own cost.

    python experiments/bench_env.py [--steps 40000] [--scenario train] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import dynamiccl.envs  # noqa: F401  (registers the environment ids)
from dynamiccl import ENV_ID


def _rate(env: gym.Env, seed: int, steps: int) -> float:
    """Steps/s of ``steps`` random valid actions, episodes drawn from ``seed``."""
    unwrapped = env.unwrapped
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        valid = np.flatnonzero(unwrapped.action_masks())
        _, _, terminated, truncated, _ = env.step(valid[rng.integers(len(valid))])
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def single(scenario: str, steps: int) -> dict[str, float]:
    """Cold, steady and warm steps/s of one environment."""
    env = gym.make(ENV_ID, scenario=scenario)
    cold = _rate(env, 0, steps)
    steady = _rate(env, 1, steps)
    warm = _rate(env, 1, steps)
    return {"cold": cold, "steady": steady, "warm": warm}


def vectorized(scenario: str, steps: int, n_envs: int) -> float:
    """Steps/s summed over ``n_envs`` environments in an SB3 DummyVecEnv, random valid actions
    (SB3's own per-step work included: it deep-copies every info dict)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    vec = make_vec_env(ENV_ID, n_envs=n_envs, seed=0, vec_env_cls=DummyVecEnv,
                       env_kwargs={"scenario": scenario, "render_mode": None})
    rng = np.random.default_rng(0)
    rounds = max(steps // n_envs, 1)

    def run() -> float:
        vec.reset()
        start = time.perf_counter()
        for _ in range(rounds):
            masks = np.stack(vec.env_method("action_masks"))
            vec.step(np.argmax(rng.random(masks.shape) * masks, axis=1))  # uniform valid action
        return time.perf_counter() - start

    run()  # cold pass; the timed one continues with new episodes (steady, like single's)
    return rounds * n_envs / run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000, help="steps per timed pass")
    parser.add_argument("--scenario", default="train", help="scenario distribution (configs/scenario)")
    parser.add_argument("--n-envs", type=int, default=8, help="environments in the DummyVecEnv")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    rates = single(args.scenario, args.steps)
    vec = vectorized(args.scenario, args.steps, args.n_envs)
    result = {"steps_per_s": round(rates["steady"]), "vec_steps_per_s": round(vec),
              "cold_steps_per_s": round(rates["cold"]), "warm_steps_per_s": round(rates["warm"]),
              "target_steps_per_s": 20_000}
    if args.json:
        print(json.dumps(result))
        return
    rows = [("single env, cold (fresh process)", rates["cold"]),
            ("single env, steady (new episodes)", rates["steady"]),
            ("single env, warm (replayed, all cached)", rates["warm"]),
            (f"DummyVecEnv x{args.n_envs}, total (steady)", vec),
            ("target (single env, steady)", 20_000)]
    print(f"{'measurement':<44} {'steps/s':>10}")
    for name, value in rows:
        print(f"{name:<44} {value:>10,.0f}")


if __name__ == "__main__":
    main()
