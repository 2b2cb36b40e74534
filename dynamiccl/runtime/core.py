"""The in-job runtime: one object per process, one DDP communication hook, decisions every rank shares.

Per gradient bucket it runs one of three paths:

* ``nccl`` — the backend's own all-reduce, issued asynchronously as DDP's default hook does (with
  NCCL, the tuner plugin steers it and ``ReduceOp.AVG`` averages inside it, so nothing else is added
  on this path; gloo has no ``AVG``, and the bucket is divided first, exactly as PyTorch's hook);
* ``stragglar`` — seed 004's all-reduce (:mod:`dynamiccl.runtime.stragglar`) for a persistent
  straggler, on the step's first bucket, the one that waits for the straggler (later buckets find
  the ranks aligned again, where its extra reduce-scatter would only cost);
* ``hierarchical`` — reduce-scatter in the node, all-reduce across nodes on 1/k of the data,
  all-gather in the node (:mod:`dynamiccl.runtime.hierarchical`).

Which one is a decision every rank shares. With ``RuntimeConfig(topology=...)`` rank 0 asks the
simulator, per bucket-size bin, which path is fastest on that system at the agreed straggler delay
and c2c (:mod:`dynamiccl.runtime.paths`), and broadcasts the table with the agreed state; until the
first decision every bucket runs ``nccl``. Without a topology there is no model to ask, and fixed
rules stand in: StragglAR for the first bucket whenever a persistent straggler is agreed and its
schedule moves fewer bytes than a ring at this world size (``matchings.worthwhile``), the
hierarchical path for buckets of ``hierarchical_min_bytes`` or more whenever ``ranks_per_node`` is
given, NCCL's all-reduce otherwise.

Control traffic runs after a step's last bucket, on every rank at the same point of the collective
sequence, over a gloo group (CPU tensors; the default group when it is gloo), where the ranks are
aligned already so it waits for nobody. Every ``measure_every`` steps each rank all-gathers how long
after the previous step's last all-reduce completed (a moment common to all ranks, so no clocks need
to agree) its first bucket of this step was ready, and its c2c ratio, both timed where the work
runs (:mod:`dynamiccl.clocks`: on a GPU CUDA events, since NCCL's host callbacks run when work is
queued, long before it completes); rank 0 updates the decision window and broadcasts the
decision, and every rank applies it from the next step on and tells the plugin the new context. Two
tiny collectives per ``measure_every`` steps, and the completion times and comm time are marked only
on the step before a measurement (read at the measurement: on a GPU the host waits there until its
stream reached that step's first bucket): on the other steps the ``nccl`` path is DDP's default
hook and nothing more. Online tuning (:mod:`dynamiccl.runtime.tuning`) uses the same boundary.
Nothing any rank acts on is a value it measured alone.

The StragglAR and hierarchical paths average where they complete a sum (a punctual rank divides one
chunk, a hierarchical rank its 1/k shard), not in a pass over the bucket. They complete inside the
hook (they are sequences of collectives whose later steps depend on earlier ones), so their buckets
do not overlap with the rest of the backward pass the way the asynchronous ``nccl`` path does; with
one bucket late anyway because of a straggler, that overlap is what the straggler already took away.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dynamiccl.clocks import Clock, clock_for
from dynamiccl.runtime.decide import DecisionWindow, JobState
from dynamiccl.runtime.hierarchical import HierarchicalAllReduce
from dynamiccl.runtime.matchings import worthwhile
from dynamiccl.runtime.paths import PathOptions, PathTable, fit_topology, predict, size_bin
from dynamiccl.runtime.plugin_control import Pin, PluginControl
from dynamiccl.runtime.stragglar import StragglAR
from dynamiccl.runtime.timing import ProfiledTimes, arrivals, profiled_times, trimmed_mean
from dynamiccl.runtime.tuning import ACTION_LENGTH, OnlineTuner, SizeBin, Tuning, TuningEvent
from dynamiccl.system.topology import Topology, load_topology

log = logging.getLogger(__name__)


@dataclass
class RuntimeConfig:
    """Knobs of the runtime; the defaults suit a training job of hundreds of steps or more."""

    #: Steps between two arrival/c2c measurements (and decisions).
    measure_every: int = 10
    #: Measurements a decision looks back over.
    window: int = 5
    #: A rank counts as late in a measurement when it arrived this much after the next-latest.
    straggler_threshold_us: float = 1000.0
    #: Share of the window in which the same rank must be late to be a persistent straggler.
    majority: float = 0.6
    #: The job's system: a preset name or topology YAML file (what ``--topology`` takes) or a
    #: Topology, sized to the job's ranks. With it each bucket's path is the simulator's choice;
    #: without it the fixed rules of this module's docstring apply.
    topology: Topology | str | Path | None = None
    #: Allow StragglAR for a persistent straggler (only where its schedule moves fewer bytes than a
    #: ring, see ``matchings.worthwhile``).
    stragglar: bool = True
    #: Ranks per node for the hierarchical path; None: the topology's node size, without a topology
    #: no hierarchical path.
    ranks_per_node: int | None = None
    #: Pipelined pieces of the hierarchical path (seed 000's active chunks).
    hierarchical_chunks: int = 1
    #: Without a topology, buckets smaller than this stay on the backend's all-reduce on the
    #: hierarchical path.
    hierarchical_min_bytes: int = 1 << 20
    #: Online tuning: first step, steps per trial, and the trial budget per size bin.
    tune_start_step: int = 3
    tune_steps_per_trial: int = 2
    tune_max_trials: int = 16

    def __post_init__(self) -> None:
        for name in ("measure_every", "window", "hierarchical_chunks", "tune_steps_per_trial"):
            if getattr(self, name) < 1:
                raise ValueError(f"RuntimeConfig.{name} must be at least 1, got {getattr(self, name)}")
        if isinstance(self.topology, str | Path):
            self.topology = load_topology(self.topology)


@dataclass
class StepRecord:
    """One control boundary as this rank saw it (tests compare these across ranks)."""

    step: int
    state: JobState
    paths: dict[str, int] = field(default_factory=dict)
    #: The per-bin path table every rank applies from here on (None: the fixed rules).
    table: PathTable | None = None


class Runtime:
    """DDP comm-hook state; create it on every rank after ``init_process_group``, before training."""

    def __init__(self, config: RuntimeConfig | None = None, *, tuner: OnlineTuner | None = None,
                 control: PluginControl | None = None, times: ProfiledTimes | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("create the runtime after torch.distributed.init_process_group")
        self.config = config or RuntimeConfig()
        self.control = control
        #: NCCL's profiler's per-call GPU times of this process when it is loaded (the default:
        #: from the environment), else None: the runtime times collectives itself.
        self.times = times if times is not None else profiled_times()
        self._trial_calls = 0
        self._step_ns: list[int] = []  # realtime at the last two steps' beginnings
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.ctrl = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        self.window = DecisionWindow(self.config.window, self.config.straggler_threshold_us,
                                     self.config.majority)
        self.job_state = JobState()
        self.stragglar = StragglAR()
        k = self.config.ranks_per_node
        self.topology: Topology | None = None
        if self.config.topology is not None:
            assert isinstance(self.config.topology, Topology)
            self.topology = fit_topology(self.config.topology, self.world, k)
            k = self.topology.gpus_per_node
        self.hierarchical = (HierarchicalAllReduce(k, self.config.hierarchical_chunks)
                             if k and k < self.world else None)
        self.path_options = PathOptions(self.config.stragglar and worthwhile(self.world),
                                        self.config.hierarchical_chunks if self.hierarchical else None)
        self.table: PathTable | None = PathTable() if self.topology is not None else None
        self._sizes: dict[int, int] = {}  # rank 0 with a topology: size bin -> largest bucket seen
        self.tuner = tuner
        self.tuning: Tuning | None = None
        self.tuning_log: list[TuningEvent] = []
        self.history: list[StepRecord] = []
        self.step = 0
        self._in_step = False
        self._clock: Clock | None = None  # the first bucket's device's (dynamiccl.clocks)
        self._timing: _StepMarks | None = None  # the step being timed (the next one measures)
        self._ended: tuple[_StepMarks, Any] | None = None  # the timed step, and the next begin
        self._arrival_us = 0.0
        self._c2c = 0.0
        self._bucket_bytes: list[int] = []
        self._trial_us: list[float] = []
        self._paths: dict[str, int] = {}

    # ---- the hook -----------------------------------------------------------------------------
    def hook(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's contract: average the bucket over ranks, return a future of the result."""
        fut = self._reduce(bucket.buffer(), average=True)
        if bucket.is_last():
            self.end_step()
        return fut

    def all_reduce(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        """Sum over all ranks along the agreed path; also usable without DDP (call :meth:`end_step`
        after a step's last call)."""
        return self._reduce(tensor, average=False)

    def _reduce(self, tensor: torch.Tensor, average: bool) -> torch.futures.Future[torch.Tensor]:
        if self._clock is None:
            self._clock = clock_for(tensor.device)
        clock = self._clock
        first = not self._in_step
        if first:
            self.begin_step()
        nbytes = tensor.numel() * tensor.element_size()
        path = self.path_for(nbytes, first)
        self._bucket_bytes.append(nbytes)
        self._paths[path] = self._paths.get(path, 0) + 1
        timed = self._timed(nbytes)
        self._trial_calls += timed and path == "nccl"
        if timed and path == "nccl" and self._profiled():
            timed = False  # NCCL's profiler times it: the asynchronous path, as any bucket
        marks = self._timing  # this step's bucket completions are timed
        start = clock.mark() if marks is not None or timed else None
        divisor = self.world if average else 1
        if path == "nccl" and not timed:
            # DDP's default hook, step for step: divide, issue, one callback that unwraps the
            # result (NCCL averages inside the all-reduce instead: no pass of our own). Each further
            # callback costs a hand-over of the GIL from the backend's thread (about 0.1 ms per
            # bucket on a busy 2-core machine), so completions are only marked on the step before
            # a measurement, the one step whose timings are used.
            fut = backend_all_reduce(tensor, divisor, async_op=True).get_future()
            if marks is not None:
                return fut.then(lambda f: _done(f.value()[0], marks, start, clock))
            return fut.then(_unwrap)
        if path == "nccl":
            backend_all_reduce(tensor, divisor)
        elif path == "stragglar":
            assert self.job_state.straggler is not None
            self.stragglar.all_reduce(tensor, self.job_state.straggler, divisor)
        else:
            assert self.hierarchical is not None
            self.hierarchical.all_reduce(tensor, divisor)
        end = clock.mark() if start is not None else None
        if timed:  # the collective's own time where it runs (on a GPU: not the host's queueing)
            clock.settle(end)
            self._trial_us.append(clock.us(end, start))
        if marks is not None:
            marks.comm.append((start, end))
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(tensor)
        return fut

    def path_for(self, nbytes: int, first: bool = True) -> str:
        """Which implementation a bucket of ``nbytes`` (the step's first or not) runs now."""
        if self.table is not None:
            return self.table.path(nbytes, first)
        if first and self._stragglar_on():
            return "stragglar"
        if self.hierarchical is not None and nbytes >= self.config.hierarchical_min_bytes:
            return "hierarchical"
        return "nccl"

    def _stragglar_on(self) -> bool:
        return self.job_state.straggler is not None and self.path_options.stragglar

    def _profiled(self) -> bool:
        return self.times is not None and self.times.recording

    def _timed(self, nbytes: int) -> bool:
        state = self.tuning.active if self.tuning is not None else None
        return state is not None and nbytes in state.size_bin

    # ---- step boundaries ----------------------------------------------------------------------
    def begin_step(self) -> None:
        """A step's first bucket: only marks of this rank's own (the straggler may still be on its
        way); what they say is read at the control point."""
        self._step_ns = [*self._step_ns[-1:], time.time_ns()]
        self.step += 1
        every = self.config.measure_every
        timed = self.step % every == every - 1
        if self._timing is not None or timed:
            assert self._clock is not None
            now = self._clock.mark()
            if self._timing is not None:  # the step that just ended was timed
                self._ended, self._timing = (self._timing, now), None
            if timed:
                self._timing = _StepMarks(now)
        self._in_step = True

    def end_step(self) -> None:
        """After a step's last bucket: the control point, at the same place on every rank."""
        self._in_step = False
        if self.topology is not None and self.rank == 0:
            for nbytes in self._bucket_bytes:
                b = size_bin(nbytes)
                self._sizes[b] = max(self._sizes.get(b, 0), nbytes)
        if self.step % self.config.measure_every == 0:
            self._measure_and_decide()
        if self.tuner is not None:
            self._tune_boundary()
        self._bucket_bytes = []

    def _read_timed_step(self) -> None:
        """The timed step's arrival and c2c from its marks (on a GPU: waits until the stream has
        reached this step's first bucket, once per measurement).

        Arrival is the time from the previous step's last bucket completing (a moment common to
        all ranks, since no rank's all-reduce completes before every rank contributed) to this
        step's first bucket being ready; c2c is the step's time outside its buckets' all-reduces
        over the time inside them."""
        if self._ended is None or self._clock is None:
            return
        (marks, now), clock = self._ended, self._clock
        self._ended = None
        clock.settle(now)
        for _, end in marks.comm:
            clock.settle(end)
        step_us = clock.us(now, marks.begin)
        comm_us = sum(clock.us(end, start) for start, end in marks.comm)
        self._c2c = max(step_us - comm_us, 0.0) / max(comm_us, 1e-3)
        last_done = max((clock.us(end, marks.begin) for _, end in marks.comm), default=None)
        self._arrival_us = 0.0 if last_done is None else max(step_us - last_done, 0.0)

    def _measure_and_decide(self) -> None:
        self._read_timed_step()
        mine = torch.tensor([self._arrival_us, self._c2c, *self._first_call()], dtype=torch.float64)
        everyone = torch.empty(self.world * 4, dtype=torch.float64)
        dist.all_gather_into_tensor(everyone, mine, group=self.ctrl)
        if self.rank == 0:
            table = everyone.view(self.world, 4)
            self.window.add(arrivals(table[:, 0].tolist(), table[:, 2].tolist(), table[:, 3].tolist()),
                            table[:, 1].tolist())
            state = self.window.decide()
            encoded = torch.cat([state.encode(), self._predict(state)])
        else:
            encoded = torch.empty(3 + len(PathTable.encode_none()), dtype=torch.float64)
        dist.broadcast(encoded, src=0, group=self.ctrl)
        self._apply(JobState.decode(encoded[:3]), PathTable.decode(encoded[3:]))

    def _first_call(self) -> tuple[float, float]:
        """(NCCL's seq, GPU time in µs) of the previous step's first all-reduce, from NCCL's
        profiler; (-1, 0) without it."""
        found = (self.times.first_call(*self._step_ns) if self._profiled() and len(self._step_ns) == 2
                 else None)
        return (float(found[0]), float(found[1])) if found else (-1.0, 0.0)

    def _predict(self, state: JobState) -> torch.Tensor:
        """Rank 0: the simulator's path per size bin at the agreed state (encoded; none without a
        topology)."""
        if self.topology is None:
            return PathTable.encode_none()
        return predict(self.topology, self._sizes, state.straggler is not None, state.delay_us,
                       state.c2c, self.path_options).encode()

    def _apply(self, state: JobState, table: PathTable | None) -> None:
        previous, self.job_state, self.table = self.job_state, state, table
        if self._stragglar_on():
            assert state.straggler is not None
            self.stragglar.prepare(state.straggler)
        if self.control is not None and state.context != previous.context:
            self._set_context(*state.context)
        self.history.append(StepRecord(self.step, state, dict(self._paths), table))
        self._paths = {}

    def _set_context(self, straggler: str, c2c: str) -> None:
        """The measured slice, else the same straggler bucket without c2c (a policy exported without
        c2c slices), else the plugin keeps its slice. Every rank runs this with the same inputs."""
        for candidate in dict.fromkeys([(straggler, c2c), (straggler, "none")]):
            if self.control is not None and self.control.set_context(*candidate):
                return
        log.info("the policy has no slice for straggler=%s (c2c=%s); the plugin keeps its current one",
                 straggler, c2c)

    # ---- online tuning ------------------------------------------------------------------------
    def _tune_boundary(self) -> None:
        cfg = self.config
        since = self.step - cfg.tune_start_step
        if since < 0 or since % cfg.tune_steps_per_trial:
            return
        if self.tuning is None:
            box: list[Any] = [sorted({SizeBin.of(b) for b in self._bucket_bytes},
                                     key=lambda b: -b.min_bytes)]
            dist.broadcast_object_list(box, src=0, group=self.ctrl)
            assert self.tuner is not None
            self.tuning = Tuning(self.tuner, box[0], cfg.tune_max_trials)
            agreed = None
        else:
            state = self.tuning.active
            if state is None:
                return
            times = (self.times.take(state.size_bin.__contains__, self._trial_calls)
                     if self._profiled() else self._trial_us)
            local = torch.tensor([trimmed_mean(times)], dtype=torch.float64)
            dist.all_reduce(local, op=dist.ReduceOp.MAX, group=self.ctrl)
            agreed = float(local.item())
        self._trial_us, self._trial_calls = [], 0
        state = self.tuning.active
        if state is None:
            return
        ended = None if agreed is None else (state.size_bin, state.current, agreed)
        action = (self.tuning.next_action(agreed) if self.rank == 0
                  else torch.empty(ACTION_LENGTH, dtype=torch.int64))
        dist.broadcast(action, src=0, group=self.ctrl)
        kind, candidate = self.tuning.apply(action)
        self._pin(state.size_bin, candidate)
        self.tuning_log.append(TuningEvent(self.step, state.size_bin, kind, candidate, ended))

    def _pin(self, size_bin: SizeBin, candidate: Any) -> None:
        if self.control is None:
            return
        if candidate is None:
            self.control.unpin(size_bin.collective, size_bin.min_bytes, size_bin.max_bytes)
        else:
            self.control.pin(Pin(size_bin.collective, size_bin.min_bytes, size_bin.max_bytes,
                                 candidate))


def backend_all_reduce(tensor: torch.Tensor, divisor: int, async_op: bool = False) -> Any:
    """The ``nccl`` path: the backend's all-reduce of the sum divided by ``divisor``. NCCL's ``AVG``
    for a CUDA tensor, where the division rides inside the reduction; elsewhere (gloo has no
    ``AVG``) the division first, as PyTorch's own all-reduce hook does it."""
    if divisor == 1:
        return dist.all_reduce(tensor, async_op=async_op)
    if tensor.is_cuda and "nccl" in dist.get_backend():
        return dist.all_reduce(tensor, op=dist.ReduceOp.AVG, async_op=async_op)
    tensor.div_(divisor)
    return dist.all_reduce(tensor, async_op=async_op)


def _unwrap(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
    return fut.value()[0]


@dataclass
class _StepMarks:
    """A timed step's marks: its begin (first bucket ready), each bucket's issue and completion."""

    begin: Any
    comm: list[tuple[Any, Any]] = field(default_factory=list)


def _done(tensor: torch.Tensor, marks: _StepMarks, start: Any, clock: Clock) -> torch.Tensor:
    """A timed step's asynchronous bucket completed (on a GPU: the callback runs on a stream that
    waits for the work, so the mark lands where the all-reduce ends)."""
    marks.comm.append((start, clock.mark()))
    return tensor
