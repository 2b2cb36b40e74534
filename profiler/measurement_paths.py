"""Measurements from the paths a user names: measurement files, and folders holding them.

A folder of logs rarely holds logs alone: a README, the job script, and for published runs the
sidecar YAML that says how each log was run. So a folder is read for the measurement files it holds
and every other file is skipped with a note, while a file named explicitly must be a measurement
file (naming one that is not is a mistake worth an error). A log with a sidecar (``<run>.yaml``
naming it, :mod:`dynamiccl.profiler.published`) is read through the sidecar, which knows what the
log alone cannot: the nodes it spanned and the ``NCCL_ALGO``/``NCCL_PROTO`` it was forced with, so
a forced run is never mistaken for NCCL's default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dynamiccl.files import not_regular_message
from dynamiccl.profiler.measurements import MeasurementFormatError, load
from dynamiccl.profiler.published import load_sidecar, sidecar_log
from dynamiccl.profiler.records import MeasurementRecord


@dataclass(frozen=True)
class LoadedMeasurements:
    records: list[MeasurementRecord]
    #: One line per file of a folder that holds no measurements, saying why it was skipped.
    skipped: list[str]


def load_paths(paths: Iterable[str | Path]) -> LoadedMeasurements:
    """Every measurement in ``paths`` (files or folders, folders searched recursively).

    Raises :class:`MeasurementFormatError` (a ``ValueError``) for a missing path or a named file
    that is not a measurement file, and ``ValueError`` for a measurement file that cannot be parsed.
    """
    records: list[MeasurementRecord] = []
    skipped: list[str] = []
    for item in map(Path, paths):
        if item.is_dir():
            found, notes = _load_folder(sorted(p for p in item.rglob("*") if p.is_file()))
            records += found
            skipped += notes
        elif item.is_file():
            records += _load_file(item)
        else:
            raise MeasurementFormatError(not_regular_message(item, "measurement file") or
                                         f"{item}: no such measurement file or folder; check the path")
    return LoadedMeasurements(records, skipped)


def _load_file(path: Path) -> list[MeasurementRecord]:
    if sidecar_log(path) is not None:  # the sidecar itself was named
        return _published(path)
    sidecar = _sidecar_of(path)
    return _published(sidecar) if sidecar is not None else load(path)


def _load_folder(files: list[Path]) -> tuple[list[MeasurementRecord], list[str]]:
    logs = {f: sidecar_log(f) for f in files}
    through_sidecar = {log.resolve() for log in logs.values() if log is not None}
    records: list[MeasurementRecord] = []
    skipped: list[str] = []
    for f in files:
        if logs[f] is not None:
            records += _published(f)
        elif f.suffix == ".md":
            skipped.append(f"{f}: documentation")
        elif f.resolve() not in through_sidecar:
            try:
                records += load(f)
            except MeasurementFormatError as exc:
                skipped.append(str(exc).split(";")[0])
    return records, skipped


def _sidecar_of(log: Path) -> Path | None:
    """The sidecar next to ``log`` that names it, if any."""
    for suffix in (".yaml", ".yml"):
        candidate = log.with_suffix(suffix)
        found = sidecar_log(candidate) if candidate.is_file() else None
        if found is not None and found.resolve() == log.resolve():
            return candidate
    return None


def _published(sidecar: Path) -> list[MeasurementRecord]:
    return [rec for run in load_sidecar(sidecar) for rec in run.records]
