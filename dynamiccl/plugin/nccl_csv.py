"""The same decisions in the CSV format of NVIDIA's example tuner (``plugins/tuner/example``).

For users who would rather run NVIDIA's plugin. Its format (NCCL 2.30.7): one rule per line,
``collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff``,
first matching rule wins, -1 = any. Two properties of that plugin shape what is written here:
it sets ``nChannels = 1`` before matching (``plugins/tuner/example/plugin.c``), so a rule saying
-1, or no rule at all, runs on ONE channel -- every rule therefore carries an explicit channel
count; and it has no "defer", so a file meant to leave NCCL alone somewhere must spell out NCCL's
own choice there (``dynamiccl.agents.shipping.export.for_example_tuner``). Rules that still defer (the
"any other system" ones) are left out: the systems they stand for run on one channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dynamiccl.files import FileKind
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.knobs import parse_enum
from dynamiccl.system.nccl import (
    ALGORITHM_TOKENS,
    COLLECTIVE_TOKENS,
    PROTOCOL_TOKENS,
    Algorithm,
    Collective,
    Protocol,
)

#: The knobs a line of NVIDIA's example tuner sets; a rule naming any other knob cannot be written.
EXAMPLE_KNOBS = ("algorithm", "protocol", "channels")
#: How every file written here starts, so a later export recognises one it may replace.
FIRST_LINE_PREFIX = "# DynamICCL policy '"
#: The comment naming the policy a file was exported from (``policy_file.Header.source``).
SOURCE_PREFIX = "# source "


def _any(value: int | None) -> str:
    return "-1" if value is None else str(value)


def to_nccl_example_csv(policy: pf.PolicyFile, *, context: tuple[str, str] = pf.DEFAULT_CONTEXT,
                        notes: Mapping[pf.Rule, str] | None = None) -> str:
    """The CSV text for one slice (default: no straggler, no overlap).

    Rules are ordered most specific first (exact nodes, then exact ranks), so the example's
    first-match search finds the rule our plugin would apply; numPipeOps and regBuff are -1 (any):
    DynamICCL's decisions never depend on them. ``notes`` puts a comment line above a rule (what
    it rests on: a measurement, or NCCL's own pick as the model predicts it); the example tuner
    skips lines starting with ``#``.
    """
    sl = policy.slice(*context)
    lines = [
        f"{FIRST_LINE_PREFIX}{policy.header.policy}' for NVIDIA's example tuner "
        f"(NCCL_TUNER_CONFIG_FILE=<this file>), slice {sl.name}",
        f"# topology {policy.header.topology}, fingerprint {policy.header.fingerprint}, "
        f"created {policy.header.created}",
        *([f"{SOURCE_PREFIX}{policy.header.source}"] if policy.header.source else []),
        "# NVIDIA's example tuner runs any call no line matches on 1 channel: load this file only "
        "on the systems (nNodes, nRanks) it lists.",
        "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,"
        "regBuff",
    ]

    def specificity(rule: pf.Rule) -> tuple[int, ...]:
        return (-(2 * (rule.nodes is not None) + (rule.ranks is not None)), *rule.group_key,
                rule.min_bytes)

    for rule in sorted(sl.rules, key=specificity):
        d = rule.decision
        if d is None:
            continue
        beyond = [name for name in d.given() if name not in EXAMPLE_KNOBS]
        if beyond:
            raise pf.PolicyFileError(
                f"the rule for {COLLECTIVE_TOKENS[rule.collective]} {rule.min_bytes}-{rule.max_bytes}"
                f" pins {', '.join(beyond)}, which NVIDIA's example tuner cannot set; export it as a "
                "DynamICCL policy file (--format dccl)")
        if d.channels is None:
            raise pf.PolicyFileError(
                f"the rule for {COLLECTIVE_TOKENS[rule.collective]} {rule.min_bytes}-{rule.max_bytes}"
                " keeps NCCL's channel count, which NVIDIA's example tuner cannot express (it "
                "would run on 1 channel); export with explicit channels"
            )
        if notes and notes.get(rule):
            lines.append(f"# {notes[rule]}")
        lines.append(",".join([
            COLLECTIVE_TOKENS[rule.collective], str(rule.min_bytes), str(rule.max_bytes),
            ALGORITHM_TOKENS[d.algorithm], PROTOCOL_TOKENS[d.protocol], str(d.channels),
            _any(rule.nodes), _any(rule.ranks), "-1", "-1",
        ]))
    return "\n".join(lines) + "\n"


def _is_ours(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(FIRST_LINE_PREFIX)) == FIRST_LINE_PREFIX.encode()


#: What ``export --format nccl-example-csv`` writes (``--force`` replaces only such a file).
KIND = FileKind("a DynamICCL export for NVIDIA's example tuner", _is_ours)


def write_nccl_example_csv(policy: pf.PolicyFile, path: str | Path, *,
                           context: tuple[str, str] = pf.DEFAULT_CONTEXT,
                           notes: Mapping[pf.Rule, str] | None = None) -> Path:
    """Writes the CSV atomically (ranks starting meanwhile read the old or the new file, never a
    mixture); an existing file is replaced only if this function wrote it."""
    return pf.replace_file(path, to_nccl_example_csv(policy, context=context, notes=notes), kind=KIND)


@dataclass(frozen=True)
class CsvRule:
    """One line of NVIDIA's example-tuner CSV; None = -1 (any, or NCCL's channel count)."""

    collective: Collective
    min_bytes: int
    max_bytes: int
    algorithm: Algorithm
    protocol: Protocol
    channels: int | None
    nodes: int | None
    ranks: int | None
    pipe_ops: int | None
    reg_buff: int | None

    def matches(self, collective: Collective, nbytes: int, nnodes: int, nranks: int) -> bool:
        return (self.collective == collective and self.min_bytes <= nbytes <= self.max_bytes
                and self.nodes in (None, nnodes) and self.ranks in (None, nranks))


def read_nccl_example_csv_file(path: str | Path) -> list[CsvRule]:
    """The rules of a CSV file; one over the policy format's size limit is refused before it is
    read (a file of 10^6 lines took 19 s to show)."""
    path = Path(path)
    size = path.stat().st_size
    if size > pf.MAX_FILE_BYTES:
        raise pf.PolicyFileError(f"{path}: {size} bytes, over the {pf.MAX_FILE_BYTES}-byte limit of a "
                                 "policy file")
    return read_nccl_example_csv(path.read_text(encoding="ascii", errors="replace"), source=str(path))


def exported_from(text: str) -> str | None:
    """The policy a CSV this module wrote was exported from (its ``# source`` comment), if any."""
    for line in text.splitlines():
        if line.startswith(SOURCE_PREFIX):
            return line[len(SOURCE_PREFIX):].strip() or None
        if line.strip() and not line.startswith("#"):
            return None
    return None


def read_nccl_example_csv(text: str, source: str = "<csv>") -> list[CsvRule]:
    """Parses the example tuner's CSV in file order (its first matching rule wins).

    Each bad line raises one :class:`~dynamiccl.plugin.policy_file.PolicyFileError` naming the line. The
    limits of a ``.dccl`` file apply (bytes, rules), so any file accepted is read in about a second.
    """
    if len(text) > pf.MAX_FILE_BYTES:
        raise pf.PolicyFileError(f"{source}: over the {pf.MAX_FILE_BYTES}-byte limit of a policy file")
    rules: list[CsvRule] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(rules) == pf.MAX_RULES:
            raise pf.PolicyFileError(f"{source}: line {lineno}: more than {pf.MAX_RULES} rules, the "
                                     "limit of a policy file")
        fields = [f.strip() for f in line.split(",")]
        if len(fields) not in (8, 10):
            raise pf.PolicyFileError(f"{source}: line {lineno}: expected 8 or 10 comma-separated "
                                     "fields (collective,min_bytes,max_bytes,algorithm,protocol,"
                                     "channels,nNodes,nRanks[,numPipeOps,regBuff])")
        try:
            coll = Collective(parse_enum(Collective, fields[0]))
            lo, hi = int(fields[1]), int(fields[2])
            algo = Algorithm(parse_enum(Algorithm, fields[3]))
            proto = Protocol(parse_enum(Protocol, fields[4]))
            dims = [None if int(v) < 0 else int(v) for v in fields[5:]] + [None] * (10 - len(fields))
        except ValueError as exc:
            raise pf.PolicyFileError(f"{source}: line {lineno}: {exc}") from None
        if not 0 <= lo <= hi:
            raise pf.PolicyFileError(f"{source}: line {lineno}: min_bytes must be 0..max_bytes")
        rules.append(CsvRule(coll, lo, hi, algo, proto, *dims))
    return rules
