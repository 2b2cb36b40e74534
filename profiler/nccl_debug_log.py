"""Reads NCCL's own cost model out of an ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING`` log.

At communicator init, rank 0 prints NCCL's latency/bandwidth table (``src/graph/tuning.cc``): blocks
of up to three algorithms, each block a ``Algorithm |`` line, a ``Protocol |`` line, a ``Max
NThreads |`` line and one line per collective holding ``latency/bandwidth`` per (algorithm,
protocol) — latency in µs, *algorithm* bandwidth in GB/s, ``0.0`` bandwidth meaning unusable. With
``TUNING`` enabled every call then logs NCCL's pick (``src/enqueue.cc``)::

    AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}

Those two are exactly what :mod:`dynamiccl.nccl_model` claims to reproduce, so a real log is the
check (and, later, a calibration target) for the NCCL-default model. Indices follow NCCL's print
order, which is also the model's: functions Broadcast, Reduce, AllGather, ReduceScatter, AllReduce;
algorithms Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT; protocols LL, LL128, Simple.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dynamiccl.knobs import Collective

FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")

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

    latency_us: np.ndarray = field(default_factory=lambda: np.full((5, 7, 3), np.nan))
    bandwidth_GBps: np.ndarray = field(default_factory=lambda: np.full((5, 7, 3), np.nan))
    max_threads: np.ndarray = field(default_factory=lambda: np.full((7, 3), -1))


@dataclass(frozen=True)
class Pick:
    """NCCL's choice for one call."""

    collective: Collective
    nbytes: int
    algorithm: str
    protocol: str
    channel_lo: int | None
    channel_hi: int | None

    @property
    def channels(self) -> int | None:
        return None if self.channel_hi is None else self.channel_hi - (self.channel_lo or 0) + 1


@dataclass
class NcclDebugLog:
    nccl_version: str | None
    env: dict[str, str]
    nranks: int | None
    tables: list[TuningTable]
    picks: list[Pick]

    def distinct_picks(self) -> list[Pick]:
        """Each (collective, size) once, in the order first logged (later repeats are dropped)."""
        seen: dict[tuple[Collective, int], Pick] = {}
        for pick in self.picks:
            seen.setdefault((pick.collective, pick.nbytes), pick)
        return list(seen.values())


def parse_debug_log_file(path: str | Path) -> NcclDebugLog:
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise NcclDebugLogError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_debug_log(text, source=str(path))


def parse_debug_log(text: str, source: str = "<log>") -> NcclDebugLog:
    """Every tuning table and pick in ``text``; raises when there is neither."""
    version, env, nranks = None, {}, None
    tables: list[TuningTable] = []
    picks: list[Pick] = []
    block: list[int] = []  # algorithm indices of the current table block
    for lineno, line in enumerate(text.splitlines(), 1):
        if m := _VERSION_RE.search(line):
            version = version or m.group(1)
        info = _INFO_RE.search(line)
        if not info:
            continue
        body = info.group(1)
        if m := _ENV_RE.search(body):
            env[m.group(1)] = m.group(2)
        if nranks is None and (m := _COMM_RE.search(body)):
            nranks = int(m.group(1))
        head, sep, rest = body.partition("|")
        label = head.strip()
        if sep and label == "Algorithm":
            block = _block_algorithms(rest, source, lineno)
            if block and block[0] == 0:
                tables.append(TuningTable())
        elif sep and label == "Max NThreads" and tables:
            for i, value in enumerate(_cells(rest)[: 3 * len(block)]):
                tables[-1].max_threads[block[i // 3], i % 3] = int(value)
        elif sep and label in FUNCTIONS and tables:
            _read_row(tables[-1], FUNCTIONS.index(label), block, rest, source, lineno)
        elif m := _PICK_RE.search(body):
            picks.append(_pick(m, source, lineno))
    if not tables and not picks:
        raise NcclDebugLogError(
            f"{source}: no NCCL tuning table and no per-call picks; rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,TUNING (rank 0 prints the table)")
    return NcclDebugLog(version, env, nranks, tables, picks)


def _cells(rest: str) -> list[str]:
    return [c.strip() for c in rest.split("|") if c.strip()]


def _block_algorithms(rest: str, source: str, lineno: int) -> list[int]:
    names = _cells(rest)
    try:
        return [ALGORITHMS.index(name) for name in names]
    except ValueError:
        raise NcclDebugLogError(f"{source}:{lineno}: unknown algorithm in {names}; this parser "
                                f"knows {', '.join(ALGORITHMS)}") from None


def _read_row(table: TuningTable, func: int, block: list[int], rest: str, source: str,
              lineno: int) -> None:
    cells = _CELL_RE.findall(rest)
    if len(cells) < 3 * len(block):
        raise NcclDebugLogError(f"{source}:{lineno}: a {FUNCTIONS[func]} row needs "
                                f"{3 * len(block)} latency/bandwidth cells, found {len(cells)}")
    for i, (lat, bw) in enumerate(cells[: 3 * len(block)]):
        algo, proto = block[i // 3], i % 3
        table.latency_us[func, algo, proto] = float(lat)
        table.bandwidth_GBps[func, algo, proto] = float(bw)


def _pick(m: re.Match, source: str, lineno: int) -> Pick:
    func = m.group(1)
    if func not in FUNCTIONS:
        raise NcclDebugLogError(f"{source}:{lineno}: unknown collective {func!r} in a pick line")
    lo, hi = m.group(5), m.group(6)
    return Pick(Collective[func.upper()], int(m.group(2)), m.group(3).lower(),
                m.group(4).lower(), None if lo is None else int(lo), None if hi is None else int(hi))


@dataclass(frozen=True)
class TableAgreement:
    """How a model's table compares with a printed one, over the entries NCCL can use."""

    entries: int
    #: Entries within 10 % (latency: or within 0.15 µs, the print's rounding) in both numbers.
    matching: int
    worst_latency_ratio: float
    worst_bandwidth_ratio: float
    mismatches: list[str]

    @property
    def share(self) -> float:
        return self.matching / self.entries if self.entries else 0.0


def compare_tables(printed: TuningTable, latency_us: np.ndarray,
                   bandwidth_GBps: np.ndarray, tolerance: float = 0.10) -> TableAgreement:
    """Entry-by-entry agreement where the log prints a usable entry (bandwidth > 0).

    An entry NCCL marks unusable but the model offers (or the reverse) counts as a mismatch too.
    """
    entries = matching = 0
    worst_lat = worst_bw = 1.0
    mismatches = []
    for f, a, p in zip(*np.nonzero(~np.isnan(printed.bandwidth_GBps)), strict=True):
        log_bw, log_lat = printed.bandwidth_GBps[f, a, p], printed.latency_us[f, a, p]
        model_bw, model_lat = float(bandwidth_GBps[f, a, p]), float(latency_us[f, a, p])
        if log_bw <= 0 and model_bw <= 0:
            continue
        entries += 1
        where = f"{FUNCTIONS[f]}/{ALGORITHMS[a]}/{PROTOCOLS[p]}"
        if (log_bw <= 0) != (model_bw <= 0):
            mismatches.append(f"{where}: log bandwidth {log_bw:g}, model {model_bw:.3g} "
                              "(usable in one, not the other)")
            continue
        bw_ratio = max(model_bw / log_bw, log_bw / model_bw)
        lat_ok = abs(model_lat - log_lat) <= max(0.15, tolerance * log_lat)
        lat_ratio = max(model_lat, 1e-9) / max(log_lat, 1e-9)
        worst_bw = max(worst_bw, bw_ratio)
        worst_lat = max(worst_lat, lat_ratio, 1 / lat_ratio)
        if bw_ratio <= 1 + tolerance and lat_ok:
            matching += 1
        else:
            mismatches.append(f"{where}: log {log_lat:g} µs / {log_bw:g} GB/s, model "
                              f"{model_lat:.3g} µs / {model_bw:.3g} GB/s")
    return TableAgreement(entries, matching, worst_lat, worst_bw, mismatches)
