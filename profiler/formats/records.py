"""One measured collective, as the runner and the nccl-tests parser both write it, plus JSONL I/O.

A record is the unit calibration consumes, so it carries everything needed to re-simulate the
measurement: collective, size in nccl-tests' convention, rank and node counts, and the
configuration NCCL ran. ``algorithm``/``protocol``/``channels`` left as ``None`` mean "NCCL chose"
(NCCL's default, or only partly forced through ``NCCL_ALGO``/``NCCL_PROTO``); calibration then asks
the NCCL-default model what NCCL would have run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from dynamiccl.files import FileKind, read_head
from dynamiccl.knobs import parse_enum
from dynamiccl.nccl import Algorithm, Collective, Protocol, bus_factor

T = TypeVar("T")

#: The label a record's configuration gets when NCCL chose every knob itself.
NCCL_DEFAULT = "NCCL default"


def is_no_op(nbytes: int) -> bool:
    """A size-0 call, which every loader drops.

    nccl-tests prints a row of size 0 for every requested size below one element per rank: nothing
    moves, and its ~0.2 µs is the call returning, not a collective. Read as a measurement it drags
    the fitted launch floor to zero (every small message then predicted tens of times too fast)
    and cannot be drawn on a log-size axis.
    """
    return nbytes == 0


def bandwidths(collective: Collective, nbytes: int, nranks: int, time_us: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s the way nccl-tests computes them (bytes / µs / 1e3 = GB/s)."""
    algbw = nbytes / time_us / 1e3 if time_us > 0 else 0.0
    return algbw, algbw * bus_factor(collective, nranks)


def knob_label(algorithm: str | None, protocol: str | None, channels: int | None) -> str:
    """A configuration as records name it: ``NCCL default``, or ``tree/simple/auto-ch``."""
    if algorithm is None and protocol is None and channels is None:
        return NCCL_DEFAULT
    return "/".join([algorithm or "auto", protocol or "auto", f"{channels}ch" if channels else "auto-ch"])


@dataclass(frozen=True)
class MeasurementRecord:
    collective: str
    #: nccl-tests' size column (allgather/reducescatter: the whole gathered/scattered buffer).
    nbytes: int
    nranks: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str | None = None
    protocol: str | None = None
    channels: int | None = None
    nnodes: int | None = None
    in_place: bool = False
    backend: str = "nccl"
    #: Where the number came from (``file:line`` for parsed output, ``runner`` for our own runs).
    source: str = ""
    #: Per-run times of a multi-run measurement (time_us is their median); empty when unknown.
    time_us_runs: tuple[float, ...] = ()
    #: The straggler the measurement injected (its rank, and how late it was made): a record of a
    #: call with a late rank, which ``tune`` leaves out of its no-straggler decisions.
    straggler_rank: int | None = None
    straggler_delay_us: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    #: The process launch that timed it ("" = unknown). Timings within one launch share its state
    #: (placement, clocks, a warm or cold network), so their spread understates how far another
    #: launch of the same call lands: an nccl-tests log is one launch (its out-of-place and
    #: in-place columns two timings within it), each runner launch of ranks another.
    launch: str = ""
    #: The GPU model the log names for rank 0 (``NVIDIA H100 80GB HBM3``; "" = not said).
    gpu: str = ""
    #: What NCCL ran for this call as its ``NCCL_DEBUG_SUBSYS=TUNING`` log printed it (``ring/ll``;
    #: "" = not logged): settles which pair a run forced with ``NCCL_ALGO`` or ``NCCL_PROTO`` alone
    #: measured.
    nccl_pick: str = ""
    #: Measured on emulated hosts (``--emulate-hosts``: ranks sharing GPUs, each its own node to
    #: NCCL, joined by loopback sockets): not the network the GPUs really sit on.
    emulated_hosts: bool = False
    #: The rank the runner's straggler detection found persistently late, and by how much, where
    #: no straggler was injected too: a property of the system as measured (one host's ranks
    #: released from a barrier a little apart), not a condition of the measurement.
    detected_straggler_rank: int | None = None
    detected_straggler_delay_us: float = 0.0

    def __post_init__(self) -> None:
        Collective[self.collective.upper()]  # raises KeyError early for a misspelt collective
        if self.nbytes < 0 or self.nranks < 1 or not (math.isfinite(self.time_us) and self.time_us > 0):
            raise ValueError(
                f"record from {self.source or 'unknown source'}: needs nbytes >= 0, nranks >= 1 and "
                f"time_us > 0 (got {self.nbytes}, {self.nranks}, {self.time_us})"
            )

    @property
    def coll(self) -> Collective:
        return Collective[self.collective.upper()]

    @property
    def nccl_default(self) -> bool:
        return self.algorithm is None and self.protocol is None and self.channels is None

    @property
    def config_label(self) -> str:
        return knob_label(self.algorithm, self.protocol, self.channels)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["time_us_runs"] = list(self.time_us_runs)
        d["config"] = self.config_label
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "") -> MeasurementRecord:
        missing = [name for name in REQUIRED_FIELDS if name not in data]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["time_us_runs"] = tuple(kwargs.get("time_us_runs") or ())
        if source and not kwargs.get("source"):
            kwargs["source"] = source
        return cls(**kwargs)


#: The fields a record cannot be made without (what a JSON object must hold to be one).
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(MeasurementRecord) if f.default is MISSING and f.default_factory is MISSING)


def check_one_system_kind(records: Iterable[MeasurementRecord]) -> None:
    """Raises ValueError (one line) when ``records`` mix emulated hosts with a real system: their
    networks differ (loopback sockets against the GPUs' own), so one model cannot fit both."""
    records = list(records)
    emulated = [r for r in records if r.emulated_hosts]
    if emulated and len(emulated) < len(records):
        raise ValueError(
            f"{len(emulated)} of the {len(records)} measurements were taken on "
            "emulated hosts (--emulate-hosts: ranks sharing GPUs over loopback sockets), the rest on "
            "a real system; give the measurements of one system only (keep their files apart)")


def normalize_config(
    algorithm: str | int | None, protocol: str | int | None
) -> tuple[str | None, str | None]:
    """Knob names as records store them (``ring``, ``simple``), accepting NCCL's spellings."""
    algo = parse_enum(Algorithm, algorithm).name.lower() if algorithm is not None else None
    proto = parse_enum(Protocol, protocol).name.lower() if protocol is not None else None
    return algo, proto


def _is_record_file(path: Path) -> bool:
    """Empty, or its first line is a measurement record (what ``--record`` appends to)."""
    first = next((line for line in read_head(path).splitlines() if line.strip()), None)
    if first is None:
        return True
    try:
        data = json.loads(first)
    except ValueError:
        return False
    return isinstance(data, dict) and all(k in data for k in REQUIRED_FIELDS)


#: A JSON-lines file of measurement records: ``--record`` appends to one and to nothing else.
RECORDS = FileKind("a file of measurement records (JSON lines)", _is_record_file, reuse=True)


def write_jsonl(records: Iterable[MeasurementRecord], path: str | Path, append: bool = False) -> int:
    """Writes one JSON object per line; returns how many were written."""
    n = 0
    with open(path, "a" if append else "w") as fh:
        for rec in records:
            fh.write(json.dumps(rec.to_json(), sort_keys=True) + "\n")
            n += 1
    return n


def read_json_lines(path: str | Path, parse: Callable[[dict[str, Any], str], T], what: str,
                    fix: str) -> list[T]:
    """``parse(object, "file:line")`` of every non-empty line; a line that is not a JSON object or
    that ``parse`` refuses (TypeError, KeyError, ValueError) raises ValueError naming the file, the
    line, ``what`` it is not, and ``fix``."""
    out: list[T] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError(f"a JSON {type(data).__name__}, not an object")
                out.append(parse(data, where))
            except (json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
                raise ValueError(f"{where}: not {what} ({exc}); {fix}") from None
    return out


def read_jsonl(path: str | Path) -> list[MeasurementRecord]:
    """Reads records back (no-op sizes dropped); a bad line raises ValueError naming the file and
    line number."""
    records = read_json_lines(path, lambda data, where: MeasurementRecord.from_json(data, source=where),
                              "a measurement record", "expected one JSON object per line as "
                              "`dynamiccl profile collective --record` writes")
    return [r for r in records if not is_no_op(r.nbytes)]
