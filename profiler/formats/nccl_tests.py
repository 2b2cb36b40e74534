"""Reads nccl-tests output (``all_reduce_perf`` and friends) into measurement records.

Users already have piles of these logs; importing them is the cheapest way to calibrate. The
format drifted across nccl-tests versions (``redop``/``root`` columns appeared, ``error`` became
``#wrong`` and may read ``N/A``, ``agg iters``/``graph`` joined the header, ``Group`` joined the rank
lines), so columns are located through the header line rather than by position. Anything the
parser cannot read is reported with the file and line number: silently dropping rows would bias
a fit. The one exception is a row of size 0 (``records.is_no_op``): nothing moved, so there is
nothing to fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from dynamiccl.files import text_lines
from dynamiccl.plugin.policy_format import POLICY_ENV
from dynamiccl.profiler.formats import plugin_log
from dynamiccl.profiler.formats.nccl_debug_log import parse_pick_line
from dynamiccl.profiler.formats.records import MeasurementRecord, is_no_op, normalize_config
from dynamiccl.system.nccl import ALGO_ENV, MAX_CHANNELS_ENV, MIN_CHANNELS_ENV, PROTO_ENV, Collective
from dynamiccl.system.nccl_versions import version_in_text


class NcclTestsParseError(ValueError):
    """Output that is not (or no longer) nccl-tests output; the message names file and line."""


#: The parser's warning where a log lists no ranks (a sidecar's nodes and GPUs per node settle it).
NO_RANK_LINES = "no '#  Rank' device lines"


@dataclass(frozen=True)
class RankDevice:
    rank: int
    host: str
    device: int
    bus_id: str
    gpu_name: str


@dataclass
class NcclTestsRun:
    """One nccl-tests invocation: its header, devices, forced environment and size table.

    One invocation is one launch: its records share a launch id (``<file>#<run index>``), and
    where NCCL's ``TUNING`` lines are in the output each record carries the pick NCCL logged for
    its size.
    """

    collective: Collective
    header: dict[str, int]
    ranks: list[RankDevice]
    env: dict[str, str]
    records: list[MeasurementRecord]
    avg_busbw_GBps: float | None = None
    nccl_version: str | None = None
    warnings: list[str] = field(default_factory=list)

    #: The output says whether NCCL_ALGO/NCCL_PROTO were set: NCCL_DEBUG=INFO lines (NCCL logs
    #: ``NCCL_ALGO set by environment to ...`` at INFO, src/graph/tuning.cc) or the variables
    #: themselves (a command line echoed into the log). nccl-tests' own text records no environment.
    #: Not where NCCL's log shows DynamICCL's tuner plugin pinning calls (a chunk-size launch of a
    #: plan): what it pinned only the launch's sidecar says (``env`` then holds ``DYNAMICCL_POLICY``:
    #: the policy the plugin logged it loaded).
    forcing_known: bool = False

    @property
    def nranks(self) -> int:
        return self.records[0].nranks if self.records else len(self.ranks)


_BINARIES = {
    "allreduce": Collective.ALLREDUCE, "allgather": Collective.ALLGATHER,
    "reducescatter": Collective.REDUCESCATTER, "broadcast": Collective.BROADCAST,
    "reduce": Collective.REDUCE,
}
_BINARY_RE = re.compile(r"\b(all_?reduce|all_?gather|reduce_?scatter|broadcast|reduce)_perf\b")
_HEADER_KEYS = {
    "nThread": "nthread", "nGpus": "ngpus", "minBytes": "min_bytes", "maxBytes": "max_bytes",
    "warmup iters:": "warmup_iters", "iters:": "iters", "agg iters:": "agg_iters",
    "validation:": "validation", "graph:": "graph",
}
_HEADER_RE = re.compile(r"(nThread|nGpus|minBytes|maxBytes|warmup iters:|agg iters:|(?<![a-z] )"
                        r"iters:|validation:|graph:)\s*(-?\d+)")
_RANK_RE = re.compile(r"#\s*Rank\s+(\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+"
                      r"(\d+)\s+\[([^\]]*)\]\s*(.*)")
_ENV_INFO_RE = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+)")
_ENV_ASSIGN_RE = re.compile(r"(?<![A-Za-z0-9_])(NCCL_[A-Z0-9_]+)=('[^']*'|\"[^\"]*\"|\S+)")
_BANNER_RE = re.compile(r"NCCL version (\S+)")
_AVG_RE = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
#: Columns repeated for the out-of-place and the in-place half (``error``: pre-2.11 max error).
_GROUP_COLUMNS = ("time", "algbw", "busbw", "wrong", "error")


def collective_from_name(text: str) -> Collective | None:
    """The collective an nccl-tests binary or file name refers to (``all_reduce_perf.log``)."""
    m = _BINARY_RE.search(text.lower()) or re.search(
        r"(all_?reduce|all_?gather|reduce_?scatter|broadcast)", text.lower())
    return _BINARIES[m.group(1).replace("_", "")] if m else None


def looks_like_nccl_tests(text: str) -> bool:
    return bool(re.search(r"^#\s*nThread\s+\d+", text, re.M)) or bool(
        re.search(r"^#\s+size\s+count\s+type", text, re.M))


#: Lines in a row that are no nccl-tests output (nor NCCL's own log lines) after which a file is
#: read no further: the rest of a log glued to junk is not worth minutes and gigabytes.
MAX_IDLE_LINES = 100_000


def parse_nccl_tests_file(path: str | Path, collective: Collective | None = None,
                          on_line: Callable[[str], None] | None = None) -> list[NcclTestsRun]:
    """:func:`parse_nccl_tests_lines` of a file, read a line at a time; each line the parser reads
    is handed to ``on_line`` too, so what else a caller looks for in the log (the tuner plugin's
    lines) is found without reading it again."""
    path = Path(path)
    lines = text_lines(path)
    if on_line is not None:
        lines = _handed_on(lines, on_line)
    return parse_nccl_tests_lines(lines, source=str(path),
                                  collective=collective or collective_from_name(path.name),
                                  launch=str(path.resolve()))


def _handed_on(lines: Iterable[str], on_line: Callable[[str], None]) -> Iterator[str]:
    for line in lines:
        on_line(line)
        yield line


def parse_nccl_tests(
    text: str, source: str = "<text>", collective: Collective | None = None,
    launch: str | None = None,
) -> list[NcclTestsRun]:
    """:func:`parse_nccl_tests_lines` of ``text``."""
    return parse_nccl_tests_lines(text.splitlines(), source, collective, launch)


def parse_nccl_tests_lines(
    lines: Iterable[str], source: str = "<text>", collective: Collective | None = None,
    launch: str | None = None,
) -> list[NcclTestsRun]:
    """Every run found in ``lines`` (logs often hold several); raises on malformed input.

    ``collective`` is the fallback when the output does not say which binary produced it;
    ``launch`` names the output in its runs' launch ids (default: ``source``). Lines that are no
    nccl-tests output (a launcher's, a job's) are passed over and counted in the last run's
    warnings; after :data:`MAX_IDLE_LINES` of them in a row the rest is not read (said too).
    """
    parser = _Parser(source, collective, launch or source)
    unparsed, idle, first = 0, 0, ""
    for lineno, line in enumerate(lines, 1):
        if parser.feed(lineno, line):
            idle = 0
            continue
        unparsed, idle = unparsed + 1, idle + 1
        first = first or f"line {lineno}: {line[:60]!r}"
        if idle >= MAX_IDLE_LINES:
            parser.stopped = (f"read no further than line {lineno}: the {MAX_IDLE_LINES} lines up "
                              "to it are no nccl-tests output, so the rest of the file is not read")
            break
    if unparsed:
        parser.notes.append(f"{unparsed} line(s) are no nccl-tests output and were passed over "
                            f"(the first, {first})")
    return parser.finish()


class _Parser:
    """A line-by-line state machine: preamble (header, devices, env) → size table → footer."""

    def __init__(self, source: str, fallback: Collective | None, launch: str) -> None:
        self.source, self.fallback, self.launch = source, fallback, launch
        self.runs: list[NcclTestsRun] = []
        #: Notes on the file as a whole (given with the last run's warnings).
        self.notes: list[str] = []
        #: Why the file was not read to its end ("" when it was).
        self.stopped = ""
        self._reset()

    def _reset(self) -> None:
        self.header: dict[str, int] = {}
        self.ranks: list[RankDevice] = []
        self.env: dict[str, str] = {}
        self.binary: Collective | None = None
        self.version: str | None = None
        self.release = ""
        self.debug_info = False
        #: NCCL's log shows DynamICCL's tuner plugin pinning calls, and the policy it loaded.
        self.steered = False
        self.policy = ""
        self.columns: list[str] | None = None
        self.rows: list[tuple[int, dict[str, str]]] = []
        self.avg: float | None = None
        self.header_line = 0
        #: NCCL's logged pick per (collective, size): the first one logged (later calls repeat it).
        self.picks: dict[tuple[Collective, int], str] = {}

    def error(self, lineno: int, problem: str) -> NcclTestsParseError:
        return NcclTestsParseError(f"{self.source}:{lineno}: {problem}")

    def feed(self, lineno: int, line: str) -> bool:
        """Reads one line; False when it is none of nccl-tests' (nor NCCL's own, nor blank)."""
        stripped = line.strip()
        if not stripped:
            return True
        if _HEADER_RE.search(stripped) and re.match(r"#\s*nThread", stripped):
            self._close()
            self.header = {_HEADER_KEYS[k]: int(v) for k, v in _HEADER_RE.findall(stripped)}
            self.header_line = lineno
            return True
        known = self._scan_metadata(stripped) or "NCCL" in stripped
        if stripped.startswith("#"):
            self._comment(lineno, stripped)
            return True
        if self.columns is not None and self.avg is None and "NCCL" not in stripped:
            self._data_row(lineno, stripped)
            return True
        return known

    def _scan_metadata(self, line: str) -> bool:
        """Whether the line named the binary, NCCL's environment or version, or a pick."""
        found = False
        binary = _BINARY_RE.search(line.lower())
        if binary and self.columns is None:
            self.binary = _BINARIES[binary.group(1).replace("_", "")]
        if m := _ENV_INFO_RE.search(line):
            self.env[m.group(1)] = m.group(2)
        elif "NCCL INFO" not in line:
            assigned = {k: v.strip("'\"") for k, v in _ENV_ASSIGN_RE.findall(line)}
            self.env.update(assigned)
            found = bool(assigned)
        self.debug_info = self.debug_info or "NCCL INFO" in line
        if plugin_log.MARK in line:
            self.steered = self.steered or plugin_log.steers(line)
            self.policy = plugin_log.policy_name(line) or self.policy
        if version := version_in_text(line):
            banner = _BANNER_RE.search(line)
            self.version = banner.group(1) if banner else self.version or str(version)
            self.release = str(version)
            found = True
        if pick := parse_pick_line(line):
            self.picks.setdefault((pick.collective, pick.nbytes), pick.pair)
        return found or binary is not None

    def _comment(self, lineno: int, line: str) -> None:
        if m := _RANK_RE.match(line):
            self.ranks.append(RankDevice(int(m.group(1)), m.group(2), int(m.group(3)),
                                         m.group(4), m.group(5).strip()))
            return
        if m := _AVG_RE.match(line):
            try:
                self.avg = float(m.group(1))
            except ValueError:
                raise self.error(lineno, f"the average bus bandwidth {m.group(1)!r} is not a "
                                 "number") from None
            return
        tokens = line.lstrip("#").split()
        if {"size", "time", "busbw"} <= set(tokens):
            if self.columns is not None and self.rows:
                self._close()
            self.columns = ["wrong" if t == "#wrong" else t for t in tokens]
            self.rows = []
            self.avg = None

    def _data_row(self, lineno: int, line: str) -> None:
        assert self.columns is not None
        values = line.split()
        if len(values) != len(self.columns):
            raise self.error(lineno, f"a size-table row needs {len(self.columns)} columns "
                             f"({' '.join(self.columns)}), this one has {len(values)}: {line!r}; "
                             "the output may be truncated or two lines run together")
        self.rows.append((lineno, dict(zip(self._column_keys(), values, strict=True))))

    def _column_keys(self) -> list[str]:
        """Column names made unique: the second timing group gets an ``ip_`` (in-place) prefix."""
        assert self.columns is not None
        keys, seen = [], set()
        for col in self.columns:
            key = f"ip_{col}" if col in seen and col in _GROUP_COLUMNS else col
            seen.add(col)
            keys.append(key)
        return keys

    def finish(self) -> list[NcclTestsRun]:
        self._close()
        if not self.runs:
            raise NcclTestsParseError(
                f"{self.source}: no nccl-tests size table found (expected a header line like "
                "'#  size  count  type  redop  root  time  algbw  busbw #wrong ...' followed by "
                "rows"
                + (f"; {self.stopped}" if self.stopped else "")
                + "); is this the output of all_reduce_perf or a similar binary?")
        self.runs[-1].warnings.extend(self.notes + ([self.stopped] if self.stopped else []))
        return self.runs

    def _close(self) -> None:
        if self.columns is None:
            return
        if not self.rows:
            raise NcclTestsParseError(f"{self.source}: the size table after line "
                                      f"{self.header_line} has no rows; the run did not finish")
        self.runs.append(self._build_run())
        self._reset()

    # -- turning rows into records --------------------------------------------------------------

    def _build_run(self) -> NcclTestsRun:
        warnings: list[str] = []
        nranks = len({r.rank for r in self.ranks})
        if not nranks:
            nranks = self.header.get("nthread", 1) * self.header.get("ngpus", 1)
            warnings.append(f"{NO_RANK_LINES}; assuming {nranks} ranks from "
                            "nThread x nGpus (wrong for multi-process MPI runs)")
        nnodes = len({r.host for r in self.ranks}) or None
        collective = self._collective(nranks)
        algo, proto, channels = _forced_config(self.env, collective)
        forcing_known = (self.debug_info or any(k in self.env for k in (ALGO_ENV, PROTO_ENV))) \
            and not self.steered
        if self.steered:
            self.env[POLICY_ENV] = self.policy or "unknown"
        records, no_ops = [], 0
        common = {"launch": f"{self.launch}#{len(self.runs)}",
                  "gpu": self.ranks[0].gpu_name if self.ranks else "",
                  "nccl_version": self.release, "forcing_unknown": not forcing_known}
        for lineno, row in self.rows:
            nbytes = _int(row, "size", lineno, self)
            if is_no_op(nbytes):
                no_ops += sum(f"{prefix}time" in row for prefix in ("", "ip_"))
                continue
            pick = self.picks.get((collective, nbytes), "")
            records += [replace(r, nccl_pick=pick, **common) for r in self._row_records(
                lineno, row, collective, nranks, nnodes, (algo, proto, channels), warnings)]
        if self.avg is None:
            warnings.append("no '# Avg bus bandwidth' footer: the output may be truncated")
        elif records:  # nccl-tests averages every printed row, the no-ops' zero bandwidth included
            mean = sum(r.busbw_GBps for r in records) / (len(records) + no_ops)
            if abs(mean - self.avg) > 0.05 * max(self.avg, 1e-3):
                warnings.append(f"the rows average {mean:.3g} GB/s bus bandwidth but the footer "
                                f"says {self.avg:.3g}: rows may be missing")
        return NcclTestsRun(collective, dict(self.header), list(self.ranks), dict(self.env),
                            records, self.avg, self.version, warnings, forcing_known)

    def _collective(self, nranks: int) -> Collective:
        if self.binary is not None:
            return self.binary
        if self.fallback is not None:
            return self.fallback
        # the first row that moved data: a no-op row's count and size are both 0 and say nothing
        lineno, row = next(((n, r) for n, r in self.rows if not is_no_op(_int(r, "size", n, self))),
                           self.rows[0])
        redop, root = row.get("redop"), row.get("root")
        if root not in (None, "-1"):
            return Collective.REDUCE if redop not in (None, "none") else Collective.BROADCAST
        if redop is not None and nranks > 1:
            per_rank = _int(row, "count", lineno, self) * _type_size(row.get("type", "float"))
            split = per_rank * nranks == _int(row, "size", lineno, self)
            if redop == "none":
                return Collective.ALLGATHER
            return Collective.REDUCESCATTER if split else Collective.ALLREDUCE
        raise NcclTestsParseError(
            f"{self.source}:{self.header_line}: cannot tell which collective this output is from; "
            "name the file after the binary (e.g. all_reduce_perf.txt) or pass --collective")

    def _row_records(self, lineno: int, row: dict[str, str], collective: Collective, nranks: int,
                     nnodes: int | None, config: tuple, warnings: list[str]) -> list[MeasurementRecord]:
        nbytes = _int(row, "size", lineno, self)
        out = []
        for prefix, in_place in (("", False), ("ip_", True)):
            if f"{prefix}time" not in row:
                continue
            wrong = row.get(f"{prefix}wrong", "N/A")
            if wrong != "N/A" and _int(row, f"{prefix}wrong", lineno, self) > 0:
                warnings.append(f"line {lineno}: {wrong} wrong values "
                                f"({'in' if in_place else 'out-of'}-place); row skipped")
                continue
            time_us = _float(row, f"{prefix}time", lineno, self)
            if not (math.isfinite(time_us) and time_us > 0):  # nan and inf too
                warnings.append(f"line {lineno}: time {time_us} is not a positive number; skipped")
                continue
            out.append(MeasurementRecord(
                collective=collective.name.lower(), nbytes=nbytes, nranks=nranks, time_us=time_us,
                algbw_GBps=_float(row, f"{prefix}algbw", lineno, self),
                busbw_GBps=_float(row, f"{prefix}busbw", lineno, self),
                algorithm=config[0], protocol=config[1], channels=config[2], nnodes=nnodes,
                in_place=in_place, backend="nccl", source=f"{self.source}:{lineno}",
                env=dict(self.env)))
        return out


def _int(row: dict[str, str], key: str, lineno: int, parser: _Parser) -> int:
    try:
        return int(row[key])
    except (KeyError, ValueError):
        raise parser.error(lineno, f"column {key!r} should be an integer, "
                           f"got {row.get(key)!r}") from None


def _float(row: dict[str, str], key: str, lineno: int, parser: _Parser) -> float:
    try:
        return float(row[key])
    except (KeyError, ValueError):
        raise parser.error(lineno, f"column {key!r} should be a number, "
                           f"got {row.get(key)!r}") from None


_TYPE_SIZES = {"int8": 1, "uint8": 1, "char": 1, "half": 2, "bfloat16": 2, "float16": 2,
               "fp8_e4m3": 1, "fp8_e5m2": 1, "int32": 4, "uint32": 4, "int": 4, "float": 4,
               "float32": 4, "int64": 8, "uint64": 8, "double": 8, "float64": 8}


def _type_size(name: str) -> int:
    return _TYPE_SIZES.get(name, 4)


def _forced_config(env: dict[str, str], collective: Collective) -> tuple[str | None, str | None, int | None]:
    """What ``NCCL_ALGO``/``NCCL_PROTO``/channel limits pinned down for ``collective``.

    Only a single named choice counts as forced; a list or an exclusion (``^LL``) leaves NCCL to
    choose, so the record stays "NCCL chose" for that knob.
    """
    algo = _single_choice(env.get(ALGO_ENV), collective)
    proto = _single_choice(env.get(PROTO_ENV), collective)
    try:
        algo, proto = normalize_config(algo, proto)
    except ValueError:
        algo, proto = None, None
    lo = env.get(MIN_CHANNELS_ENV) or env.get("NCCL_MIN_CTAS")
    hi = env.get(MAX_CHANNELS_ENV) or env.get("NCCL_MAX_CTAS")
    channels = int(lo) if lo and hi and lo == hi and lo.isdigit() else None
    return algo, proto, channels


def _single_choice(value: str | None, collective: Collective) -> str | None:
    """The one choice an NCCL_ALGO/NCCL_PROTO value (2.24+ ``func:list;func:list``) makes."""
    if not value:
        return None
    chosen = None
    for part in value.split(";"):
        func, _, choices = part.rpartition(":")
        if func and func.strip().lower().replace("_", "") != collective.name.lower():
            continue
        chosen = choices.strip()
    if not chosen or chosen.startswith("^") or "," in chosen:
        return None
    return chosen
