"""Reads (and writes) the measurement CSV of NVIDIA's example tuner workflow.

NCCL's ``plugins/tuner/example/scripts/optimize_config.py`` turns a sweep into the tuner's config
file; its input is one row per measured configuration::

    collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,bandwidth_gbps,latency_us

(``cost_metric`` may sit before ``bandwidth_gbps``, written here as nccl-tests' busbw in GB/s; ``-1``
means "not set"; ``latency_us`` is the
measured time of the call). Users who already swept their system have this file, so it calibrates
the model without re-measuring. This is *not* the tuner's config CSV
(:mod:`dynamiccl.plugin.nccl_csv` writes that one).

The replay tables of ``tests/fixtures/real/replay`` use the same columns plus ``system``,
``source`` and ``latency_inplace_us`` (nccl-tests' in-place time of the same call, read as a second,
in-place record: the same call timed twice within one launch); an ``algorithm``/``protocol`` of
``default`` marks NCCL's own choice, which the records store as ``None`` ("NCCL chose"). Their
``run`` column names the log a row comes from, one launch: the records of one run share the launch
id ``<file>#<run>``. Rows without a run say nothing about their launch (``launch`` stays "").
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from dynamiccl.files import text_lines
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths, is_no_op, normalize_config
from dynamiccl.system.knobs import NCCL_KNOBS, Collective

#: The columns optimize_config.py reads; ``cost_metric`` is optional.
REQUIRED = ("collective", "size_bytes", "algorithm", "protocol", "channels", "nodes", "ranks",
            "latency_us")
COLUMNS = ("collective", "size_bytes", "algorithm", "protocol", "channels", "nodes", "ranks",
           "pipeOps", "regBuff", "bandwidth_gbps", "latency_us")
#: Optional: the same call's in-place time (nccl-tests' second timing group), µs; empty = none.
INPLACE_COLUMN = "latency_inplace_us"
#: Optional: the log (one launch) a row comes from, as the replay tables name it.
RUN_COLUMN = "run"
#: Values meaning "NCCL decides" in the algorithm/protocol/channels/nodes columns.
UNSET = ("", "-1", "default", "auto")
#: NCCL knobs beyond the workflow's algorithm, protocol and channels: a column each, named as the
#: knob, read where present and written always (-1 = NCCL's own value).
EXTRA_KNOBS = tuple(k for k in NCCL_KNOBS if k.name not in COLUMNS)


class TunerCsvError(ValueError):
    """A row or header optimize_config.py would not accept either; the message names the line."""


def looks_like_tuner_csv(text: str) -> bool:
    header = text.lstrip().splitlines()[0] if text.strip() else ""
    names = {c.strip() for c in header.split(",")}
    return set(REQUIRED) <= names


def read_tuner_csv(path: str | Path) -> list[MeasurementRecord]:
    """:func:`parse_tuner_csv` of a file, read a line at a time."""
    path = Path(path)
    return parse_tuner_csv(text_lines(path), source=str(path), launch=str(path.resolve()))


def parse_tuner_csv(text: str | Iterable[str], source: str = "<csv>", launch: str | None = None
                    ) -> list[MeasurementRecord]:
    """One record per row (no-op sizes dropped); a malformed row raises with ``source:line`` and
    the fix. ``text``: the CSV, or its lines. ``launch`` names the file in the launch ids of rows
    with a ``run`` (default: ``source``)."""
    lines = text.splitlines() if isinstance(text, str) else text
    reader = csv.DictReader(itertools.dropwhile(lambda line: not line.strip(), lines))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise TunerCsvError(f"{source}: the header lacks {', '.join(missing)}; NVIDIA's tuner "
                            f"measurement CSV has the columns {','.join(COLUMNS)}")
    records = []
    for lineno, row in enumerate(reader, 2):
        where = f"{source}:{lineno}"
        try:
            record = _record(row, where)
        except (KeyError, ValueError) as exc:
            raise TunerCsvError(f"{where}: {exc}; each row needs a collective name, integer "
                                "size_bytes/channels/nodes/ranks (-1 = unset) and a positive "
                                "latency_us") from None
        if is_no_op(record.nbytes):
            continue
        run = (row.get(RUN_COLUMN) or "").strip()
        if run:
            record = replace(record, launch=f"{launch or source}#{run}")
        records.append(record)
        again = (row.get(INPLACE_COLUMN) or "").strip()
        if again:
            try:
                records.append(_timed_again(record, float(again)))
            except ValueError:
                raise TunerCsvError(f"{where}: {INPLACE_COLUMN} is {again!r}; give the in-place "
                                    "time in µs, or leave it empty") from None
    if not records:
        raise TunerCsvError(f"{source}: a header but no measurement rows")
    return records


def _record(row: dict[str, str], where: str) -> MeasurementRecord:
    coll = Collective[row["collective"].strip().upper().replace("_", "")]
    nbytes = int(row["size_bytes"])
    ranks = int(row["ranks"])
    if ranks < 1:
        raise ValueError(f"ranks is {ranks}; the replay needs the measured rank count")
    time_us = float(row["latency_us"])
    algo = _unset_or(row["algorithm"])
    proto = _unset_or(row["protocol"])
    algo, proto = normalize_config(algo, proto)
    channels = _int_or_none(row["channels"])
    nodes = _int_or_none(row["nodes"])
    algbw, busbw = bandwidths(coll, nbytes, ranks, time_us)
    extra = {k.name: k.record(k.value(_unset_or(row.get(k.name)))) for k in EXTRA_KNOBS}
    return MeasurementRecord(coll.name.lower(), nbytes, ranks, time_us, algbw, busbw, algo, proto,
                             channels, nodes, source=row.get("source") or where, **extra)


def _timed_again(record: MeasurementRecord, time_us: float) -> MeasurementRecord:
    if not (math.isfinite(time_us) and time_us > 0):
        raise ValueError(f"time {time_us}")
    algbw, busbw = bandwidths(record.coll, record.nbytes, record.nranks, time_us)
    return replace(record, time_us=time_us, algbw_GBps=algbw, busbw_GBps=busbw, in_place=True)


def _unset_or(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value.lower() in UNSET else value


def _int_or_none(value: str | None) -> int | None:
    value = (value or "").strip()
    return None if value.lower() in UNSET else int(value)


def tuner_csv_rows(records: Iterable[MeasurementRecord],
                   extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Rows in the workflow's columns (plus ``extra``), NCCL's own choice as ``default``."""
    rows = []
    for rec in records:
        row = {
            "collective": rec.collective, "size_bytes": str(rec.nbytes),
            "algorithm": rec.algorithm or "default", "protocol": rec.protocol or "default",
            "channels": str(rec.channels or -1),
            **{k.name: str(getattr(rec, k.name) if getattr(rec, k.name) is not None else -1)
               for k in EXTRA_KNOBS},
            "nodes": str(rec.nnodes or -1),
            "ranks": str(rec.nranks), "pipeOps": "-1", "regBuff": "-1",
            "bandwidth_gbps": f"{rec.busbw_GBps:.4g}", "latency_us": f"{rec.time_us:g}",
        }
        rows.append({**(extra or {}), **row})
    return rows
