"""What each measurement file says about how it was run: whether NCCL was forced, and which NCCL.

``tune`` decides by comparing NCCL's default with forced choices, so a run whose forcing is unknown
cannot be placed on either side: nccl-tests' text output records no environment, and a run forced
with ``NCCL_ALGO=RING`` reads exactly like a default one (two such logs taken for repeated default
launches once made launch noise look like 16.6 % and hid a measured rule). A log states its forcing
through a sidecar (:mod:`~dynamiccl.profiler.formats.published`), ``NCCL_DEBUG=INFO`` lines (NCCL
logs ``NCCL_ALGO set by environment to ...`` at INFO, its default subsystems INIT, BOOTSTRAP and ENV,
NCCL ``src/graph/tuning.cc``), the ``-J`` report's ``env``, or its own format (runner records,
NVIDIA's tuner CSV); :attr:`MeasurementRecord.forcing_unknown` marks the rest. A knob NCCL has no
variable for (a chunk size) is set by DynamICCL's tuner plugin: a log whose NCCL lines show the
plugin pinning calls (:mod:`~dynamiccl.profiler.formats.plugin_log`) is labelled only by the sidecar
the plan wrote beside it, which says what was pinned and is checked against those lines.

NCCL's default changes between releases (its cost-model constants do: NCCL 2.29 and 2.30
``src/graph/tuning.cc``), so measurements of two releases describe two baselines: they are
refused together unless one release is chosen, and a policy is stamped with the releases it was
measured on (:func:`dynamiccl.system.nccl_versions.window_text`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from dynamiccl.plugin.policy_format import POLICY_ENV
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.nccl_versions import NcclVersion, parse_version

#: How many file names a one-line message lists before "and N more".
SHOWN_FILES = 3


def record_file(rec: MeasurementRecord) -> str:
    """The file a record was read from, as the user named it (its ``file:line`` without the line)."""
    where = rec.read_at or rec.source
    path, sep, _ = where.rpartition(":")
    return path if sep and path else where


def listed(files: list[str]) -> str:
    """``a, b, c and 4 more``."""
    shown = ", ".join(files[:SHOWN_FILES])
    return shown + (f" and {len(files) - SHOWN_FILES} more" if len(files) > SHOWN_FILES else "")


def unlabelled_files(records: Iterable[MeasurementRecord]) -> list[str]:
    """The files (in the order read) whose records do not say whether NCCL was forced."""
    return list(dict.fromkeys(record_file(r) for r in records if r.forcing_unknown))


def steered_files(records: Iterable[MeasurementRecord]) -> list[str]:
    """The files of unknown forcing whose NCCL log shows DynamICCL's tuner plugin pinning calls."""
    return list(dict.fromkeys(record_file(r) for r in records
                              if r.forcing_unknown and POLICY_ENV in r.env))


def unlabelled_message(files: list[str], steered: list[str] | tuple[str, ...] = ()) -> str:
    """One line naming the files whose forcing is unknown and how to label them; ``steered``
    (:func:`steered_files`) are those the plugin steered, whose label only their sidecar holds."""
    parts = []
    if steered:
        parts.append(f"{len(steered)} log(s) show DynamICCL's tuner plugin pinning their calls "
                     f"({listed(list(steered))}) but no sidecar says what it pinned (a chunk size "
                     "leaves no trace in nccl-tests' text, so they would read as NCCL's default): "
                     "keep each beside the <name>.yaml its plan wrote (`tune --plan` writes it for "
                     "a launch pinned through the plugin), or run the launch again from the plan")
    rest = [f for f in files if f not in steered]
    if rest:
        parts.append(f"{len(rest)} log(s) do not say whether NCCL_ALGO/NCCL_PROTO were set "
                     f"({listed(rest)}): nccl-tests' text records no environment, so a forced run "
                     "reads as NCCL's default; label each with a sidecar (`dynamiccl label LOG "
                     "--nodes N --gpus-per-node G [--forced NCCL_ALGO=Ring]`), or measure again with "
                     "NCCL_DEBUG=INFO (as `dynamiccl tune --plan` launches do) or nccl-tests -J")
    return "; ".join(parts)


def versions(records: Iterable[MeasurementRecord]) -> dict[NcclVersion, list[str]]:
    """The NCCL releases the records state, each with the files that state it (in order read)."""
    found: dict[NcclVersion, dict[str, None]] = defaultdict(dict)
    for rec in records:
        version = parse_version(rec.nccl_version) if rec.nccl_version else None
        if version is not None:
            found[version][record_file(rec)] = None
    return {v: list(files) for v, files in sorted(found.items())}


def unversioned_files(records: Iterable[MeasurementRecord]) -> list[str]:
    """The files whose records state no NCCL release."""
    return list(dict.fromkeys(record_file(r) for r in records if not r.nccl_version))


def mixed_versions_message(by_version: dict[NcclVersion, list[str]]) -> str:
    """One line naming each release with its files, and how to tune on one of them."""
    parts = "; ".join(f"NCCL {v}: {listed(files)}" for v, files in by_version.items())
    return (f"the measurements come from {len(by_version)} NCCL releases ({parts}), and NCCL's "
            "default differs between releases; tune one release's logs at a time (--nccl-version "
            f"{next(iter(by_version))}), or keep their folders apart")


def of_version(records: Iterable[MeasurementRecord], version: NcclVersion
               ) -> list[MeasurementRecord]:
    """The records measured on ``version``."""
    return [r for r in records if r.nccl_version and parse_version(r.nccl_version) == version]
