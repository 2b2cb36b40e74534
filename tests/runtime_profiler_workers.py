"""Rank functions for the runtime with NCCL's profiler, rehearsed on gloo (loaded by file path).

Gloo never loads NCCL or its profiler, so each rank plays NCCL's part towards the real plugin in
its own process: the tuner's (``nccl_tuner_standin``: what NCCL would run for a size, pins
included) and the profiler's (``nccl_profiler_standin``: each all-reduce's launch when the rank
calls it, then its "GPU" time). The GPU times are synthetic and far from gloo's own (milliseconds
against gloo's tenths): a number the runtime acts on shows which source it came from.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: Synthetic GPU time per call (µs) of NCCL's own choice; a pinned Simple-protocol candidate runs
#: in FAST of it, any other pin in SLOW of it; every call jittered by up to JITTER.
BASE_US, FAST, SLOW, JITTER = 5000.0, 0.7, 1.2, 0.02


def profiled_runtime(ctx, tune_steps: int, nbytes: int, detect_steps: int, late_rank: int,
                     late_ms: float, library: str, rings: str) -> dict:
    """Both rehearsals in one gloo job (one start-up of the ranks): the online tuner, then
    straggler detection, each with a runtime of its own."""
    import torch.distributed as dist

    os.environ.update({"NCCL_TUNER_PLUGIN": library, "NCCL_PROFILER_PLUGIN": library,
                       "DYNAMICCL_PROFILE": rings})
    dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))
    out = {"tuning": _tune(ctx, tune_steps, nbytes, library),
           "history": _detect(ctx, detect_steps, late_rank, late_ms, library)}
    dist.destroy_process_group()
    return out


def _tune(ctx, steps: int, nbytes: int, library: str) -> dict:
    """The runtime's online tuner on one size bin, its trials timed by the profiler stand-in."""
    import numpy as np
    import torch
    from nccl_profiler_standin import NcclProfilerStandIn
    from nccl_tuner_standin import NcclTunerStandIn

    tuner_standin = NcclTunerStandIn(library, ctx.world_size)  # no policy: NCCL decides unless pinned
    nccl = NcclProfilerStandIn(library, 0xC0FFEE, ctx.world_size, ctx.rank)
    from dynamiccl.agents.policies.online import CoordinateDescentTuner
    from dynamiccl.agents.policies.runtime_tuner import RuntimeTunerAdapter
    from dynamiccl.runtime import Runtime, RuntimeConfig
    from dynamiccl.runtime.plugin_control import PluginControl
    from dynamiccl.system.nccl import Algorithm, Collective, Protocol
    from dynamiccl.system.topology import load_topology

    topology = load_topology("dgx_h100").resized(nodes=1, gpus_per_node=ctx.world_size)
    tuner = RuntimeTunerAdapter(CoordinateDescentTuner(budget=4, deployable=True), topology, budget=4)
    rt = Runtime(RuntimeConfig(measure_every=1000, tune_start_step=2, tune_steps_per_trial=1),
                 tuner=tuner, control=PluginControl())
    rng = np.random.default_rng(ctx.rank)
    t = torch.full((nbytes // 4,), float(ctx.rank))
    for _ in range(steps):
        for _ in range(4):  # four calls of the bin per step
            pinned = tuner_standin.decide(nbytes)
            algo, proto = (Algorithm(pinned[0]), Protocol(pinned[1])) if pinned else \
                (Algorithm.TREE, Protocol.LL)
            scale = 1.0 if pinned is None else FAST if proto == Protocol.SIMPLE else SLOW
            call = nccl.launch(Collective.ALLREDUCE, nbytes // 4, algo, proto, 1)
            rt.all_reduce(t).wait()
            gpu_us = BASE_US * scale * (1 + JITTER * rng.uniform(-1, 1))
            nccl.complete(call, 1, time.time_ns(), int(gpu_us * 1e3))
        rt.end_step()
    events = [(e.step, e.kind, e.candidate, e.ended) for e in rt.tuning_log]
    profiled = rt._profiled()
    nccl.finalize()
    return {"events": events, "profiled": profiled, "done": rt.tuning.active is None}


def _detect(ctx, steps: int, late_rank: int, late_ms: float, library: str) -> list:
    """A persistent straggler found from the ranks' GPU times of each step's first all-reduce,
    with the runtime's own arrival timing stubbed to report no lateness at all. As NCCL's kernels
    do, the stand-in's punctual ranks wait inside the first all-reduce for the late rank's data:
    their GPU time is the late rank's plus its lateness."""
    import torch
    from nccl_profiler_standin import NcclProfilerStandIn

    from dynamiccl.runtime import Runtime, RuntimeConfig
    from dynamiccl.system.nccl import Algorithm, Collective, Protocol

    nccl = NcclProfilerStandIn(library, 0xBEEF, ctx.world_size, ctx.rank)
    rt = Runtime(RuntimeConfig(measure_every=2, window=3, stragglar=False,
                               straggler_threshold_us=late_ms * 500))
    own_read = rt._read_timed_step

    def read_without_own_arrivals() -> None:  # the stub: the runtime's own timing sees nothing
        own_read()
        rt._arrival_us = 0.0

    rt._read_timed_step = read_without_own_arrivals
    buckets = [torch.full((n,), 1.0) for n in (4096, 1024)]
    for _ in range(steps):
        if ctx.rank == late_rank:
            time.sleep(late_ms / 1e3)
        for i, b in enumerate(buckets):
            done = rt.all_reduce(b)  # the first bucket begins the step, then NCCL launches it
            call = nccl.launch(Collective.ALLREDUCE, b.numel(), Algorithm.RING, Protocol.SIMPLE, 1)
            done.wait()
            waited_ms = late_ms if i == 0 and ctx.rank != late_rank else 0.0
            nccl.complete(call, 1, time.time_ns(), int(1e6 + waited_ms * 1e6))
        rt.end_step()
    history = [(h.step, h.state.straggler, round(h.state.delay_us)) for h in rt.history]
    nccl.finalize()
    return history
