"""One measured collective, as the runner and the nccl-tests parser both write it, plus JSONL I/O.

A record is the unit calibration consumes, so it carries everything needed to re-simulate the
measurement: collective, size in nccl-tests' convention, rank and node counts, and the
configuration NCCL ran: one field per NCCL knob (``dynamiccl.system.knobs.NCCL_KNOBS``: algorithm,
protocol, channels, ...), each left as ``None`` where "NCCL chose" (NCCL's default, or only partly
forced through ``NCCL_ALGO``/``NCCL_PROTO``); calibration then asks the NCCL-default model what
NCCL would have run.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from dynamiccl.config_loader import unique_keys
from dynamiccl.files import MAX_LINE_CHARS, FileKind, not_regular_message, read_head, text_lines
from dynamiccl.system.knobs import NCCL_KNOBS, Knobs, knob_fields, parse_enum
from dynamiccl.system.nccl import NCCL_ALGORITHMS, Algorithm, Collective, Protocol, bus_factor
from dynamiccl.system.nccl_versions import parse_version
from dynamiccl.system.topology import MAX_RANKS
from dynamiccl.system.units import MAX_DURATION_US, SIZE_LIMIT

T = TypeVar("T")

#: The label a record's configuration gets when NCCL chose every knob itself.
NCCL_DEFAULT = "NCCL default"
#: The communication libraries a record can have been measured with (the runner's backends).
BACKENDS = ("nccl", "gloo")
#: Below this no collective ran (a kernel launch alone takes microseconds): a unit slip.
MIN_TIME_US = 0.01


class ImpossibleRecord(ValueError):
    """A record no measurement can have produced (a time beyond an hour, a fraction of a byte, an
    algorithm NCCL does not have); ``problem`` says what, without where."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.problem = problem


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


def knob_label(source: Any) -> str:
    """The NCCL knobs of ``source`` (a record or a spec, in their JSON form) as records name them:
    ``NCCL default``, or ``tree/simple/auto-ch``."""
    knobs = Knobs.of(source)
    return NCCL_DEFAULT if knobs.is_default else "/".join(knobs.parts(keep="auto"))


@dataclass(frozen=True)
@knob_fields
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
    #: The NCCL release that ran it (``2.26.2``; "" = the log does not say): NCCL's default, the
    #: baseline every decision is taken against, changes between releases
    #: (:mod:`dynamiccl.system.nccl_versions`).
    nccl_version: str = ""
    #: The log does not say whether ``NCCL_ALGO``/``NCCL_PROTO`` were set (nccl-tests text with no
    #: sidecar and no ``NCCL_DEBUG=INFO`` lines): ``algorithm``/``protocol`` None may be NCCL's
    #: default or a forced run, so ``tune`` refuses it (:mod:`~dynamiccl.profiler.formats.provenance`).
    forcing_unknown: bool = False
    #: The rank the runner's straggler detection found persistently late, and by how much, where
    #: no straggler was injected too: a property of the system as measured (one host's ranks
    #: released from a barrier a little apart), not a condition of the measurement.
    detected_straggler_rank: int | None = None
    detected_straggler_delay_us: float = 0.0
    #: Where it was read (``file:line``), for messages; not part of the measurement (never written,
    #: never compared): a runner record's ``source`` says ``runner`` whichever file holds it.
    read_at: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        problem = _impossible(self)
        if problem:
            raise ImpossibleRecord(self.where, problem)

    @property
    def where(self) -> str:
        """The file and line it was read from, else its source, for a message naming it."""
        return self.read_at or self.source or "a measurement record"

    @property
    def coll(self) -> Collective:
        return Collective[self.collective.upper()]

    @property
    def nccl_default(self) -> bool:
        return all(getattr(self, k.name) is None for k in NCCL_KNOBS)

    @property
    def config_label(self) -> str:
        return knob_label(self)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["read_at"]
        d["time_us_runs"] = list(self.time_us_runs)
        d["config"] = self.config_label
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "") -> MeasurementRecord:
        missing = [name for name in REQUIRED_FIELDS if name not in data]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
        known = {f.name for f in fields(cls)} - {"read_at"}
        kwargs = {k: _whole(v) if k in _WHOLE_FIELDS else v for k, v in data.items() if k in known}
        runs = kwargs.get("time_us_runs") or ()
        if not isinstance(runs, (list, tuple)):
            raise ImpossibleRecord(source or "a measurement record",
                                   f"time_us_runs {runs!r} is not a list of times in µs")
        kwargs["time_us_runs"] = tuple(runs)
        if source and not kwargs.get("source"):
            kwargs["source"] = source
        return cls(**kwargs, read_at=source)


#: Fields that hold whole numbers (a JSON writer may spell 4096 as 4096.0).
_WHOLE_FIELDS = ("nbytes", "nranks", "nnodes", *(k.name for k in NCCL_KNOBS if not k.is_enum),
                 "straggler_rank", "detected_straggler_rank")


def _whole(value: Any) -> Any:
    """``4096.0`` as 4096; anything else as it is (and refused by the record's check if wrong)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _known(enum_cls: type, value: Any, allowed: Iterable[Any]) -> bool:
    return isinstance(value, str) and value.upper() in enum_cls.__members__ \
        and enum_cls[value.upper()] in allowed


def _impossible(rec: MeasurementRecord) -> str | None:
    """Why ``rec`` cannot be a measurement of one collective (None when it can be): a value of the
    wrong kind, or beyond what any system measures (sizes from 0 below 2^63 bytes, 1 to
    ``MAX_RANKS`` ranks, times from :data:`MIN_TIME_US` to an hour, NCCL's own algorithms)."""
    if not _known(Collective, rec.collective, Collective):
        return (f"collective {rec.collective!r} is none of "
                f"{', '.join(c.name.lower() for c in Collective)}")
    if not _is_int(rec.nbytes) or not 0 <= rec.nbytes < SIZE_LIMIT:
        return f"nbytes {rec.nbytes!r} is not a size in bytes (a whole number from 0 below 2^63)"
    if not _is_int(rec.nranks) or not 1 <= rec.nranks <= MAX_RANKS:
        return f"nranks {rec.nranks!r} is not a rank count (a whole number 1..{MAX_RANKS})"
    if rec.nnodes is not None and not (_is_int(rec.nnodes) and 1 <= rec.nnodes <= rec.nranks):
        return f"nnodes {rec.nnodes!r} is not a node count of {rec.nranks} ranks (1..{rec.nranks})"
    for name, value in (("time_us", rec.time_us), *(("time_us_runs", t) for t in rec.time_us_runs)):
        if not _is_number(value) or not MIN_TIME_US <= value <= MAX_DURATION_US:
            return (f"{name} {value!r} is not the time of one collective in µs ({MIN_TIME_US:g} µs "
                    "up to an hour)")
    for name in ("algbw_GBps", "busbw_GBps"):
        value = getattr(rec, name)
        if not _is_number(value) or not 0 <= value < float("inf"):
            return f"{name} {value!r} is not a bandwidth in GB/s"
    for k in NCCL_KNOBS:
        value = getattr(rec, k.name)
        if value is None:
            continue
        if k.is_enum:
            allowed = k.nccl.values or tuple(k.kind)
            if not _known(k.kind, value, allowed):
                return f"{k.name} {value!r} is none of NCCL's ({', '.join(v.name.lower() for v in allowed)})"
        elif not (_is_int(value) and k.lo <= value <= k.hi):
            return f"{k.name} {value!r} is not {k.title} ({k.lo}..{k.hi})"
    for prefix in ("", "detected_"):
        rank, delay = getattr(rec, f"{prefix}straggler_rank"), getattr(rec, f"{prefix}straggler_delay_us")
        if rank is not None and not (_is_int(rank) and 0 <= rank < rec.nranks):
            return f"{prefix}straggler_rank {rank!r} is not one of the {rec.nranks} ranks"
        if not _is_number(delay) or not 0 <= delay <= MAX_DURATION_US:
            return f"{prefix}straggler_delay_us {delay!r} is not a delay in µs (0 up to an hour)"
    for name in ("in_place", "emulated_hosts", "forcing_unknown"):
        if not isinstance(getattr(rec, name), bool):
            return f"{name} {getattr(rec, name)!r} is not true or false"
    if rec.backend not in BACKENDS:
        return f"backend {rec.backend!r} is none of {', '.join(BACKENDS)}"
    for name in ("source", "launch", "gpu", "nccl_pick", "nccl_version"):
        if not isinstance(getattr(rec, name), str):
            return f"{name} {getattr(rec, name)!r} is not a string"
    if not isinstance(rec.env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in rec.env.items()):
        return f"env {rec.env!r} is not a mapping of variable names to strings"
    if rec.nccl_version and parse_version(rec.nccl_version) is None:
        return f"nccl_version {rec.nccl_version!r} is not an NCCL release (major.minor.patch)"
    if rec.nccl_pick:
        algo, _, proto = rec.nccl_pick.partition("/")
        if not (_known(Algorithm, algo, NCCL_ALGORITHMS) and _known(Protocol, proto, Protocol)):
            return f"nccl_pick {rec.nccl_pick!r} is not an algorithm/protocol pair NCCL runs"
    return None


#: The fields a record cannot be made without (what a JSON object must hold to be one).
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(MeasurementRecord) if f.default is MISSING and f.default_factory is MISSING)


def check_one_system_kind(records: Iterable[MeasurementRecord]) -> None:
    """Raises ValueError (one line) when ``records`` mix emulated hosts with a real system: their
    networks differ (loopback sockets against the GPUs' own), so one model cannot fit both."""
    records = list(records)
    emulated = [r for r in records if r.emulated_hosts]
    if emulated and len(emulated) < len(records):
        real = next(r for r in records if not r.emulated_hosts)
        raise ValueError(
            f"{len(emulated)} of the {len(records)} measurements were taken on "
            "emulated hosts (--emulate-hosts: ranks sharing GPUs over loopback sockets), the rest on "
            f"a real system (e.g. {emulated[0].where} and {real.where}); give the measurements of "
            "one system only (keep their files apart)")


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
                    fix: str, *, max_lines: int | None = None) -> list[T]:
    """``parse(object, "file:line")`` of every non-empty line; a line that is not a JSON object (a
    key given twice included) or that ``parse`` refuses (TypeError, KeyError, ValueError) raises
    ValueError naming the file, the line, ``what`` it is not, and ``fix``; so do a file that is not
    UTF-8 text, a FIFO or a device (named, never read: one blocks, another never ends), and more
    than ``max_lines`` non-empty lines (memory is bounded whatever the file). A UTF-8 byte-order
    mark (some editors write one) is read past."""
    special = not_regular_message(path, what)
    if special:
        raise ValueError(special)
    out: list[T] = []
    lines = text_lines(path, errors="strict")
    try:
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            if len(line) >= MAX_LINE_CHARS:
                raise ValueError(f"{where}: a line of more than {MAX_LINE_CHARS} characters, too long "
                                 f"to be {what}; {fix}")
            if max_lines is not None and len(out) >= max_lines:
                raise ValueError(f"{where}: more than {max_lines} lines, too many to be {what}; {fix}")
            try:
                data = json.loads(line, object_pairs_hook=unique_keys)
                if not isinstance(data, dict):
                    raise ValueError(f"a JSON {type(data).__name__}, not an object")
                out.append(parse(data, where))
            except ImpossibleRecord as exc:
                raise ValueError(f"{where}: {exc.problem}; no measurement has that, so fix or drop "
                                 "the line") from None
            except RecursionError:
                raise ValueError(f"{where}: JSON nested too deeply to be {what}; {fix}") from None
            except (json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
                raise ValueError(f"{where}: not {what} ({exc}); {fix}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text, so not {what}; {fix}") from None
    return out


def read_jsonl(path: str | Path) -> list[MeasurementRecord]:
    """Reads records back (no-op sizes dropped); a bad line raises ValueError naming the file and
    line number."""
    records = read_json_lines(path, lambda data, where: MeasurementRecord.from_json(data, source=where),
                              "a measurement record", "expected one JSON object per line as "
                              "`dynamiccl profile collective --record` writes")
    return [r for r in records if not is_no_op(r.nbytes)]
