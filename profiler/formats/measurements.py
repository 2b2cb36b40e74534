"""One entry point for every measurement file a user already has: ``load(path)``.

Users arrive with nccl-tests stdout, nccl-tests ``-J`` JSON reports, the CSV that NVIDIA's example
tuner workflow (``optimize_config.py``) consumes, NVIDIA's cost-model test timings (``time.txt``
per configuration, :mod:`.nccl_topo_timings`), or this project's own runner records. Asking them
to say which is friction, and guessing from the file name fails on ``out.log``; the content tells
the formats apart unambiguously, so ``load`` sniffs it and hands the file to the matching parser.
Every parser returns :class:`MeasurementRecord`, the unit ``profiler.fit.calibrate`` consumes, and
drops the no-op rows of size 0 (``records.is_no_op``).

An NCCL ``NCCL_DEBUG=INFO`` log holds NCCL's tuning table and its picks but no timings; it is
recognised and refused with a pointer to ``dynamiccl check-model``, which reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from dynamiccl.files import not_regular_message
from dynamiccl.profiler.formats.records import REQUIRED_FIELDS, MeasurementRecord, read_jsonl
from dynamiccl.system.knobs import Collective

#: Bytes read to decide the format (headers and first rows are enough for every format).
_SNIFF_BYTES = 64 * 1024
#: The formats DynamICCL reads, as the messages that refuse a file name them.
FORMATS = ("nccl-tests output (stdout of all_reduce_perf and friends, or its -J JSON report), "
           "NVIDIA's tuner measurement CSV (header collective,size_bytes,algorithm,protocol,...,"
           "latency_us), NVIDIA's cost-model test timings (<GPUs per node>/<nodes>/<Collective>"
           "[/<Algorithm>/<Protocol>]/time.txt) or runner records (JSON lines from `dynamiccl "
           "profile collective --record`)")


class MeasurementFormatError(ValueError):
    """A file no measurement parser recognises, or one that cannot be read."""


def detect_format(path: str | Path) -> str:
    """``nccl-tests``, ``nccl-tests-json``, ``tuner-csv``, ``nccl-topo-timings``, ``records`` or
    ``nccl-debug-log``."""
    head = _head(Path(path))
    stripped = head.lstrip("\ufeff \t\r\n")  # a byte-order mark some editors write, then space
    if stripped.startswith("{"):
        first = _json_object(stripped.splitlines()[0])
        missing = [] if first is None else [name for name in REQUIRED_FIELDS if name not in first]
        if first is None or {"results", "args"} & set(first) or ("nccl_version" in first and missing):
            return "nccl-tests-json"  # one (usually indented) report object; records name a release too
        if missing:
            raise MeasurementFormatError(
                f"{path}: a JSON object that is neither an nccl-tests -J report (it has no "
                f"'results') nor a measurement record (it has no {', '.join(missing)}); give "
                f"{FORMATS}")
        return "records"  # one record object per line
    from dynamiccl.profiler.formats.nccl_tests import looks_like_nccl_tests
    from dynamiccl.profiler.formats.nccl_topo_timings import looks_like_topo_timings
    from dynamiccl.profiler.formats.tuner_measurements_csv import looks_like_tuner_csv

    if looks_like_topo_timings(path, head):
        return "nccl-topo-timings"
    if looks_like_nccl_tests(head):
        return "nccl-tests"
    if looks_like_tuner_csv(head):
        return "tuner-csv"
    if "NCCL INFO" in head:
        return "nccl-debug-log"
    raise MeasurementFormatError(f"{path}: not a measurement format DynamICCL reads; give {FORMATS}")


def load(path: str | Path) -> list[MeasurementRecord]:
    """Every measurement in ``path``, whatever its format (see :func:`detect_format`)."""
    return read(path)[0]


def read(path: str | Path, collective: Collective | None = None, *,
         on_line: Callable[[str], None] | None = None) -> tuple[list[MeasurementRecord], list[str]]:
    """:func:`load` plus the parser's warnings, each prefixed with the file. ``collective`` is
    the collective of nccl-tests output whose file name and columns do not say it. ``on_line`` is
    handed each line of nccl-tests text output as the parser reads it (the one format that holds
    NCCL's own log lines; the others hand none): what else is looked for in NCCL's log is found in
    the same read."""
    path = Path(path)
    kind = detect_format(path)
    if kind == "nccl-tests":
        records, warnings = _nccl_tests(path, collective, on_line)
    else:
        records, warnings = _PARSERS[kind](path, collective)
    return records, [f"{path}: {w}" for w in warnings]


def _head(path: Path) -> str:
    if not path.exists():
        raise MeasurementFormatError(f"{path}: no such file; check the path")
    if path.is_dir():
        raise MeasurementFormatError(f"{path}: is a folder, not a measurement file")
    special = not_regular_message(path, "measurement file")
    if special:
        raise MeasurementFormatError(special)
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
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


Parsed = tuple[list[MeasurementRecord], list[str]]


def _nccl_tests(path: Path, collective: Collective | None,
                on_line: Callable[[str], None] | None = None) -> Parsed:
    from dynamiccl.profiler.formats.nccl_tests import parse_nccl_tests_file

    runs = parse_nccl_tests_file(path, collective, on_line)
    return [r for run in runs for r in run.records], [w for run in runs for w in run.warnings]


def _nccl_tests_json(path: Path, collective: Collective | None) -> Parsed:
    from dynamiccl.profiler.formats.nccl_tests_json import parse_nccl_tests_json_file

    run = parse_nccl_tests_json_file(path, collective)
    return run.records, run.warnings


def _tuner_csv(path: Path, collective: Collective | None) -> Parsed:
    from dynamiccl.profiler.formats.tuner_measurements_csv import read_tuner_csv

    return read_tuner_csv(path), []


def _topo_timings(path: Path, collective: Collective | None) -> Parsed:
    from dynamiccl.profiler.formats.nccl_topo_timings import parse_time_file

    return parse_time_file(path), []


def _records(path: Path, collective: Collective | None) -> Parsed:
    return read_jsonl(path), []


def _debug_log(path: Path, collective: Collective | None) -> Parsed:
    raise MeasurementFormatError(
        f"{path}: an NCCL debug log (NCCL_DEBUG=INFO) holds NCCL's tuning table and its picks but "
        "no timings; check NCCL's default model against it with `dynamiccl check-model`, or give "
        "the nccl-tests output of the same run")


_PARSERS: dict[str, Callable[[Path, Collective | None], Parsed]] = {
    "nccl-tests": _nccl_tests,
    "nccl-tests-json": _nccl_tests_json,
    "tuner-csv": _tuner_csv,
    "nccl-topo-timings": _topo_timings,
    "records": _records,
    "nccl-debug-log": _debug_log,
}
