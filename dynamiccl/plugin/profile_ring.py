"""The profiler's ring, written once: the file the C plugin fills and every Python reader reads.

With ``DYNAMICCL_PROFILE=DIR`` set when NCCL initialises a communicator, the plugin library (loaded
as NCCL's profiler plugin through ``NCCL_PROFILER_PLUGIN``) writes one ring per communicator and
rank: ``DIR/dynamiccl-<pid>-<n>-<commId>-r<rank>.ring``, readable by its owner only (0600), created
under a hidden name and renamed once its header is complete. A ring that cannot be created (a full
``/dev/shm``) leaves ``...-r<rank>.failed`` holding the reason instead, so a reader knows the
profile misses that rank (:func:`failed_rings`). The file is a :data:`HEADER_BYTES` header and a
power-of-two number of :data:`RECORD_BYTES` records, one per completed collective
(:data:`RECORD_FIELDS`). The plugin never waits for a reader: a full ring overwrites its oldest
records, and a reader that fell behind is told how many it lost.

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

import os
import stat
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
from dynamiccl.system.topology import MAX_RANKS
from dynamiccl.system.units import MAX_DURATION_US, SIZE_LIMIT

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
#: What the plugin leaves, named like the ring, when it cannot create one (its text: the reason).
FAILED_SUFFIX = ".failed"
FAILED_FORMAT = FILE_FORMAT[: -len(FILE_SUFFIX)] + FAILED_SUFFIX
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
    """One ring file, read with ``pread`` into copies (never mapped: a file cut short while mapped
    kills the reader with SIGBUS; read, it is a short read, refused in one line).

    The writer keeps writing while it is read; :meth:`read` returns a consistent copy of the
    committed records since a cursor, each field checked as it is read. Opening refuses
    (RingFormatError) anything that is not a complete ring of this format written by this user, and
    :meth:`read` a record no plugin writes, so a hostile or truncated file is never indexed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.capacity = 0  # until the header is read
        try:  # a symlink, a FIFO or a device planted under a ring's name is not opened as one
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise RingFormatError(f"{self.path}: cannot read it ({exc.strerror or exc})") from None
        try:
            self._check_file()
            header = self._header()
            problem = _header_problem(header, os.fstat(self._fd).st_size)
            if problem:
                raise RingFormatError(f"{self.path}: not a DynamICCL profile ring ({problem})")
        except BaseException:
            os.close(self._fd)
            raise
        self.capacity = int(header["capacity"])
        self.info = RingInfo(self.path, int(header["comm_id"]), int(header["rank"]),
                             int(header["nranks"]), int(header["nnodes"]), int(header["pid"]),
                             int(header["abi"]), self.capacity, int(header["created_ns"]),
                             _text(header["comm_name"]), _text(header["plugin_version"]))

    def _check_file(self) -> None:
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode):
            raise RingFormatError(f"{self.path}: not a regular file, so not a ring the plugin wrote")
        if st.st_uid != os.geteuid():
            raise RingFormatError(f"{self.path}: owned by user id {st.st_uid}, not by this user "
                                  f"({os.geteuid()}), so not a ring this job's plugin wrote")
        if st.st_size < HEADER_BYTES:
            raise RingFormatError(f"{self.path}: {st.st_size} bytes, shorter than a ring header")

    def _pread(self, size: int, offset: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise RingFormatError(f"{self.path}: cut short while being read ({offset + len(data)} "
                                  f"bytes where the ring has {offset + size}); the file was truncated")
        return data

    def _header(self) -> np.void:
        size = os.fstat(self._fd).st_size
        if self.capacity and size != HEADER_BYTES + self.capacity * RECORD_BYTES:
            raise RingFormatError(f"{self.path}: cut short while being read ({size} bytes where the "
                                  f"ring has {HEADER_BYTES + self.capacity * RECORD_BYTES}); the "
                                  "file was truncated")
        return np.frombuffer(self._pread(HEADER_BYTES, 0), HEADER_DTYPE, count=1)[0]

    def head(self) -> int:
        """Records the writers have claimed so far."""
        return int(self._header()["head"])

    def closed(self) -> bool:
        """NCCL finalized the communicator: the ring holds all it will."""
        return bool(self._header()["closed"])

    def started(self) -> int:
        return int(self._header()["started"])

    def drops(self) -> dict[str, int]:
        counts = self._header()["drops"]
        return {reason: int(counts[i]) for i, reason in enumerate(DROP_REASONS)}

    def _slots(self, first: int, count: int) -> np.ndarray:
        """A copy of ``count`` records from index ``first`` on (wrapping around the ring)."""
        start = first % self.capacity
        head = min(count, self.capacity - start)
        data = self._pread(head * RECORD_BYTES, HEADER_BYTES + start * RECORD_BYTES)
        if count > head:
            data += self._pread((count - head) * RECORD_BYTES, HEADER_BYTES)
        return np.frombuffer(data, RECORD_DTYPE, count=count)

    def read(self, since: int = 0) -> RingRead:
        """The records committed from index ``since`` on, up to the first one still being written
        (the next read starts there, so nothing is returned twice). RingFormatError names the
        first record no plugin writes (an unknown id, a stop before its start) or a file cut short."""
        head = self.head()
        first = max(since, head - self.capacity, 0)
        lost = first - since if since < first else 0
        count = max(head - first, 0)
        index = np.arange(first, first + count, dtype=np.uint64)
        snapshot = self._slots(first, count)
        recheck = self._slots(first, count)["commit"]
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
        records = snapshot[:end][good[:end]]
        problem = record_problem(records, self.info.nranks)
        if problem:
            raise RingFormatError(f"{self.path}: not a ring the plugin wrote ({problem})")
        return RingRead(records, first + end, lost)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

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
    nranks, rank, nnodes = int(header["nranks"]), int(header["rank"]), int(header["nnodes"])
    if not 1 <= nranks <= MAX_RANKS:
        return f"nranks {nranks} is not a rank count (1..{MAX_RANKS})"
    if not 0 <= rank < nranks:
        return f"rank {rank} is not one of its {nranks} ranks"
    if not 1 <= nnodes <= nranks:
        return f"nnodes {nnodes} is not a node count of {nranks} ranks"
    return None


#: The ids a record may hold: NCCL's collectives, algorithms, protocols and datatypes as the plugin
#: numbers them (index into the generated name tables).
_ID_FIELDS = (("coll", "collective", len(PROFILER_COLLECTIVE_NAMES)),
              ("algo", "algorithm", len(PROFILER_ALGORITHM_NAMES)),
              ("proto", "protocol", len(PROFILER_PROTOCOL_NAMES)), ("dtype", "datatype", len(DATATYPES)))
#: The longest GPU time a record may hold (an hour, as any measurement).
MAX_GPU_NS = int(MAX_DURATION_US * 1000)


def record_problem(records: np.ndarray, nranks: int) -> str | None:
    """What no plugin writes in a batch of ``records`` of a ring of ``nranks`` ranks (the first
    record's problem, in words), None when every field is one the plugin can write."""
    bad: list[tuple[int, str]] = []
    for field, what, count in _ID_FIELDS:
        values = records[field].astype(np.int64)
        out = np.flatnonzero((values < 0) | (values >= count))
        if len(out):
            bad.append((int(out[0]), f"{what} id {int(values[out[0]])}, which NCCL does not have"))
    out = np.flatnonzero(records["channels"] > MAX_CHANNELS)
    if len(out):
        bad.append((int(out[0]), f"{int(records['channels'][out[0]])} channels (NCCL runs at most "
                                 f"{MAX_CHANNELS})"))
    timed = (records["flags"] & FLAG_TIMED) != 0
    start, stop = records["gpu_start_ns"], records["gpu_stop_ns"]
    out = np.flatnonzero(timed & (stop < start))
    if len(out):
        bad.append((int(out[0]), "a GPU stop before its start"))
    out = np.flatnonzero(timed & (stop >= start) & (stop - start > np.uint64(MAX_GPU_NS)))
    if len(out):
        bad.append((int(out[0]), "a GPU time longer than an hour"))
    split = np.isin(records["coll"], [int(Collective.ALLGATHER), int(Collective.REDUCESCATTER)])
    limit = np.where(split, np.uint64((SIZE_LIMIT - 1) // nranks), np.uint64(SIZE_LIMIT - 1))
    out = np.flatnonzero(records["bytes"] > limit)
    if len(out):
        bad.append((int(out[0]), f"{int(records['bytes'][out[0]])} bytes"))
    if not bad:
        return None
    at, what = min(bad)
    return f"record of call {int(records['seq'][at])}: {what}"


def nccl_tests_bytes(collective: np.ndarray, nbytes: np.ndarray, nranks: int) -> np.ndarray:
    """nccl-tests' size of ring records: NCCL counts an allgather's or reducescatter's elements per
    rank (its ``count``), nccl-tests' size is the whole gathered or scattered buffer."""
    split = np.isin(collective, [int(Collective.ALLGATHER), int(Collective.REDUCESCATTER)])
    return np.where(split, nbytes * np.uint64(nranks), nbytes).astype(np.uint64)


def ring_files(folder: str | Path) -> list[Path]:
    """The complete rings in ``folder`` (a ring being created has a hidden name until it is): every
    file named as one, symbolic links included (:class:`RingView` refuses what is not a ring)."""
    return sorted(p for p in Path(folder).glob(f"{FILE_PREFIX}*{FILE_SUFFIX}")
                  if p.is_symlink() or p.is_file())


#: Bytes of a ``.failed`` note read at most.
FAILED_BYTES = 512


def failed_rings(folder: str | Path) -> dict[Path, str]:
    """The rings the plugin could not create in ``folder`` (their ``.failed`` notes, this user's
    regular files only, as rings are), with why."""
    out = {}
    for path in sorted(Path(folder).glob(f"{FILE_PREFIX}*{FAILED_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            text = os.read(fd, FAILED_BYTES)
        finally:
            os.close(fd)
        why = text.decode("utf-8", "replace").strip().splitlines()
        out[path] = why[0] if why else "no reason recorded (the disk was full)"
    return out


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
        f"#define DCCL_RING_FAILED_FORMAT {_c_string(FAILED_FORMAT)}",
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
