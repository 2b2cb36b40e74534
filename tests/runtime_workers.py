"""Rank functions the runtime tests start through the launcher (loaded by file path in each rank)."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from nccl_tuner_standin import NcclTunerStandIn  # noqa: E402  (the tests' folder, for a rank too)

DTYPES = (torch.int64, torch.float32, torch.bfloat16)
#: Small sizes in every dtype (uneven chunks, odd and even counts, as 2-D and transposed views),
#: then DDP-like buckets: contiguous 4 MiB of float32 and 2 MiB of int64 that no chunk count divides.
CASES = (*((size, dtype) for size in (5, 4099, 4098) for dtype in DTYPES),
         (1 << 20, torch.float32), ((1 << 18) + 3, torch.int64))
#: From this many elements a case hands the op its contiguous flat tensor, as DDP does.
FLAT_FROM = 1 << 16


def _join(ctx, backend: str = "gloo") -> torch.device:
    device = torch.device("cpu")
    extra = {}
    if backend == "nccl":
        device = torch.device("cuda", ctx.gpu())  # rank % GPUs on emulated hosts
        torch.cuda.set_device(device)
        extra = {"device_id": device}
    dist.init_process_group(backend, init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s), **extra)
    return device


def _data(rank: int, size: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(size, generator=gen).to(dtype)
    return torch.randint(-(2**20), 2**20, (size,), generator=gen).to(dtype)


def compare_with_all_reduce(ctx, stragglers: list[int], layouts: list[tuple[int, int]]):
    """Every case's result next to all_reduce's, gathered on rank 0 as (case, max error, exact,
    identical on every rank)."""
    from dynamiccl.runtime.hierarchical import HierarchicalAllReduce
    from dynamiccl.runtime.stragglar import StragglAR

    _join(ctx)
    sar = StragglAR()
    hier = {layout: HierarchicalAllReduce(*layout) for layout in layouts}
    out = []
    n = ctx.world_size
    for seed, (size, dtype) in enumerate(CASES):
        total = _data(ctx.rank, size, dtype, seed)
        dist.all_reduce(total)
        cases = [(f"stragglar s={s}", lambda t, s=s: sar.all_reduce(t, s), 1) for s in stragglers]
        cases += [(f"hierarchical k={k} chunks={c}", h.all_reduce, 1) for (k, c), h in hier.items()]
        if dtype.is_floating_point:  # DDP's average, divided inside each op where it completes a sum
            cases += [(f"stragglar s={stragglers[-1]} average",
                       lambda t: sar.all_reduce(t, stragglers[-1], n), n)]
            cases += [(f"hierarchical k={k} chunks={c} average", lambda t, h=h: h.all_reduce(t, n), n)
                      for (k, c), h in hier.items()]
        for name, op, divisor in cases:
            ref = total / divisor if divisor != 1 else total
            got = _data(ctx.rank, size, dtype, seed)
            if size >= FLAT_FROM:
                op(got)
            elif size % 2:  # any shape, contiguous or not: the ops write the result back in place
                op(got.view(-1, 1))
            else:
                op(got.view(2, -1).t())
            err = float((got.double() - ref.double()).abs().max())
            scale = float(ref.double().abs().max()) or 1.0
            out.append({"case": f"{name} n={n} size={size} {dtype}", "exact":
                        torch.equal(got, ref), "rel_err": err / scale, "identical": _same_bits(got),
                        "float": dtype.is_floating_point, "dtype": str(dtype), "size": size})
    dist.destroy_process_group()
    return out if ctx.rank == 0 else None


def _same_bits(t: torch.Tensor) -> bool:
    """Every rank holds the same bits: a digest of each rank's bytes, all-gathered (not the tensors,
    which would cost more than the op under test on large cases)."""
    import hashlib

    raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    mine = torch.tensor([int.from_bytes(hashlib.blake2b(raw, digest_size=7).digest(), "little")])
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return all(torch.equal(everyone[0], e) for e in everyone)


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def ddp_with_straggler(ctx, steps: int, late_rank: int, late_ms: float, config: dict,
                       plugin: dict | None = None, backend: str = "gloo", torch_hook: bool = False):
    """DDP through ``dynamiccl.runtime.ddp`` next to plain DDP on the same data (with
    ``torch_hook``, DDP with PyTorch's own Python all-reduce hook); ``late_rank`` sleeps before each
    backward. Returns the runtime's history, both models' parameters and the plugin's all-reduce
    decision for 1000 B before and after."""
    import time

    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamiccl import runtime

    nccl = _with_plugin(ctx, plugin)  # before the process group: NCCL reads it at init
    device = _join(ctx, backend)
    before = nccl.decide(1000) if nccl else None
    ids = [device.index] if backend == "nccl" else None
    tuned = runtime.ddp(_model().to(device), runtime.RuntimeConfig(**config), bucket_cap_mb=0.01,
                        device_ids=ids)
    plain = DDP(_model().to(device), bucket_cap_mb=0.01, device_ids=ids)
    if torch_hook:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        plain.register_comm_hook(None, allreduce_hook)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (tuned, plain)]
    gen = torch.Generator().manual_seed(10 + ctx.rank)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=gen).to(device)
        for model, opt in zip((tuned, plain), opts, strict=True):
            loss = model(x).square().mean()
            if ctx.rank == late_rank and model is tuned:
                time.sleep(late_ms / 1e3)
            loss.backward()
            opt.step()
            opt.zero_grad()
    rt = tuned.dynamiccl_runtime
    params = [[p.detach().cpu().clone() for p in m.parameters()] for m in (tuned, plain)]
    dist.destroy_process_group()
    return {"history": [(h.step, h.state, h.paths) for h in rt.history],
            "tuned": params[0], "plain": params[1], "plugin": rt.control is not None,
            "decided": (before, nccl.decide(1000) if nccl else None)}


def all_reduce_sizes(ctx, sizes: list[int], log_dir: str, repeats: int = 3) -> bool:
    """Each size's sum all-reduce ``repeats`` times on NCCL, this rank's NCCL debug log written to
    ``log_dir/rank<r>.log``; whether every result was the exact sum."""
    import os

    os.environ["NCCL_DEBUG_FILE"] = f"{log_dir}/rank{ctx.rank}.log"  # before NCCL starts logging
    device = _join(ctx, "nccl")
    total = ctx.world_size * (ctx.world_size + 1) / 2
    exact = True
    for nbytes in sizes:
        for _ in range(repeats):
            t = torch.full((nbytes // 4,), float(ctx.rank + 1), device=device)
            dist.all_reduce(t)
            exact &= bool((t == total).all())
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return exact


def job_check(ctx, rounds: list[list[str]]):
    """Per round, each rank points DYNAMICCL_POLICY at its own file and starts the runtime;
    returns the error each round gave this rank (None: the job started)."""
    import os

    from dynamiccl import runtime

    _join(ctx)
    errors = []
    for policies in rounds:
        os.environ["DYNAMICCL_POLICY"] = policies[ctx.rank]
        try:
            runtime.start()
            errors.append(None)
        except runtime.JobMismatchError as exc:
            errors.append(str(exc))
        t = torch.ones(1)
        dist.all_reduce(t)  # the group is still usable: every rank stopped at the same point
    dist.destroy_process_group()
    return errors


def tune_in_lockstep(ctx, steps: int, sizes: list[int], plugin: dict | None = None,
                     backend: str = "gloo"):
    """Plain torch.distributed use of the runtime with an online tuner; returns the tuning log and
    what the plugin decides afterwards for each size."""
    from dynamiccl.agents.policies.online import CoordinateDescentTuner
    from dynamiccl.agents.policies.runtime_tuner import RuntimeTunerAdapter
    from dynamiccl.runtime import Runtime, RuntimeConfig
    from dynamiccl.runtime.plugin_control import PluginControl
    from dynamiccl.system.topology import load_topology

    nccl = _with_plugin(ctx, plugin)
    device = _join(ctx, backend)
    if ctx.emulated_hosts:  # the system NCCL sees: one GPU per host, loopback sockets between
        from dynamiccl.profiler.measure.emulation import local_emulated_topology

        topology = local_emulated_topology(ctx.world_size)
    else:
        topology = load_topology("dgx_h100").resized(nodes=1, gpus_per_node=ctx.world_size)
    tuner = RuntimeTunerAdapter(CoordinateDescentTuner(budget=4, deployable=True), topology, budget=4)
    control = PluginControl() if nccl else None
    rt = Runtime(RuntimeConfig(measure_every=1000, tune_start_step=2, tune_steps_per_trial=1),
                 tuner=tuner, control=control)
    tensors = [torch.full((n // 4,), float(ctx.rank), device=device) for n in sizes]
    for _ in range(steps):
        for t in tensors:
            rt.all_reduce(t).wait()
        rt.end_step()
    events = [(e.step, e.size_bin, e.kind, e.candidate, e.ended) for e in rt.tuning_log]
    done = rt.tuning is not None and rt.tuning.active is None
    dist.destroy_process_group()
    return {"events": events, "done": done,
            "decided": {n: nccl.decide(n) for n in sizes} if nccl else None}


def _with_plugin(ctx, plugin: dict | None) -> NcclTunerStandIn | None:
    """Points the process at the plugin and policy as a job would, and plays NCCL's init."""
    import os

    if plugin is None:
        return None
    os.environ["NCCL_TUNER_PLUGIN"] = plugin["library"]
    os.environ["DYNAMICCL_POLICY"] = plugin["policy"]
    return NcclTunerStandIn(plugin["library"], ctx.world_size)


def paths_in_lockstep(ctx, topology: str, ranks_per_node: int | None, sizes: list[int], steps: int,
                      late_rank: int, late_ms: float, config: dict):
    """Plain torch.distributed use of the runtime with a topology: ``late_rank`` sleeps before each
    step's first all-reduce. Returns the runtime's history, the topology it fitted to the job and
    its path options, and whether every result equalled a plain all_reduce's."""
    import time

    from dynamiccl.runtime import Runtime, RuntimeConfig

    _join(ctx)
    rt = Runtime(RuntimeConfig(topology=topology, ranks_per_node=ranks_per_node, **config))
    exact = True
    for step in range(steps):
        if ctx.rank == late_rank:
            time.sleep(late_ms / 1e3)
        for i, n in enumerate(sizes):
            got = _data(ctx.rank, n // 8, torch.int64, step * 100 + i)
            ref = got.clone()
            rt.all_reduce(got).wait()
            dist.all_reduce(ref)
            exact &= torch.equal(got, ref)
        rt.end_step()
    dist.destroy_process_group()
    return {"history": [(h.step, h.state, h.paths, h.table) for h in rt.history],
            "topology": rt.topology, "options": rt.path_options, "exact": exact}


class _StandInStreamMark:
    """A point on the stand-in stream: stamped on the host when the work queued before it is done."""

    def __init__(self) -> None:
        import threading

        self.ns = 0
        self.reached = threading.Event()

    def stamp(self, *_: object) -> None:
        import time

        self.ns = time.perf_counter_ns()
        self.reached.set()


class _StandInStream:
    """A stand-in for a CUDA stream and NCCL's asynchrony, on the CPU: the all-reduce it issues
    (real gloo work) returns a future that is complete at once, as PyTorch completes an NCCL
    future when the work is queued, while the work itself finishes later; a mark is reached when
    everything queued before it is done, as a CUDA event is. It replaces the runtime's
    ``backend_all_reduce`` and clock in one rank."""

    def __init__(self) -> None:
        self.pending: list[torch.futures.Future] = []

    def all_reduce(self, tensor: torch.Tensor, divisor: int, async_op: bool = False):
        if divisor != 1:
            tensor.div_(divisor)
        self.pending.append(dist.all_reduce(tensor, async_op=True).get_future())
        queued: torch.futures.Future = torch.futures.Future()
        queued.set_result([tensor])

        class Queued:
            def get_future(self) -> torch.futures.Future:
                return queued

        return Queued()

    def mark(self) -> _StandInStreamMark:
        mark = _StandInStreamMark()
        self.pending = [f for f in self.pending if not f.done()]
        if self.pending:
            torch.futures.collect_all(list(self.pending)).add_done_callback(mark.stamp)
        else:
            mark.stamp()
        return mark

    def settle(self, mark: _StandInStreamMark) -> None:
        assert mark.reached.wait(60.0), "the stand-in stream never reached a mark"

    def us(self, mark: _StandInStreamMark, origin: _StandInStreamMark) -> float:
        return (mark.ns - origin.ns) / 1e3

    def synchronize(self) -> None:
        for fut in self.pending:
            fut.wait()
        self.pending = []


def stragglar_with_async_collectives(ctx, steps: int, late_rank: int, late_ms: float,
                                     config: dict, sizes: list[int]):
    """The runtime on gloo whose all-reduces complete after their host callbacks ran (the stand-in
    stream above, for CUDA's asynchrony): ``late_rank`` sleeps before each step; every step ends
    with the stand-in's synchronize, as a GPU step ends with torch.cuda.synchronize. Returns the
    runtime's history and whether every sum came out right."""
    import time

    from dynamiccl.runtime import core

    _join(ctx)
    stream = _StandInStream()
    core.backend_all_reduce = stream.all_reduce
    core.clock_for = lambda device: stream
    rt = core.Runtime(core.RuntimeConfig(**config))
    exact = True
    for _ in range(steps):
        if ctx.rank == late_rank:
            time.sleep(late_ms / 1e3)
        tensors = [torch.full((n // 8,), ctx.rank, dtype=torch.int64) for n in sizes]
        for t in tensors:
            rt.all_reduce(t)
        stream.synchronize()
        exact &= all(bool((t == sum(range(ctx.world_size))).all()) for t in tensors)
        rt.end_step()
    dist.destroy_process_group()
    return {"history": [(h.step, h.state, h.paths) for h in rt.history], "exact": exact}


def interleaved_asking_a_stand_in_nccl(ctx, specs: list, library: str, reverse: bool,
                                       disabled: tuple[int, ...]):
    """The interleaved launch's rank side on gloo, each call also asking the plugin what to run
    the way NCCL would (:class:`NcclTunerStandIn`, its cost table with the ``disabled`` cells marked
    unusable): NCCL's consultation of its tuner, which gloo never makes. Returns the plugin's
    per-spec counts and, call by call, (spec index, what the plugin forced)."""
    from dynamiccl.profiler.measure import interleave
    from dynamiccl.profiler.measure.runner import call_bytes

    nccl = NcclTunerStandIn(library, ctx.world_size)
    real_op, seen = interleave.collective_op, []

    def asking(spec, device, group=None):
        op, index = real_op(spec, device, group), specs.index(spec)
        nbytes = call_bytes(spec, ctx.world_size)

        def call():
            seen.append((index, nccl.decide(nbytes, int(spec.coll), disabled)))
            op()
        return call

    interleave.collective_op = asking
    times, _, counts = interleave.rank_interleaved(ctx, specs, library, reverse)
    return {"counts": counts, "seen": seen, "shapes": [list(t.shape) for t in times]}
