"""Measurements from the paths a user names: measurement files, and folders holding them.

A folder of logs rarely holds logs alone: a README, the job script, and for published runs the
sidecar YAML that says how each log was run. So a folder is read for the measurement files it holds
and every other file is skipped with a note, while a file named explicitly must be a measurement
file (naming one that is not is a mistake worth an error). A log with a sidecar (``<run>.yaml``
naming it, :mod:`dynamiccl.profiler.formats.published`) is read through the sidecar, which knows what the
log alone cannot: the nodes it spanned and the ``NCCL_ALGO``/``NCCL_PROTO`` it was forced with, so
a forced run is never mistaken for NCCL's default.

An NCCL debug log (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``) holds no timings but NCCL's pick for
every call: named, or found in a folder, it is read for those picks, and each record of a run
forced the same way (the log's ``NCCL_ALGO``/``NCCL_PROTO``) of the same collective and size gets
the pick (``MeasurementRecord.nccl_pick``): what a run forced with one knob alone measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from dynamiccl.files import not_regular_message
from dynamiccl.profiler.formats.measurements import MeasurementFormatError, detect_format, read
from dynamiccl.profiler.formats.nccl_debug_log import NcclDebugLogError, parse_debug_log_file
from dynamiccl.profiler.formats.nccl_tests import _forced_config
from dynamiccl.profiler.formats.plugin_log import pin_policy_launch
from dynamiccl.profiler.formats.published import (
    SidecarFile,
    load_sidecar,
    may_be_sidecar,
    pinned_sidecar,
    sidecar_log,
)
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.knobs import Collective

#: A logged pick's key: collective, forced NCCL_ALGO, forced NCCL_PROTO (None = NCCL chose), size,
#: and the communicator's rank count where the log says it (None = any).
PickKey = tuple[Collective, str | None, str | None, int, int | None]


#: The suffix of a plan's list of its launches, one name a line, which its script writes into the
#: folder of logs before the first launch (``<script name>.launches``).
LAUNCH_LIST_SUFFIX = ".launches"
#: How much of such a list is read (a name is under a hundred bytes).
LAUNCH_LIST_BYTES = 1 << 20


@dataclass(frozen=True)
class LoadedMeasurements:
    records: list[MeasurementRecord]
    #: One line per file of a folder that holds no measurements, saying why it was skipped.
    skipped: list[str]
    #: One line per file named again (by another path, a link, or inside a folder also named):
    #: read once, so no measurement counts twice.
    repeated: list[str] = field(default_factory=list)
    #: The parsers' warnings, each naming its file (rows skipped, lines passed over, a file not
    #: read to its end).
    warnings: list[str] = field(default_factory=list)


def distinct_files(paths: Iterable[str | Path], seen: dict[tuple[int, int], str | Path] | None = None,
                   repeated: list[str] | None = None) -> list[str | Path]:
    """``paths`` without the files listed before (same inode: another spelling, a symlink or a hard
    link), each as given; each one dropped is noted in ``repeated``. ``seen`` carries what was
    listed across calls."""
    seen = {} if seen is None else seen
    out = []
    for path in paths:
        try:
            info = Path(path).stat()
        except OSError:  # missing or unreadable: the reader names it
            out.append(path)
            continue
        key = (info.st_dev, info.st_ino)
        if key in seen:
            if repeated is not None:
                repeated.append(f"{path} (the same file as {seen[key]})")
            continue
        seen[key] = path
        out.append(path)
    return out


def load_paths(paths: Iterable[str | Path]) -> LoadedMeasurements:
    """Every measurement in ``paths`` (files or folders, folders searched recursively).

    Raises :class:`MeasurementFormatError` (a ``ValueError``) for a missing path or a named file
    that is not a measurement file, and ``ValueError`` for a measurement file that cannot be parsed.
    """
    records: list[MeasurementRecord] = []
    skipped: list[str] = []
    repeated: list[str] = []
    warnings: list[str] = []
    seen: dict[tuple[int, int], Path] = {}
    picks: dict[PickKey, str] = {}
    for item in map(Path, paths):
        if item.is_dir():
            files = distinct_files(sorted(p for p in item.rglob("*") if p.is_file()), seen, repeated)
            found, notes = _load_folder(files, picks, warnings)
            records += found
            skipped += notes
        elif item.is_file():
            if distinct_files([item], seen, repeated):
                found, run_files = _load_file(item, picks, warnings)
                records += found
                distinct_files(run_files, seen)  # a log and its sidecar are one run
        else:
            raise MeasurementFormatError(not_regular_message(item, "measurement file") or
                                         f"{item}: no such measurement file or folder; check the path")
    return LoadedMeasurements(_with_picks(records, picks), skipped, repeated, warnings)


def _load(path: Path, warnings: list[str]) -> list[MeasurementRecord]:
    records, said = read(path)
    warnings += said
    return records


def _load_file(path: Path, picks: dict[PickKey, str], warnings: list[str]
               ) -> tuple[list[MeasurementRecord], list[Path]]:
    """The records of the file ``path`` named, and the other file of its run (a sidecar's log, a
    log's sidecar), which is not to be read again."""
    named = SidecarFile.read(path) if may_be_sidecar(path) else None
    log = sidecar_log(named) if named is not None else None
    if named is not None and log is not None:  # the sidecar itself was named
        return _published(named, warnings), [log]
    sidecar = _sidecar_of(path)
    if sidecar is not None:
        return _published(sidecar, warnings), [sidecar.path]
    if detect_format(path) == "nccl-debug-log":
        if not _read_picks(path, picks):
            raise MeasurementFormatError(
                f"{path}: an NCCL debug log without per-call picks holds no timings and settles no "
                "forced run; rerun with NCCL_DEBUG_SUBSYS=TUNING, or check NCCL's model against its "
                "table with `dynamiccl check-model`")
        return [], []
    return _load(path, warnings), []


def _load_folder(files: list[Path], picks: dict[PickKey, str], warnings: list[str]
                 ) -> tuple[list[MeasurementRecord], list[str]]:
    yamls = {f: SidecarFile.read(f) for f in files if may_be_sidecar(f)}  # each read once
    logs = {f: sidecar_log(yaml) for f, yaml in yamls.items()}
    pins = {f: pinned_sidecar(yaml) for f, yaml in yamls.items()}
    through_sidecar = {log.resolve() for log in logs.values() if log is not None}
    through_sidecar |= {pin[1].resolve() for pin in pins.values() if pin}  # a pinned launch's policy
    records: list[MeasurementRecord] = []
    skipped: list[str] = []
    for f in files:
        if logs.get(f) is not None:
            records += _published(yamls[f], warnings)
        elif (part := _unfinished_log(yamls.get(f))) is not None:  # stopped between its renames
            skipped.append(f"{f}: the sidecar of {part.name[:-len('.part')]}, a launch that did "
                           "not finish (run the plan again to redo it)")
        elif pins.get(f) is not None:  # a printed plan labelled the log before its launch ran
            skipped.append(f"{f}: the sidecar of {pins[f][0].name}, a launch pinned through the "
                           "plugin that has not run yet (run its line from the plan)")
        elif f.suffix == ".md":
            skipped.append(f"{f}: documentation")
        elif f.suffix == LAUNCH_LIST_SUFFIX:
            if (missing := _unfinished_launches(f)) is not None:
                warnings.append(missing)
        elif f.suffix == ".part":  # a plan's launch keeps its output as <name>.txt.part until it ends
            skipped.append(f"{f}: the output of a launch that did not finish (run the plan again "
                           "to redo it)")
        elif f.resolve() not in through_sidecar and (name := pin_policy_launch(f)):
            skipped.append(f"{f}: the pin policy of {name}, a launch pinned through the plugin "
                           "with no labelled log here (run it again from the plan)")
        elif f.resolve() not in through_sidecar:
            try:
                if detect_format(f) != "nccl-debug-log":
                    records += _load(f, warnings)
                elif not _read_picks(f, picks):
                    skipped.append(f"{f}: an NCCL debug log without per-call picks")
            except MeasurementFormatError as exc:
                skipped.append(str(exc).split(";")[0])
    return records, skipped


def _unfinished_launches(launch_list: Path) -> str | None:
    """What a plan's list of its launches (:data:`LAUNCH_LIST_SUFFIX`) says of the launches without
    a finished log beside it (a plan stopped, or not run to its end), or None when every one has
    one: a folder of logs does not show the launches that never started."""
    try:
        with launch_list.open("rb") as fh:
            text = fh.read(LAUNCH_LIST_BYTES).decode(errors="replace")
    except OSError:
        return None
    names = [n for n in (line.strip() for line in text.splitlines())
             if n and not n.startswith("#") and "/" not in n]
    missing = [n for n in names if not (launch_list.parent / f"{n}.txt").is_file()]
    if not missing:
        return None
    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    return (f"{launch_list}: {len(missing)} of the plan's {len(names)} launches have no finished "
            f"log ({shown}); run the plan again to go on")


def _unfinished_log(sidecar: SidecarFile | None) -> Path | None:
    """The ``<log>.part`` of a plan's launch whose sidecar is written and whose log is not: the
    plan writes the sidecar, then renames the log, so a stop between the two leaves this."""
    log = (sidecar.mapping or {}).get("log") if sidecar is not None else None
    if not isinstance(log, str) or not log or sidecar_log(sidecar) is not None:
        return None
    part = sidecar.path.parent / f"{log}.part"
    return part if part.is_file() else None


def _read_picks(path: Path, picks: dict[PickKey, str]) -> bool:
    """Adds the per-call picks of the debug log ``path`` to ``picks`` (the first logged pick of a
    call wins); whether it had any."""
    try:
        log = parse_debug_log_file(path)
    except NcclDebugLogError:
        return False
    for pick in log.distinct_picks():
        algo, proto, _ = _forced_config(log.env, pick.collective)
        picks.setdefault((pick.collective, algo, proto, pick.nbytes, log.nranks), pick.pair)
    return bool(log.picks)


def _with_picks(records: list[MeasurementRecord], picks: dict[PickKey, str]) -> list[MeasurementRecord]:
    """Records with the pick a debug log gives for their call and forced knobs, where their own
    log printed none."""
    if not picks:
        return records
    out = []
    for rec in records:
        key = (rec.coll, rec.algorithm, rec.protocol, rec.nbytes)
        pick = picks.get((*key, rec.nranks)) or picks.get((*key, None))
        out.append(replace(rec, nccl_pick=pick) if pick and not rec.nccl_pick else rec)
    return out


def _sidecar_of(log: Path) -> SidecarFile | None:
    """The sidecar next to ``log`` that names it, if any (``log`` itself, read already, is none)."""
    for suffix in (".yaml", ".yml"):
        candidate = log.with_suffix(suffix)
        if candidate == log or not (may_be_sidecar(candidate) and candidate.is_file()):
            continue
        sidecar = SidecarFile.read(candidate)
        found = sidecar_log(sidecar)
        if found is not None and found.resolve() == log.resolve():
            return sidecar
    return None


def _published(sidecar: SidecarFile, warnings: list[str]) -> list[MeasurementRecord]:
    runs = load_sidecar(sidecar)
    warnings += [said for run in runs for said in run.warnings]
    return [rec for run in runs for rec in run.records]
