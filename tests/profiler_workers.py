"""Rank functions the profiler tests start through the launcher (loaded by file path in each rank)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Echoed:
    """A dataclass of a file target: it needs its module in sys.modules, in the rank (to be
    defined) and in the caller (to be unpickled)."""

    rank: int
    world: int


def echo_dataclass(ctx) -> Echoed:
    return Echoed(ctx.rank, ctx.world_size)


def echo(ctx, value):
    return {"rank": ctx.rank, "world": ctx.world_size, "value": value,
            "omp": os.environ.get("OMP_NUM_THREADS")}


def ddp_with_probe(ctx, steps: int, late_rank: int | None, late_ms: float, backend: str = "gloo",
                   tell_device: bool = False, fake_cuda_events: bool = False):
    """A small DDP model trained with the probe hook; ``late_rank`` sleeps before each backward.

    Returns the probe's report and the parameters, plus those of an identical model trained with
    DDP's default hook, so the test can check the probe averages gradients exactly like DDP. With
    ``tell_device`` the probe is given the job's device; ``fake_cuda_events`` (CPU only) tells it
    "cuda" while the buckets stay on the CPU, and makes "cuda" clock marks stand-ins for CUDA
    events (timed on the host, refusing arithmetic with host times as torch.cuda.Event does): a
    step then begins on one clock and its buckets are marked on another, as on a GPU when the
    first step begins before the probe has seen a CUDA bucket.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl.profiler.measure import hooks
    from dynamiccl.profiler.measure.hooks import CommProbe

    device = torch.device("cuda", ctx.gpu()) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))
    probe_device = device
    if fake_cuda_events:
        real_clock_for = hooks.clock_for
        hooks.clock_for = lambda d: _StandInEventClock() if d.type == "cuda" else real_clock_for(d)
        probe_device = torch.device("cuda")

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 8)).to(device)

    ids = [device.index] if backend == "nccl" else None
    probed = DDP(model(), bucket_cap_mb=0.1, device_ids=ids)
    plain = DDP(model(), bucket_cap_mb=0.1, device_ids=ids)
    probe = CommProbe(device=probe_device if tell_device or fake_cuda_events else None)
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


class _StandInEvent:
    """A host-timed mark with CUDA events' interface; like them, not a number."""

    def __init__(self) -> None:
        self.ns = time.perf_counter_ns()

    def elapsed_time(self, later: _StandInEvent) -> float:
        if not isinstance(later, _StandInEvent):
            raise TypeError(f"elapsed_time() expects an Event, got {type(later).__name__}")
        return (later.ns - self.ns) / 1e6  # ms, as torch.cuda.Event.elapsed_time

    def synchronize(self) -> None:
        pass

    def __sub__(self, other):
        raise TypeError(f"unsupported operand type(s) for -: 'Event' and '{type(other).__name__}'")

    __rsub__ = __sub__


class _StandInEventClock:
    def mark(self) -> _StandInEvent:
        return _StandInEvent()

    def us(self, mark: _StandInEvent, origin: _StandInEvent) -> float:
        return origin.elapsed_time(mark) * 1e3

    def settle(self, mark: _StandInEvent) -> None:
        mark.synchronize()


def nccl_environment(ctx):
    """The NCCL variables this rank runs with (no GPU touched)."""
    from dynamiccl.profiler.measure import emulation

    names = {*emulation.EMULATED_HOST_ENV, emulation.HOSTID_ENV}
    return {"emulated_hosts": ctx.emulated_hosts,
            "env": {k: v for k, v in os.environ.items() if k in names}}


def environment(ctx, names):
    """What this rank's environment holds of ``names`` (None: unset)."""
    return {name: os.environ.get(name) for name in names}


def calls_per_group(ctx, spec):
    """The runner's rank side (as ``rank_main`` runs it) with gloo standing in for NCCL: how many
    collectives the measured group and the control group were asked to run (each group's sequence
    number counts its collectives), and the shape of this rank's own times."""
    import torch.distributed as dist

    from dynamiccl.profiler.measure.runner import join_group, measure_in_group

    device, ctrl = join_group(ctx, "gloo")
    measured = dist.distributed_c10d._get_default_group()
    before = measured._get_sequence_number_for_group(), ctrl._get_sequence_number_for_group()
    times = measure_in_group(spec, device, ctrl=ctrl)
    after = measured._get_sequence_number_for_group(), ctrl._get_sequence_number_for_group()
    dist.destroy_process_group()
    return {"measured": after[0] - before[0], "control": after[1] - before[1],
            "shape": list(times.shape)}
