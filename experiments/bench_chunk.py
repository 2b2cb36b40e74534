"""Where a chunk size pays, in simulation: ``python experiments/bench_chunk.py [--quick] [--json]``.

Calls: the held-out systems of ``configs/scenario/heldout.yaml`` (PCIe cluster at 2/4/8 nodes, the
48:1 two-tier rings at 4/8/16 and the inverted one at 4, DGX H100 at 8/16, DGX A100 at 16), the
collectives allreduce, allgather, reducescatter and broadcast, sizes 64 KiB - 1 GiB (every 4x) and
compute overlap (c2c) 0, 0.5 and 2. The choice is NCCL's own (algorithm, protocol, channels), with
the chunk size left to NCCL or set to one of the knob's levels (the plugin's getChunkSize).

Reality: each system is a held-out perturbed reality (``PerturbedBackend``, seeds from
``HELDOUT_SEED_START``: per algorithm/protocol bandwidth ±40 %, latency floors 1/3-3x, 1-5 %
noise), and the chunk physics itself is off too, per system and pair: what a chunk costs beyond
its bytes (:func:`dynamiccl.simulator.chunking.pipeline_us`' ``step_cost``) is log-uniform in
[1/2, 8] times the model's (8: a connection hiding none of a hop's latency behind the chunks in
flight), and the chunk's effect then holds only to a power ``gamma`` uniform in [0, 1.25] (0: a
chunk changes nothing). A model of chunking is physics no GPU here has checked, so it may be wrong
either way: smaller chunks can cost more than modelled.

Deciders, per call (each against NCCL's default, timed in the reality):

* ``oracle``: the fastest level in the reality (the headroom);
* ``model only``: the level the nominal simulator finds fastest, pinned without any measurement --
  what shipping decisions without evidence would do (tune never does);
* ``measured``: as ``dynamiccl tune``: the model's level is a candidate only; NCCL's default and it
  are each measured in ``--launches`` noisy launches, and the chunk is pinned only where the
  measured gain clears the gate (``gate.passes``: the margin and the measurement's own noise).
  Every decision it ships rests on its measurements: decisions without evidence are 0 by
  construction, and the table counts them to show it.

Scores (``bench_tuning.Score``): the share of the headroom captured, calls slower than NCCL's
default by more than 2 %, the worst call (its speedup over NCCL's default); per c2c level, and per
collective and size where the oracle gains.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import replace

import numpy as np
from bench_tuning import Score

from dynamiccl import decisions
from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN, passes
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.simulator import evaluate
from dynamiccl.simulator import protocols as P
from dynamiccl.simulator.chunking import chunk_ratio
from dynamiccl.system.knobs import CHUNK_BYTES_LEVELS, Config, invalid_reason
from dynamiccl.system.launch_noise import default_launch_noise, noise_band
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology
from dynamiccl.system.units import format_size

SYSTEMS = (("pcie_cluster", 2), ("pcie_cluster", 4), ("pcie_cluster", 8), ("ring_ring_48to1", 4),
           ("ring_ring_48to1", 8), ("ring_ring_48to1", 16), ("ring_ring_48to1_inverted", 4),
           ("dgx_h100", 8), ("dgx_h100", 16), ("dgx_a100", 16))
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER,
               Collective.BROADCAST)
SIZES = tuple(1 << k for k in range(16, 31, 2))
C2C = (0.0, 0.5, 2.0)
GAMMA_RANGE = (0.0, 1.25)
STEP_COST_RANGE = (0.5, 8.0)
SLOWER = 1.02


class ChunkReality:
    """A held-out perturbed system whose chunk physics is the model's to a hidden power."""

    def __init__(self, index: int, launches: int) -> None:
        self.seed = HELDOUT_SEED_START + index
        self.backend = PerturbedBackend(self.seed)
        self.launches = launches
        self._gamma: dict[tuple, float] = {}
        self._rng = np.random.default_rng([self.seed, 0xC4C])

    def physics(self, config: Config) -> tuple[float, float]:
        """This system's (gamma, step cost) for the configuration's pair."""
        key = (config.algorithm, config.protocol)
        if key not in self._gamma:
            rng = np.random.default_rng([self.seed, int(key[0]), int(key[1])])
            lo, hi = np.log(STEP_COST_RANGE)
            self._gamma[key] = (float(rng.uniform(*GAMMA_RANGE)), float(np.exp(rng.uniform(lo, hi))))
        return self._gamma[key]

    def truth(self, s: Scenario, config: Config) -> float:
        """The noise-free time of ``config``: the perturbed reality's time with NCCL's chunk, times
        the chunk's effect with this system's step cost, to the power gamma."""
        own = replace(config, chunk_bytes=None)
        t = self.backend.true_time(s, own)
        if config.chunk_bytes is None:
            return t
        gamma, step_cost = self.physics(config)
        base = float(P.base_latency_us(config.algorithm, np.array([int(config.protocol)]))[0])
        at_zero = evaluate(replace(s, nbytes=0), own).time_us
        bytes_us = np.array([evaluate(s, own).time_us - at_zero])
        ratio = chunk_ratio(s.topology, s.collective, config.algorithm, config.protocol,
                            np.array([s.nbytes]), config.channels, config.chunk_bytes,
                            np.array([at_zero - base]), bytes_us, step_cost)
        return t * float(ratio[0]) ** gamma

    def measure(self, s: Scenario, config: Config) -> list[float]:
        """``launches`` noisy launches of ``config``."""
        t = self.truth(s, config)
        return [self.backend.noisy_time(s, t) for _ in range(self.launches)]


def measured_pick(reality: ChunkReality, s: Scenario, default: Config, candidate: Config,
                  margin: float) -> tuple[Config, int]:
    """tune's rule for one candidate: pinned only where its measured gain over NCCL's default
    clears the gate; (the pick, measurements spent)."""
    if candidate == default:
        return default, 0
    ours, theirs = reality.measure(s, candidate), reality.measure(s, default)
    gain = float(np.median(theirs)) / float(np.median(ours)) - 1.0
    prior = default_launch_noise(s.topology)[noise_band(s.nbytes)].core  # tune's prior noise
    sides = [max(float(np.std(np.log(t))), prior) ** 2 / len(t) for t in (ours, theirs)]
    return (candidate if passes(gain, math.sqrt(sum(sides)), margin) else default), 2 * len(ours)


def run(systems, collectives, sizes, c2cs, launches: int, margin: float) -> dict:
    scores = {name: defaultdict(Score) for name in ("oracle", "model only", "measured")}
    pays: dict[tuple[str, int], list[float]] = defaultdict(list)
    by_system: dict[str, list[tuple[float, float]]] = defaultdict(list)
    shipped = without_evidence = model_only = 0
    for index, (name, nodes) in enumerate(systems):
        topology = load_topology(name, nodes=nodes)
        reality = ChunkReality(index, launches)
        for coll in collectives:
            for n in sizes:
                for c2c in c2cs:
                    s = Scenario(topology, coll, n, c2c=c2c)
                    try:
                        default = decisions.nccl_default(s).config
                    except ValueError:
                        continue
                    levels = [default] + [replace(default, chunk_bytes=c) for c in CHUNK_BYTES_LEVELS
                                          if invalid_reason(topology, coll, replace(default, chunk_bytes=c))
                                          is None]
                    truth = {c: reality.truth(s, c) for c in levels}
                    t_default, t_best = truth[default], min(truth.values())
                    where = f"{name} x{nodes} {coll.name.lower()} {format_size(n)} c2c {c2c:g}"
                    model = decisions.refined(s, default).config
                    pick, spent = measured_pick(reality, s, default, model, margin)
                    shipped += pick != default
                    model_only += model != default
                    for key, chosen in (("oracle", min(truth, key=truth.get)), ("model only", model),
                                        ("measured", pick)):
                        score = scores[key][f"c2c {c2c:g}"]
                        score.slower_than = SLOWER
                        score.add(where, t_default, t_best, truth[chosen])
                    scores["measured"][f"c2c {c2c:g}"].measurements += spent
                    pays[(coll.name.lower(), n)].append(t_default / t_best)
                    by_system[f"{name} x{nodes}"].append((t_default / t_best, t_default / truth[pick]))
    return {"scores": {k: {c: v.summary() for c, v in by.items()} for k, by in scores.items()},
            "where_it_pays": {f"{coll} {format_size(n)}": round(float(np.mean(g)), 4)
                              for (coll, n), g in sorted(pays.items())},
            "by_system": {k: {"oracle": round(float(np.exp(np.mean(np.log([a for a, _ in v])))), 4),
                              "measured": round(float(np.exp(np.mean(np.log([b for _, b in v])))), 4)}
                          for k, v in by_system.items()},
            "decisions_shipped": shipped, "decisions_without_evidence": without_evidence,
            "model_only_decisions": model_only}


def _print(result: dict, args: argparse.Namespace) -> None:
    sizes = result["config"]["sizes"]
    print(f"chunk size on {len(args.systems)} held-out systems x {len(args.collectives)} collectives "
          f"x {len(sizes)} sizes ({format_size(sizes[0])}-{format_size(sizes[-1])}); reality: chunk "
          f"step cost x{STEP_COST_RANGE}, effect to a power in {GAMMA_RANGE}; measured: "
          f"{args.launches} launches each side, margin {args.margin:.0%}")
    print(f"{'decider':<11} {'c2c':>4} {'headroom':>9} {'captured':>9} {'slower>2%':>9} "
          f"{'worst':>7} {'calls':>6}")
    for decider, by in result["scores"].items():
        for c2c, sc in by.items():
            headroom = math.exp(sc["log_headroom"] / max(sc["decisions"], 1)) - 1
            share = "n/a" if sc["headroom_share"] is None else f"{sc['headroom_share']:.3f}"
            print(f"{decider:<11} {c2c[4:]:>4} {headroom:>8.1%} {share:>9} {sc['slower_2pct']:>9} "
                  f"{sc['worst_speedup']:>7.3f} {sc['decisions']:>6}")
    print(f"decisions shipped (measured): {result['decisions_shipped']}; without evidence: "
          f"{result['decisions_without_evidence']} (model only would ship "
          f"{result['model_only_decisions']}, none measured)")
    print("by system (geometric mean speedup over NCCL's default, every call and c2c): oracle / "
          "measured")
    for key, g in result["by_system"].items():
        print(f"  {key:<28} {g['oracle']:.3f}x / {g['measured']:.3f}x")
    print("where it pays (oracle's mean speedup over NCCL's default, every system and c2c):")
    for key, gain in result["where_it_pays"].items():
        if gain > 1.005:
            print(f"  {key:<24} {gain:.3f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="two systems, allreduce and broadcast, three sizes, c2c 0 (seconds)")
    parser.add_argument("--launches", type=int, default=3, help="launches per side (default 3)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    args.systems, args.collectives = SYSTEMS, COLLECTIVES
    sizes, c2cs = SIZES, C2C
    if args.quick:
        args.systems = (("dgx_h100", 8), ("pcie_cluster", 4))
        args.collectives = (Collective.ALLREDUCE, Collective.BROADCAST)
        sizes, c2cs = (1 << 18, 1 << 22, 1 << 26), (0.0,)
    result = run(args.systems, args.collectives, sizes, c2cs, args.launches, args.margin)
    result["config"] = {"systems": [list(s) for s in args.systems], "sizes": list(sizes),
                        "c2c": list(c2cs), "launches": args.launches, "margin": args.margin,
                        "gamma_range": list(GAMMA_RANGE), "step_cost_range": list(STEP_COST_RANGE),
                        "seed_start": HELDOUT_SEED_START}
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        _print(result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
