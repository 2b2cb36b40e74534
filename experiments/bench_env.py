"""Environment throughput: steps per second, single process and vectorized (SB3 DummyVecEnv).

Every step picks a random *valid* action (what a masked policy does) on the ``train`` distribution
with the simulator backend. A warm-up pass first fills the simulator's caches for the episodes the
timed pass replays, so the number measures the environment, not the simulator's first visit to a
scenario; the cold rate (first visits included) is reported alongside for honesty.

    python experiments/bench_env.py [--steps 50000] [--scenario train] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import dynamiccl  # noqa: F401  (registers the environment)
from dynamiccl import ENV_ID


def _valid_actions(env: gym.Env, rng: np.random.Generator, steps: int) -> tuple[float, int]:
    """Seconds to run ``steps`` random valid actions through ``env`` (made with gym.make)."""
    unwrapped = env.unwrapped
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        valid = np.flatnonzero(unwrapped.action_masks())
        _, _, terminated, truncated, _ = env.step(valid[rng.integers(len(valid))])
        if terminated or truncated:
            env.reset()
    return time.perf_counter() - start, steps


def single(scenario: str, steps: int) -> tuple[float, float]:
    """(cold, warm) steps/s of one environment behind gym.make's wrappers."""
    env = gym.make(ENV_ID, scenario=scenario)
    cold = steps / _valid_actions(env, np.random.default_rng(0), steps)[0]
    warm = steps / _valid_actions(env, np.random.default_rng(0), steps)[0]
    return cold, warm


def vectorized(scenario: str, steps: int, n_envs: int) -> float:
    """Steps/s summed over ``n_envs`` environments in an SB3 DummyVecEnv, random valid actions."""
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

    run()  # warm-up: fills the simulator's caches
    return rounds * n_envs / run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="steps per timed pass")
    parser.add_argument("--scenario", default="train", help="scenario distribution (configs/scenario)")
    parser.add_argument("--n-envs", type=int, default=8, help="environments in the DummyVecEnv")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    cold, warm = single(args.scenario, args.steps)
    vec = vectorized(args.scenario, args.steps, args.n_envs)
    result = {"steps_per_s": round(warm), "vec_steps_per_s": round(vec),
              "cold_steps_per_s": round(cold), "target_steps_per_s": 20_000}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'measurement':<44} {'steps/s':>10}")
    print(f"{'single env, warm caches (gym.make)':<44} {warm:>10,.0f}")
    print(f"{'single env, first visits included':<44} {cold:>10,.0f}")
    print(f"{f'DummyVecEnv x{args.n_envs}, warm caches':<44} {vec:>10,.0f}")
    print(f"{'target (single env)':<44} {20_000:>10,}")


if __name__ == "__main__":
    main()
