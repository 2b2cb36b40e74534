"""The ``live`` backend: every step's collective runs on real ranks through the profiler's runner.

A :class:`~dynamiccl.profiler.measure.session.RankSession` keeps ``nprocs`` local ranks up for the whole
episode. Each step sends the chosen action to rank 0, which broadcasts it, so every rank runs the
same configuration; the step's result is the measured time of that configuration and of NCCL's own
choice measured right after it on the same ranks (the reward's reference), plus the straggler the
ranks *observed* (detected from their timings, not copied from the scenario).

On ``nccl`` the action's algorithm, protocol and channel count become a communicator's NCCL
settings; an action NCCL cannot be told to run (StragglAR, a scheduled ring-over-ring) or one that
is invalid in the scenario runs NCCL's default instead, as the environment expects. On ``gloo``
(CPU, tests, machines without GPUs) no NCCL knob exists, so both measurements run gloo's own
algorithm: the pipeline, the timing and the straggler observation are real, the knob effect is not.
A scenario's straggler is injected (that rank sleeps before each collective) unless
``inject_stragglers=False``, for systems whose stragglers are real. ``emulate_hosts`` runs more
NCCL ranks than GPUs, each its own host on a loopback network (the scenario's system should then
be one GPU per node, joined by a socket network, as NCCL sees it).

On ``nccl`` the ranks load DynamICCL as NCCL's profiler (``profiler=True``, the default): a step's
times are then the median GPU time of each measured call (first channel's start to last channel's
stop, the slowest rank's), not the runner's host timing, which also holds the launch and the
barrier's wake-up. Where the profiler recorded no complete set of the calls (gloo, an NCCL older
than 2.27) the runner's timing stands.
"""

from __future__ import annotations

import statistics
import time
import weakref
from typing import TYPE_CHECKING

from dynamiccl.envs.backends.base import Measurement
from dynamiccl.system.knobs import ACTIONS, Collective, Knobs, invalid_reason, parse_enum

if TYPE_CHECKING:
    import numpy as np

    from dynamiccl.profiler.measure.profile_reader import ProfileReader
    from dynamiccl.profiler.measure.runner import CollectiveResult, CollectiveSpec
    from dynamiccl.profiler.measure.session import RankSession
    from dynamiccl.system.scenario import Scenario


#: How long a step waits for NCCL's profiler to report its last calls before the runner's timing
#: stands in.
PROFILER_WAIT_S = 1.0


class LiveBackend:
    """Measures on ``nprocs`` local ranks (default: the scenario topology's rank count).

    ``dist_backend``: ``gloo`` or ``nccl``; ``warmup``/``iters``/``runs``: the measurement protocol
    per step (nccl-tests style, kept short because it runs every step); ``timeout_s``: a step that
    takes longer ends the session with an error naming the stuck rank; ``emulate_hosts``: NCCL
    ranks as hosts of their own sharing the GPUs present (needs the CUDA MPS daemon);
    ``profiler``: on nccl, time each call by NCCL's profiler (see the module docstring).
    """

    name = "live"

    def __init__(self, nprocs: int | None = None, dist_backend: str = "gloo", warmup: int = 2,
                 iters: int = 10, runs: int = 1, timeout_s: float = 120.0,
                 inject_stragglers: bool = True, emulate_hosts: bool = False,
                 profiler: bool = True) -> None:
        if dist_backend not in ("gloo", "nccl"):
            raise ValueError(f"dist_backend must be gloo or nccl, got {dist_backend!r}")
        if emulate_hosts and dist_backend != "nccl":
            raise ValueError("emulated hosts are NCCL ranks; use dist_backend='nccl'")
        self.emulate_hosts = emulate_hosts
        self.nprocs, self.dist_backend = nprocs, dist_backend
        self.protocol = {"warmup": warmup, "iters": iters, "runs": runs}
        self.timeout_s, self.inject_stragglers = timeout_s, inject_stragglers
        self.profiler = profiler and dist_backend == "nccl"
        self._session: RankSession | None = None
        self._reader: ProfileReader | None = None
        self._finalizer: weakref.finalize | None = None

    def _ensure_session(self, nranks: int) -> RankSession:
        nprocs = self.nprocs or nranks
        if nranks != nprocs:
            raise ValueError(f"the scenario's system has {nranks} ranks but the live backend runs "
                             f"{nprocs}; describe the measured system (`dynamiccl profile "
                             "topology`) or set nprocs to match")
        if self._session is None:
            from dynamiccl.profiler.measure.session import RankSession

            env, rings = self._profiler_env()
            self._session = RankSession(nprocs, self.dist_backend, self.timeout_s, self.emulate_hosts,
                                        env)
            self._finalizer = weakref.finalize(self, _close, self._session, self._reader, rings)
        return self._session

    def _profiler_env(self) -> tuple[dict[str, str] | None, str | None]:
        """The ranks' environment for NCCL's profiler and the rings' folder (None, None: off)."""
        if not self.profiler:
            return None, None
        from dynamiccl.plugin import build as plugin
        from dynamiccl.plugin.profile_ring import JOB_RECORDS
        from dynamiccl.profiler.measure.job_profile import profiling_env, temporary_rings
        from dynamiccl.profiler.measure.profile_reader import ProfileReader

        rings = temporary_rings()
        self._reader = ProfileReader(rings)
        return profiling_env(plugin.library_path(), rings, JOB_RECORDS), str(rings)

    def _gpu_times(self, specs: list[CollectiveSpec], nranks: int) -> list[float] | None:
        """Each spec's median GPU time over its timed calls from NCCL's profiler; None without
        a complete record of them."""
        if self._reader is None:
            return None
        import numpy as np

        from dynamiccl.profiler.measure.profile_reader import consecutive_runs, join_ranks

        coll = Collective(parse_enum(Collective, specs[0].collective))
        count = specs[0].nbytes // 4
        split = coll in (Collective.ALLGATHER, Collective.REDUCESCATTER)
        nbytes = 4 * (count // nranks * nranks if split else count)
        calls, deadline = [], time.monotonic() + PROFILER_WAIT_S
        while True:  # NCCL's proxy thread reports a call's end a little after the GPU ran it
            calls.append(self._reader.poll())
            runs = consecutive_runs(join_ranks(np.concatenate(calls)), int(coll), nbytes,
                                    [s.warmup + s.runs * s.iters for s in specs])
            if runs is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if runs is None:
            return None
        return [statistics.median(r[s.warmup:].tolist()) for r, s in zip(runs, specs, strict=True)]

    def _spec(self, scenario: Scenario, action: int | None) -> CollectiveSpec:
        from dynamiccl.profiler.measure.runner import CollectiveSpec

        knobs: dict[str, object] = {}
        if action is not None and self.dist_backend == "nccl":
            config = ACTIONS[action]
            runnable = config.exportable and invalid_reason(
                scenario.topology, scenario.collective, config) is None
            if runnable:
                knobs = Knobs.of(config).record()
        late = self.inject_stragglers and scenario.has_straggler
        return CollectiveSpec(
            scenario.collective.name.lower(), scenario.nbytes, self.dist_backend,
            straggler_rank=scenario.straggler_rank if late else None,
            straggler_delay_us=scenario.straggler_delay_us if late else 0.0,
            **self.protocol, **knobs)

    def measure(self, scenario: Scenario, action: int) -> Measurement:
        session = self._ensure_session(scenario.topology.nranks)
        # measured back to back even when the action is NCCL's default: two independent runs,
        # so the reward carries the system's real run-to-run noise
        specs = [self._spec(scenario, action), self._spec(scenario, None)]
        mine, reference = session.measure(specs)
        gpu = self._gpu_times(specs, scenario.topology.nranks)
        times = gpu if gpu is not None else [mine.time_us, reference.time_us]
        return Measurement(times[0], times[1], *_observed(mine))

    def action_times(self, scenario: Scenario) -> np.ndarray | None:
        return None  # measuring every action per step is what a live system cannot afford

    def close(self) -> None:
        """Stops the ranks; the environment or the caller should call it when done."""
        if self._finalizer is not None:
            self._finalizer()
        self._session = self._reader = None


def _close(session: RankSession, reader: ProfileReader | None, rings: str | None) -> None:
    session.close()
    if reader is not None:
        reader.close()
    if rings is not None:
        from dynamiccl.profiler.measure.job_profile import remove_rings

        remove_rings(rings)


def _observed(result: CollectiveResult) -> tuple[int | None, float]:
    s = result.straggler
    if s is None or s.rank is None:
        return None, 0.0
    return s.rank, s.delay_us
