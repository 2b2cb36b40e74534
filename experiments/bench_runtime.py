"""DDP with the runtime's hook against plain DDP, with a persistent straggler, next to the simulator.

Real gloo processes on this machine (``--nprocs`` ranks, 4 by default): a small MLP whose gradient
is one bucket, the last rank sleeping ``d`` ms before every backward. For each delay the two models
train in alternating blocks in the same processes (so machine load hits both alike) and rank 0's
mean step time is reported for each, with its standard error (step times on a loaded machine are
bimodal, so a median jumps between the modes). The simulator's prediction is for the same setting: a
one-tier switch of ``nprocs`` ranks whose bandwidth is fitted so that the simulated ring all-reduce
of the gradient takes what gloo's all-reduce took in this run, then ring vs StragglAR at the delay —
for the path the runtime picks (no saving is predicted where it keeps NCCL's all-reduce).

    python experiments/bench_runtime.py --json
    {"ranks": 4, "cases": [{"straggler_delay_ms": 0, "plain_step_ms": ..., "hook_step_ms": ...,
                            "predicted_saving_ms": ...}, ...]}
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta

from dynamiccl.knobs import Algorithm, Collective, Config, Protocol
from dynamiccl.profiler.launcher import launch
from dynamiccl.scenario import Scenario
from dynamiccl.simulator.api import evaluate
from dynamiccl.topology import Topology, topology_from_dict

#: Runtime settings of the benchmark: decide every 5 steps from the last 5 measurements, 3 of which
#: must show the same rank 4 ms late (this 2-core machine's load alone makes ranks 2 ms late).
RUNTIME = {"measure_every": 5, "window": 5, "majority": 0.6, "straggler_threshold_us": 4000.0}


def bench_rank(ctx, delays_ms: list[float], width: int, layers: int, block: int, blocks: int,
               warmup: int) -> dict | None:
    """Rank side: plain DDP and hooked DDP, alternating blocks per delay; rank 0 reports."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl import runtime

    dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))
    straggler = ctx.world_size - 1

    def model():
        torch.manual_seed(0)
        mods = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
        return torch.nn.Sequential(*mods)

    plain = DDP(model(), bucket_cap_mb=256)
    hooked = runtime.ddp(model(), runtime.RuntimeConfig(**RUNTIME), bucket_cap_mb=256)
    opts = {m: torch.optim.SGD(m.parameters(), lr=1e-3) for m in (plain, hooked)}
    x = torch.randn(16, width)
    grad_bytes = sum(p.numel() * p.element_size() for p in plain.parameters())

    def step(m, delay_ms: float) -> float:
        t0 = time.perf_counter()
        loss = m(x).square().mean()
        if ctx.rank == straggler and delay_ms:
            time.sleep(delay_ms / 1e3)
        loss.backward()
        opts[m].step()
        opts[m].zero_grad()
        return (time.perf_counter() - t0) * 1e3

    buf = torch.ones(grad_bytes // 4)
    ar_ms = []
    for i in range(25):  # gloo's own all-reduce of the gradient, everyone punctual
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if i >= 5:
            ar_ms.append((time.perf_counter() - t0) * 1e3)
    cases = []
    for d in delays_ms:
        for m in (plain, hooked):
            for _ in range(warmup):  # the hook's window sees the new delay before timing starts
                step(m, d)
        times: dict[str, list[float]] = {"plain": [], "hook": []}
        for _ in range(blocks):
            for name, m in (("plain", plain), ("hook", hooked)):
                times[name] += [step(m, d) for _ in range(block)]
        rt = hooked.dynamiccl_runtime
        cases.append({"straggler_delay_ms": d,
                      "plain_step_ms": statistics.fmean(times["plain"]),
                      "hook_step_ms": statistics.fmean(times["hook"]),
                      "plain_stderr_ms": _stderr(times["plain"]),
                      "hook_stderr_ms": _stderr(times["hook"]),
                      "hook_path": rt.path_for(grad_bytes),
                      "detected_delay_ms": rt.job_state.delay_us / 1e3})
    dist.destroy_process_group()
    if ctx.rank:
        return None
    return {"cases": cases, "grad_bytes": grad_bytes, "allreduce_ms": statistics.median(ar_ms)}


def _stderr(xs: list[float]) -> float:
    return statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0


def fitted_topology(nranks: int, nbytes: int, allreduce_ms: float) -> Topology:
    """A one-tier switch whose simulated ring all-reduce of ``nbytes`` takes ``allreduce_ms``."""
    def make(bw: float) -> Topology:
        return topology_from_dict({"name": "gloo-loopback", "tiers": [
            {"name": "loopback", "size": nranks, "fabric": "switch", "bandwidth_GBps": bw,
             "latency_us": 10.0, "link": "net"}]})

    low, high = 1e-3, 1e3
    for _ in range(60):  # bisection in log space: time falls as bandwidth grows
        mid = (low * high) ** 0.5
        if _ring_us(make(mid), nbytes, 0.0) > allreduce_ms * 1e3:
            low = mid
        else:
            high = mid
    return make((low * high) ** 0.5)


def _ring_us(topology: Topology, nbytes: int, delay_us: float) -> float:
    return _time(topology, nbytes, delay_us, Algorithm.RING)


def _time(topology: Topology, nbytes: int, delay_us: float, algorithm: Algorithm) -> float:
    scenario = Scenario(topology, Collective.ALLREDUCE, nbytes,
                        topology.nranks - 1 if delay_us > 0 else None, delay_us)
    return evaluate(scenario, Config(algorithm, Protocol.SIMPLE, 4)).time_us


def predicted_saving_ms(topology: Topology, nbytes: int, delay_ms: float, path: str) -> float:
    """Ring minus StragglAR at this delay, where the runtime runs StragglAR; else nothing."""
    if path != "stragglar":
        return 0.0
    delay_us = delay_ms * 1e3
    return (_ring_us(topology, nbytes, delay_us)
            - _time(topology, nbytes, delay_us, Algorithm.STRAGGLAR)) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--nprocs", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--delays", default="0,5,20,50", help="straggler delays in ms (default 0,5,20,50)")
    ap.add_argument("--width", type=int, default=512, help="MLP width (default 512)")
    ap.add_argument("--layers", type=int, default=4, help="MLP layers (default 4: a 4 MiB gradient)")
    ap.add_argument("--block", type=int, default=2, help="steps per block (default 2)")
    ap.add_argument("--blocks", type=int, default=25, help="alternating blocks per model (default 25)")
    args = ap.parse_args()
    if args.nprocs < 2:
        ap.error("--nprocs must be at least 2 (a straggler needs someone to wait for it)")
    try:
        delays = [float(d) for d in args.delays.split(",")]
    except ValueError:
        ap.error(f"--delays must be comma-separated numbers of ms, got {args.delays!r}")
    warmup = RUNTIME["measure_every"] * RUNTIME["window"]
    out = launch(f"{__file__}:bench_rank", args.nprocs,
                 {"delays_ms": delays, "width": args.width, "layers": args.layers,
                  "block": args.block, "blocks": args.blocks, "warmup": warmup}, timeout_s=1800)[0]
    topology = fitted_topology(args.nprocs, out["grad_bytes"], out["allreduce_ms"])
    for case in out["cases"]:
        case["predicted_saving_ms"] = predicted_saving_ms(topology, out["grad_bytes"],
                                                          case["straggler_delay_ms"], case["hook_path"])
        case["measured_saving_ms"] = case["plain_step_ms"] - case["hook_step_ms"]
    result = {"ranks": args.nprocs, "cases": out["cases"], "grad_bytes": out["grad_bytes"],
              "gloo_allreduce_ms": out["allreduce_ms"],
              "fitted_bandwidth_GBps": topology.tiers[0].bandwidth_GBps}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.nprocs} gloo ranks, {out['grad_bytes'] / 2**20:.1f} MiB gradient, gloo all-reduce "
          f"{out['allreduce_ms']:.2f} ms")
    for c in result["cases"]:
        print(f"delay {c['straggler_delay_ms']:5.1f} ms: plain {c['plain_step_ms']:7.2f} "
              f"± {c['plain_stderr_ms']:.2f} ms, hook {c['hook_step_ms']:7.2f} ± {c['hook_stderr_ms']:.2f} "
              f"ms ({c['hook_path']}), saved {c['measured_saving_ms']:6.2f} ms, simulator predicts "
              f"{c['predicted_saving_ms']:6.2f} ms")


if __name__ == "__main__":
    main()
