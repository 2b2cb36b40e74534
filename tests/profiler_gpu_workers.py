"""Rank functions of the profiler's GPU tests, started through the launcher (loaded by file path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH_REAL = Path(__file__).resolve().parents[1] / "experiments" / "bench_real.py"


def _bench_real():
    """experiments/bench_real.py as a module (entered in sys.modules first: its dataclasses look
    their module up there)."""
    if "bench_real" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_real", BENCH_REAL)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_real"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_real"]


def ddp_buckets(ctx, steps: int, width: int, layers: int, bucket_mb: float, seed: int) -> dict | None:
    """bench_real's DDP job (``ddp_rank``: its model, data and steps), returning on rank 0 the
    buckets DDP all-reduced: the first step's (``bucket_sizes``) and, from the second step on, the
    rebuilt ones (``rebuilt_bucket_sizes``), in bytes."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    bench = _bench_real()
    device = bench._join(ctx)
    model = DDP(bench._mlp(width, layers, seed).to(device), device_ids=[device.index],
                bucket_cap_mb=bucket_mb)
    bench._timed_steps(ctx, model, steps, width, seed)
    data = model._get_ddp_logging_data()
    first = [int(b) for b in str(data["bucket_sizes"]).split(",")]
    rebuilt = [int(b) for b in str(data.get("rebuilt_bucket_sizes", data["bucket_sizes"])).split(",")]
    dist.destroy_process_group()
    return {"first": first, "rebuilt": rebuilt, "steps": steps} if ctx.rank == 0 else None
