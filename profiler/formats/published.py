"""Published nccl-tests runs kept as fixtures: a measured log plus a sidecar saying what ran it.

A log alone does not say how many nodes it spanned (large runs are kept without their thousands of
``#  Rank`` lines), how it was launched, or which ``NCCL_ALGO``/``NCCL_PROTO`` the job exported
outside the log. The sidecar (``<log stem>.yaml`` next to the log) records those facts and where the
numbers came from, so every record loaded here carries the system's true shape and configuration.
Each system folder also holds its datasheet ``topology.yaml`` and a ``system.yaml`` of facts the
topology schema cannot express yet.

Layout: ``<root>/<system>/<run>.txt|.json`` + ``<run>.yaml``, ``<root>/<system>/topology.yaml``.

``python -m dynamiccl.profiler.formats.published ROOT --replay OUT`` writes the replay tables (one CSV per
system that has forced runs) that ``tests/fixtures/real/replay/README.md`` documents.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dynamiccl.config_loader import load_yaml, yaml_problem
from dynamiccl.profiler.formats.nccl_tests import _forced_config, _single_choice
from dynamiccl.profiler.formats.records import MeasurementRecord, normalize_config
from dynamiccl.profiler.formats.tuner_measurements_csv import COLUMNS, INPLACE_COLUMN, tuner_csv_rows
from dynamiccl.system.knobs import Collective
from dynamiccl.system.nccl import ALGO_ENV, PROTO_ENV
from dynamiccl.system.nccl_versions import parse_version
from dynamiccl.system.topology import LAUNCH_MODES, MAX_RANKS, Topology, load_topology

#: Files in a system folder that are not run sidecars.
SYSTEM_FILES = ("topology.yaml", "system.yaml")
_REQUIRED = ("log", "collective", "nodes", "gpus_per_node", "launch", "forced", "source")


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


def load_sidecar(sidecar: str | Path) -> list[PublishedRun]:
    """The runs one sidecar describes: its log, or its summary table (``layout: table``)."""
    return load_table(sidecar) if _layout(Path(sidecar)) == "table" else [load_run(sidecar)]


def sidecar_log(path: str | Path) -> Path | None:
    """The log ``path`` is the sidecar of, or None when it is not a sidecar (any other YAML, a
    system's ``topology.yaml``/``system.yaml``, a file that is not YAML)."""
    path = Path(path)
    if path.suffix not in (".yaml", ".yml") or path.name in SYSTEM_FILES:
        return None
    try:
        meta = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("log"), str):
        return None
    log = path.parent / meta["log"]
    return log if log.is_file() else None


def sidecar_text(log: str, collective: Collective, nodes: int, gpus_per_node: int, launch: str,
                 forced: dict[str, str], *, env: dict[str, str] | None = None,
                 source: dict[str, str] | None = None, notes: str = "",
                 nccl_version: str = "unknown") -> str:
    """A sidecar for the log named ``log`` (a file name beside the sidecar), as :func:`load_run`
    reads it: what the log alone cannot say (the nodes, the launch mode, the variables that forced
    NCCL, ``{}`` for NCCL's default). ``dynamiccl label`` and the scripts ``tune --plan`` writes use
    it; every sidecar it writes loads (checked by :func:`_sidecar_problem` before it is returned)."""
    meta = {"log": log, "collective": collective.name.lower(), "nodes": nodes,
            "gpus_per_node": gpus_per_node, "launch": launch, "nccl_version": nccl_version,
            "forced": dict(forced), "env": dict(env or {}), "source": dict(source or {}),
            "notes": notes}
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
    from dynamiccl.profiler.formats.measurements import read

    sidecar = Path(sidecar)
    meta = _read_sidecar(sidecar)
    log = sidecar.parent / meta["log"]
    collective = Collective[str(meta["collective"]).upper()]
    forced = {str(k): str(v) for k, v in (meta["forced"] or {}).items()}
    algo, proto, channels = _forced_config(forced, collective)
    nodes, gpn = int(meta["nodes"]), int(meta["gpus_per_node"])
    stated = _sidecar_version(sidecar, meta)
    halves: dict[bool, list[MeasurementRecord]] = {False: [], True: []}
    records, warnings = read(log)
    for rec in records:
        if rec.coll != collective:
            raise PublishedRunError(f"{sidecar}: says {collective.name.lower()} but {log.name} "
                                    f"holds {rec.collective}; fix the sidecar's collective")
        if rec.nranks > nodes * gpn:  # fewer: a log whose first rank lines were cut off
            raise PublishedRunError(f"{sidecar}: says {nodes} nodes x {gpn} GPUs = {nodes * gpn} "
                                    f"ranks, but {log.name} lists {rec.nranks}; fix its nodes or "
                                    "gpus_per_node")
        if stated and rec.nccl_version and rec.nccl_version != stated:
            raise PublishedRunError(f"{sidecar}: says NCCL {stated} but {log.name} was run with "
                                    f"NCCL {rec.nccl_version}; fix the sidecar's nccl_version")
        halves[rec.in_place].append(replace(rec, nranks=nodes * gpn, nnodes=nodes, algorithm=algo,
                                            protocol=proto, channels=channels,
                                            env={**rec.env, **forced, **_str_map(meta.get("env"))},
                                            nccl_version=rec.nccl_version or stated,
                                            forcing_unknown=False))
    if not halves[False]:
        raise PublishedRunError(f"{log}: no out-of-place rows with a size above 0")
    return PublishedRun(sidecar.parent.name, sidecar.stem, log, collective, nodes, gpn,
                        str(meta["launch"]), forced, str(meta.get("nccl_version", "unknown")),
                        dict(meta["source"]), tuple(halves[False]), tuple(halves[True]),
                        tuple(warnings))


def load_table(sidecar: str | Path) -> list[PublishedRun]:
    """A published *summary table* (``layout: table``) in NVIDIA's tuner-CSV columns.

    Some sources publish one number per (node count, configuration) instead of a log; each row
    carries its own nodes, ranks and configuration (``default`` = NCCL chose), so the table splits
    into one run per (collective, nodes, configuration). The sidecar's ``nodes`` is then ``table``.
    Each such run was its own job, so its own launch (``<table>#<run name>``).
    """
    from dynamiccl.profiler.formats.tuner_measurements_csv import read_tuner_csv

    sidecar = Path(sidecar)
    meta = _read_sidecar(sidecar)
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


def _layout(sidecar: Path) -> str:
    meta = _sidecar_yaml(sidecar)
    return str(meta.get("layout", "log")) if isinstance(meta, dict) else "log"


def _sidecar_yaml(path: Path) -> Any:
    """The sidecar's YAML document (a key given twice refused), or one PublishedRunError."""
    try:
        return load_yaml(path.read_text())
    except OSError as exc:
        raise PublishedRunError(f"{path}: cannot read the sidecar ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise PublishedRunError(f"{path}: not a valid sidecar ({yaml_problem(exc)})") from None


def _read_sidecar(path: Path) -> dict[str, Any]:
    meta = _sidecar_yaml(path)
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
