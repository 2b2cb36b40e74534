"""NVIDIA's forced-choice timings of NCCL's cost-model tests: one ``time.txt`` per configuration.

NVIDIA keeps, next to each platform of its topology unit tests, the measured time of every
collective at every power-of-two size, once with NCCL's own choice and once per algorithm/protocol
pair forced. The public fork ``phu0ngng/nccl`` holds them under ``test/unit/topo/<Platform>/data``;
the test that reads them, ``test/unit/model.cc`` (read at commit
7f4493df32386007010e370c9373ddc155f881ab), fixes the format:

* the path is ``<gpus per node>/<nodes>/<Collective>/time.txt`` for NCCL's own choice and
  ``<gpus per node>/<nodes>/<Collective>/<Algorithm>/<Protocol>/time.txt`` for the call forced to
  that pair (NCCL's spellings, ``ncclFuncStr``/``ncclAlgoStr``/``ncclProtoStr``: ``AllReduce``,
  ``NVLSTree``, ``LL128``; some files spell ``SIMPLE``);
* line i (from 0) is the time of one call of 8·2^i bytes, in microseconds (the test compares it
  with ``ncclTopoGetAlgoTime``'s µs at ``size = 8 << i``); a line ``0.0`` (or 0) was not measured.
  The test reads sizes up to 4 GiB (30 lines); newer files carry two more lines (8 and 16 GiB),
  read here the same way;
* the size is nccl-tests' ``size`` column (AllGather and ReduceScatter: the whole gathered buffer),
  which is why their smallest sizes, below one element per rank, are ``0.0``.

What the files do not say, and what this reader therefore assumes: which NCCL build measured them
(none is recorded; the records say ``nccl_version`` nowhere), and how many launches each number
is (each file is taken as one launch of nccl-tests: its records share the launch id of the file's
path, and nothing times the same call twice within it). The fork's history may hold several versions
of one file, measured in different campaigns; a fixture keeps one version per file and says which
(its ``PROVENANCE.tsv``: path, commit, sha256).

``load(path)`` (:mod:`dynamiccl.profiler.formats.measurements`) reads one file by its path;
:func:`read_tree` reads every file of a ``data`` folder, the API the benchmarks and the learned
prior's corpus use.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths, normalize_config
from dynamiccl.system.knobs import Collective
from dynamiccl.system.nccl import COLLECTIVE_NCCL_NAMES
from dynamiccl.system.topology import MAX_RANKS

#: The only file name this format has.
TIME_FILE = "time.txt"
#: The size of line 0 (bytes); each further line doubles it.
FIRST_SIZE = 8
#: The most lines a file may hold: 8 B x 2^40 is far beyond any collective measured.
MAX_LINES = 40
_COLLECTIVES = {name.upper(): coll for coll, name in COLLECTIVE_NCCL_NAMES.items()}
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$")


class TopoTimingsError(ValueError):
    """A ``time.txt`` whose path or lines are not the format's."""


def layout(path: str | Path) -> tuple[int, int, Collective, str | None, str | None] | None:
    """(GPUs per node, nodes, collective, algorithm, protocol) the file's path says (algorithm and
    protocol None: NCCL's own choice), or None where the path is not the format's."""
    path = Path(path)
    if path.name != TIME_FILE:
        return None
    parts = path.parent.parts
    for depth, forced in ((3, False), (5, True)):
        if len(parts) < depth:
            continue
        gpn, nodes, coll, *pair = parts[-depth:]
        if not (gpn.isdigit() and nodes.isdigit()) or coll.upper() not in _COLLECTIVES:
            continue
        try:
            algo, proto = normalize_config(*pair) if forced else (None, None)
        except ValueError:
            continue
        return int(gpn), int(nodes), _COLLECTIVES[coll.upper()], algo, proto
    return None


def looks_like_topo_timings(path: str | Path, head: str) -> bool:
    """A ``time.txt`` at a path of the format holding one number per line."""
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    return layout(path) is not None and bool(lines) and all(map(_NUMBER.match, lines))


def parse_time_file(path: str | Path) -> list[MeasurementRecord]:
    """One record per measured line of one file (``0.0`` lines skipped), its shape and forced pair
    from the path; the file is one launch (launch id: its resolved path)."""
    path = Path(path)
    where = layout(path)
    if where is None:
        raise TopoTimingsError(
            f"{path}: not <GPUs per node>/<nodes>/<Collective>[/<Algorithm>/<Protocol>]/time.txt; "
            "keep NVIDIA's data folders as the fork lays them out")
    gpn, nodes, coll, algo, proto = where
    nranks = gpn * nodes
    if not 1 <= nranks <= MAX_RANKS:
        raise TopoTimingsError(f"{path}: {gpn} GPUs x {nodes} nodes is no system of 1..{MAX_RANKS} "
                               "ranks; check the folder names")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TopoTimingsError(f"{path}: cannot be read ({exc}); check the file") from None
    lines = [line.strip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) > MAX_LINES:
        raise TopoTimingsError(f"{path}: {len(lines)} lines; the format has one per size from 8 B, "
                               f"at most {MAX_LINES}")
    launch = str(path.resolve())
    records = []
    for i, text in enumerate(lines):
        source = f"{path}:{i + 1}"
        if not _NUMBER.match(text):
            raise TopoTimingsError(f"{source}: {text!r} is not a time in µs; the format holds one "
                                   "number per line (0.0: not measured)")
        time_us = float(text)
        if time_us == 0.0:
            continue
        if not math.isfinite(time_us):
            raise TopoTimingsError(f"{source}: {text!r} is not a time in µs")
        nbytes = FIRST_SIZE << i
        algbw, busbw = bandwidths(coll, nbytes, nranks, time_us)
        records.append(MeasurementRecord(coll.name.lower(), nbytes, nranks, time_us, algbw, busbw,
                                         algorithm=algo, protocol=proto, nnodes=nodes,
                                         source=source, launch=launch, read_at=source))
    return records


def read_tree(root: str | Path) -> list[MeasurementRecord]:
    """Every ``time.txt`` under ``root`` (a platform's ``data`` folder, or any folder of it), in
    path order; TopoTimingsError where one is not the format's or none is found."""
    root = Path(root)
    files = sorted(p for p in root.rglob(TIME_FILE) if p.is_file())
    if not files:
        raise TopoTimingsError(f"{root}: no {TIME_FILE} under it; give a platform's data folder "
                               "(<GPUs per node>/<nodes>/<Collective>/...)")
    return [rec for f in files for rec in parse_time_file(f)]
