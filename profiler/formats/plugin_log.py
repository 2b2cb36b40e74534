"""What DynamICCL's tuner plugin says in NCCL's log, read back: whether a launch ran the pin it was given.

A knob NCCL has no variable for (a chunk size) is measured through the plugin's pin: the launch
loads the plugin with a one-rule policy, and nothing in nccl-tests' output says whether the plugin
then steered the calls. NCCL's own log does, through the lines the plugin writes with NCCL's logger
(``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``; ``dynamiccl/plugin/csrc/tuner.c`` and ``fleet.c``
print them, ``tests/test_chunk_plan.py`` reads the real plugin's):

* at init, the policy it loaded: ``DynamICCL: policy NAME (sha256 HEX), 1 rules, ...``;
* with ``DYNAMICCL_LOG_DECISIONS=1``, each distinct decision once per process: ``DynamICCL
  decision: allreduce 33554432-134217728 B, nNodes 16 nRanks 128: nvls_tree/simple, NCCL's
  channels`` (`` -- not usable here, NCCL's choice stands`` where NCCL's cost table refused it);
* each chunk size it gave NCCL's getChunkSize, when it changes: ``DynamICCL chunk: allreduce
  nvls_tree/simple piece of 2097152 B on 1 channel(s): 131072 -> 16384 B``;
* at WARN, every reason it stepped aside (a policy file whose SHA-256 is not the expected one, an
  NCCL outside the policy's window, ``NCCL_ALGO`` set, a damaged file), and two notes that change
  nothing it pins (:data:`NOTES`).

:func:`steers` tells a log the plugin steered (read as NCCL's default otherwise, which it is not);
:func:`pin_problem` says why a log does not show the pin applied, naming the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from dynamiccl.system.knobs import KNOB, Collective, KnobValues
from dynamiccl.system.nccl_versions import parse_version

#: The ``policy`` header of a plan's pin policy, before its launch's name: how a pin policy is told
#: from a user's policy (a plan replaces only its own; a folder of logs skips it by that name).
PIN_POLICY_PREFIX = "plan-pin:"
#: The plugin's name in each of its lines (cheap to test before the regular expressions).
MARK = "DynamICCL"
POLICY_LINE = re.compile(r"DynamICCL: policy (.+?) \(sha256 ([0-9a-f]{64})\)")
DECISION_LINE = re.compile(r"DynamICCL decision: (\w+) (\d+)-(\d+) B, nNodes (\S+) nRanks (\S+): "
                           r"(\w+)/(\w+), (\d+ channels|NCCL's channels)(.*)$")
CHUNK_LINE = re.compile(r"DynamICCL chunk: (\w+) (\w+)/(\w+) piece of (\d+) B on (\d+) channel\(s\): "
                        r"(\d+) -> (\d+) B")
WARN_LINE = re.compile(r"NCCL WARN (DynamICCL: .*)$")
#: The plugin's WARN lines that leave its pins in place: aws-ofi-nccl's tuner replaced, a relative
#: ``DYNAMICCL_POLICY`` made absolute. Any other WARN is a rank where it stepped aside (a new WARN is
#: taken for one until it is listed here: a launch refused is safer than one misread).
NOTES = ("DynamICCL: the network plugin is aws-ofi-nccl", "is a relative path; using")
#: What a decision line ends with where NCCL's cost table did not allow the pinned pair.
UNUSABLE = "not usable here"
#: How much of a WARN line a message quotes.
QUOTED = 240


def pin_policy_launch(path: str | Path) -> str | None:
    """The name of the launch whose pin policy ``path`` is (None: not a plan's pin policy)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    m = re.search(rf"^policy {re.escape(PIN_POLICY_PREFIX)}(\S+)$", head, re.M)
    return m.group(1) if m else None


def steers(line: str) -> bool:
    """Whether the line says the plugin pinned a call: a decision it applied, or a chunk it gave."""
    if MARK not in line:
        return False
    m = DECISION_LINE.search(line)
    return (m is not None and UNUSABLE not in m.group(9)) or CHUNK_LINE.search(line) is not None


def policy_name(line: str) -> str | None:
    """The policy the plugin loaded, where the line is its init line."""
    m = POLICY_LINE.search(line) if MARK in line else None
    return m.group(1) if m else None


def pin_problem(lines: Iterable[str], collective: Collective, pinned: KnobValues, sha256: str,
                nccl_version: str = "") -> str | None:
    """Why NCCL's log ``lines`` do not show the plugin applying ``pinned`` to ``collective``'s
    calls, from the policy whose SHA-256 is ``sha256`` (None: it shows it): one clause naming what
    is missing and the fix. ``nccl_version`` (the log's release, "" unknown) tells a release too
    old to take a knob from a missing line of it."""
    loaded, applied, refused, chunks, warning = set(), set(), set(), set(), ""
    for line in lines:
        if MARK not in line:
            continue
        if m := WARN_LINE.search(line):
            if not any(note in m.group(1) for note in NOTES):
                warning = warning or m.group(1)
        elif m := POLICY_LINE.search(line):
            loaded.add(m.group(2))
        elif m := DECISION_LINE.search(line):
            (refused if UNUSABLE in m.group(9) else applied).add((m.group(1), m.group(6),
                                                                  m.group(7), m.group(8)))
        elif m := CHUNK_LINE.search(line):
            chunks.add((m.group(1), m.group(2), m.group(3), int(m.group(7))))
    if warning:
        return (f"the plugin stepped aside on a rank (NCCL WARN {warning[:QUOTED]}): fix what it "
                "names and run the launch again from the plan")
    if sha256 not in loaded:
        return (f"NCCL's log has no `DynamICCL: policy ... (sha256 {sha256[:12]}...)` line, so the "
                "plugin never loaded the pin policy: launch it with NCCL_TUNER_PLUGIN naming the "
                "plugin and NCCL_DEBUG_SUBSYS including TUNING, as the plan's script does")
    given = pinned.given()
    coll = collective.name.lower()
    pair = (KNOB["algorithm"].token(given["algorithm"]), KNOB["protocol"].token(given["protocol"]))
    channels = f"{given['channels']} channels" if "channels" in given else "NCCL's channels"
    if (coll, *pair, channels) not in applied:
        if any(d[:3] == (coll, *pair) for d in refused):
            return (f"NCCL's cost table did not allow {'/'.join(pair)} for these calls, so NCCL ran "
                    "its own choice (`DynamICCL decision: ... not usable here`): this pair cannot "
                    "be measured on this system, so move the log and its sidecar out of the "
                    "measurements")
        return (f"NCCL's log has no `DynamICCL decision: {coll} ...: {'/'.join(pair)}, {channels}` "
                "line, so the plugin pinned nothing: launch it with DYNAMICCL_LOG_DECISIONS=1, as "
                "the plan's script does")
    release = parse_version(nccl_version) if nccl_version else None
    for name, value in given.items():
        if name in ("algorithm", "protocol", "channels"):
            continue  # the decision line shows them
        if name != "chunk_bytes":
            return f"NCCL's log cannot show whether the plugin applied {name}"
        if (coll, *pair, int(value)) in chunks:
            continue
        since = parse_version(KNOB[name].nccl.nccl_since)
        if release is not None and release < since:
            return (f"NCCL {release} never asks a tuner for {name} ({KNOB[name].nccl.via}, NCCL "
                    f"{since} and later), so the launch ran {'/'.join(pair)} with NCCL's own; "
                    f"measure it under NCCL {since} or later")
        return (f"NCCL's log has no `DynamICCL chunk: {coll} {'/'.join(pair)} ... -> {int(value)} B` "
                "line, so NCCL never took the pinned chunk size (it asks a tuner from NCCL "
                f"{since}, {KNOB[name].nccl.via})")
    return None
