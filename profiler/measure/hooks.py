"""A DDP communication hook and step callback that measure stragglers and C2C in a real job.

It does DDP's own gradient averaging (all-reduce, divide by world size) and adds two timestamps
per bucket, plus two per step, so it can stay on in production. Timestamps are host clocks on CPU
and CUDA events on GPU (:mod:`dynamiccl.clocks`: an NCCL future's callback runs when the work is
*queued*, so only an event on the stream marks its completion); events are read once per step, at
the step's end. The two kinds never meet: a step's marks all come from one clock. Given the job's
``device`` the probe uses its clock from the first step; otherwise it learns the device from the
first bucket, and the step that bucket ran in (begun before anything said which clock) is left out
of the report.

Usage::

    probe = CommProbe(device=torch.device("cuda", local_rank))
    ddp_model.register_comm_hook(probe, probe.allreduce_hook)
    for batch in loader:
        with probe.step():
            loss = ddp_model(batch).sum(); loss.backward(); optimizer.step()
    report = probe.report()  # a collective: every rank calls it
"""

# No ``from __future__ import annotations`` here: DDP checks the hook's annotations at run time
# and accepts only the real ``dist.GradBucket`` / ``torch.futures.Future[torch.Tensor]`` objects.
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dynamiccl.clocks import Clock, clock_for
from dynamiccl.profiler.measure import straggler_detection
from dynamiccl.profiler.measure.c2c import StepBreakdown, step_breakdown


@dataclass(frozen=True)
class ProbeReport:
    steps: int
    #: Who arrives last at the step's first gradient all-reduce (None with a single rank).
    straggler: straggler_detection.StragglerReport | None
    #: Per rank: medians over the steps of the step breakdown.
    per_rank: list[dict[str, float]]

    @property
    def compute_to_comm(self) -> float:
        return float(np.median([r["compute_to_comm"] for r in self.per_rank]))

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "compute_to_comm": self.compute_to_comm,
                "straggler": self.straggler.to_json() if self.straggler else None,
                "per_rank": self.per_rank}


@dataclass(frozen=True)
class _Step:
    first_exec_us: float
    breakdown: StepBreakdown


class CommProbe:
    """DDP comm-hook state; see the module docstring for use."""

    def __init__(self, group: dist.ProcessGroup | None = None, window: int = 1000,
                 device: torch.device | str | None = None) -> None:
        self.group = group
        self._steps: deque[_Step] = deque(maxlen=window)
        self._pending: list[tuple[Any, Any, int]] = []
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._clock: Clock | None = clock_for(self._device) if device is not None else None

    def allreduce_hook(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buf = bucket.buffer()
        if self._clock is None or buf.device.type != self._device.type:
            self._device = buf.device
            self._clock = clock_for(buf.device)
        clock = self._clock
        start = clock.mark()
        world = dist.get_world_size(self.group)
        nbytes = buf.numel() * buf.element_size()
        fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()

        def done(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            self._pending.append((start, clock.mark(), nbytes))
            return f.value()[0].div_(world)

        return fut.then(done)

    @contextmanager
    def step(self) -> Iterator[None]:
        """Wrap one training step (forward, backward, optimizer) in this."""
        if self._clock is None:
            self._clock = clock_for(self._device)
        clock = self._clock
        self._pending = []
        begin = clock.mark()
        yield
        end = clock.mark()
        clock.settle(end)
        pending, self._pending = self._pending, []
        if not pending or self._clock is not clock:
            return  # no bucket, or the buckets' marks are another clock's than this step's origin
        comm = [(clock.us(a, begin), clock.us(e, begin), b) for a, e, b in pending]
        first = min(comm)
        self._steps.append(_Step(first[1] - first[0], step_breakdown(0.0, clock.us(end, begin), comm)))

    def report(self) -> "ProbeReport":
        """Gathers every rank's steps (a collective call) and analyses them."""
        world = dist.get_world_size(self.group)
        mine = np.array([[s.first_exec_us, s.breakdown.step_us, s.breakdown.compute_us,
                          s.breakdown.comm_us, s.breakdown.exposed_comm_us]
                         for s in self._steps], dtype=np.float64).reshape(-1, 5)
        n = torch.tensor([len(mine)], device=self._device)
        dist.all_reduce(n, op=dist.ReduceOp.MIN, group=self.group)
        steps = int(n.item())
        local = torch.tensor(mine[len(mine) - steps:], device=self._device)
        gathered = torch.empty((world * steps, 5), dtype=torch.float64, device=self._device)
        dist.all_gather_into_tensor(gathered, local, group=self.group)
        data = gathered.cpu().numpy().reshape(world, steps, 5)
        report = (straggler_detection.from_exec_times(data[:, :, 0].T)
                  if world > 1 and steps > 0 else None)
        per_rank = [_medians(data[r]) for r in range(world)]
        return ProbeReport(steps, report, per_rank)


def _medians(rows: np.ndarray) -> dict[str, float]:
    if not len(rows):
        return {"step_us": 0.0, "compute_us": 0.0, "comm_us": 0.0, "exposed_comm_us": 0.0,
                "compute_to_comm": float("inf")}
    med = np.median(rows, axis=0)
    b = StepBreakdown(float(med[1]), float(med[3]), float(med[4]), float(med[2]), 0)
    out = {k: v for k, v in asdict(b).items() if k != "comm_bytes"}
    out["compute_to_comm"] = b.compute_to_comm
    return out
