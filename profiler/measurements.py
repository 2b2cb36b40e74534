"""One entry point for every measurement file a user already has: ``load(path)``.

Users arrive with nccl-tests stdout, nccl-tests ``-J`` JSON reports, the CSV that NVIDIA's example
tuner workflow (``optimize_config.py``) consumes, or this project's own runner records. Asking them
to say which is friction, and guessing from the file name fails on ``out.log``; the content tells
the formats apart unambiguously, so ``load`` sniffs it and hands the file to the matching parser.
Every parser returns :class:`MeasurementRecord`, the unit ``profiler.calibrate`` consumes.

An NCCL ``NCCL_DEBUG=INFO`` log holds NCCL's tuning table and its picks but no timings; it is
recognised and refused with a pointer to :mod:`dynamiccl.profiler.nccl_debug_log`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dynamiccl.profiler.records import MeasurementRecord, read_jsonl

#: Bytes read to decide the format (headers and first rows are enough for every format).
_SNIFF_BYTES = 64 * 1024


class MeasurementFormatError(ValueError):
    """A file no measurement parser recognises, or one that cannot be read."""


def detect_format(path: str | Path) -> str:
    """``nccl-tests``, ``nccl-tests-json``, ``tuner-csv``, ``records`` or ``nccl-debug-log``."""
    head = _head(Path(path))
    stripped = head.lstrip()
    if stripped.startswith("{"):
        first = _json_object(stripped.splitlines()[0])
        if first is None or {"results", "nccl_version", "args"} & set(first):
            return "nccl-tests-json"  # one (usually indented) report object
        return "records"  # one record object per line
    from dynamiccl.profiler.nccl_tests import looks_like_nccl_tests
    from dynamiccl.profiler.tuner_measurements_csv import looks_like_tuner_csv

    if looks_like_nccl_tests(head):
        return "nccl-tests"
    if looks_like_tuner_csv(head):
        return "tuner-csv"
    if "NCCL INFO" in head:
        return "nccl-debug-log"
    raise MeasurementFormatError(
        f"{path}: not a measurement format DynamICCL reads; give nccl-tests output (stdout of "
        "all_reduce_perf and friends, or its -J JSON report), NVIDIA's tuner measurement CSV "
        "(header collective,size_bytes,algorithm,protocol,...,latency_us) or runner records "
        "(JSON lines from `dynamiccl profile collective --record`)")


def load(path: str | Path) -> list[MeasurementRecord]:
    """Every measurement in ``path``, whatever its format (see :func:`detect_format`)."""
    path = Path(path)
    kind = detect_format(path)
    return _PARSERS[kind](path)


def _head(path: Path) -> str:
    if not path.exists():
        raise MeasurementFormatError(f"{path}: no such file; check the path")
    if not path.is_file():
        raise MeasurementFormatError(f"{path}: is a directory, not a measurement file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_SNIFF_BYTES)
    except OSError as exc:
        raise MeasurementFormatError(f"{path}: cannot be read ({exc.strerror}); check its "
                                     "permissions") from None
    if b"\x00" in raw:
        raise MeasurementFormatError(f"{path}: is a binary file, not a measurement log")
    return raw.decode("utf-8", errors="replace")


def _json_object(line: str) -> dict | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _nccl_tests(path: Path) -> list[MeasurementRecord]:
    from dynamiccl.profiler.nccl_tests import parse_nccl_tests_file

    return [rec for run in parse_nccl_tests_file(path) for rec in run.records]


def _nccl_tests_json(path: Path) -> list[MeasurementRecord]:
    from dynamiccl.profiler.nccl_tests_json import parse_nccl_tests_json_file

    return parse_nccl_tests_json_file(path).records


def _tuner_csv(path: Path) -> list[MeasurementRecord]:
    from dynamiccl.profiler.tuner_measurements_csv import read_tuner_csv

    return read_tuner_csv(path)


def _debug_log(path: Path) -> list[MeasurementRecord]:
    raise MeasurementFormatError(
        f"{path}: an NCCL debug log (NCCL_DEBUG=INFO) holds NCCL's tuning table and its picks but "
        "no timings; read it with dynamiccl.profiler.nccl_debug_log.parse_debug_log_file, or give "
        "the nccl-tests output of the same run")


_PARSERS: dict[str, Callable[[Path], list[MeasurementRecord]]] = {
    "nccl-tests": _nccl_tests,
    "nccl-tests-json": _nccl_tests_json,
    "tuner-csv": _tuner_csv,
    "records": read_jsonl,
    "nccl-debug-log": _debug_log,
}
