"""Published nccl-tests runs kept as fixtures: a measured log plus a sidecar saying what ran it.

A log alone does not say how many nodes it spanned (large runs are kept without their thousands of
``#  Rank`` lines), how it was launched, or which ``NCCL_ALGO``/``NCCL_PROTO`` the job exported
outside the log. The sidecar (``<log stem>.yaml`` next to the log) records those facts and where the
numbers came from, so every record loaded here carries the system's true shape and configuration.
A launch measured through DynamICCL's tuner plugin (a knob NCCL has no variable for: a chunk size)
records what the plugin pinned (``pinned``: knob -> value, as records spell them) and the pin policy
it loaded (``policy``, ``policy_sha256``); such a log is read only where NCCL's own lines show the
plugin applied that pin (:func:`~dynamiccl.profiler.formats.plugin_log.pin_problem`), never as
NCCL's default.
Each system folder also holds its datasheet ``topology.yaml`` and a ``system.yaml`` of facts the
topology schema cannot express yet.

Layout: ``<root>/<system>/<run>.txt|.json`` + ``<run>.yaml``, ``<root>/<system>/topology.yaml``.

``python -m dynamiccl.profiler.formats.published ROOT --replay OUT`` writes the replay tables (one CSV per
system that has forced runs) that ``tests/fixtures/real/replay/README.md`` documents.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dynamiccl.config_loader import DuplicateKey, load_yaml, yaml_problem
from dynamiccl.plugin.policy_format import POLICY_ENV
from dynamiccl.profiler.formats import plugin_log
from dynamiccl.profiler.formats.nccl_tests import NO_RANK_LINES, _forced_config, _single_choice
from dynamiccl.profiler.formats.records import MeasurementRecord, normalize_config
from dynamiccl.profiler.formats.tuner_measurements_csv import COLUMNS, INPLACE_COLUMN, tuner_csv_rows
from dynamiccl.system.knobs import NCCL_KNOBS, Collective, Knobs, KnobValues
from dynamiccl.system.nccl import (
    ALGO_ENV,
    MAX_CHANNELS,
    MAX_CHANNELS_ENV,
    MIN_CHANNELS_ENV,
    PROTO_ENV,
)
from dynamiccl.system.nccl_versions import parse_version
from dynamiccl.system.topology import LAUNCH_MODES, MAX_RANKS, Topology, load_topology

#: Files in a system folder that are not run sidecars.
SYSTEM_FILES = ("topology.yaml", "system.yaml")
_REQUIRED = ("log", "collective", "nodes", "gpus_per_node", "launch", "forced", "source")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class PublishedRunError(ValueError):
    """A fixture whose sidecar is missing a fact or contradicts its log."""


@dataclass(frozen=True)
class PublishedRun:
    """One published log with its sidecar's facts applied to every record."""

    system: str
    name: str
    log: Path
    collective: Collective
    nodes: int
    gpus_per_node: int
    launch: str
    forced: dict[str, str]
    nccl_version: str
    source: dict[str, Any]
    records: tuple[MeasurementRecord, ...]
    #: The log's in-place column, the same calls timed a second time (empty for summary tables):
    #: how far two timings of one call disagree is the run's own noise.
    in_place: tuple[MeasurementRecord, ...] = ()
    #: What the log's parser passed over (lines that are no nccl-tests output, rows skipped).
    warnings: tuple[str, ...] = ()

    @property
    def nranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def is_default(self) -> bool:
        """NCCL chose algorithm and protocol itself (nothing pinned by the environment)."""
        return all(r.nccl_default for r in self.records)


def system_dirs(root: str | Path) -> list[Path]:
    """Folders under ``root`` that hold a datasheet topology (one per system kind)."""
    root = Path(root)
    if not root.is_dir():
        raise PublishedRunError(f"{root}: no such fixture folder; give the folder holding one "
                                "sub-folder per system (tests/fixtures/real)")
    return sorted(p for p in root.iterdir() if (p / "topology.yaml").is_file())


def system_topology(system_dir: str | Path) -> Topology:
    return load_topology(Path(system_dir) / "topology.yaml")


def load_system(system_dir: str | Path) -> list[PublishedRun]:
    """Every run of one system folder, in file-name order."""
    folder = Path(system_dir)
    sidecars = sorted(p for p in folder.glob("*.yaml") if p.name not in SYSTEM_FILES)
    return [run for sidecar in sidecars for run in load_sidecar(sidecar)]


def load_sidecar(sidecar: str | Path | SidecarFile) -> list[PublishedRun]:
    """The runs one sidecar describes: its log, or its summary table (``layout: table``)."""
    file = sidecar if isinstance(sidecar, SidecarFile) else SidecarFile.read(sidecar)
    meta = file.document()
    if isinstance(meta, dict) and meta.get("layout", "log") == "table":
        return _load_table(file.path, _checked_sidecar(file.path, meta))
    return [_load_run(file.path, _checked_sidecar(file.path, meta))]


@dataclass(frozen=True)
class SidecarFile:
    """A YAML file that may be a sidecar, read and parsed once: a folder asks of each whether it is
    a sidecar (:func:`sidecar_log`), a pinned launch's (:func:`pinned_sidecar`), then loads it
    (:func:`load_sidecar`), and a sidecar repeated in every launch of a plan is parsed once, not
    four times."""

    path: Path
    #: What it holds read as PyYAML reads it (a key given twice: the last), None where that is no
    #: mapping or it cannot be read: what tells a sidecar from any other YAML file.
    mapping: dict[str, Any] | None
    #: Its document read as a sidecar is (a key given twice refused), unless ``error``.
    parsed: Any = None
    #: Why it cannot be read as a sidecar, raised by :meth:`document`.
    error: Exception | None = None

    @classmethod
    def read(cls, path: str | Path) -> SidecarFile:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            return cls(path, None, error=PublishedRunError(
                f"{path}: cannot read the sidecar ({exc.strerror or exc})"))
        except UnicodeDecodeError as exc:
            return cls(path, None, error=exc)
        try:
            parsed = load_yaml(text)
        except DuplicateKey as exc:  # still a sidecar's shape, so refused as one when loaded
            try:
                lenient = yaml.safe_load(text)
            except yaml.YAMLError:
                lenient = None
            return cls(path, lenient if isinstance(lenient, dict) else None, error=PublishedRunError(
                f"{path}: not a valid sidecar ({yaml_problem(exc)})"))
        except yaml.YAMLError as exc:
            return cls(path, None, error=PublishedRunError(
                f"{path}: not a valid sidecar ({yaml_problem(exc)})"))
        return cls(path, parsed if isinstance(parsed, dict) else None, parsed)

    def document(self) -> Any:
        """The sidecar's YAML document (a key given twice refused), or one PublishedRunError."""
        if self.error is not None:
            raise self.error
        return self.parsed


def may_be_sidecar(path: str | Path) -> bool:
    """Whether a file of that name may be a sidecar: a YAML file other than a system's
    ``topology.yaml`` / ``system.yaml`` (nothing else is read to find sidecars)."""
    path = Path(path)
    return path.suffix in (".yaml", ".yml") and path.name not in SYSTEM_FILES


def _maybe_sidecar(path: str | Path | SidecarFile) -> dict[str, Any] | None:
    """The mapping a YAML file beside logs holds, or None for a system's ``topology.yaml`` /
    ``system.yaml``, another suffix, or a file that is no YAML mapping: what may be a sidecar."""
    if isinstance(path, SidecarFile):
        return path.mapping if may_be_sidecar(path.path) else None
    return SidecarFile.read(path).mapping if may_be_sidecar(path) else None


def sidecar_log(path: str | Path | SidecarFile) -> Path | None:
    """The log ``path`` is the sidecar of, or None when it is not a sidecar (any other YAML, a
    system's ``topology.yaml``/``system.yaml``, a file that is not YAML)."""
    meta = _maybe_sidecar(path)
    if meta is None or not isinstance(meta.get("log"), str):
        return None
    log = _path_of(path).parent / meta["log"]
    return log if log.is_file() else None


def pinned_sidecar(path: str | Path | SidecarFile) -> tuple[Path, Path] | None:
    """The log and the pin policy the sidecar ``path`` names where it labels a launch pinned
    through the plugin, whether that launch has run yet or not (a printed plan writes both files
    before the launch); None for any other file. The policy is part of the run, not a measurement
    file of its own."""
    meta = _maybe_sidecar(path)
    if meta is None or meta.get("pinned") is None:
        return None
    log, policy = meta.get("log"), meta.get("policy")
    if not (isinstance(log, str) and log and isinstance(policy, str) and policy):
        return None
    folder = _path_of(path).parent
    return folder / log, folder / policy


def _path_of(path: str | Path | SidecarFile) -> Path:
    return path.path if isinstance(path, SidecarFile) else Path(path)


def sidecar_text(log: str, collective: Collective, nodes: int, gpus_per_node: int, launch: str,
                 forced: dict[str, str], *, env: dict[str, str] | None = None,
                 source: dict[str, str] | None = None, notes: str = "",
                 nccl_version: str = "unknown", pinned: KnobValues | None = None,
                 policy: str = "", policy_sha256: str = "") -> str:
    """A sidecar for the log named ``log`` (a file name beside the sidecar), as :func:`load_run`
    reads it: what the log alone cannot say (the nodes, the launch mode, the variables that forced
    NCCL, ``{}`` for NCCL's default; for a launch DynamICCL's tuner plugin pinned, the knobs it
    pinned and the pin policy ``policy`` with its SHA-256). ``dynamiccl label`` and the plans ``tune
    --plan`` writes use it; every sidecar it writes loads (checked by :func:`_sidecar_problem`
    before it is returned)."""
    meta = {"log": log, "collective": collective.name.lower(), "nodes": nodes,
            "gpus_per_node": gpus_per_node, "launch": launch, "nccl_version": nccl_version,
            "forced": dict(forced), "env": dict(env or {}), "source": dict(source or {}),
            "notes": notes}
    if pinned is not None:
        meta.update(pinned={k: v for k, v in pinned.record().items() if v is not None},
                    policy=policy, policy_sha256=policy_sha256)
    if launch not in LAUNCH_MODES:
        raise PublishedRunError(f"launch is {launch!r}; use one of {', '.join(LAUNCH_MODES)}")
    problem = _sidecar_problem(meta)
    if problem:
        raise PublishedRunError(problem)
    head = f"# Sidecar of {log}: how it was run (dynamiccl.profiler.formats.published).\n"
    return head + yaml.safe_dump(meta, sort_keys=False, width=1000)


def load_all(root: str | Path) -> dict[str, list[PublishedRun]]:
    return {d.name: load_system(d) for d in system_dirs(root)}


def load_run(sidecar: str | Path) -> PublishedRun:
    """Parses the log a sidecar names and rewrites its records with the sidecar's facts.

    ``records`` are the out-of-place rows, ``in_place`` the in-place column's (the same calls
    timed again); the loader has already dropped the no-op rows of size 0.
    """
    sidecar = Path(sidecar)
    return _load_run(sidecar, _checked_sidecar(sidecar, SidecarFile.read(sidecar).document()))


def _load_run(sidecar: Path, meta: dict[str, Any]) -> PublishedRun:
    log = sidecar.parent / meta["log"]
    records, warnings, plugin_lines = _read_log(log, pinned=meta.get("pinned") is not None)
    halves = _log_records(meta, log, f"{sidecar}:", _sidecar_version(sidecar, meta), _SIDECAR_FIXES,
                          records, plugin_lines)
    collective = Collective[str(meta["collective"]).upper()]
    forced = {str(k): str(v) for k, v in (meta["forced"] or {}).items()}
    return PublishedRun(sidecar.parent.name, sidecar.stem, log, collective, int(meta["nodes"]),
                        int(meta["gpus_per_node"]), str(meta["launch"]), forced,
                        str(meta.get("nccl_version", "unknown")), dict(meta["source"]),
                        tuple(halves[False]), tuple(halves[True]),
                        tuple(w for w in warnings if NO_RANK_LINES not in w))  # the sidecar's shape


def _read_log(log: Path, pinned: bool) -> tuple[list[MeasurementRecord], list[str], list[str]]:
    """The log's records and its parser's warnings, and for a ``pinned`` launch the lines
    DynamICCL's tuner plugin wrote into NCCL's log (what :func:`_check_pin` reads), found as the
    parser reads the log: the log is read once."""
    from dynamiccl.profiler.formats.measurements import read

    plugin_lines: list[str] = []

    def keep(line: str) -> None:
        if plugin_log.MARK in line:
            plugin_lines.append(line)

    records, warnings = read(log, on_line=keep if pinned else None)
    return records, warnings, plugin_lines


def check_against_log(text: str, log: str | Path, records: Sequence[MeasurementRecord]) -> None:
    """PublishedRunError where the sidecar ``text`` (as :func:`sidecar_text` writes it, without a
    pin) contradicts the log it would sit beside, whose ``records`` the caller has read: another
    collective, fewer ranks than the log lists, another NCCL release or another forcing than the
    log's own lines state. What ``dynamiccl label`` checks before it writes: a label that the log
    itself refutes is refused, not written."""
    meta = yaml.safe_load(text)
    _log_records(meta, Path(log), "the label", _sidecar_version(Path(log), meta), _LABEL_FIXES,
                 records, ())


#: The fix each contradiction names, in a sidecar and in a label being written.
_SIDECAR_FIXES = {"collective": "fix the sidecar's collective",
                  "shape": "fix its nodes or gpus_per_node",
                  "version": "fix the sidecar's nccl_version",
                  "forcing": "fix the sidecar's forced, or drop the sidecar: tune reads the log's own"}
_LABEL_FIXES = {"collective": "the log says which it ran",
                "shape": "give the --nodes and --gpus-per-node it ran on",
                "version": "give the --nccl-version it ran, or none (the log's own is read)",
                "forcing": "give the --forced it ran with, or no label: tune reads the log's own"}


def _log_records(meta: dict[str, Any], log: Path, where: str, stated: str, fixes: dict[str, str],
                 records: Sequence[MeasurementRecord], plugin_lines: Sequence[str]
                 ) -> dict[bool, list[MeasurementRecord]]:
    """The log's ``records`` with the sidecar's facts (``meta``) applied, out-of-place (False) and
    in-place (True); PublishedRunError (naming ``where``, the sidecar) where they contradict the
    log: another collective, more ranks than the sidecar's shape, another NCCL release
    (``stated``: the sidecar's, "" for none), another NCCL_ALGO/NCCL_PROTO than the log's own
    lines (NCCL's INFO ``... set by environment to ...``) say it ran with, or a pin its plugin's
    lines (``plugin_lines``) do not show applied."""
    collective = Collective[str(meta["collective"]).upper()]
    forced = {str(k): str(v) for k, v in (meta["forced"] or {}).items()}
    pinned = _pinned(meta)
    knobs = _run_knobs(forced, pinned, collective)
    nodes, gpn = int(meta["nodes"]), int(meta["gpus_per_node"])
    halves: dict[bool, list[MeasurementRecord]] = {False: [], True: []}
    _check_pin(where, log, meta, pinned, collective, records, stated, plugin_lines)
    for rec in records:
        if rec.coll != collective:
            raise PublishedRunError(f"{where} says {collective.name.lower()} but {log.name} "
                                    f"holds {rec.collective}; {fixes['collective']}")
        if rec.nranks > nodes * gpn:  # fewer: a log whose first rank lines were cut off
            raise PublishedRunError(f"{where} says {nodes} nodes x {gpn} GPUs = {nodes * gpn} "
                                    f"ranks, but {log.name} lists {rec.nranks}; {fixes['shape']}")
        if stated and rec.nccl_version and rec.nccl_version != stated:
            raise PublishedRunError(f"{where} says NCCL {stated} but {log.name} was run with "
                                    f"NCCL {rec.nccl_version}; {fixes['version']}")
        contradiction = _forcing_contradiction(rec.env, forced, collective)
        if contradiction:
            raise PublishedRunError(f"{where} says {contradiction[1]} but {log.name} states "
                                    f"{contradiction[0]} (its NCCL INFO lines); {fixes['forcing']}")
        halves[rec.in_place].append(replace(rec, nranks=nodes * gpn, nnodes=nodes, **knobs,
                                            env={**rec.env, **forced, **_str_map(meta.get("env"))},
                                            nccl_version=rec.nccl_version or stated,
                                            forcing_unknown=False))
    if not halves[False]:
        raise PublishedRunError(f"{log}: no out-of-place rows with a size above 0")
    return halves


def _run_knobs(forced: dict[str, str], pinned: Knobs | None, collective: Collective
               ) -> dict[str, str | int | None]:
    """Every NCCL knob of the run's records (their JSON form): what NCCL's variables forced, then
    what the plugin pinned; None where NCCL chose."""
    algo, proto, channels = _forced_config(forced, collective)
    knobs = {**{k.name: None for k in NCCL_KNOBS}, "algorithm": algo, "protocol": proto,
             "channels": channels}
    if pinned is not None:
        knobs.update({name: value for name, value in pinned.record().items() if value is not None})
    return knobs


def _check_pin(where: str, log: Path, meta: dict[str, Any], pinned: Knobs | None,
               collective: Collective, records: Sequence[MeasurementRecord], stated: str,
               plugin_lines: Sequence[str]) -> None:
    """A pinned launch is read only where NCCL's log shows the plugin applying its pin (its
    ``plugin_lines``, read with the log); a log the plugin steered is read only where the sidecar
    says what it pinned. ``where`` names the sidecar (``path:``) or the label being written."""
    said_by = "its sidecar" if where.endswith(":") else "the label"
    named = f"its sidecar {Path(where[:-1]).name}" if where.endswith(":") else "the label"
    if pinned is None:
        steered = next((r.env[POLICY_ENV] for r in records if POLICY_ENV in r.env), None)
        if steered is not None:
            raise PublishedRunError(
                f"{log}: NCCL's log shows DynamICCL's tuner plugin pinning its calls (policy "
                f"{steered}) but {named} records no pin, so what it measured is "
                "unknown: launch NCCL's default and NCCL_ALGO runs without NCCL_TUNER_PLUGIN and "
                "DYNAMICCL_POLICY in the environment")
        return
    version = next((r.nccl_version for r in records if r.nccl_version), stated)
    problem = plugin_log.pin_problem(plugin_lines, collective, pinned, meta["policy_sha256"],
                                     version)
    if problem:
        label = "/".join(pinned.parts(keep=None))
        raise PublishedRunError(
            f"{log}: {said_by} says DynamICCL's tuner plugin pinned {label} (pin policy "
            f"{meta['policy']}), but {problem} (the launch is read neither as that choice nor as "
            "NCCL's default)")


def _pinned(meta: dict[str, Any]) -> Knobs | None:
    """What the plugin pinned, as :data:`~dynamiccl.system.knobs.Knobs` (None: no pin; the sidecar
    was checked by :func:`_sidecar_problem`)."""
    return None if meta.get("pinned") is None else Knobs(**{str(k): v for k, v in meta["pinned"].items()})


def _pin_problem(meta: dict[str, Any], forced: dict[str, str], collective: Collective) -> str | None:
    """What a pinned sidecar says that no launch through the plugin can have: a knob NCCL's tuner
    does not take or a value out of its range, a pin without an algorithm and a protocol (a policy
    rule names both), NCCL_ALGO/NCCL_PROTO forced too (the plugin then steps aside), no policy."""
    pinned = meta["pinned"]
    names = [k.name for k in NCCL_KNOBS]
    if not isinstance(pinned, dict):
        return f"pinned is {pinned!r}; give a mapping of {', '.join(names)} to their values"
    unknown = [str(k) for k in pinned if k not in names]
    if unknown:
        return f"pinned names {', '.join(unknown)}, no knob of the plugin's; use {', '.join(names)}"
    try:
        knobs = Knobs(**pinned)
    except ValueError as exc:
        return f"pinned: {exc}"
    if knobs.algorithm is None or knobs.protocol is None:
        return "pinned names no algorithm or no protocol; a policy rule names both"
    for k in NCCL_KNOBS:
        value = getattr(knobs, k.name)
        if value is not None and not k.is_enum and not k.lo <= value <= k.hi:
            return f"pinned {k.name} is {value}; give {k.lo}..{k.hi}"
    try:
        normalize_config(knobs.algorithm, knobs.protocol)
    except ValueError as exc:
        return f"pinned: {exc}"
    if any(_single_choice(forced.get(var), collective) for var in (ALGO_ENV, PROTO_ENV)):
        return (f"it pins through the plugin and forces {ALGO_ENV}/{PROTO_ENV} too, under which the "
                "plugin steps aside; keep one")
    if not isinstance(meta.get("policy"), str) or not meta["policy"]:
        return "pinned without the policy file that pinned it (policy: <name>.dccl)"
    if not isinstance(meta.get("policy_sha256"), str) or not _SHA256.fullmatch(meta["policy_sha256"]):
        return (f"policy_sha256 is {meta.get('policy_sha256')!r}; give the pin policy's SHA-256 (64 "
                "lowercase hexadecimal digits)")
    return None


def _forcing_contradiction(logged: dict[str, str], forced: dict[str, str], collective: Collective
                           ) -> tuple[str, str] | None:
    """(what the log states, what the sidecar says) for the first of NCCL_ALGO/NCCL_PROTO the log
    names a value of and the sidecar another (or none); None where they agree."""
    for var in (ALGO_ENV, PROTO_ENV):
        if var not in logged:
            continue
        said = forced.get(var)
        if (_single_choice(logged[var], collective) or "").lower() != \
                (_single_choice(said, collective) or "").lower():
            return (f"{var}={logged[var]}",
                    f"{var}={said}" if said else f"{var} unset (NCCL's default)")
    return None


def _load_table(sidecar: Path, meta: dict[str, Any]) -> list[PublishedRun]:
    """A published *summary table* (``layout: table``) in NVIDIA's tuner-CSV columns.

    Some sources publish one number per (node count, configuration) instead of a log; each row
    carries its own nodes, ranks and configuration (``default`` = NCCL chose), so the table splits
    into one run per (collective, nodes, configuration). The sidecar's ``nodes`` is then ``table``.
    Each such run was its own job, so its own launch (``<table>#<run name>``).
    """
    from dynamiccl.profiler.formats.tuner_measurements_csv import read_tuner_csv

    table = sidecar.parent / meta["log"]
    groups: dict[tuple, list[MeasurementRecord]] = {}
    for rec in read_tuner_csv(table):
        if rec.nnodes is None:
            raise PublishedRunError(f"{rec.source}: a table row needs its node count")
        key = (rec.collective, rec.nnodes, rec.config_label)
        launch = f"{table.resolve()}#{rec.collective}:{rec.nnodes}n:{rec.config_label}"
        groups.setdefault(key, []).append(replace(rec, env=_str_map(meta.get("env")), launch=launch,
                                                  nccl_version=_sidecar_version(sidecar, meta)))
    gpn = int(meta["gpus_per_node"])
    return [PublishedRun(sidecar.parent.name, f"{sidecar.stem}:{coll}:{nodes}n:{label}",
                         sidecar.parent / meta["log"], Collective[coll.upper()], nodes, gpn,
                         str(meta["launch"]), _forced_env(recs[0]),
                         str(meta.get("nccl_version", "unknown")), dict(meta["source"]),
                         tuple(recs))
            for (coll, nodes, label), recs in groups.items()]


def _sidecar_version(sidecar: Path, meta: dict[str, Any]) -> str:
    """The NCCL release the sidecar states (``nccl_version``), "" where it says ``unknown`` or
    nothing; a value that names no release is refused."""
    value = meta.get("nccl_version")
    if value in (None, "unknown"):
        return ""
    version = parse_version(str(value))
    if version is None:
        raise PublishedRunError(f"{sidecar}: nccl_version {value!r} is not an NCCL release; give "
                                "it as major.minor.patch (2.26.2) or 'unknown'")
    return str(version)


def _forced_env(rec: MeasurementRecord) -> dict[str, str]:
    out = {}
    if rec.algorithm:
        out["NCCL_ALGO"] = rec.algorithm
    if rec.protocol:
        out["NCCL_PROTO"] = rec.protocol
    return out


def _checked_sidecar(path: Path, meta: Any) -> dict[str, Any]:
    """The sidecar ``path``'s document ``meta``, or one PublishedRunError naming what a sidecar
    lacks or says that no run can have."""
    if not isinstance(meta, dict):
        raise PublishedRunError(f"{path}: a sidecar is a mapping with {', '.join(_REQUIRED)}")
    missing = [k for k in _REQUIRED if k not in meta]
    if missing:
        raise PublishedRunError(f"{path}: missing {', '.join(missing)}; every published run "
                                "records its shape, launch mode, forced variables and source")
    if meta["launch"] not in LAUNCH_MODES:
        raise PublishedRunError(f"{path}: launch is {meta['launch']!r}; use one of "
                                f"{', '.join(LAUNCH_MODES)}")
    problem = _sidecar_problem(meta)
    if problem:
        raise PublishedRunError(f"{path}: {problem}")
    if not (Path(path).parent / str(meta["log"])).is_file():
        raise PublishedRunError(f"{path}: its log {meta['log']!r} is not next to it")
    return meta


def _sidecar_problem(meta: dict[str, Any]) -> str | None:
    """What a sidecar says that no run can have: an unknown collective, a shape beyond the system
    limits, forced variables that name no algorithm or protocol of NCCL's (taken for NCCL's default
    otherwise), or a mapping that is none."""
    table = meta.get("layout") == "table"  # its rows say their collective and configuration
    if not table and str(meta["collective"]).upper() not in Collective.__members__:
        return (f"collective is {meta['collective']!r}; use one of "
                f"{', '.join(c.name.lower() for c in Collective)}")
    for key in ("nodes", "gpus_per_node"):
        value = meta[key]
        if key == "nodes" and value == "table":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RANKS:
            return f"{key} is {value!r}; give a whole number 1..{MAX_RANKS}"
    if not table and meta["nodes"] * meta["gpus_per_node"] > MAX_RANKS:
        return (f"nodes x gpus_per_node is {meta['nodes']} x {meta['gpus_per_node']} = "
                f"{meta['nodes'] * meta['gpus_per_node']} ranks, more than any system has "
                f"({MAX_RANKS}); give the run's own")
    for key in ("env",) if table else ("forced", "env"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            return f"{key} is {meta[key]!r}; give a mapping of NCCL variables to values"
    if table:
        return None
    forced = {str(k): str(v) for k, v in (meta["forced"] or {}).items()}
    collective = Collective[str(meta["collective"]).upper()]
    algo, proto = (_single_choice(forced.get(var), collective) for var in (ALGO_ENV, PROTO_ENV))
    try:
        normalize_config(algo, proto)
    except ValueError as exc:
        return f"forced {ALGO_ENV}/{PROTO_ENV}: {exc}"
    for var in (MIN_CHANNELS_ENV, MAX_CHANNELS_ENV):
        value = forced.get(var)
        if value is not None and not (value.isdigit() and 1 <= int(value) <= MAX_CHANNELS):
            return f"forced {var} is {value!r}; give a channel count 1..{MAX_CHANNELS}"
    if meta.get("pinned") is not None:
        return _pin_problem(meta, forced, collective)
    return None


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


# ---------------------------------------------------------------------------------------------
# Replay tables: measured time per configuration, NCCL's default run included and labelled
# ---------------------------------------------------------------------------------------------

#: NVIDIA's tuner-workflow columns, the in-place time, and where each row came from.
REPLAY_COLUMNS = ("system", *COLUMNS, INPLACE_COLUMN, "nccl_default", "launch", "run", "source")


def replay_rows(runs: Sequence[PublishedRun]) -> list[dict[str, str]]:
    """One row per measured size of every run, in file order, with the same size's in-place time
    where the log has one."""
    rows = []
    for run in runs:
        extra = {"system": run.system, "nccl_default": str(run.is_default).lower(),
                 "launch": run.launch, "run": run.name, "source": str(run.source.get("url", ""))}
        again = {r.nbytes: r.time_us for r in run.in_place}
        rows += [{**row, INPLACE_COLUMN: f"{again[rec.nbytes]:g}" if rec.nbytes in again else ""}
                 for rec, row in zip(run.records, tuner_csv_rows(run.records, extra), strict=True)]
    return [{k: row[k] for k in REPLAY_COLUMNS} for row in rows]


def write_replay(root: str | Path, out_dir: str | Path) -> list[Path]:
    """A CSV per system with at least one forced run (nothing to compare against otherwise)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for system, runs in load_all(root).items():
        if all(run.is_default for run in runs):
            continue
        path = out_dir / f"{system}.csv"
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=REPLAY_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(replay_rows(runs))
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the published-run fixtures and write "
                                     "their replay tables.")
    parser.add_argument("root", type=Path, help="folder with one sub-folder per system")
    parser.add_argument("--replay", type=Path, help="write <system>.csv replay tables here")
    args = parser.parse_args(argv)
    runs = load_all(args.root)
    for system, system_runs in runs.items():
        nodes = sorted({r.nodes for r in system_runs})
        forced = sum(not r.is_default for r in system_runs)
        print(f"{system}: {len(system_runs)} runs ({forced} forced), nodes {nodes}")
    if args.replay:
        for path in write_replay(args.root, args.replay):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
