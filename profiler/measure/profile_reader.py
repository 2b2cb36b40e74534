"""What NCCL's profiler saw: per-call GPU durations with NCCL's own choice, from the plugin's rings.

With the plugin loaded as NCCL's profiler (``NCCL_PROFILER_PLUGIN``) and ``DYNAMICCL_PROFILE=DIR``,
every rank of every communicator writes its completed collectives into a ring in ``DIR``
(:mod:`dynamiccl.plugin.profile_ring`). :class:`ProfileReader` follows every ring of the folder as it
grows (new rings included) and returns the new calls as one numpy array (:data:`CALL_DTYPE`, one
row per call and rank). :func:`join_ranks` makes it one row per collective call (the ranks of a
communicator share its commId, and NCCL numbers each function's calls, ``seq``); :func:`rank_matrix`
lays a field out as ``[call, rank]``, what straggler detection
(:mod:`~dynamiccl.profiler.measure.straggler_detection`) reads.

Sizes are nccl-tests' (the whole gathered or scattered buffer for allgather/reducescatter), times
in µs, a duration NaN where the ring holds no GPU time for the call (a channel's event was lost).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from dynamiccl.plugin.profile_ring import FLAG_TIMED, RingFormatError, RingView, nccl_tests_bytes, ring_files
from dynamiccl.profiler.formats.records import MIN_TIME_US

#: One call as one rank recorded it.
CALL_DTYPE = np.dtype([
    ("comm_id", "<u8"), ("rank", "<i4"), ("nranks", "<i4"), ("nnodes", "<i4"), ("pid", "<i4"),
    ("seq", "<u8"), ("collective", "u1"), ("algorithm", "i1"), ("protocol", "i1"),
    ("channels", "u1"), ("nbytes", "<u8"), ("duration_us", "<f8"), ("host_start_ns", "<u8"),
    ("gpu_start_ns", "<u8"), ("gpu_stop_ns", "<u8"),
])
#: One collective call over the ranks that recorded it: the first rank's choice (NCCL's choice is
#: the same on every rank), the longest rank's GPU time (what the job waits for), the ranks seen and
#: the spread of their launch times.
JOINED_DTYPE = np.dtype([
    ("comm_id", "<u8"), ("seq", "<u8"), ("collective", "u1"), ("algorithm", "i1"),
    ("protocol", "i1"), ("channels", "u1"), ("nranks", "<i4"), ("nnodes", "<i4"), ("nbytes", "<u8"),
    ("ranks_seen", "<i4"), ("duration_us", "<f8"), ("launch_spread_us", "<f8"),
    ("host_start_ns", "<u8"),
])


def calls_from(view: RingView, records: np.ndarray) -> np.ndarray:
    """Ring records of ``view`` as calls (:data:`CALL_DTYPE`)."""
    info = view.info
    out = np.zeros(len(records), CALL_DTYPE)
    out["comm_id"], out["rank"], out["nranks"] = info.comm_id, info.rank, info.nranks
    out["nnodes"], out["pid"] = info.nnodes, info.pid
    for name, field in (("seq", "seq"), ("collective", "coll"), ("algorithm", "algo"),
                        ("protocol", "proto"), ("channels", "channels"),
                        ("host_start_ns", "host_start_ns"), ("gpu_start_ns", "gpu_start_ns"),
                        ("gpu_stop_ns", "gpu_stop_ns")):
        out[name] = records[field]
    out["nbytes"] = nccl_tests_bytes(records["coll"], records["bytes"], info.nranks)
    timed = (records["flags"] & FLAG_TIMED) != 0
    span = (records["gpu_stop_ns"] - records["gpu_start_ns"]).astype(np.float64) / 1e3
    # a GPU time below any collective's (a timer that did not move) counts as no time
    out["duration_us"] = np.where(timed & (span >= MIN_TIME_US), span, np.nan)
    return out


#: Seconds a file named like a ring that cannot be opened as one is tried again (on a folder shared
#: over NFS, another node's ring may show its name before its header); then it is given up, so
#: files planted there cost one look each, not one every poll.
SETTLE_S = 30.0


class ProfileReader:
    """Every ring in ``folder``, read incrementally: :meth:`poll` returns the calls recorded since
    the last poll. A file that is not a ring (or not yet complete) is skipped and retried for
    :data:`SETTLE_S`; a ring that holds a record no plugin writes, or is cut short while read, is
    given up (the calls read from it before stay). Both are named in :attr:`unreadable` with why."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._views: dict[Path, RingView] = {}
        self._cursor: dict[Path, int] = {}
        self._given_up: set[Path] = set()
        self._failing_since: dict[Path, float] = {}
        #: Every ring opened so far (a ring given up later included).
        self.seen: set[Path] = set()
        self.lost = 0
        self.unreadable: dict[Path, str] = {}

    def poll(self) -> np.ndarray:
        found = []
        for path in ring_files(self.folder):
            if path in self._given_up:
                continue
            view = self._views.get(path)
            if view is None:
                try:
                    view = self._views[path] = RingView(path)
                except RingFormatError as exc:
                    self.unreadable[path] = str(exc)
                    since = self._failing_since.setdefault(path, time.monotonic())
                    if time.monotonic() - since > SETTLE_S:
                        self._given_up.add(path)
                    continue
                self.unreadable.pop(path, None)
                self.seen.add(path)
                self._cursor[path] = 0
            try:
                read = view.read(self._cursor[path])
            except RingFormatError as exc:
                self._give_up(path, exc)
                continue
            self._cursor[path] = read.next
            self.lost += read.lost
            found.append(calls_from(view, read.records))
        return np.concatenate(found) if found else np.zeros(0, CALL_DTYPE)

    @property
    def rings(self) -> list[RingView]:
        return list(self._views.values())

    def drops(self) -> dict[str, int]:
        """Per reason, what the plugin could not record, summed over the rings."""
        total: dict[str, int] = {}
        for path, view in list(self._views.items()):
            try:
                drops = view.drops()
            except RingFormatError as exc:
                self._give_up(path, exc)
                continue
            for reason, n in drops.items():
                total[reason] = total.get(reason, 0) + n
        return total

    def all_closed(self) -> bool:
        """Every ring's communicator was finalized (nothing more will come)."""
        closed = True
        for path, view in list(self._views.items()):
            try:
                closed &= view.closed()
            except RingFormatError as exc:
                self._give_up(path, exc)
        return closed

    def _give_up(self, path: Path, why: RingFormatError) -> None:
        self.unreadable[path] = str(why)
        self._given_up.add(path)
        self._views.pop(path).close()

    def close(self) -> None:
        for view in self._views.values():
            view.close()
        self._views.clear()

    def __enter__(self) -> ProfileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def join_ranks(calls: np.ndarray) -> np.ndarray:
    """One row per collective call (:data:`JOINED_DTYPE`), ordered by communicator, then launch."""
    if len(calls) == 0:
        return np.zeros(0, JOINED_DTYPE)
    key = np.stack([calls["comm_id"], calls["collective"].astype(np.uint64), calls["seq"]], axis=1)
    unique, first, group = np.unique(key, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    n = len(unique)
    out = np.zeros(n, JOINED_DTYPE)
    for name in ("comm_id", "seq", "collective", "algorithm", "protocol", "channels", "nranks",
                 "nnodes", "nbytes"):
        out[name] = calls[name][first]
    out["ranks_seen"] = np.bincount(group, minlength=n)
    duration = np.full(n, -np.inf)
    np.maximum.at(duration, group, np.where(np.isnan(calls["duration_us"]), -np.inf,
                                            calls["duration_us"]))
    out["duration_us"] = np.where(np.isinf(duration), np.nan, duration)
    start = calls["host_start_ns"].astype(np.int64)
    earliest, latest = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(earliest, group, start)
    np.maximum.at(latest, group, start)
    out["host_start_ns"] = earliest
    out["launch_spread_us"] = (latest - earliest) / 1e3
    return out[np.lexsort((out["host_start_ns"], out["comm_id"]))]


def rank_matrix(calls: np.ndarray, field: str) -> np.ndarray:
    """``field`` of every call seen by all its ranks, as ``[call, rank]`` (calls in launch order;
    one communicator's calls: pass a selection). Calls some rank did not record are left out."""
    if len(calls) == 0:
        return np.zeros((0, 0))
    nranks = int(calls["nranks"].max())
    key = np.stack([calls["comm_id"], calls["collective"].astype(np.uint64), calls["seq"]], axis=1)
    unique, group = np.unique(key, axis=0, return_inverse=True)
    group = group.reshape(-1)
    matrix = np.full((len(unique), nranks), np.nan)
    matrix[group, calls["rank"]] = calls[field]
    launch = np.full(len(unique), np.iinfo(np.int64).max)
    np.minimum.at(launch, group, calls["host_start_ns"].astype(np.int64))
    order = np.argsort(launch, kind="stable")
    matrix = matrix[order]
    return matrix[~np.isnan(matrix).any(axis=1)]


def consecutive_runs(joined: np.ndarray, collective: int, nbytes: int,
                     counts: list[int]) -> list[np.ndarray] | None:
    """The GPU times of ``counts[0]`` calls, then ``counts[1]`` calls, ... of ``collective`` at
    ``nbytes``, in launch order: what back-to-back measurements of the same call ran (the live
    backend's choice and NCCL's reference). None unless exactly that many such calls are there,
    each timed by all its ranks (the profiler is not loaded, lost one, or a rank's record is yet
    to come: the caller waits or keeps its own timing)."""
    mine = joined[(joined["collective"] == collective) & (joined["nbytes"] == nbytes)]
    mine = mine[np.argsort(mine["host_start_ns"], kind="stable")]
    if (len(mine) != sum(counts) or np.isnan(mine["duration_us"]).any()
            or (mine["ranks_seen"] < mine["nranks"]).any()):
        return None
    return np.split(mine["duration_us"], np.cumsum(counts)[:-1])
