"""The profiler's ring, written once: the file the C plugin fills and every Python reader maps.

With ``DYNAMICCL_PROFILE=DIR`` set when NCCL initialises a communicator, the plugin library (loaded
as NCCL's profiler plugin through ``NCCL_PROFILER_PLUGIN``) writes one ring per communicator and
rank: ``DIR/dynamiccl-<pid>-<n>-<commId>-r<rank>.ring``, created under a hidden name and renamed
once its header is complete. The file is a :data:`HEADER_BYTES` header and a power-of-two number of
:data:`RECORD_BYTES` records, one per completed collective (:data:`RECORD_FIELDS`). The plugin never
waits for a reader: a full ring overwrites its oldest records, and a reader that fell behind is told
how many it lost.

Writers claim a record with an atomic increment of ``head``, write it and commit it by storing its
index + 1 in ``commit`` last (a seqlock: ``commit`` is 0 while the record is being written), so a
reader copies a batch, reads the commits again and keeps what did not change
(:meth:`RingView.read`). What the plugin could not record is counted per reason
(:data:`DROP_REASONS`) in the header.

The C side's copy of these facts, with the structs laid out to the byte, is generated into
``dynamiccl/plugin/csrc/profiler_format.h`` by ``python -m dynamiccl.plugin.policy_format`` (which
generates every header of the plugin); a test regenerates it and fails on any difference.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamiccl.system.nccl import MAX_CHANNELS, Collective
from dynamiccl.system.nccl_profiler import (
    DATATYPES,
    PROFILER_ALGORITHM_NAMES,
    PROFILER_COLLECTIVE_NAMES,
    PROFILER_PROTOCOL_NAMES,
    PROFILER_STATE_KERNEL_CH_STOP,
    ProfilerEvent,
)

#: The directory the rings go to; unset or empty: the profiler records nothing.
PROFILE_ENV = "DYNAMICCL_PROFILE"
#: Records per ring (a power of two, :data:`MIN_RECORDS`..:data:`MAX_RECORDS`).
RECORDS_ENV = "DYNAMICCL_PROFILE_RECORDS"
DEFAULT_RECORDS = 4096
#: Records per ring for a job read as it runs (``profile job``, the runtime): a burst between two
#: reads must fit.
JOB_RECORDS = 1 << 16
MIN_RECORDS, MAX_RECORDS = 64, 1 << 20
#: Collectives one communicator may have in flight (started, a channel still running). DDP of a
#: large model enqueues a few hundred buckets ahead of the GPU; a call beyond is dropped (no_slot).
SLOTS = 512
#: A collective whose channels have not all stopped this long after it started is recorded without
#: a GPU time and its slot reused (NCCL lost a channel event, or never ran one).
STALE_NS = 10_000_000_000
#: What the plugin asks NCCL for: the collectives and their channels' GPU start/stop times.
EVENT_MASK = ProfilerEvent.COLL | ProfilerEvent.KERNEL_CH

MAGIC = b"DCCLRING"
FORMAT_VERSION = 1
FILE_PREFIX = "dynamiccl-"
FILE_SUFFIX = ".ring"
#: printf format of a ring's name: pid, the process's communicator counter, commId, rank.
FILE_FORMAT = FILE_PREFIX + "%d-%u-%016llx-r%d" + FILE_SUFFIX
NAME_BYTES = 64
VERSION_BYTES = 16

#: Why the plugin did not record a call or its time: ``no_slot`` every slot held a collective in
#: flight; ``descriptor`` NCCL's descriptor named something the ring has no id for (an unknown
#: collective, datatype, algorithm or protocol, more than MAX_CHANNELS channels); ``untimed`` the
#: call is recorded but its channels' times were missing, out of order or inconsistent; ``stale``
#: the call is recorded untimed after STALE_NS without all its channels; ``handle`` a stop or state
#: for an event no longer live (stopped twice, given up as stale), ignored.
DROP_REASONS = ("no_slot", "descriptor", "untimed", "stale", "handle")
DROP_SLOTS = 8
#: Record flag: every channel's start and stop arrived in order; gpu_start_ns/gpu_stop_ns are valid.
FLAG_TIMED = 1

#: (name, C type, array length or 0, meaning). Fields are laid out in this order with natural
#: alignment, as a C compiler lays out the generated struct (static assertions check it).
HEADER_FIELDS: tuple[tuple[str, str, int, str], ...] = (
    ("magic", "char", 8, "MAGIC"),
    ("version", "uint32_t", 0, "FORMAT_VERSION"),
    ("header_bytes", "uint32_t", 0, "HEADER_BYTES"),
    ("record_bytes", "uint32_t", 0, "RECORD_BYTES"),
    ("capacity", "uint32_t", 0, "records in the ring (a power of two)"),
    ("comm_id", "uint64_t", 0, "NCCL's commId (the communicator's hash, the same on every rank)"),
    ("rank", "int32_t", 0, "this rank in the communicator"),
    ("nranks", "int32_t", 0, "ranks in the communicator"),
    ("nnodes", "int32_t", 0, "nodes of the communicator"),
    ("pid", "int32_t", 0, "the writing process"),
    ("abi", "uint32_t", 0, "the profiler ABI version NCCL called init through"),
    ("closed", "uint32_t", 0, "1 once NCCL finalized the communicator: no more records"),
    ("created_ns", "uint64_t", 0, "CLOCK_REALTIME at init"),
    ("head", "uint64_t", 0, "records claimed so far (record i is at i % capacity)"),
    ("started", "uint64_t", 0, "collective events NCCL started"),
    ("drops", "uint64_t", DROP_SLOTS, "count per DROP_REASONS"),
    ("comm_name", "char", NAME_BYTES, "the communicator's name (NUL-terminated, may be empty)"),
    ("plugin_version", "char", VERSION_BYTES, "the package version the plugin was built from"),
)
RECORD_FIELDS: tuple[tuple[str, str, int, str], ...] = (
    ("commit", "uint64_t", 0, "index + 1 once written; 0 while being written"),
    ("seq", "uint64_t", 0, "NCCL's seqNumber: per collective function and communicator"),
    ("bytes", "uint64_t", 0, "count x datatype size (per rank for allgather/reducescatter)"),
    ("host_start_ns", "uint64_t", 0, "CLOCK_REALTIME when NCCL started the call's event (launch)"),
    ("host_stop_ns", "uint64_t", 0, "CLOCK_REALTIME when NCCL stopped it (enqueued)"),
    ("gpu_start_ns", "uint64_t", 0, "first channel's start on the GPU's global timer"),
    ("gpu_stop_ns", "uint64_t", 0, "last channel's stop on the GPU's global timer"),
    ("coll", "uint8_t", 0, "NCCL's collective id"),
    ("algo", "int8_t", 0, "NCCL's algorithm id"),
    ("proto", "int8_t", 0, "NCCL's protocol id"),
    ("channels", "uint8_t", 0, "channels NCCL ran it on"),
    ("warps", "uint8_t", 0, "warps per channel"),
    ("dtype", "uint8_t", 0, "NCCL's datatype id"),
    ("timed_channels", "uint8_t", 0, "channels whose start and stop arrived"),
    ("flags", "uint8_t", 0, "FLAG_TIMED"),
)
HEADER_BYTES = 256
RECORD_BYTES = 64

_NUMPY = {"char": "S", "uint8_t": "u1", "int8_t": "i1", "uint32_t": "<u4", "int32_t": "<i4",
          "uint64_t": "<u8"}
_SIZE = {"char": 1, "uint8_t": 1, "int8_t": 1, "uint32_t": 4, "int32_t": 4, "uint64_t": 8}


def _layout(fields: tuple[tuple[str, str, int, str], ...], total: int) -> np.dtype:
    """The fields at their natural-alignment offsets, padded to ``total`` bytes."""
    names, formats, offsets, offset = [], [], [], 0
    for name, ctype, count, _ in fields:
        size = _SIZE[ctype]
        offset = -(-offset // size) * size
        names.append(name)
        if ctype == "char":
            formats.append(f"S{count}")
        else:
            formats.append((_NUMPY[ctype], (count,)) if count else _NUMPY[ctype])
        offsets.append(offset)
        offset += size * max(count, 1)
    assert offset <= total, (offset, total)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": total})


HEADER_DTYPE = _layout(HEADER_FIELDS, HEADER_BYTES)
RECORD_DTYPE = _layout(RECORD_FIELDS, RECORD_BYTES)
#: The byte offset of ``head`` (what a writer increments), for readers of the raw mapping.
HEAD_OFFSET = HEADER_DTYPE.fields["head"][1]


class RingFormatError(ValueError):
    """A file that is not a complete ring of this format (one line: what is wrong)."""


@dataclass(frozen=True)
class RingInfo:
    """What a ring's header says about the communicator and rank that wrote it."""

    path: Path
    comm_id: int
    rank: int
    nranks: int
    nnodes: int
    pid: int
    abi: int
    capacity: int
    created_ns: int
    comm_name: str
    plugin_version: str


@dataclass(frozen=True)
class RingRead:
    """Records read from a ring: ``records`` (RECORD_DTYPE, oldest first), the cursor to pass to the
    next read, and how many records the writer overwrote before they could be read."""

    records: np.ndarray
    next: int
    lost: int


class RingView:
    """A read-only numpy view of one ring file (``np.frombuffer`` over its mmap).

    The writer keeps writing while it is mapped; :meth:`read` returns a consistent copy of the
    committed records since a cursor. Opening refuses (RingFormatError) anything that is not a
    complete ring of this format, so a hostile or truncated file is never indexed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < HEADER_BYTES:
                    raise RingFormatError(f"{self.path}: {size} bytes, shorter than a ring header")
                self._map = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise RingFormatError(f"{self.path}: cannot read it ({exc.strerror or exc})") from None
        header = np.frombuffer(self._map, HEADER_DTYPE, count=1).copy()[0]  # holds no view
        problem = _header_problem(header, size)
        if problem:
            self._map.close()
            raise RingFormatError(f"{self.path}: not a DynamICCL profile ring ({problem})")
        self._header = np.frombuffer(self._map, HEADER_DTYPE, count=1)
        self.capacity = int(header["capacity"])
        self._records = np.frombuffer(self._map, RECORD_DTYPE, count=self.capacity,
                                      offset=HEADER_BYTES)
        self.info = RingInfo(self.path, int(header["comm_id"]), int(header["rank"]),
                             int(header["nranks"]), int(header["nnodes"]), int(header["pid"]),
                             int(header["abi"]), self.capacity, int(header["created_ns"]),
                             _text(header["comm_name"]), _text(header["plugin_version"]))

    def head(self) -> int:
        """Records the writers have claimed so far."""
        return int(self._header["head"][0])

    def closed(self) -> bool:
        """NCCL finalized the communicator: the ring holds all it will."""
        return bool(self._header["closed"][0])

    def started(self) -> int:
        return int(self._header["started"][0])

    def drops(self) -> dict[str, int]:
        counts = self._header["drops"][0]
        return {reason: int(counts[i]) for i, reason in enumerate(DROP_REASONS)}

    def read(self, since: int = 0) -> RingRead:
        """The records committed from index ``since`` on, up to the first one still being written
        (the next read starts there, so nothing is returned twice)."""
        head = self.head()
        first = max(since, head - self.capacity, 0)
        lost = first - since if since < first else 0
        index = np.arange(first, head, dtype=np.uint64)
        slots = (index % np.uint64(self.capacity)).astype(np.int64)
        snapshot = self._records[slots]
        recheck = self._records["commit"][slots]
        overwritten = index < np.uint64(max(self.head() - self.capacity, 0))
        good = (snapshot["commit"] == index + 1) & (recheck == snapshot["commit"]) & ~overwritten
        # stop at the first record neither good nor lost: a writer is still on it
        pending = ~good & ~overwritten
        end = int(np.argmax(pending)) if pending.any() else len(index)
        if end < len(index) and int(index[end]) + self.capacity // 2 < head:
            # a writer that died mid-record would stall every later read: give that one up
            pending[end] = False
            overwritten[end] = True
            end = int(np.argmax(pending)) if pending.any() else len(index)
        lost += int(overwritten[:end].sum())
        return RingRead(snapshot[:end][good[:end]], first + end, lost)

    def close(self) -> None:
        self._header = self._records = None  # type: ignore[assignment]
        self._map.close()

    def __enter__(self) -> RingView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _header_problem(header: np.void, size: int) -> str | None:
    if bytes(header["magic"]) != MAGIC:
        return "no ring magic: another file, or one still being created"
    if int(header["version"]) != FORMAT_VERSION:
        return f"format version {int(header['version'])}, this reader reads {FORMAT_VERSION}"
    if (int(header["header_bytes"]), int(header["record_bytes"])) != (HEADER_BYTES, RECORD_BYTES):
        return "header or record size differs from this format's"
    capacity = int(header["capacity"])
    if not MIN_RECORDS <= capacity <= MAX_RECORDS or capacity & (capacity - 1):
        return f"capacity {capacity} is not a power of two in {MIN_RECORDS}..{MAX_RECORDS}"
    if size != HEADER_BYTES + capacity * RECORD_BYTES:
        return f"{size} bytes where {capacity} records need {HEADER_BYTES + capacity * RECORD_BYTES}"
    return None


def nccl_tests_bytes(collective: np.ndarray, nbytes: np.ndarray, nranks: int) -> np.ndarray:
    """nccl-tests' size of ring records: NCCL counts an allgather's or reducescatter's elements per
    rank (its ``count``), nccl-tests' size is the whole gathered or scattered buffer."""
    split = np.isin(collective, [int(Collective.ALLGATHER), int(Collective.REDUCESCATTER)])
    return np.where(split, nbytes * np.uint64(nranks), nbytes).astype(np.uint64)


def ring_files(folder: str | Path) -> list[Path]:
    """The complete rings in ``folder`` (a ring being created has a hidden name until it is)."""
    return sorted(p for p in Path(folder).glob(f"{FILE_PREFIX}*{FILE_SUFFIX}") if p.is_file())


# ---- the generated C header ---------------------------------------------------------------------


def _c_string(text: str) -> str:
    assert all(0x20 <= ord(ch) < 0x7F and ch not in '"\\' for ch in text), text
    return f'"{text}"'


def _c_struct(name: str, fields: tuple[tuple[str, str, int, str], ...], dtype: np.dtype) -> list[str]:
    lines = ["typedef struct {"]
    for field, ctype, count, meaning in fields:
        lines.append(f"  {ctype} {field}{f'[{count}]' if count else ''}; /* {meaning} */")
    pad = dtype.itemsize - max(dtype.fields[f][1] + dtype.fields[f][0].itemsize for f in dtype.names)
    if pad:
        lines.append(f"  unsigned char reserved_[{pad}];")
    lines.append(f"}} {name};")
    lines.append(f'_Static_assert(sizeof({name}) == {dtype.itemsize}, "{name} size");')
    for field in dtype.names:
        lines.append(f"_Static_assert(offsetof({name}, {field}) == {dtype.fields[field][1]}, "
                     f'"{name}.{field}");')
    return lines


def _c_names(name: str, names: list[str]) -> str:
    return f"static const char* const {name}[{len(names)}] = {{{', '.join(map(_c_string, names))}}};"


def c_header() -> str:
    """The text of ``csrc/profiler_format.h``."""
    colls = [PROFILER_COLLECTIVE_NAMES[c] for c in sorted(PROFILER_COLLECTIVE_NAMES)]
    algos = [PROFILER_ALGORITHM_NAMES[a] for a in sorted(PROFILER_ALGORITHM_NAMES)]
    protos = [PROFILER_PROTOCOL_NAMES[p] for p in sorted(PROFILER_PROTOCOL_NAMES)]
    assert [int(c) for c in sorted(PROFILER_COLLECTIVE_NAMES)] == list(range(len(colls)))
    assert [int(a) for a in sorted(PROFILER_ALGORITHM_NAMES)] == list(range(len(algos)))
    lines = [
        "/* generated by `python -m dynamiccl.plugin.policy_format` from",
        " * dynamiccl/plugin/profile_ring.py and dynamiccl/system/nccl_profiler.py; do not edit (a",
        " * test regenerates it and fails on any difference). */",
        "#ifndef DYNAMICCL_PROFILER_FORMAT_H",
        "#define DYNAMICCL_PROFILER_FORMAT_H",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        f"#define DCCL_ENV_PROFILE {_c_string(PROFILE_ENV)}",
        f"#define DCCL_ENV_PROFILE_RECORDS {_c_string(RECORDS_ENV)}",
        f"#define DCCL_RING_DEFAULT_RECORDS {DEFAULT_RECORDS}u",
        f"#define DCCL_RING_MIN_RECORDS {MIN_RECORDS}u",
        f"#define DCCL_RING_MAX_RECORDS {MAX_RECORDS}u",
        f"#define DCCL_PROF_SLOTS {SLOTS}u",
        f"#define DCCL_PROF_STALE_NS {STALE_NS}ull",
        f"#define DCCL_PROF_EVENT_MASK {int(EVENT_MASK)}",
        f"#define DCCL_PROF_MAX_CHANNELS {MAX_CHANNELS}",
        f"#define DCCL_RING_MAGIC {_c_string(MAGIC.decode())}",
        f"#define DCCL_RING_VERSION {FORMAT_VERSION}u",
        f"#define DCCL_RING_FILE_FORMAT {_c_string(FILE_FORMAT)}",
        f"#define DCCL_RING_FLAG_TIMED {FLAG_TIMED}",
        f"#define DCCL_RING_DROP_SLOTS {DROP_SLOTS}",
        f"#define DCCL_PROF_NUM_COLLS {len(colls)}",
        f"#define DCCL_PROF_NUM_ALGOS {len(algos)}",
        f"#define DCCL_PROF_NUM_PROTOS {len(protos)}",
        f"#define DCCL_PROF_NUM_DTYPES {len(DATATYPES)}",
        "",
        "enum {",
        *[f"  DCCL_DROP_{reason.upper()} = {i}," for i, reason in enumerate(DROP_REASONS)],
        f"  DCCL_NUM_DROP_REASONS = {len(DROP_REASONS)},",
        f"  DCCL_PROF_EVENT_COLL = {int(ProfilerEvent.COLL)},",
        f"  DCCL_PROF_EVENT_KERNEL_CH = {int(ProfilerEvent.KERNEL_CH)},",
        f"  DCCL_PROF_STATE_KERNEL_CH_STOP = {PROFILER_STATE_KERNEL_CH_STOP},",
        "};",
        "",
        "/* How NCCL's descriptors spell collectives, algorithms, protocols and datatypes (index = NCCL's",
        " * id), and each datatype's size in bytes. */",
        _c_names("dccl_prof_coll_names", colls),
        _c_names("dccl_prof_algo_names", algos),
        _c_names("dccl_prof_proto_names", protos),
        _c_names("dccl_prof_dtype_names", [name for name, _ in DATATYPES]),
        f"static const uint8_t dccl_prof_dtype_bytes[{len(DATATYPES)}] = "
        f"{{{', '.join(str(size) for _, size in DATATYPES)}}};",
        "",
        f"#define DCCL_RING_NAME_BYTES {NAME_BYTES}",
        f"#define DCCL_RING_VERSION_BYTES {VERSION_BYTES}",
        *_c_struct("dccl_ring_header_t", HEADER_FIELDS, HEADER_DTYPE),
        "",
        *_c_struct("dccl_ring_record_t", RECORD_FIELDS, RECORD_DTYPE),
        "",
        "#endif",
        "",
    ]
    return "\n".join(lines)


HEADER_PATH = Path(__file__).parent / "csrc" / "profiler_format.h"
