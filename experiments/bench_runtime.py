"""DDP with the runtime's hook against plain DDP, with a persistent straggler, next to the simulator.

Real gloo processes on this machine (``--nprocs`` ranks, 4 by default): an MLP whose gradient is one
16 MiB bucket, the last rank sleeping ``d`` ms before every backward. For each delay the two models
train in alternating blocks in the same processes (so machine load hits both alike) and rank 0's
mean step time is reported for each, with its standard error (step times on a loaded machine are
bimodal, so a median jumps between the modes); ``measured_saving_ms`` is the mean of the paired
block differences, with its standard error. Plain DDP gets ``gradient_as_bucket_view=True`` like
``runtime.ddp``, so the difference is the hook's alone; without a straggler that is what any DDP
communication hook costs (``bench_hook_overhead.py``), on CPU gloo mostly the averaging's own pass
over the bucket, which DDP without a hook folds into its gradient copy.

The simulator's prediction is for the same setting: the bucket the straggler delays (the step's
first, read from DDP's own bucket layout), the injected delay and the same ranks, on a one-tier
switch whose bandwidth is fitted so that the simulated ring all-reduce of that bucket takes what
gloo's all-reduce took in this run (the runtime is given the same system, so it asks the simulator
which path each bucket runs, as a job given its topology does); the saving is ring minus StragglAR
at the delay, times the share
of timed steps on which the runtime actually ran StragglAR (``stragglar_share``: none while it keeps
the plain all-reduce, all once it has agreed on the straggler). At n = 4 StragglAR's completion
rounds move 4/3 of the bucket per rank against a ring's 3/2, so the saving is about a ninth of the
all-reduce time; the 16 MiB default makes that several ms, above this machine's noise, where a
4 MiB gradient's 1.4 ms was not. gloo's own reduce-scatter is slow, so the runtime's StragglAR
passes chunks around a ring of point-to-point sends among the punctual ranks while the straggler is
late (13 ms for 16 MiB on 3 ranks here): at delays shorter than that the measurement falls short of
the prediction by the difference.

Per delay the bucket's all-reduce is also timed alone, outside DDP (``alone_*``: gloo's against
StragglAR's, the straggler sleeping after a barrier), next to the simulator's saving at a
StragglAR share of one (``predicted_alone_saving_ms``). On a machine with fewer cores than ranks the
two settings differ: inside a training step all ranks' compute shares the cores, so the straggler's
sleep hands its core to the others' backward passes (plain DDP's step grows by less than the delay:
less lateness for StragglAR to hide), and the punctual ranks' reduce-scatter takes cores from the
straggler's own backward once it wakes — which separate GPUs never do. Alone, nobody computes while
the straggler sleeps, which is the setting the simulator's collective times describe.

With ``--backend nccl`` the same runs on GPUs through NCCL (the same JSON): ``--emulate-hosts``
puts the ranks on the GPUs present as hosts of their own (one GPU is enough, with the CUDA MPS
daemon so that the ranks compute side by side), the straggler a late rank on its own host. Step
and collective times then wait for the GPU at both ends, the fitted system's network is the
loopback's sockets, and StragglAR's punctual ranks reduce-scatter with NCCL's own reduce-scatter.

    python experiments/bench_runtime.py --json
    {"ranks": 4, "backend": "gloo", "cases": [{"straggler_delay_ms": 0, "plain_step_ms": ...,
                                              "hook_step_ms": ..., "predicted_saving_ms": ...}, ...]}
    python experiments/bench_runtime.py --json --backend nccl --emulate-hosts   # on one GPU

``--profiler`` (nccl) loads DynamICCL as NCCL's profiler in the ranks too: the runtime then finds
the straggler from each rank's GPU time of a step's first all-reduce
(:mod:`dynamiccl.runtime.timing`) instead of its own marks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from datetime import timedelta

from dynamiccl.plugin import build as plugin
from dynamiccl.profiler.measure import emulation
from dynamiccl.profiler.measure.job_profile import profiler_loaded
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.simulator.api import evaluate
from dynamiccl.system.knobs import Algorithm, Collective, Config, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, topology_from_dict

#: Runtime settings of the benchmark: decide every 5 steps from the last 5 measurements, 3 of which
#: must show the same rank 4 ms late (this 2-core machine's load alone makes ranks 2 ms late).
RUNTIME = {"measure_every": 5, "window": 5, "majority": 0.6, "straggler_threshold_us": 4000.0}


def bench_rank(ctx, delays_ms: list[float], width: int, layers: int, block: int, blocks: int,
               warmup: int, collective_reps: int, backend: str = "gloo") -> dict | None:
    """Rank side: plain DDP and hooked DDP, alternating blocks per delay; rank 0 reports."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl import runtime

    nccl = backend == "nccl"
    device = torch.device("cuda", ctx.gpu()) if nccl else torch.device("cpu")
    if nccl:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s),
                            **({"device_id": device} if nccl else {}))
    ddp_args = {"device_ids": [device.index]} if nccl else {}
    idle = torch.cuda.synchronize if nccl else (lambda: None)  # time until the GPU is done
    straggler = ctx.world_size - 1

    def model():
        torch.manual_seed(0)
        mods = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
        return torch.nn.Sequential(*mods).to(device)

    # the same gradient layout as runtime.ddp's (bucket views): the comparison is the hook's
    plain = DDP(model(), bucket_cap_mb=256, gradient_as_bucket_view=True, **ddp_args)
    opts = {plain: torch.optim.SGD(plain.parameters(), lr=1e-3)}
    x = torch.randn(16, width).to(device)
    grad_bytes = sum(p.numel() * p.element_size() for p in plain.parameters())

    def step(m, delay_ms: float) -> float:
        idle()
        t0 = time.perf_counter()
        loss = m(x).square().mean()
        if ctx.rank == straggler and delay_ms:
            time.sleep(delay_ms / 1e3)
        loss.backward()
        opts[m].step()
        opts[m].zero_grad()
        idle()
        return (time.perf_counter() - t0) * 1e3

    step(plain, 0.0)  # DDP lays its buckets out anew after the first step
    layout = plain._get_ddp_logging_data()  # the rebuilt layout, or the first where none was needed
    buckets = [int(b) for b in str(layout.get("rebuilt_bucket_sizes", layout["bucket_sizes"])).split(",")]
    first_bucket = buckets[0]  # DDP's bucket 0: the first one reduced, the one the straggler delays
    buf = torch.ones(first_bucket // 4, device=device)
    ar_ms = []
    for i in range(25):  # the backend's own all-reduce of that bucket, everyone punctual
        dist.barrier()
        idle()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        idle()
        if i >= 5:
            ar_ms.append((time.perf_counter() - t0) * 1e3)
    agreed = torch.tensor([statistics.median(ar_ms)], dtype=torch.float64, device=device)
    dist.broadcast(agreed, src=0)  # one system model on every rank
    allreduce_ms = float(agreed.item())
    # the runtime picks each bucket's path from the simulator on this system, as a job given its
    # topology does
    system = fitted_topology(ctx.world_size, first_bucket, allreduce_ms)
    config = runtime.RuntimeConfig(**RUNTIME, topology=system)
    hooked = runtime.ddp(model(), config, bucket_cap_mb=256, **ddp_args)
    opts[hooked] = torch.optim.SGD(hooked.parameters(), lr=1e-3)
    step(hooked, 0.0)
    rt = hooked.dynamiccl_runtime
    cases = []
    for d in delays_ms:
        for m in (plain, hooked):
            for _ in range(warmup):  # the hook's window sees the new delay before timing starts
                step(m, d)
        times: dict[str, list[float]] = {"plain": [], "hook": []}
        paths: list[str] = []
        for _ in range(blocks):
            times["plain"] += [step(plain, d) for _ in range(block)]
            for _ in range(block):
                paths.append(rt.path_for(first_bucket))  # what this step's first bucket runs
                times["hook"].append(step(hooked, d))
        saved = [statistics.fmean(times["plain"][i:i + block]) - statistics.fmean(times["hook"][i:i + block])
                 for i in range(0, len(paths), block)]
        alone = _collectives_alone(first_bucket, d, straggler, collective_reps, device)
        cases.append({"straggler_delay_ms": d,
                      "plain_step_ms": statistics.fmean(times["plain"]),
                      "hook_step_ms": statistics.fmean(times["hook"]),
                      "plain_stderr_ms": _stderr(times["plain"]),
                      "hook_stderr_ms": _stderr(times["hook"]),
                      "measured_saving_ms": statistics.fmean(saved),
                      "measured_saving_stderr_ms": _stderr(saved),
                      "stragglar_share": paths.count("stragglar") / len(paths),
                      "detected_delay_ms": rt.job_state.delay_us / 1e3, **alone})
    dist.destroy_process_group()
    if ctx.rank:
        return None
    return {"cases": cases, "grad_bytes": grad_bytes, "bucket_bytes": buckets,
            "allreduce_ms": allreduce_ms, "topology": system}


def _collectives_alone(nbytes: int, delay_ms: float, straggler: int, reps: int,
                       device) -> dict[str, float]:
    """The first bucket's averaging all-reduce outside DDP, the straggler sleeping ``delay_ms``
    after a barrier: the backend's (as the hook's plain path runs it) and StragglAR's,
    alternating; rank 0's medians from the barrier on (on a GPU, until its work is done). Outside a
    training step nobody else computes while the straggler sleeps, so this is the setting the
    simulator's collective times describe."""
    import torch
    import torch.distributed as dist

    from dynamiccl.runtime.core import backend_all_reduce
    from dynamiccl.runtime.stragglar import StragglAR

    world = dist.get_world_size()
    idle = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sar, data = StragglAR(), torch.randn(nbytes // 4).to(device)
    sar.prepare(straggler)
    ops = {"allreduce": lambda t: backend_all_reduce(t, world),
           "stragglar": lambda t: sar.all_reduce(t, straggler, world)}
    times: dict[str, list[float]] = {name: [] for name in ops}
    for i in range(reps):
        for name in (ops if i % 2 else reversed(ops)):
            buf = data.clone()
            dist.barrier()
            idle()
            t0 = time.perf_counter()
            if dist.get_rank() == straggler and delay_ms:
                time.sleep(delay_ms / 1e3)
            ops[name](buf)
            idle()
            times[name].append((time.perf_counter() - t0) * 1e3)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {"alone_allreduce_ms": medians["allreduce"], "alone_stragglar_ms": medians["stragglar"],
            "alone_saving_ms": medians["allreduce"] - medians["stragglar"]}


def _stderr(xs: list[float]) -> float:
    return statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0


def fitted_topology(nranks: int, nbytes: int, allreduce_ms: float) -> Topology:
    """A one-tier switch whose simulated ring all-reduce of ``nbytes`` takes ``allreduce_ms``."""
    def make(bw: float) -> Topology:
        return topology_from_dict({"name": "fitted-loopback", "tiers": [
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


def predicted_saving_ms(topology: Topology, nbytes: int, delay_ms: float, stragglar_share: float) -> float:
    """Ring minus StragglAR at this delay, on the share of steps the runtime ran StragglAR."""
    if not stragglar_share:
        return 0.0
    delay_us = delay_ms * 1e3
    return stragglar_share * (_ring_us(topology, nbytes, delay_us)
                              - _time(topology, nbytes, delay_us, Algorithm.STRAGGLAR)) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--nprocs", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--delays", default="0,5,20,50", help="straggler delays in ms (default 0,5,20,50)")
    ap.add_argument("--width", type=int, default=1024, help="MLP width (default 1024)")
    ap.add_argument("--layers", type=int, default=4, help="MLP layers (default 4: a 16 MiB gradient)")
    ap.add_argument("--block", type=int, default=2, help="steps per block (default 2)")
    ap.add_argument("--blocks", type=int, default=25, help="alternating blocks per model (default 25)")
    ap.add_argument("--collective-reps", type=int, default=20,
                    help="timings per collective outside DDP, per delay (default 20)")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                    help="gloo on CPU (default) or nccl on the GPUs present")
    ap.add_argument("--emulate-hosts", action="store_true",
                    help="nccl: more ranks than GPUs, each its own host (loopback sockets; needs the "
                         "CUDA MPS daemon)")
    ap.add_argument("--profiler", action="store_true",
                    help="nccl: the ranks load DynamICCL as NCCL's profiler too, and the runtime finds "
                         "the straggler from each rank's GPU time of a step's first all-reduce")
    args = ap.parse_args()
    if args.nprocs < 2:
        ap.error("--nprocs must be at least 2 (a straggler needs someone to wait for it)")
    if args.collective_reps < 1:
        ap.error("--collective-reps must be at least 1")
    try:
        delays = [float(d) for d in args.delays.split(",")]
    except ValueError:
        ap.error(f"--delays must be comma-separated numbers of ms, got {args.delays!r}")
    if args.emulate_hosts and args.backend != "nccl":
        ap.error("--emulate-hosts makes NCCL ranks hosts of their own; add --backend nccl")
    if args.profiler and args.backend != "nccl":
        ap.error("--profiler loads NCCL's profiler, which gloo never loads; add --backend nccl")
    warmup = RUNTIME["measure_every"] * RUNTIME["window"]
    nccl = args.backend == "nccl"
    try:
        if nccl:
            emulation.prepare(args.nprocs, emulation.visible_gpus(), args.emulate_hosts)
        with (profiler_loaded(plugin.library_path()) if args.profiler
              else contextlib.nullcontext(None if nccl else {"CUDA_VISIBLE_DEVICES": ""})) as env:
            out = launch(f"{__file__}:bench_rank", args.nprocs,
                         {"delays_ms": delays, "width": args.width, "layers": args.layers,
                          "block": args.block, "blocks": args.blocks, "warmup": warmup,
                          "collective_reps": args.collective_reps, "backend": args.backend},
                         timeout_s=1800, env=env, emulate_hosts=args.emulate_hosts)[0]
    except emulation.EmulationError as exc:
        print(f"bench_runtime: {exc}", file=sys.stderr)
        sys.exit(2)
    first_bucket = out["bucket_bytes"][0]
    topology = out["topology"]  # the system the runtime decided on, fitted once in the ranks
    for case in out["cases"]:
        case["predicted_saving_ms"] = predicted_saving_ms(topology, first_bucket,
                                                          case["straggler_delay_ms"],
                                                          case["stragglar_share"])
        case["predicted_alone_saving_ms"] = predicted_saving_ms(topology, first_bucket,
                                                                case["straggler_delay_ms"], 1.0)
    result = {"ranks": args.nprocs, "backend": args.backend, "emulated_hosts": args.emulate_hosts,
              "profiler": args.profiler,
              "cases": out["cases"], "grad_bytes": out["grad_bytes"],
              "bucket_bytes": out["bucket_bytes"], "allreduce_ms": out["allreduce_ms"],
              "fitted_bandwidth_GBps": topology.tiers[0].bandwidth_GBps}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    hosts = " (emulated hosts)" if args.emulate_hosts else ""
    print(f"{args.nprocs} {args.backend} ranks{hosts}, {out['grad_bytes'] / 2**20:.1f} MiB gradient in "
          f"buckets of {[round(b / 2**20, 2) for b in out['bucket_bytes']]} MiB, {args.backend} "
          f"all-reduce of the first {out['allreduce_ms']:.2f} ms")
    for c in result["cases"]:
        print(f"delay {c['straggler_delay_ms']:5.1f} ms: plain {c['plain_step_ms']:7.2f} "
              f"± {c['plain_stderr_ms']:.2f} ms, hook {c['hook_step_ms']:7.2f} ± {c['hook_stderr_ms']:.2f} "
              f"ms (StragglAR on {c['stragglar_share']:.0%}), saved {c['measured_saving_ms']:6.2f} "
              f"± {c['measured_saving_stderr_ms']:.2f} ms, simulator predicts "
              f"{c['predicted_saving_ms']:6.2f} ms; the bucket's all-reduce alone: {args.backend} "
              f"{c['alone_allreduce_ms']:6.2f} ms, StragglAR {c['alone_stragglar_ms']:6.2f} ms, "
              f"saved {c['alone_saving_ms']:6.2f} ms (predicted {c['predicted_alone_saving_ms']:6.2f})")


if __name__ == "__main__":
    main()
