"""Times one collective on every rank the way nccl-tests does, and watches who arrives last.

Protocol (seed 003's, nccl-tests' vocabulary): ``warmup`` untimed iterations, then ``runs`` runs of
``iters`` timed iterations; a run's time is its mean, the reported time the median over runs with
the spread beside it. Each timed iteration starts from a barrier, lets an injected straggler sleep,
then records the rank's own arrival→completion time. Only the measured collective runs on the
measured backend: barriers and everything else the ranks say to each other go over a gloo side
group (:func:`join_group`), and each rank's times come back through the launcher (its own result
file), so ``NCCL_ALGO=Tree`` forces the all-reduce measured and nothing NCCL cannot run with it
(as nccl-tests, which runs nothing but the measured collective). Those per-rank execution times give both the
collective time (the slowest rank's view, i.e. including any wait for a late peer) and the
straggler analysis (:mod:`dynamiccl.profiler.measure.straggler_detection`) without needing
synchronised clocks.

Knobs reach NCCL through its environment variables, which it reads when a communicator is created;
every measurement here runs in fresh processes, so each gets its own communicator and settings.
Gloo has no such knobs: a gloo measurement is recorded as what it is, the backend's own algorithm.
With ``emulate_hosts`` the NCCL ranks share the GPUs present, each its own host on a loopback
network (:mod:`dynamiccl.profiler.measure.emulation`), and their records say so: NCCL saw one node per rank.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

from dynamiccl.plugin.policy_format import CONTEXT_ENV, POLICY_ENV
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths, knob_label
from dynamiccl.profiler.measure import emulation, straggler_detection
from dynamiccl.profiler.measure.launcher import RankContext, launch, set_environment
from dynamiccl.system.knobs import NCCL_KNOBS, Knobs, knob_fields, parse_enum
from dynamiccl.system.nccl import TUNER_PLUGIN_ENV, Collective

_ELEMENT_BYTES = 4  # float32, nccl-tests' default type


@dataclass(frozen=True)
@knob_fields
class CollectiveSpec:
    collective: str
    #: nccl-tests' size convention (allgather/reducescatter: the whole gathered buffer).
    nbytes: int
    backend: str = "gloo"
    warmup: int = 10
    iters: int = 100
    runs: int = 5
    straggler_rank: int | None = None
    straggler_delay_us: float = 0.0
    #: NCCL knobs (one field each, :data:`~dynamiccl.system.knobs.NCCL_KNOBS`, those after the
    #: channel count keyword-only); ``None`` leaves the choice to NCCL. Ignored (and recorded as
    #: such) on gloo.
    algorithm: str | None = None
    protocol: str | None = None
    channels: int | None = None

    def __post_init__(self) -> None:
        coll = Collective(parse_enum(Collective, self.collective))
        object.__setattr__(self, "collective", coll.name.lower())
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if min(self.iters, self.runs) < 1 or self.warmup < 0:
            raise ValueError("iters and runs must be at least 1 and warmup not negative")
        if self.straggler_delay_us < 0:
            raise ValueError("the injected straggler delay must not be negative")

    @property
    def coll(self) -> Collective:
        return Collective[self.collective.upper()]

    @property
    def knobs_applied(self) -> bool:
        return self.backend == "nccl"

    @property
    def config_label(self) -> str:
        """What it asks NCCL to run, as its record names it (``tree/simple/auto-ch``)."""
        return knob_label(self)

    @property
    def knobs(self) -> Knobs:
        """The NCCL knobs it names, as the knob table's types."""
        return Knobs.of(self)


#: What steers NCCL's choice in a process: the knobs, a tuner plugin and the policy it reads. A
#: measurement sets these itself, from its spec and the caller's explicit ``env``; a value left in
#: the caller's shell would otherwise make a run recorded as NCCL's default (or as one forced choice)
#: run something else.
STEERING_ENV = (*dict.fromkeys(env for k in NCCL_KNOBS for env in k.nccl.env), TUNER_PLUGIN_ENV,
                POLICY_ENV, CONTEXT_ENV)


def inherited_steering(environ: Mapping[str, str] | None = None) -> list[str]:
    """The :data:`STEERING_ENV` variables set in ``environ`` (default: this process's), which a
    measurement ignores: commands name them in a note."""
    environ = os.environ if environ is None else environ
    return [name for name in STEERING_ENV if environ.get(name)]


def nccl_env(spec: CollectiveSpec) -> dict[str, str]:
    """The NCCL environment that forces ``spec``'s knobs for the communicators a rank creates."""
    return spec.knobs.env()


def steered_env(spec: CollectiveSpec, env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """A rank's environment changes for ``spec``: every :data:`STEERING_ENV` variable unset (None),
    then ``env`` (a tuner plugin and its policy, say), then the spec's own knobs."""
    return {**dict.fromkeys(STEERING_ENV), **(env or {}), **nccl_env(spec)}


@dataclass
class CollectiveResult:
    spec: CollectiveSpec
    nranks: int
    time_us: float
    time_us_runs: tuple[float, ...]
    #: ``time_us`` less the persistent straggler's median delay (equal without one).
    time_after_straggler_us: float
    algbw_GBps: float
    busbw_GBps: float
    straggler: straggler_detection.StragglerReport | None
    #: Per-rank execution times ``[rank, iteration]`` over all timed iterations (µs).
    exec_us: np.ndarray = field(repr=False)
    #: Per-rank arrival instants ``[rank, iteration]`` on the host's monotonic clock (µs); only
    #: comparable across ranks that share one host.
    arrival_us: np.ndarray | None = field(default=None, repr=False)
    #: The launch of ranks that measured it (its records' launch id; "" = not known).
    launch: str = ""
    #: Rank 0's GPU model ("" on CPU).
    gpu: str = ""
    #: The ranks were emulated hosts sharing the GPUs present (NCCL saw one node per rank).
    emulated_hosts: bool = False
    #: The NCCL environment its ranks ran with where it is not the spec's forcing (a choice pinned
    #: call by call through the tuner plugin: the plugin, no NCCL_ALGO/NCCL_PROTO).
    env: dict[str, str] | None = None

    @property
    def algbw_with_wait_GBps(self) -> float:
        """size / time_us: the bandwidth the punctual ranks see, waiting for the straggler included."""
        return self.algbw_GBps * self.time_after_straggler_us / self.time_us if self.time_us else 0.0

    @property
    def busbw_with_wait_GBps(self) -> float:
        return self.busbw_GBps * self.time_after_straggler_us / self.time_us if self.time_us else 0.0

    @property
    def spread_pct(self) -> float:
        runs = self.time_us_runs
        return 100.0 * (max(runs) - min(runs)) / self.time_us if self.time_us else 0.0

    def to_json(self) -> dict[str, Any]:
        """The ``dynamiccl profile collective --json`` contract, plus context after the five keys."""
        s = self.straggler
        found = s is not None and s.rank is not None
        return {
            "time_us": self.time_us,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
            "straggler_rank": s.rank if found else None,
            "straggler_delay_us": s.delay_us if found else 0.0,
            "time_after_straggler_us": self.time_after_straggler_us,
            "algbw_with_wait_GBps": self.algbw_with_wait_GBps,
            "busbw_with_wait_GBps": self.busbw_with_wait_GBps,
            "time_us_runs": list(self.time_us_runs),
            "spread_pct": self.spread_pct,
            "collective": self.spec.collective,
            "nbytes": self.spec.nbytes,
            "nranks": self.nranks,
            "backend": self.spec.backend,
            "emulated_hosts": self.emulated_hosts,
            "config": self.to_record().config_label if self.spec.knobs_applied else "gloo default",
            "straggler": s.to_json() if s is not None else None,
            "spec": asdict(self.spec),
        }

    def to_record(self) -> MeasurementRecord:
        s, applied = self.straggler, self.spec.knobs_applied
        return MeasurementRecord(
            collective=self.spec.collective, nbytes=self.spec.nbytes, nranks=self.nranks,
            time_us=self.time_us, algbw_GBps=self.algbw_GBps, busbw_GBps=self.busbw_GBps,
            **{k.name: getattr(self.spec, k.name) if applied else None for k in NCCL_KNOBS},
            nnodes=self.nranks if self.emulated_hosts else 1,
            backend=self.spec.backend, source="runner", time_us_runs=self.time_us_runs,
            straggler_rank=self.spec.straggler_rank if self.spec.straggler_delay_us > 0 else None,
            straggler_delay_us=self.spec.straggler_delay_us if self.spec.straggler_rank is not None else 0.0,
            detected_straggler_rank=s.rank if s else None,
            detected_straggler_delay_us=s.delay_us if s and s.rank is not None else 0.0,
            env=(nccl_env(self.spec) if self.env is None else dict(self.env)) if applied else {},
            launch=self.launch, gpu=self.gpu,
            emulated_hosts=self.emulated_hosts)


def summarize(spec: CollectiveSpec, times: np.ndarray, shared_clock: bool = True,
              emulated_hosts: bool = False) -> CollectiveResult:
    """``times[rank, (exec, arrival), run, iteration]`` (µs) → nccl-tests numbers and stragglers.

    Like the simulator, the time is counted from the first arrival (what the punctual ranks wait)
    while the bandwidths use the time after the straggler arrived (what the collective itself
    took, as nccl-tests sees it with punctual ranks). Symmetric collectives find the straggler from
    execution times, which needs no common clock; broadcast and reduce cannot (the root leaves
    early by design), so they compare arrival instants and need ranks sharing one host's clock.
    """
    nranks = times.shape[0]
    exec_us = times[:, 0]
    slowest = exec_us.max(axis=0)  # [run, iteration]: the earliest arrival's view
    runs = tuple(float(x) for x in slowest.mean(axis=1))
    time_us = float(np.median(runs))
    flat = exec_us.reshape(nranks, -1)
    report = None
    if nranks > 1 and spec.coll not in (Collective.BROADCAST, Collective.REDUCE):
        report = straggler_detection.from_exec_times(flat.T)
    elif nranks > 1 and shared_clock:
        arrivals = times[:, 1].reshape(nranks, -1).T
        report = straggler_detection.from_arrivals(arrivals, collective_us=float(np.median(flat.min(axis=0))))
    delay = report.delay_us if report is not None and report.rank is not None else 0.0
    after = max(time_us - delay, 1e-3)
    algbw, busbw = bandwidths(spec.coll, spec.nbytes, nranks, after)
    arrivals = times[:, 1].reshape(nranks, -1) if shared_clock else None
    return CollectiveResult(spec, nranks, time_us, runs, after, algbw, busbw, report, flat, arrivals,
                            emulated_hosts=emulated_hosts)


def measure_collective(spec: CollectiveSpec, nprocs: int, timeout_s: float = 120.0,
                       emulate_hosts: bool = False) -> CollectiveResult:
    """Starts ``nprocs`` local ranks, measures, and summarizes on this side."""
    return measure_many([spec], nprocs, timeout_s, emulate_hosts)[0]


def measure_many(specs: list[CollectiveSpec], nprocs: int, timeout_s: float = 120.0,
                 emulate_hosts: bool = False, env: dict[str, str] | None = None
                 ) -> list[CollectiveResult]:
    """Several measurements with one start-up of the ranks per distinct NCCL environment, in the
    order the specs first name each environment.

    NCCL caches some knobs (channel limits) per process, so measurements under different NCCL
    knobs never share processes; gloo measurements always do. Each start-up is a launch with a
    fresh id in its results: what one launch measures shares that launch's state, so only
    measurements of separate launches tell how far a call's time moves from launch to launch.
    ``emulate_hosts`` runs the NCCL ranks as hosts of their own on the GPUs present; ``env`` is
    more environment for every NCCL rank (a tuner plugin and its policy, say); whatever else of
    :data:`STEERING_ENV` this process has set, its NCCL ranks run without. NCCL ranks that
    cannot be placed raise :class:`~dynamiccl.profiler.measure.emulation.EmulationError` before anything
    starts.
    """
    for spec in specs:
        if spec.straggler_rank is not None and not 0 <= spec.straggler_rank < nprocs:
            raise ValueError(f"straggler rank {spec.straggler_rank} is outside 0..{nprocs - 1}")
    groups: dict[tuple, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault((spec.backend, tuple(steered_env(spec, env).items())), []).append(i)
    if any(backend == "nccl" for backend, _ in groups):
        emulation.check_placement(nprocs, emulation.visible_gpus(), emulate_hosts)
    results: list[CollectiveResult | None] = [None] * len(specs)
    for (backend, steering), idx in groups.items():
        nccl = backend == "nccl"
        per_rank = launch("dynamiccl.profiler.measure.runner:rank_main", nprocs,
                          {"specs": [specs[i] for i in idx]}, timeout_s=timeout_s,
                          env=rank_environment(backend, dict(steering)),
                          emulate_hosts=emulate_hosts and nccl)
        launch_id = f"runner-{uuid.uuid4().hex[:12]}"
        for k, i in enumerate(idx):
            result = summarize(specs[i], np.stack([times[k] for times, _ in per_rank]),
                               emulated_hosts=emulate_hosts and nccl)
            result.launch, result.gpu = launch_id, per_rank[0][1]
            results[i] = result
    return [r for r in results if r is not None]


def rank_environment(backend: str, steering: Mapping[str, str | None]) -> dict[str, str | None]:
    """What a rank's environment changes to: the NCCL steering for NCCL ranks, no GPU for gloo."""
    return dict(steering) if backend == "nccl" else {"CUDA_VISIBLE_DEVICES": ""}


def rank_main(ctx: RankContext, specs: list[CollectiveSpec]) -> tuple[list[np.ndarray], str]:
    """Launcher entry: join the group, measure each spec; this rank's own times (the launcher
    brings every rank's back) and the GPU's model."""
    import torch.distributed as dist

    device, ctrl = join_group(ctx, specs[0].backend)
    try:
        out = [measure_in_group(spec, device, ctrl=ctrl) for spec in specs]
    finally:
        dist.destroy_process_group()
    return out, gpu_name(device)


def gpu_name(device: Any) -> str:
    """The model of ``device``'s GPU ("" on CPU)."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""


def join_group(ctx: RankContext, backend: str) -> tuple[Any, Any]:
    """Initializes the default process group for a launcher rank; returns the rank's device and the
    gloo side group for everything but the measured collectives (:func:`control_group`)."""
    import torch.distributed as dist

    device = _device(backend, ctx.gpu() if backend == "nccl" else 0)
    dist.init_process_group(backend, init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}))
    return device, control_group()


def control_group() -> Any:
    """A gloo group of every rank, for barriers and results: on the host, outside whatever NCCL
    knobs the measured communicator was forced to (its creation runs no collective: a store-based
    barrier)."""
    import torch.distributed as dist

    return dist.new_group(backend="gloo")


def gather_times(mine: np.ndarray, ctrl: Any) -> np.ndarray | None:
    """Every rank's times, stacked on rank 0 (None elsewhere), over the control group."""
    import torch.distributed as dist

    everyone: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(mine, everyone, dst=0, group=ctrl)
    return np.stack(everyone) if everyone is not None else None


def run_under_torchrun(spec: CollectiveSpec) -> CollectiveResult | None:
    """For ``torchrun … dynamiccl profile collective``: the group comes from ``env://``."""
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if spec.backend == "nccl" and emulation.visible_gpus() <= local:
        raise RuntimeError(f"the nccl backend needs a GPU per local rank; local rank {local} found "
                           f"{emulation.visible_gpus()} GPU(s); use --backend gloo on CPU")
    if spec.backend == "nccl":  # NCCL reads its knobs when this process's first communicator starts
        set_environment(steered_env(spec))
    device = _device(spec.backend, local)
    dist.init_process_group(spec.backend, **({"device_id": device} if spec.backend == "nccl" else {}))
    try:
        ctrl = control_group()
        exec_us = gather_times(measure_in_group(spec, device, ctrl=ctrl), ctrl)
    finally:
        dist.destroy_process_group()
    one_host = os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE")
    return summarize(spec, exec_us, shared_clock=one_host) if exec_us is not None else None


def _device(backend: str, gpu: int) -> Any:
    """CPU for gloo; GPU ``gpu`` (made the current device) for NCCL."""
    import torch

    if backend != "nccl":
        return torch.device("cpu")
    torch.cuda.set_device(gpu)
    return torch.device("cuda", gpu)


def measure_in_group(spec: CollectiveSpec, device: Any, group: Any = None, ctrl: Any = None
                     ) -> np.ndarray:
    """Runs the protocol in an initialized group: the collective on ``group`` (default: the default
    group), barriers on ``ctrl`` (default: the default group too).

    This rank's ``[2, run, iteration]``: its own execution time of each collective and its arrival
    instant on the host's monotonic clock (µs).
    """
    op = collective_op(spec, device, group)
    runs = [timed_iterations(op, spec, device, ctrl, spec.warmup if r == 0 else 0)
            for r in range(spec.runs)]
    return np.stack(runs, axis=1)


def timed_iterations(op: Any, spec: CollectiveSpec, device: Any, ctrl: Any, warmup: int
                     ) -> np.ndarray:
    """``warmup`` untimed then ``spec.iters`` timed calls of ``op``, each from a barrier on ``ctrl``
    with this rank's GPU idle; ``[2, iteration]``: execution times and arrival instants (µs)."""
    import torch
    import torch.distributed as dist

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sleep_s = spec.straggler_delay_us / 1e6 if spec.straggler_rank == dist.get_rank() else 0.0
    times = np.zeros((2, spec.iters))
    for i in range(warmup + spec.iters):
        sync()
        dist.barrier(group=ctrl)
        if sleep_s:
            time.sleep(sleep_s)
        t0 = time.perf_counter_ns()
        op()
        sync()
        t1 = time.perf_counter_ns()
        if i >= warmup:
            times[:, i - warmup] = (t1 - t0) / 1e3, t0 / 1e3
    return times


def call_bytes(spec: CollectiveSpec, world: int) -> int:
    """The bytes NCCL is told a call of ``spec`` moves (its ``nBytes``: the whole gathered buffer
    for all-gather and reduce-scatter), after rounding to whole float32 elements per rank."""
    count = spec.nbytes // _ELEMENT_BYTES
    if spec.coll in (Collective.ALLGATHER, Collective.REDUCESCATTER):
        count = count // world * world
    return count * _ELEMENT_BYTES


def collective_op(spec: CollectiveSpec, device: Any, group: Any = None) -> Any:
    """A zero-argument callable running the collective once on preallocated buffers."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    count = spec.nbytes // _ELEMENT_BYTES
    coll = spec.coll
    split = coll in (Collective.ALLGATHER, Collective.REDUCESCATTER)
    if count < (world if split else 1):
        raise ValueError(f"{spec.nbytes} B is too small: {coll.name.lower()} on {world} ranks needs "
                         f"at least {_ELEMENT_BYTES * (world if split else 1)} B")
    per_rank = count // world
    buf = torch.ones(per_rank * world if split else count, dtype=torch.float32, device=device)
    part = torch.ones(per_rank, dtype=torch.float32, device=device)
    if coll == Collective.ALLREDUCE:
        return lambda: dist.all_reduce(buf, group=group)
    if coll == Collective.BROADCAST:
        return lambda: dist.broadcast(buf, src=0, group=group)
    if coll == Collective.REDUCE:
        return lambda: dist.reduce(buf, dst=0, group=group)
    if coll == Collective.ALLGATHER:
        return lambda: dist.all_gather_into_tensor(buf, part, group=group)
    return lambda: dist.reduce_scatter_tensor(part, buf, group=group)

