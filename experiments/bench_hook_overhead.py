"""What the runtime's hook costs per step on its plain path (no straggler), in µs, with its error.

``bench_runtime.py`` compares whole step times, where a 2-core machine's scheduling noise is larger
than the hook's own cost. This script isolates that cost: the same small model (several buckets, a
short step) trained in the same processes by plain DDP (``ddp``; ``ddp_view`` with
``gradient_as_bucket_view=True``), by DDP with PyTorch's own Python all-reduce hook
(``torch_hook``), by ``dynamiccl.runtime.ddp`` (``runtime``, which turns bucket views on) and by the
same without its control boundary (``runtime_no_control``: no gloo collectives every
``measure_every`` steps), in short blocks that rotate through the variants round after round.

Each variant's overhead is its block's mean step time minus plain DDP's in the same round, averaged
over rounds: load that shifts between rounds cancels, and the standard error is that of the paired
differences. ``wall`` is elapsed time, ``cpu`` the process's CPU time on all its threads (what the
process did, not how long it waited for the others). ``runtime - ddp_view`` is the hook's cost
against plain DDP with the same gradient layout, and what any communication hook costs in DDP: a
callback per bucket that hands the GIL between threads (DDP insists on a future of a Python
object), and one pass over each bucket for the averaging, which DDP folds into its copy of the
gradients into the bucket only when no hook is registered (PyTorch's own C++ and Python hooks
divide in a pass of their own too). The first dominates small buckets, the second large ones.
``runtime - torch_hook`` is what the runtime adds to PyTorch's own Python hook; negative where the
bucket views ``runtime.ddp`` turns on save more than the runtime adds.

    python experiments/bench_hook_overhead.py --json
    {"ranks": 2, "step_us": ..., "step_cpu_us": ..., "buckets": 4,
     "overhead_us": {"wall": {"torch_hook": [mean, stderr], "runtime": [...], ...}, "cpu": {...}}}
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta

from dynamiccl.profiler.measure.launcher import launch

VARIANTS = ("ddp", "ddp_view", "torch_hook", "runtime", "runtime_no_control")


def overhead_rank(ctx, width: int, layers: int, bucket_mb: float, block: int, rounds: int,
                  warmup: int) -> dict | None:
    """Rank side: every variant in the same process, rotated per round; rank 0 reports."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl import runtime

    dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[m for _ in range(layers)
                                     for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])

    models = {"ddp": DDP(model(), bucket_cap_mb=bucket_mb)}
    models["ddp_view"] = DDP(model(), bucket_cap_mb=bucket_mb, gradient_as_bucket_view=True)
    models["torch_hook"] = DDP(model(), bucket_cap_mb=bucket_mb)
    models["torch_hook"].register_comm_hook(None, allreduce_hook)
    models["runtime"] = runtime.ddp(model(), bucket_cap_mb=bucket_mb)
    models["runtime_no_control"] = runtime.ddp(model(), runtime.RuntimeConfig(measure_every=1 << 30),
                                               bucket_cap_mb=bucket_mb)
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-4) for k, m in models.items()}
    x = torch.randn(8, width)

    def run(name: str, steps: int) -> tuple[float, float]:
        """(wall, process CPU) µs per step: the CPU time counts the work this process did on all
        its threads (gloo's and the futures' callbacks too) and not the time it waited for others."""
        m, opt = models[name], opts[name]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        return ((time.perf_counter() - t0) * 1e6 / steps, (time.process_time() - c0) * 1e6 / steps)

    for name in VARIANTS:
        run(name, warmup)
    buckets = len(str(models["ddp"]._get_ddp_logging_data()["rebuilt_bucket_sizes"]).split(","))
    per_round: list[dict[str, tuple[float, float]]] = []
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        per_round.append({name: run(name, block) for name in order})
    dist.destroy_process_group()
    if ctx.rank:
        return None
    overhead: dict[str, dict[str, list[float]]] = {"wall": {}, "cpu": {}}
    pairs = [(name, "ddp") for name in VARIANTS[1:]] + [("runtime", "ddp_view"),
                                                        ("runtime", "torch_hook")]
    for i, clock in enumerate(overhead):
        for name, base in pairs:
            diffs = [r[name][i] - r[base][i] for r in per_round]
            key = name if base == "ddp" else f"{name} - {base}"
            overhead[clock][key] = [statistics.fmean(diffs), _stderr(diffs)]
    return {"step_us": statistics.fmean(r["ddp"][0] for r in per_round),
            "step_cpu_us": statistics.fmean(r["ddp"][1] for r in per_round), "buckets": buckets,
            "overhead_us": overhead}


def _stderr(xs: list[float]) -> float:
    return statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--nprocs", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--width", type=int, default=128, help="MLP width (default 128)")
    ap.add_argument("--layers", type=int, default=4, help="MLP layers (default 4)")
    ap.add_argument("--bucket-mb", type=float, default=0.05, help="DDP bucket cap (default 0.05 MiB)")
    ap.add_argument("--block", type=int, default=20, help="steps per block (default 20)")
    ap.add_argument("--rounds", type=int, default=60, help="rounds of blocks (default 60)")
    args = ap.parse_args()
    if args.nprocs < 2:
        ap.error("--nprocs must be at least 2")
    out = launch(f"{__file__}:overhead_rank", args.nprocs,
                 {"width": args.width, "layers": args.layers, "bucket_mb": args.bucket_mb,
                  "block": args.block, "rounds": args.rounds, "warmup": 30}, timeout_s=1800)[0]
    result = {"ranks": args.nprocs, **out}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.nprocs} gloo ranks, {out['buckets']} buckets, plain DDP step {out['step_us']:.0f} µs "
          f"({out['step_cpu_us']:.0f} µs CPU)")
    for clock, table in out["overhead_us"].items():
        for name, (mean, err) in table.items():
            print(f"  {clock:4s} {name:20s} {mean:+8.1f} ± {err:.1f} µs per step")


if __name__ == "__main__":
    main()
