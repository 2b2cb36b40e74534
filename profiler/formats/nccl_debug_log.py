"""Reads NCCL's own cost model out of an ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING`` log.

At communicator init, rank 0 prints NCCL's latency/bandwidth table (``src/graph/tuning.cc``): blocks
of up to three algorithms, each block a ``Algorithm |`` line, a ``Protocol |`` line, a ``Max
NThreads |`` line and one line per collective holding ``latency/bandwidth`` per (algorithm,
protocol) — latency in µs, *algorithm* bandwidth in GB/s, ``0.0`` bandwidth meaning unusable. With
``TUNING`` enabled every call then logs NCCL's pick (``src/enqueue.cc``)::

    AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}

Those two are exactly what :mod:`dynamiccl.nccl_model` claims to reproduce, so a real log is the
check (and, later, a calibration target) for the NCCL-default model: :func:`compare_tables` and
:func:`compare_picks` put them side by side (``dynamiccl check-model`` prints them). NCCL prints its
functions, algorithms and protocols in id order, which is also the model's, and spells them as
``dynamiccl.system.nccl`` records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.files import not_regular_message, text_lines
from dynamiccl.system.knobs import Config, parse_enum
from dynamiccl.system.nccl import (
    ALGORITHM_NCCL_NAMES,
    COLLECTIVE_NCCL_NAMES,
    N_ALGORITHMS,
    N_COLLECTIVES,
    N_PROTOCOLS,
    PROTOCOL_NCCL_NAMES,
    Algorithm,
    Collective,
    Protocol,
)

#: Half a unit of the table's last printed digit: NCCL prints each entry as ``%8.1f/%6.1f`` (µs/GB/s,
#: NCCL 2.28.9 src/graph/tuning.cc), so a model value within this of the printed one prints the same.
PRINTED_HALF_UNIT = 0.05

if TYPE_CHECKING:
    from dynamiccl.nccl_model import NcclModel

_FUNCTION_BY_NAME = {name: coll for coll, name in COLLECTIVE_NCCL_NAMES.items()}
_ALGORITHM_BY_NAME = {name: algo for algo, name in ALGORITHM_NCCL_NAMES.items()}
_SHAPE = (N_COLLECTIVES, N_ALGORITHMS, N_PROTOCOLS)

_INFO_RE = re.compile(r"NCCL INFO (.*)$")
_VERSION_RE = re.compile(r"NCCL version (\S+)")
_ENV_RE = re.compile(r"(NCCL_[A-Z0-9_]+) set by environment to (\S+)")
_COMM_RE = re.compile(r"\bnranks (\d+)\b")
_CELL_RE = re.compile(r"(-?[\d.]+)\s*/\s*(-?[\d.]+)")
_PICK_RE = re.compile(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)"
                      r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?")


class NcclDebugLogError(ValueError):
    """A log without NCCL's tuning output; the message says what to enable."""


@dataclass
class TuningTable:
    """One communicator's table as printed: NaN where the log printed nothing."""

    latency_us: np.ndarray = field(default_factory=lambda: np.full(_SHAPE, np.nan))
    bandwidth_GBps: np.ndarray = field(default_factory=lambda: np.full(_SHAPE, np.nan))
    max_threads: np.ndarray = field(default_factory=lambda: np.full(_SHAPE[1:], -1))


@dataclass(frozen=True)
class Pick:
    """NCCL's choice for one call."""

    collective: Collective
    nbytes: int
    algorithm: Algorithm
    protocol: Protocol
    channel_lo: int | None
    channel_hi: int | None

    @property
    def channels(self) -> int | None:
        return None if self.channel_hi is None else self.channel_hi - (self.channel_lo or 0) + 1

    @property
    def pair(self) -> str:
        """Algorithm and protocol as records store NCCL's pick (``ring/simple``)."""
        return f"{self.algorithm.name.lower()}/{self.protocol.name.lower()}"

    def label(self) -> str:
        """As :meth:`Config.label` writes a configuration (``ring/simple/4ch``)."""
        channels = "" if self.channels is None else f"/{self.channels}ch"
        return f"{self.algorithm.name.lower()}/{self.protocol.name.lower()}{channels}"


@dataclass
class NcclDebugLog:
    nccl_version: str | None
    env: dict[str, str]
    nranks: int | None
    #: The first table the log prints (the first communicator's).
    tables: list[TuningTable]
    #: Each (collective, size) once, as first logged (NCCL logs every call; later ones repeat it).
    picks: list[Pick]

    def distinct_picks(self) -> list[Pick]:
        """Each (collective, size) once, in the order first logged."""
        return list(self.picks)


def parse_debug_log_file(path: str | Path) -> NcclDebugLog:
    path = Path(path)
    special = not_regular_message(path, "NCCL debug log")
    if special:
        raise NcclDebugLogError(special)
    if path.is_dir():
        raise NcclDebugLogError(f"{path} is a folder, not an NCCL debug log; give rank 0's log "
                                "file inside it")
    try:
        return parse_debug_log_lines(text_lines(path), source=str(path))
    except FileNotFoundError:
        raise NcclDebugLogError(f"{path}: no such NCCL debug log; check the path") from None
    except OSError as exc:
        raise NcclDebugLogError(f"{path}: cannot be read ({exc.strerror or exc}); check its "
                                "permissions") from None


def parse_debug_log(text: str, source: str = "<log>") -> NcclDebugLog:
    """:func:`parse_debug_log_lines` of ``text``."""
    return parse_debug_log_lines(text.splitlines(), source)


def parse_debug_log_lines(lines: Iterable[str], source: str = "<log>") -> NcclDebugLog:
    """The first tuning table and every distinct pick in ``lines``; raises when there is neither.
    Read a line at a time and keeping only the first table and one pick per call, so a log of
    hundreds of megabytes (every call of a long job) takes memory for what it says, not its size."""
    version, env, nranks = None, {}, None
    tables: list[TuningTable] = []
    picks: dict[tuple[Collective, int], Pick] = {}
    block: list[int] = []  # algorithm indices of the current table block
    first_table_done = False
    seen: set[tuple[str, str]] = set()  # (function, bytes) of the picks read
    for lineno, line in enumerate(lines, 1):
        if version is None and (m := _VERSION_RE.search(line)):
            version = m.group(1)
        info = _INFO_RE.search(line) if "NCCL INFO" in line else None
        if not info:
            continue
        body = info.group(1)
        if "set by environment" in body and (m := _ENV_RE.search(body)):
            env[m.group(1)] = m.group(2)
        if nranks is None and (m := _COMM_RE.search(body)):
            nranks = int(m.group(1))
        head, sep, rest = body.partition("|")
        label = head.strip()
        if sep and label == "Algorithm":
            block = _block_algorithms(rest, source, lineno)
            if block and block[0] == 0:
                first_table_done = bool(tables)  # later communicators' tables are not kept
                if not tables:
                    tables.append(TuningTable())
        elif sep and label == "Max NThreads" and tables and not first_table_done:
            for i, value in enumerate(_cells(rest)[: N_PROTOCOLS * len(block)]):
                tables[-1].max_threads[block[i // N_PROTOCOLS], i % N_PROTOCOLS] = int(value)
        elif sep and label in _FUNCTION_BY_NAME and tables and not first_table_done:
            _read_row(tables[-1], _FUNCTION_BY_NAME[label], block, rest, source, lineno)
        elif "Bytes ->" in body and (m := _PICK_RE.search(body)) and m.group(1, 2) not in seen:
            seen.add(m.group(1, 2))  # a call logged again: NCCL's pick of it is the same
            pick = _pick(m, source, lineno)
            picks.setdefault((pick.collective, pick.nbytes), pick)
    if not tables and not picks:
        raise NcclDebugLogError(
            f"{source}: no NCCL tuning table and no per-call picks; rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,TUNING (rank 0 prints the table)")
    return NcclDebugLog(version, env, nranks, tables, list(picks.values()))


def parse_pick_line(line: str) -> Pick | None:
    """NCCL's pick from one ``TUNING`` line (``AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE
    ...``), or None for any other line; nccl-tests output run with ``NCCL_DEBUG=INFO`` holds them
    between its rows. The bytes are NCCL's ``nBytes`` (element size x count, x ranks for all-gather
    and reduce-scatter), which is nccl-tests' size column."""
    info = _INFO_RE.search(line)
    m = _PICK_RE.search(info.group(1)) if info else None
    if m is None or m.group(1) not in _FUNCTION_BY_NAME:
        return None
    try:
        return _pick(m, "", 0)
    except NcclDebugLogError:
        return None


def _cells(rest: str) -> list[str]:
    return [c.strip() for c in rest.split("|") if c.strip()]


def _block_algorithms(rest: str, source: str, lineno: int) -> list[int]:
    names = _cells(rest)
    unknown = [name for name in names if name not in _ALGORITHM_BY_NAME]
    if unknown:
        raise NcclDebugLogError(f"{source}:{lineno}: unknown algorithm {unknown[0]!r}; this parser "
                                f"knows {', '.join(_ALGORITHM_BY_NAME)}")
    return [int(_ALGORITHM_BY_NAME[name]) for name in names]


def _read_row(table: TuningTable, func: Collective, block: list[int], rest: str, source: str,
              lineno: int) -> None:
    cells = _CELL_RE.findall(rest)
    if len(cells) < N_PROTOCOLS * len(block):
        raise NcclDebugLogError(f"{source}:{lineno}: a {COLLECTIVE_NCCL_NAMES[func]} row needs "
                                f"{N_PROTOCOLS * len(block)} latency/bandwidth cells, found "
                                f"{len(cells)}")
    for i, (lat, bw) in enumerate(cells[: N_PROTOCOLS * len(block)]):
        algo, proto = block[i // N_PROTOCOLS], i % N_PROTOCOLS
        table.latency_us[func, algo, proto] = float(lat)
        table.bandwidth_GBps[func, algo, proto] = float(bw)


def _pick(m: re.Match, source: str, lineno: int) -> Pick:
    func = m.group(1)
    if func not in _FUNCTION_BY_NAME:
        raise NcclDebugLogError(f"{source}:{lineno}: unknown collective {func!r} in a pick line")
    try:
        algo, proto = parse_enum(Algorithm, m.group(3)), parse_enum(Protocol, m.group(4))
    except ValueError as exc:
        raise NcclDebugLogError(f"{source}:{lineno}: {exc} in a pick line") from None
    lo, hi = m.group(5), m.group(6)
    return Pick(_FUNCTION_BY_NAME[func], int(m.group(2)), Algorithm(algo), Protocol(proto),
                None if lo is None else int(lo), None if hi is None else int(hi))


@dataclass(frozen=True)
class TableEntry:
    """One (collective, algorithm, protocol) entry as NCCL printed it and as the model has it."""

    collective: Collective
    algorithm: Algorithm
    protocol: Protocol
    log_latency_us: float
    log_bandwidth_GBps: float
    model_latency_us: float
    model_bandwidth_GBps: float
    #: Both sides can use the entry and their bandwidths are within the tolerance, or equal at the
    #: precision NCCL prints (one decimal: 0.123 GB/s prints as 0.1).
    bandwidth_agrees: bool
    #: Within the tolerance, or within the print's 0.15 µs rounding.
    latency_agrees: bool

    @property
    def agrees(self) -> bool:
        return self.bandwidth_agrees and self.latency_agrees

    @property
    def label(self) -> str:
        return (f"{COLLECTIVE_NCCL_NAMES[self.collective]}/{ALGORITHM_NCCL_NAMES[self.algorithm]}/"
                f"{PROTOCOL_NCCL_NAMES[self.protocol]}")

    @property
    def usable_in_one_only(self) -> bool:
        return (self.log_bandwidth_GBps <= 0) != (self.model_bandwidth_GBps <= 0)

    @property
    def bandwidth_ratio(self) -> float:
        """model / log (1 = equal); nan where either side cannot use the entry."""
        if self.usable_in_one_only:
            return float("nan")
        return self.model_bandwidth_GBps / self.log_bandwidth_GBps

    @property
    def latency_ratio(self) -> float:
        return max(self.model_latency_us, 1e-9) / max(self.log_latency_us, 1e-9)

    def problem(self) -> str:
        """What differs, in words ('' when the entry agrees)."""
        if self.agrees:
            return ""
        if self.usable_in_one_only:
            return (f"{self.label}: log bandwidth {self.log_bandwidth_GBps:g}, model "
                    f"{self.model_bandwidth_GBps:.3g} (usable in one, not the other)")
        return (f"{self.label}: log {self.log_latency_us:g} µs / {self.log_bandwidth_GBps:g} GB/s, "
                f"model {self.model_latency_us:.3g} µs / {self.model_bandwidth_GBps:.3g} GB/s")

    def to_json(self) -> dict:
        return {"collective": self.collective.name.lower(), "algorithm": self.algorithm.name.lower(),
                "protocol": self.protocol.name.lower(), "nccl_latency_us": self.log_latency_us,
                "nccl_bandwidth_GBps": self.log_bandwidth_GBps,
                "model_latency_us": self.model_latency_us,
                "model_bandwidth_GBps": self.model_bandwidth_GBps, "agrees": self.agrees}


@dataclass(frozen=True)
class TableAgreement:
    """How a model's table compares with a printed one, over the entries either side can use."""

    rows: list[TableEntry]

    @property
    def entries(self) -> int:
        return len(self.rows)

    @property
    def matching(self) -> int:
        return sum(r.agrees for r in self.rows)

    @property
    def share(self) -> float:
        return self.matching / self.entries if self.entries else 0.0

    @property
    def worst_bandwidth_ratio(self) -> float:
        """The largest factor between the two bandwidths of an entry both sides can use (>= 1)."""
        ratios = [r.bandwidth_ratio for r in self.rows if not r.usable_in_one_only]
        return max([max(x, 1 / x) for x in ratios], default=1.0)

    @property
    def worst_latency_ratio(self) -> float:
        ratios = [r.latency_ratio for r in self.rows if not r.usable_in_one_only]
        return max([max(x, 1 / x) for x in ratios], default=1.0)

    @property
    def mismatches(self) -> list[str]:
        return [r.problem() for r in self.rows if not r.agrees]


def compare_tables(printed: TuningTable, latency_us: np.ndarray,
                   bandwidth_GBps: np.ndarray, tolerance: float = 0.10) -> TableAgreement:
    """Entry-by-entry agreement where the log prints an entry that either side can use.

    An entry NCCL marks unusable (bandwidth 0) but the model offers, or the reverse, disagrees.
    Bandwidths agree within ``tolerance`` or at the printed precision (:data:`PRINTED_HALF_UNIT`):
    below ~0.5 GB/s one printed decimal is coarser than the tolerance.
    """
    rows = []
    for f, a, p in zip(*np.nonzero(~np.isnan(printed.bandwidth_GBps)), strict=True):
        log_bw, log_lat = float(printed.bandwidth_GBps[f, a, p]), float(printed.latency_us[f, a, p])
        model_bw, model_lat = float(bandwidth_GBps[f, a, p]), float(latency_us[f, a, p])
        if log_bw <= 0 and model_bw <= 0:
            continue
        bandwidth_agrees = log_bw > 0 and model_bw > 0 and (
            max(model_bw / log_bw, log_bw / model_bw) <= 1 + tolerance
            or abs(model_bw - log_bw) <= PRINTED_HALF_UNIT)
        latency_agrees = abs(model_lat - log_lat) <= max(0.15, tolerance * log_lat)
        rows.append(TableEntry(Collective(f), Algorithm(a), Protocol(p), log_lat, log_bw,
                               model_lat, model_bw, bool(bandwidth_agrees), bool(latency_agrees)))
    return TableAgreement(rows)


@dataclass(frozen=True)
class PickComparison:
    """NCCL's logged pick for one call and the model's pick for the same call."""

    nccl: Pick
    #: None when the model finds nothing usable for the call.
    model: Config | None
    #: The channels the model's pick is dealt to, as NCCL's TUNING line counts them (the call's
    #: ``nMaxChannels`` spread by NCCL's planner: ``NcclModel.spread_channels``); None: not known.
    spread: int | None = None

    @property
    def model_channels(self) -> int | None:
        return self.spread if self.spread is not None else (self.model and self.model.channels)

    @property
    def agrees(self) -> bool:
        """Same algorithm and protocol, and the same channel count where the log prints one."""
        if self.model is None:
            return False
        return (self.model.algorithm == self.nccl.algorithm
                and self.model.protocol == self.nccl.protocol
                and self.nccl.channels in (None, self.model_channels))

    def model_label(self) -> str | None:
        """The model's pick as the log spells NCCL's (``ring/simple/2ch``: the channels it runs on)."""
        if self.model is None:
            return None
        return f"{self.model.algorithm.name.lower()}/{self.model.protocol.name.lower()}/" \
               f"{self.model_channels}ch"

    def to_json(self) -> dict:
        return {"collective": self.nccl.collective.name.lower(), "size": self.nccl.nbytes,
                "nccl": self.nccl.label(), "model": self.model_label(),
                "model_max_channels": None if self.model is None else self.model.channels,
                "agrees": self.agrees}


def compare_picks(log: NcclDebugLog, model: NcclModel) -> list[PickComparison]:
    """Every distinct logged call next to what the model picks for it, with the channels the
    model's pick is spread over (what the log's ``channel{Lo..Hi}`` counts)."""
    out = []
    for pick in log.distinct_picks():
        try:
            config = model.choose(pick.collective, pick.nbytes).config
        except ValueError:  # NCCL found something usable where the model finds nothing
            out.append(PickComparison(pick, None))
            continue
        out.append(PickComparison(pick, config, model.spread_channels(pick.collective, pick.nbytes,
                                                                      config)))
    return out
