"""Reads the JSON report nccl-tests writes with ``-J FILE.json`` (report version 3).

Layout (nccl-tests ``src/util.cu``): one object with ``version``, ``args`` (the command line, whose
first entry names the binary), ``env`` (``"NAME=value"`` strings, so a forced ``NCCL_ALGO`` is in
the file), ``nccl_version`` (an integer such as 22703), ``config`` (threads, GPUs per thread, sizes
and a ``devices`` list with one entry per rank: ``rank``, ``hostname``, ``device``…), ``results``
(one object per size with ``size``, ``count``, ``type``, ``redop``, ``root`` and ``out_of_place`` /
``in_place`` objects holding ``time`` or ``cpu_time`` in µs, ``alg_bw``, ``bus_bw``, ``nwrong``;
a skipped half is ``null``), then ``out_of_bounds`` and ``average_bus_bandwidth``.

The report names no collective except through the binary in ``args``, so the file name and the
row shapes are the fall-backs, as for the text output.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynamiccl.profiler.formats.nccl_tests import _TYPE_SIZES, _forced_config, collective_from_name
from dynamiccl.profiler.formats.records import MeasurementRecord, is_no_op
from dynamiccl.system.knobs import Collective
from dynamiccl.system.nccl_versions import parse_version


class NcclTestsJsonError(ValueError):
    """A JSON file that is not an nccl-tests report; the message names the file and the field."""


@dataclass
class NcclTestsJsonRun:
    collective: Collective
    env: dict[str, str]
    nccl_version: str | None
    records: list[MeasurementRecord]
    warnings: list[str] = field(default_factory=list)


#: The largest -J report read (one holds a few kilobytes per size measured): it is read whole.
MAX_REPORT_BYTES = 64 << 20


def parse_nccl_tests_json_file(path: str | Path, collective: Collective | None = None) -> NcclTestsJsonRun:
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_REPORT_BYTES:
        raise NcclTestsJsonError(f"{path}: {size} bytes, more than any nccl-tests -J report "
                                 f"({MAX_REPORT_BYTES >> 20} MiB at most: a report is a few kB per "
                                 "size); give the report of one run")
    try:
        report = json.loads(path.read_text(errors="replace"))
    except json.JSONDecodeError as exc:
        raise NcclTestsJsonError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); an nccl-tests "
                                 "-J report is one JSON object — was the run cut short?") from None
    except RecursionError:
        raise NcclTestsJsonError(f"{path}: JSON nested too deeply to be an nccl-tests -J report") from None
    try:
        return parse_nccl_tests_json(report, source=str(path), collective=collective,
                                     launch=str(path.resolve()))
    except (AttributeError, TypeError) as exc:  # a field of another kind than the report's
        raise NcclTestsJsonError(f"{path}: not shaped like the report nccl-tests writes with -J "
                                 f"({exc})") from None


def parse_nccl_tests_json(report: Any, source: str = "<json>",
                          collective: Collective | None = None,
                          launch: str | None = None) -> NcclTestsJsonRun:
    """``collective`` is the fallback when neither ``args`` nor the file name names the binary.
    A report is one run of the binary, so one launch: its records share the launch id ``launch``
    (default: ``source``)."""
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise NcclTestsJsonError(f"{source}: no 'results' list; expected the report nccl-tests "
                                 "writes with -J FILE.json")
    env = _env(report.get("env"))
    config = report.get("config") or {}
    devices = config.get("devices") or []
    nranks = len({d.get("rank") for d in devices if isinstance(d, dict)})
    warnings = []
    if not nranks:
        nranks = int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
        warnings.append(f"no devices listed; assuming {nranks} ranks from nthreads x ngpus")
    nnodes = len({d.get("hostname") for d in devices if isinstance(d, dict)}) or None
    gpu = next((str(d.get("device_info") or "") for d in devices if isinstance(d, dict)), "")
    collective = _collective(report, source, nranks, collective)
    algo, proto, channels = _forced_config(env, collective)
    version = _version(report.get("nccl_version"))
    records = []
    for i, row in enumerate(report["results"]):
        where = f"{source}:results[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("size"), int) or row["size"] < 0:
            raise NcclTestsJsonError(f"{where}: a result needs a whole-number 'size' and timing "
                                     "objects")
        if is_no_op(row["size"]):
            continue
        for key, in_place in (("out_of_place", False), ("in_place", True)):
            half = row.get(key)
            if half is None:
                continue
            time_us = half.get("time", half.get("cpu_time"))
            if not isinstance(time_us, (int, float)) or not (math.isfinite(time_us) and time_us > 0):
                warnings.append(f"{where}.{key}: time {time_us!r} is not a positive number; skipped")
                continue
            if half.get("nwrong"):
                warnings.append(f"{where}.{key}: {half['nwrong']:g} wrong values; skipped")
                continue
            records.append(MeasurementRecord(
                collective.name.lower(), row["size"], nranks, float(time_us),
                float(half.get("alg_bw", 0.0)), float(half.get("bus_bw", 0.0)), algo, proto,
                channels, nnodes, in_place, source=where, env=dict(env), launch=launch or source,
                gpu=gpu, nccl_version=version or ""))
    return NcclTestsJsonRun(collective, env, version, records, warnings)


def _env(entries: Any) -> dict[str, str]:
    out = {}
    for entry in entries or []:
        name, sep, value = str(entry).partition("=")
        if sep and name.startswith("NCCL_"):
            out[name] = value
    return out


def _collective(report: dict[str, Any], source: str, nranks: int,
                fallback: Collective | None) -> Collective:
    for text in [*(report.get("args") or [])[:1], source]:
        found = collective_from_name(str(text))
        if found is not None:
            return found
    if fallback is not None:
        return fallback
    rows = [r for r in report["results"] if isinstance(r, dict) and r.get("size")]  # no no-ops
    if rows:
        root, redop = str(rows[0].get("root", "-1")).strip(), rows[0].get("redop")
        if root != "-1":
            return Collective.REDUCE if redop not in (None, "none") else Collective.BROADCAST
        if redop == "none":
            return Collective.ALLGATHER
        per_rank = int(rows[0].get("count", 0)) * _TYPE_SIZES.get(str(rows[0].get("type")), 4)
        if nranks > 1 and per_rank * nranks == int(rows[0]["size"]):
            return Collective.REDUCESCATTER
        if redop is not None:
            return Collective.ALLREDUCE
    raise NcclTestsJsonError(f"{source}: cannot tell which collective this report is from ('args' "
                             "does not name the binary); name the file after it, e.g. "
                             "all_reduce_perf.json, or pass --collective")


def _version(code: Any) -> str | None:
    """NCCL's integer version code (22703) as text (2.27.3); None where it names no release."""
    version = parse_version(code)
    return None if version is None else str(version)

