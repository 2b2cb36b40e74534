"""A job's collective mix, as ``dynamiccl profile job`` writes it: measurement records with counts.

One line per (collective, size, ranks, nodes, NCCL's choice) the job ran: a
:class:`~dynamiccl.profiler.formats.records.MeasurementRecord` of NCCL's default (``time_us`` the
median GPU time per call, ``time_us_runs`` the distribution as at most :data:`MAX_RUNS` order
statistics, ``nccl_pick`` the algorithm and protocol NCCL ran), so ``tune --measurements`` reads it
as measurements, plus what only a job has (keys records ignore): ``calls`` (how many the job made),
``untimed_calls`` (of those, without a GPU time), ``total_us`` (the job's time in them, untimed calls
counted at the median), ``nccl_channels`` and the p10/p90 of the time per call, and on every line
of a mix that lacks calls the job made, ``partial``: why (the job was stopped, a rank's ring could
not be created). ``tune --workload`` weighs its report and plan by ``total_us``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamiccl.files import FileKind, read_head, write_text_atomic
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths, read_json_lines
from dynamiccl.system.nccl import MAX_CHANNELS, Algorithm, Collective, Protocol
from dynamiccl.system.units import MAX_DURATION_US

#: Order statistics of the per-call times kept in a record's ``time_us_runs``.
MAX_RUNS = 1000
SOURCE = "profile job"
#: The keys a job-mix line has besides a measurement record's.
JOB_KEYS = ("calls", "untimed_calls", "total_us", "nccl_channels", "p10_us", "p90_us")


@dataclass(frozen=True)
class MixEntry:
    """How often and how long the job ran one kind of call."""

    record: MeasurementRecord
    calls: int
    untimed_calls: int
    total_us: float
    nccl_channels: int
    p10_us: float
    p90_us: float
    #: Why the mix this entry is part of lacks calls the job made ("" when it holds them all).
    partial: str = ""

    def to_json(self) -> dict:
        return {**self.record.to_json(), "calls": self.calls, "untimed_calls": self.untimed_calls,
                "total_us": round(self.total_us, 3), "nccl_channels": self.nccl_channels,
                "p10_us": round(self.p10_us, 3), "p90_us": round(self.p90_us, 3),
                **({"partial": self.partial} if self.partial else {})}


def entry(collective: Collective, nbytes: int, nranks: int, nnodes: int, algorithm: Algorithm,
          protocol: Protocol, channels: int, calls: int, timed_calls: int, timed_total_us: float,
          sample_us: np.ndarray, *, launch: str, emulated_hosts: bool = False,
          gpu: str = "", partial: str = "") -> MixEntry | None:
    """The mix line for ``calls`` calls, ``timed_calls`` of them with GPU times summing to
    ``timed_total_us``, ``sample_us`` those times or a uniform sample of them; None when no call has
    a time (a record needs one)."""
    times = np.sort(np.asarray(sample_us, dtype=float))
    if len(times) == 0 or timed_calls < 1:
        return None
    median = float(np.median(times))
    picks = np.unique(np.linspace(0, len(times) - 1, min(len(times), MAX_RUNS)).round().astype(int))
    algbw, busbw = bandwidths(collective, nbytes, nranks, median)
    record = MeasurementRecord(
        collective=collective.name.lower(), nbytes=int(nbytes), nranks=int(nranks), time_us=median,
        algbw_GBps=algbw, busbw_GBps=busbw, nnodes=int(nnodes), source=SOURCE,
        time_us_runs=tuple(float(t) for t in times[picks]), launch=launch, gpu=gpu,
        nccl_pick=f"{algorithm.name.lower()}/{protocol.name.lower()}", emulated_hosts=emulated_hosts)
    untimed = int(calls) - int(timed_calls)
    return MixEntry(record, int(calls), untimed, float(timed_total_us) + untimed * median,
                    int(channels), float(np.percentile(times, 10)), float(np.percentile(times, 90)),
                    partial)


def write(entries: list[MixEntry], path: str | Path) -> Path:
    """The mix as JSON lines, written atomically."""
    text = "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in entries)
    return write_text_atomic(path, text)


#: Lines (kinds of call) a mix may have: a job's collectives x sizes x communicators x NCCL's
#: choices is a few thousand; beyond this it is no job's mix, and reading it would take gigabytes.
MAX_KINDS = 100_000
FIX = "give the job.jsonl `dynamiccl profile job` wrote"


def read(path: str | Path) -> list[MixEntry]:
    """A job mix back; ValueError (one line, naming the file and line) for anything else: a line
    that is no mix line, a kind of call given twice (``profile job`` writes each once; counted
    twice, it would double the job's time in it), a mix with no call or no time in its calls,
    more than :data:`MAX_KINDS` lines."""
    seen: dict[tuple, str] = {}

    def once(data: dict, where: str) -> MixEntry:
        e = _entry(data, where)
        r = e.record
        key = (r.collective, r.nbytes, r.nranks, r.nnodes, r.nccl_pick, e.nccl_channels)
        if key in seen:
            raise ValueError(f"the kind of call of {seen[key]} again ({r.collective} {r.nbytes} B "
                             f"on {r.nranks} ranks, NCCL's {r.nccl_pick}/{e.nccl_channels}ch)")
        seen[key] = where
        return e

    entries = read_json_lines(path, once, "a job's collective mix", FIX, max_lines=MAX_KINDS)
    if not entries:
        raise ValueError(f"{path}: the job's mix is empty; profile a job that runs NCCL "
                         "collectives (dynamiccl profile job -- CMD)")
    if not any(e.total_us > 0 for e in entries):
        raise ValueError(f"{path}: the job's mix spends no time in its calls (total_us is 0 on "
                         f"every line), so it weighs nothing; {FIX}")
    return entries


def _entry(data: dict, where: str) -> MixEntry:
    missing = [k for k in JOB_KEYS if k not in data]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    record = MeasurementRecord.from_json(data, source=where)
    calls, untimed, channels = data["calls"], data["untimed_calls"], data["nccl_channels"]
    if not _whole(calls) or not 1 <= calls <= MAX_CALLS:
        raise ValueError(f"calls {calls!r} is not a number of calls (1..{MAX_CALLS})")
    if not _whole(untimed) or not 0 <= untimed <= calls:
        raise ValueError(f"untimed_calls {untimed!r} is not a number of calls (0..{calls})")
    if not _whole(channels) or not 0 <= channels <= MAX_CHANNELS:
        raise ValueError(f"nccl_channels {channels!r} is not a channel count (0..{MAX_CHANNELS})")
    times = {k: data[k] for k in ("total_us", "p10_us", "p90_us")}
    for key, value in times.items():
        limit = calls * MAX_DURATION_US if key == "total_us" else MAX_DURATION_US
        if not _real(value) or not 0 <= value <= limit:
            raise ValueError(f"{key} {value!r} is not a time in µs (0..{limit:g})")
    partial = data.get("partial", "")
    if not isinstance(partial, str):
        raise ValueError(f"partial {partial!r} is not a reason")
    return MixEntry(record, int(calls), int(untimed), float(times["total_us"]), int(channels),
                    float(times["p10_us"]), float(times["p90_us"]), partial)


#: Calls of one kind a mix line may count (a job making a million calls a second for a year).
MAX_CALLS = 10**14


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_job_mix(path: Path) -> bool:
    first = next((line for line in read_head(path).splitlines() if line.strip()), None)
    if first is None:
        return False
    try:
        data = json.loads(first)
    except ValueError:
        return False
    return isinstance(data, dict) and all(k in data for k in JOB_KEYS)


#: What ``profile job`` writes (``--force`` replaces only a file of this kind).
JOB_MIX = FileKind("a job's collective mix (profile job)", _is_job_mix)
