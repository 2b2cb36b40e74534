"""A user's job run with NCCL's profiler loaded, and its collective mix while it runs.

:func:`run_job` starts the command (torchrun, mpirun, a plain script) in a session of its own with
the plugin as NCCL's profiler (``NCCL_PROFILER_PLUGIN``) and the rings' folder
(``DYNAMICCL_PROFILE``) in its environment, drains the rings while it runs (a ring overwrites its
oldest records, so a long job is read as it goes) and ends with the job: its exit status, or the
timeout or a signal dynamiccl received, passed on to every process of the job
(:mod:`~dynamiccl.profiler.measure.job_process`: torchrun's workers and mpirun's ranks included,
SIGTERM shortly after any other signal, killed after a grace period or a second signal); the mix
so far is kept. The calls are joined across ranks as they complete (:class:`MixAccumulator`) and
summarised per (collective, size, ranks, nodes, NCCL's choice) into
:mod:`~dynamiccl.profiler.formats.job_mix` entries.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynamiccl.plugin.profile_ring import JOB_RECORDS, PROFILE_ENV, RECORDS_ENV, failed_rings
from dynamiccl.profiler.formats.job_mix import MixEntry, entry
from dynamiccl.profiler.measure.job_process import (
    GRACE_S,
    JobProcess,
    Stops,
    how_it_ended,
    stopped_status,
    supervise,
)
from dynamiccl.profiler.measure.profile_reader import CALL_DTYPE, ProfileReader, join_ranks
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.nccl_profiler import PROFILER_PLUGIN_ENV

#: Times kept per kind of call for its distribution (counts and totals are exact beyond it).
RESERVOIR = 10_000
#: Per-rank rows of calls not yet seen by every rank kept at most; beyond, the oldest are taken
#: as they are (a rank that lost records would otherwise hold them forever).
MAX_PENDING = 1_000_000

_KEY = ("collective", "nbytes", "nranks", "nnodes", "algorithm", "protocol", "channels")


@dataclass
class _Kind:
    calls: int = 0
    timed: int = 0
    total_us: float = 0.0
    seen: int = 0  # timed calls offered to the reservoir
    sample: list[float] = field(default_factory=list)


class MixAccumulator:
    """Per-rank calls in, the job's mix out: each call counted once, when every rank of its
    communicator has recorded it (its time: the longest rank's), with a seeded reservoir of times
    per kind of call."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)
        self._pending = np.zeros(0, CALL_DTYPE)
        self.kinds: dict[tuple, _Kind] = {}
        self.partial = 0  # calls counted without every rank's record

    def add(self, calls: np.ndarray) -> None:
        rows = np.concatenate([self._pending, calls]) if len(self._pending) else calls
        if len(rows) == 0:
            return
        key = np.stack([rows["comm_id"], rows["collective"].astype(np.uint64), rows["seq"]], axis=1)
        _, group, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
        group = group.reshape(-1)
        complete = count[group] >= rows["nranks"]
        self._take(rows[complete])
        self._pending = rows[~complete]
        if len(self._pending) > MAX_PENDING:
            self.flush()

    def flush(self) -> None:
        """Counts every call still waiting for a rank (the job ended, or a rank lost records)."""
        joined = join_ranks(self._pending)
        self.partial += int((joined["ranks_seen"] < joined["nranks"]).sum())
        self._count(joined)
        self._pending = np.zeros(0, CALL_DTYPE)

    def _take(self, rows: np.ndarray) -> None:
        if len(rows):
            self._count(join_ranks(rows))

    def _count(self, joined: np.ndarray) -> None:
        if len(joined) == 0:
            return
        keys = np.stack([joined[k].astype(np.int64) for k in _KEY], axis=1)
        unique, group = np.unique(keys, axis=0, return_inverse=True)
        for i, key in enumerate(map(tuple, unique.tolist())):
            times = joined["duration_us"][group.reshape(-1) == i]
            timed = times[~np.isnan(times)]
            kind = self.kinds.setdefault(key, _Kind())
            kind.calls += len(times)
            kind.timed += len(timed)
            kind.total_us += float(timed.sum())
            self._sample(kind, timed)

    def _sample(self, kind: _Kind, timed: np.ndarray) -> None:
        """Algorithm R over the batch: each time ends up in the sample with equal probability."""
        room = max(RESERVOIR - len(kind.sample), 0)
        kind.sample.extend(timed[:room].tolist())
        rest = timed[room:]
        if len(rest):
            seen = kind.seen + room + np.arange(1, len(rest) + 1)
            slot = self._rng.integers(0, seen)
            keep = slot < RESERVOIR
            for s, t in zip(slot[keep].tolist(), rest[keep].tolist(), strict=True):
                kind.sample[s] = t
        kind.seen += len(timed)

    def entries(self, *, launch: str, emulated_hosts: bool = False, gpu: str = "",
                partial: str = "") -> list[MixEntry]:
        """The mix, most time first (kinds with no timed call are left out: see :attr:`untimed`);
        ``partial``: why it lacks calls the job made, if it does."""
        out = []
        for (coll, nbytes, nranks, nnodes, algo, proto, channels), kind in self.kinds.items():
            e = entry(Collective(coll), nbytes, nranks, nnodes, Algorithm(algo), Protocol(proto),
                      channels, kind.calls, kind.timed, kind.total_us, np.array(kind.sample),
                      launch=launch, emulated_hosts=emulated_hosts, gpu=gpu, partial=partial)
            if e is not None:
                out.append(e)
        return sorted(out, key=lambda e: (-e.total_us, e.record.collective, e.record.nbytes))

    @property
    def untimed(self) -> int:
        """Calls of kinds the job ran without any GPU time (not in :meth:`entries`)."""
        return sum(k.calls for k in self.kinds.values() if k.timed == 0)


@dataclass
class JobRun:
    """How the job ended and what its rings held."""

    #: The job's return code (Python's: negative for the signal that killed it).
    returncode: int
    #: Why the job was stopped before it ended on its own ("" when it was not).
    stopped: str
    #: What to exit with, as a shell reports it: the job's status (128 + the signal that killed
    #: it), 124 after --timeout, 128 + the signal dynamiccl received that stopped it.
    status: int
    mix: MixAccumulator
    #: Rings read (a ring given up as not the plugin's after some reads counts).
    rings: int
    lost: int
    drops: dict[str, int]
    unreadable: dict[Path, str]
    #: Rings the plugin could not create (a full /dev/shm): the ranks the mix lacks, with why.
    failed: dict[Path, str]
    seconds: float
    #: Processes the job started that still ran when it ended on its own (ended with it).
    left_running: list[int] = field(default_factory=list)

    @property
    def ended(self) -> str:
        """``the job exited with status 3``, ``the job was killed by SIGKILL``, or why it was
        stopped and how it ended then."""
        how = how_it_ended(self.returncode)
        return f"the job {self.stopped}; its command {how}" if self.stopped else f"the job {how}"

    @property
    def partial(self) -> str:
        """Why the mix lacks calls the job made ("" when it holds them all)."""
        why = []
        if self.stopped:
            why.append(f"the job {self.stopped}")
        if self.failed:
            why.append(f"{len(self.failed)} rank(s) recorded nothing: "
                       f"{next(iter(self.failed.values()))}")
        if self.lost:
            why.append(f"{self.lost} records were overwritten before they could be read")
        return "; ".join(why)


def profiling_env(library: Path, rings: Path, records: int) -> dict[str, str]:
    """What a job needs in its environment for NCCL to load the profiler and record into ``rings``
    (every rank's process: export them through a launcher that does not pass the environment)."""
    return {PROFILER_PLUGIN_ENV: str(library), PROFILE_ENV: str(rings), RECORDS_ENV: str(records)}


#: A temporary rings folder's name: this prefix and mkdtemp's random letters.
RINGS_PREFIX = "dynamiccl-rings-"
#: Temporary rings folders this process made, each with the descriptor that holds its lock.
_LOCKS: dict[Path, int] = {}


def temporary_rings(removed: Callable[[Path], None] | None = None) -> Path:
    """A fresh folder for a job's rings: in /dev/shm where it can be written (memory, as the rings
    are mapped), else the system's temporary folder. The caller removes it (:func:`remove_rings`).

    The folder is locked (``flock``) while this process lives: a process killed with SIGKILL runs
    no cleanup, and its rings would hold /dev/shm's memory until the machine reboots, so the
    folders of this user that hold files and no lock are removed here first, each passed to
    ``removed``. An empty one is left: it may be another run's, made and not yet locked."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    parent = Path(shm or tempfile.gettempdir())
    for stale in _remove_unlocked_rings(parent):
        if removed is not None:
            removed(stale)
    folder = Path(tempfile.mkdtemp(prefix=RINGS_PREFIX, dir=parent))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _LOCKS[folder] = fd
    return folder


def remove_rings(folder: str | Path) -> None:
    """Removes a temporary rings folder, then lets go of its lock."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    fd = _LOCKS.pop(folder, None)
    if fd is not None:
        os.close(fd)


def _remove_unlocked_rings(parent: Path) -> list[Path]:
    """Removes the temporary rings folders in ``parent`` of this user that hold files and whose
    lock no process holds (their dynamiccl was killed); returns them."""
    removed = []
    for folder in sorted(parent.glob(f"{RINGS_PREFIX}*")):
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid == os.geteuid() and os.listdir(fd):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: its dynamiccl runs
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


@contextmanager
def profiler_loaded(library: Path, records: int = JOB_RECORDS) -> Iterator[dict[str, str]]:
    """The environment (:func:`profiling_env`) under which the ranks a benchmark launches load the
    plugin as NCCL's profiler, the runtime then timing collectives by it
    (:mod:`dynamiccl.runtime.timing`), with rings in a temporary folder removed afterwards."""
    rings = temporary_rings()
    try:
        yield profiling_env(library, rings, records)
    finally:
        remove_rings(rings)


def run_job(cmd: Sequence[str], env: dict[str, str], rings: Path, stops: Stops, *,
            timeout_s: float | None = None, grace_s: float = GRACE_S, poll_s: float = 0.2,
            progress: Callable[[MixAccumulator, float], None] | None = None) -> JobRun:
    """Runs ``cmd`` with ``env`` (the caller's environment and :func:`profiling_env`) until it ends,
    reading ``rings`` as it goes; a signal ``stops`` catches, or ``timeout_s``, stops it
    (:class:`~dynamiccl.profiler.measure.job_process.JobProcess`) and its mix so far is kept.
    Raises OSError when the command cannot be started."""
    mix = MixAccumulator()
    began = time.monotonic()
    job = JobProcess(cmd, env, grace_s)
    stops.attach(job)
    with ProfileReader(rings) as reader:

        def each() -> None:
            mix.add(reader.poll())
            if progress is not None:
                progress(mix, time.monotonic() - began)

        ending = supervise(job, began=began, timeout_s=timeout_s, poll_s=poll_s, each=each)
        mix.add(reader.poll())
        mix.flush()
        status, stopped = stopped_status(job, ending, timeout_s=timeout_s,
                                         signals=len(stops.received))
        return JobRun(ending.returncode, stopped, status, mix, len(reader.seen), reader.lost,
                      reader.drops(), dict(reader.unreadable), failed_rings(rings),
                      time.monotonic() - began, ending.left)
