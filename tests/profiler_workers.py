"""Rank functions the profiler tests start through the launcher (loaded by file path in each rank)."""

from __future__ import annotations

import os
import time
from datetime import timedelta


def fail_on_rank(ctx, bad_rank: int, mode: str):
    """Rank ``bad_rank`` raises, exits hard or hangs; the others wait in a collective."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))
    if ctx.rank == bad_rank:
        if mode == "raise":
            raise RuntimeError("injected failure on purpose")
        if mode == "exit":
            os._exit(3)
        time.sleep(3600)
    t = torch.ones(4)
    dist.all_reduce(t)
    return float(t[0])


def misbehave_without_torch(ctx, bad_rank: int, mode: str):
    """Like fail_on_rank but without torch, so the launcher's own paths are tested in a second."""
    if ctx.rank == bad_rank:
        if mode == "raise":
            raise RuntimeError("injected failure on purpose")
        time.sleep(3600)
    return ctx.rank


def echo(ctx, value):
    return {"rank": ctx.rank, "world": ctx.world_size, "value": value,
            "omp": os.environ.get("OMP_NUM_THREADS")}


def ddp_with_probe(ctx, steps: int, late_rank: int | None, late_ms: float, backend: str = "gloo"):
    """A small DDP model trained with the probe hook; ``late_rank`` sleeps before each backward.

    Returns the probe's report and the parameters, plus those of an identical model trained with
    DDP's default hook, so the test can check the probe averages gradients exactly like DDP.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl.profiler.hooks import CommProbe

    device = torch.device("cuda", ctx.rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 8)).to(device)

    ids = [ctx.rank] if backend == "nccl" else None
    probed = DDP(model(), bucket_cap_mb=0.1, device_ids=ids)
    plain = DDP(model(), bucket_cap_mb=0.1, device_ids=ids)
    probe = CommProbe()
    probed.register_comm_hook(probe, probe.allreduce_hook)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (probed, plain)]
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    for _ in range(steps):
        x = torch.randn(32, 64, generator=gen).to(device)
        with probe.step():
            loss = probed(x).square().mean()
            if ctx.rank == late_rank:
                time.sleep(late_ms / 1e3)
            loss.backward()
            opts[0].step()
            opts[0].zero_grad()
        plain(x).square().mean().backward()
        opts[1].step()
        opts[1].zero_grad()
    report = probe.report()
    params = [[p.detach().cpu().clone() for p in m.parameters()] for m in (probed, plain)]
    dist.destroy_process_group()
    return {"report": report, "probed": params[0], "plain": params[1]}
