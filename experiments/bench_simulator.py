"""Benchmark: configuration evaluations per second, vectorized simulator vs a naive per-pair loop.

Both run in the same process on the same random states (collective, size, straggler delay, C2C) and
all 336 joint actions; the naive baseline times one (state, action) pair per ``evaluate`` call, the
scalar path a per-action Python loop would use. Target (issue 2): ≥ 5 M evaluations/s on one core.

    python experiments/bench_simulator.py            # table
    python experiments/bench_simulator.py --json     # {"evals_per_s": ..., "naive_evals_per_s": ...}
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from dynamiccl.simulator import evaluate, simulate  # noqa: E402
from dynamiccl.system.knobs import ACTIONS, ConfigBatch  # noqa: E402
from dynamiccl.system.nccl import Collective  # noqa: E402
from dynamiccl.system.scenario import Scenario  # noqa: E402
from dynamiccl.system.topology import load_topology  # noqa: E402


def _states(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "collective": rng.integers(0, len(Collective), n),
        "nbytes": 2.0 ** rng.integers(3, 33, n),
        "delay": np.where(rng.random(n) < 0.3, rng.uniform(0, 5000, n), 0.0),
        "c2c": np.where(rng.random(n) < 0.3, rng.uniform(0, 3, n), 0.0),
    }


def bench_vectorized(topology, states: dict[str, np.ndarray], min_seconds: float) -> float:
    batch = ConfigBatch.all_actions()
    args = (topology, states["collective"], states["nbytes"], batch, states["delay"], states["c2c"])
    simulate(*args)  # builds the cached tables once, as a long training run would
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds or calls < 3:
        simulate(*args)
        calls += 1
    elapsed = time.perf_counter() - start
    return calls * states["nbytes"].size * len(batch) / elapsed


def bench_naive(topology, states: dict[str, np.ndarray], pairs: int, rng: np.random.Generator) -> float:
    rows = rng.integers(0, states["nbytes"].size, pairs)
    cols = rng.integers(0, len(ACTIONS), pairs)
    start = time.perf_counter()
    for b, a in zip(rows, cols, strict=True):
        scen = Scenario(topology, Collective(int(states["collective"][b])), int(states["nbytes"][b]),
                        straggler_rank=0, straggler_delay_us=float(states["delay"][b]),
                        c2c=float(states["c2c"][b]))
        try:
            evaluate(scen, ACTIONS[a])
        except ValueError:  # invalid pairs are answered too (by the same validity rules)
            pass
    return pairs / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topology", default="dgx_h100", help="preset name or YAML file")
    parser.add_argument("--nodes", type=int, default=4, help="node count of the preset")
    parser.add_argument("--states", type=int, default=2048, help="states per vectorized call")
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum timing window")
    parser.add_argument("--naive-pairs", type=int, default=3000, help="pairs timed by the naive loop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.states < 1 or args.naive_pairs < 1 or args.seconds <= 0:
        parser.error("--states, --naive-pairs and --seconds must be positive")
    topology = load_topology(args.topology, nodes=args.nodes)
    rng = np.random.default_rng(args.seed)
    states = _states(rng, args.states)
    vec = bench_vectorized(topology, states, args.seconds)
    naive = bench_naive(topology, states, args.naive_pairs, rng)
    result = {"evals_per_s": vec, "naive_evals_per_s": naive}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"system: {topology.describe()}; {args.states} states x {len(ACTIONS)} actions per call")
        print(f"{'path':<12}{'evals/s':>16}{'speed-up':>12}")
        print(f"{'vectorized':<12}{vec:>16,.0f}{vec / naive:>11,.0f}x")
        print(f"{'naive loop':<12}{naive:>16,.0f}{1:>11}x")
        print(f"target >= 5,000,000 evals/s: {'met' if vec >= 5e6 else 'NOT met'}")
    return result


if __name__ == "__main__":
    main()
