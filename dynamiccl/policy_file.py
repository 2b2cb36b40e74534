"""The policy file (``*.dccl``): what ``dynamiccl export`` writes and the C tuner plugin reads.

A deployed policy has to be checked by a person before it steers a production job, and read by a
plugin that must never misread it. So the file is plain text, one rule per line, and closed by a
CRC-32 of everything above it; a file that fails any check is refused as a whole, by this module
with one :class:`PolicyFileError` and by the plugin with one NCCL warning (it then steps aside).

Format, version 1 (``dynamiccl/csrc/policy.c`` accepts exactly the same files)::

    DYNAMICCL-POLICY 1                          first line: magic and format version
    # comment                                   '#' lines and blank lines are ignored
    policy oracle                               header: key value (required keys below;
    created 2026-11-21T08:00:00Z                unknown keys are ignored for forward
    topology dgx_h100                           compatibility)
    fingerprint 1a2b3c4d5e6f7a8b
    nccl 2.21.5..2.32.3
    config_hash 0123456789abcdef
    slice straggler=none c2c=none               a context slice; the rules below belong to it
    allreduce 0 7 2 16 * * defer - - -
    allreduce 8 65535 2 16 * * ring ll 16 -
    checksum crc32 89abcdef                     last line: CRC-32 (zlib) of all bytes above it

Rule columns: collective, min_bytes, max_bytes (inclusive, NCCL's nBytes: the whole gathered
buffer for allgather/reducescatter), nodes, ranks, pipe_ops, reg_buff (``*`` = any), algorithm
and protocol (NCCL's names) or ``defer``, channels and chunk bytes (``-`` = keep NCCL's).

Lookup (identical in C): the slice is chosen once per communicator (``DYNAMICCL_CONTEXT``, default
``straggler=none c2c=none``); among rule groups whose nodes/ranks match the communicator the most
specific wins per (collective, pipe_ops, reg_buff) -- an exact node count outranks an exact rank
count, which outranks ``*``; per call the group for (pipe_ops, reg_buff), else (pipe_ops, *), else
(*, reg_buff), else (*, *) answers, and a size outside its ranges means "defer to NCCL".
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from dynamiccl.nccl import ALGORITHM_TOKENS as ALGO_TOKENS
from dynamiccl.nccl import COLLECTIVE_TOKENS as COLL_TOKENS
from dynamiccl.nccl import MAX_CHANNELS, Algorithm, Collective, Protocol
from dynamiccl.nccl import PROTOCOL_TOKENS as PROTO_TOKENS

MAGIC = "DYNAMICCL-POLICY"
FORMAT_VERSION = 1
SUFFIX = ".dccl"
MAX_FILE_BYTES = 64 << 20
MAX_LINE = 4096
MAX_RULES = 1_000_000
MAX_SLICES = 64
MAX_HEADER_VALUE = 200
MAX_BUCKET = 31
MIN_CHUNK, MAX_CHUNK = 2048, 1 << 30
MAX_BYTES = 2**64 - 1
MAX_DIM = 2**31 - 1
REQUIRED_HEADER = ("policy", "created", "topology", "fingerprint", "nccl", "config_hash")
#: NCCL releases whose tuner loader finds one of the plugin's ABI versions (v2..v6).
DEFAULT_NCCL_RANGE = "2.21.5..2.32.3"

#: Environment variables the plugin reads. DYNAMICCL_CONTEXT is reserved for the run-time context
#: (``straggler=BUCKET,c2c=BUCKET``); today it is read once per communicator at init.
POLICY_ENV = "DYNAMICCL_POLICY"
CONTEXT_ENV = "DYNAMICCL_CONTEXT"
LOG_DECISIONS_ENV = "DYNAMICCL_LOG_DECISIONS"

#: Context buckets a running job can know, with the representative value export evaluates at.
#: Straggler: how late the persistently slowest rank arrives; c2c: compute-to-communication ratio.
STRAGGLER_BUCKETS: dict[str, float] = {"none": 0.0, "short": 50.0, "long": 1000.0}
STRAGGLER_SHORT_MAX_US = 200.0
C2C_BUCKETS: dict[str, float] = {"none": 0.0, "low": 0.5, "high": 2.0}
C2C_LOW_MAX = 1.0
DEFAULT_CONTEXT = ("none", "none")

_TOKEN_ALGO = {v: k for k, v in ALGO_TOKENS.items()}
_TOKEN_PROTO = {v: k for k, v in PROTO_TOKENS.items()}
_TOKEN_COLL = {v: k for k, v in COLL_TOKENS.items()}
_DIGITS = re.compile(r"[0-9]{1,20}")
_WORD = re.compile(r"[a-z0-9_]+")
_ALLOWED = re.compile(rb"[^\x20-\x7e\t\n\r]")
_CHECKSUM = re.compile(r"checksum crc32 ([0-9a-f]{8})")
_HEADER_LINE = re.compile(r"([^ \t\r]*)[ \t\r]*(.*)", re.DOTALL)


class PolicyFileError(ValueError):
    """A policy file that cannot be used; the message names the file, the line and the problem."""


def context_buckets(straggler_delay_us: float, c2c: float) -> tuple[str, str]:
    """The slice key a job in this situation uses (the agreed mapping for the run-time context)."""
    if straggler_delay_us <= 0:
        straggler = "none"
    else:
        straggler = "short" if straggler_delay_us <= STRAGGLER_SHORT_MAX_US else "long"
    c2c_bucket = "none" if c2c <= 0 else ("low" if c2c <= C2C_LOW_MAX else "high")
    return straggler, c2c_bucket


@dataclass(frozen=True)
class Decision:
    """What the plugin makes NCCL do; ``None`` channels or chunk keep NCCL's own."""

    algorithm: Algorithm
    protocol: Protocol
    channels: int | None = None
    chunk_bytes: int | None = None

    def label(self) -> str:
        ch = f"{self.channels}ch" if self.channels else "nccl-ch"
        return f"{ALGO_TOKENS[self.algorithm]}/{PROTO_TOKENS[self.protocol]}/{ch}"


@dataclass(frozen=True)
class Rule:
    """One line of a slice. ``None`` in nodes/ranks/pipe_ops/reg_buff means any; ``decision=None``
    means defer to NCCL."""

    collective: Collective
    min_bytes: int
    max_bytes: int
    nodes: int | None = None
    ranks: int | None = None
    pipe_ops: int | None = None
    reg_buff: int | None = None
    decision: Decision | None = None
    line: int = field(default=0, compare=False)

    @property
    def group_key(self) -> tuple[int, int, int, int, int]:
        """Sort/group key; -1 stands for "any" exactly as in the C plugin."""
        return (int(self.collective), *(-1 if v is None else v for v in
                                        (self.nodes, self.ranks, self.pipe_ops, self.reg_buff)))


@dataclass(frozen=True)
class Slice:
    straggler: str = "none"
    c2c: str = "none"
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        # Rule order carries no meaning (lookup is by key and size), so slices compare as sets.
        ordered = tuple(sorted(self.rules, key=lambda r: (r.group_key, r.min_bytes)))
        object.__setattr__(self, "rules", ordered)

    @property
    def key(self) -> tuple[str, str]:
        return (self.straggler, self.c2c)

    @property
    def name(self) -> str:
        return f"straggler={self.straggler} c2c={self.c2c}"


@dataclass(frozen=True)
class Header:
    policy: str
    created: str
    topology: str
    fingerprint: str
    nccl: str
    config_hash: str


@dataclass(frozen=True)
class PolicyFile:
    header: Header
    slices: tuple[Slice, ...]

    def slice(self, straggler: str = "none", c2c: str = "none") -> Slice:
        for s in self.slices:
            if s.key == (straggler, c2c):
                return s
        raise KeyError(f"no slice straggler={straggler} c2c={c2c}")

    @property
    def n_rules(self) -> int:
        return sum(len(s.rules) for s in self.slices)

    def decide(
        self,
        collective: Collective,
        nbytes: int,
        nranks: int,
        nnodes: int,
        pipe_ops: int | None = None,
        reg_buff: int | None = None,
        *,
        context: tuple[str, str] = DEFAULT_CONTEXT,
    ) -> Rule | None:
        """The rule the plugin applies to this call (None: no rule covers it, NCCL decides)."""
        try:
            sl = self.slice(*context)
        except KeyError:
            sl = self.slice(*DEFAULT_CONTEXT)
        best: dict[tuple[int, int, int], tuple[int, tuple[int, ...]]] = {}
        for rule in sl.rules:
            if rule.nodes not in (None, nnodes) or rule.ranks not in (None, nranks):
                continue
            score = 2 * (rule.nodes is not None) + (rule.ranks is not None)
            k = rule.group_key
            sub = (k[0], k[3], k[4])
            if sub not in best or score > best[sub][0]:
                best[sub] = (score, k)
        pipe = -1 if pipe_ops is None or pipe_ops < 1 else pipe_ops
        reg = reg_buff if reg_buff in (0, 1) else -1
        for p, r in ((pipe, reg), (pipe, -1), (-1, reg), (-1, -1)):
            chosen = best.get((int(collective), p, r))
            if chosen:
                for rule in sl.rules:
                    if rule.group_key == chosen[1] and rule.min_bytes <= nbytes <= rule.max_bytes:
                        return rule
                return None
        return None


def checksum(body: bytes) -> str:
    return f"{zlib.crc32(body) & 0xFFFFFFFF:08x}"


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

_PREAMBLE = """\
# DynamICCL tuner policy, read by the NCCL tuner plugin libnccl-tuner-dynamiccl.so:
#   NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) DYNAMICCL_POLICY=<this file> torchrun ...
# `dynamiccl show <this file>` prints it as a table. Do not edit by hand: the last line is a CRC-32
# of everything above it and the plugin ignores a file whose checksum does not match.
"""
_COLUMNS = """\
# Each slice holds the rules for one run-time context; without DYNAMICCL_CONTEXT the plugin uses
# 'straggler=none c2c=none' (no persistent straggler, no compute overlap).
# Rule columns: collective min_bytes max_bytes nodes ranks pipe_ops reg_buff algorithm protocol
#   channels chunk. Sizes are NCCL's nBytes, inclusive. '*' = any value, 'defer' = NCCL decides,
#   '-' = keep NCCL's channel count / chunk size.
"""


def _dim(v: int | None) -> str:
    return "*" if v is None else str(v)


def _rule_fields(rule: Rule) -> list[str]:
    d = rule.decision
    tail = (["defer", "-", "-", "-"] if d is None else
            [ALGO_TOKENS[d.algorithm], PROTO_TOKENS[d.protocol], _dim(d.channels).replace("*", "-"),
             _dim(d.chunk_bytes).replace("*", "-")])
    return [COLL_TOKENS[rule.collective], str(rule.min_bytes), str(rule.max_bytes),
            _dim(rule.nodes), _dim(rule.ranks), _dim(rule.pipe_ops), _dim(rule.reg_buff), *tail]


def dumps(pf: PolicyFile) -> str:
    """The file text; the result is re-read, so only a file the plugin accepts is ever produced."""
    lines = [f"{MAGIC} {FORMAT_VERSION}", _PREAMBLE.rstrip("\n")]
    for key in REQUIRED_HEADER:
        lines.append(f"{key} {getattr(pf.header, key)}")
    lines.append(_COLUMNS.rstrip("\n"))
    for sl in pf.slices:
        lines.append(f"slice straggler={sl.straggler} c2c={sl.c2c}")
        rows = [_rule_fields(r) for r in sl.rules]
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(11)]
        lines += [" ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    body = "\n".join(lines) + "\n"
    text = f"{body}checksum crc32 {checksum(body.encode('ascii', 'replace'))}\n"
    loads(text, source="<policy being written>")
    return text


def write(pf: PolicyFile, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(dumps(pf), encoding="ascii")
    return path


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read(path: str | Path) -> PolicyFile:
    path = Path(path)
    if not path.is_file():
        raise PolicyFileError(f"{path}: no such policy file; export one with `dynamiccl export`")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise PolicyFileError(f"{path}: {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
    return loads(path.read_bytes(), source=str(path))


def loads(data: str | bytes, source: str = "<string>") -> PolicyFile:
    """Parses and validates a whole file; any problem raises one :class:`PolicyFileError`."""
    raw = data.encode("latin-1", "replace") if isinstance(data, str) else bytes(data)
    return _Parser(source).parse(raw)


def _number(text: str, lo: int, hi: int) -> int | None:
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.line = 0
        self.header: dict[str, str] = {}
        self.slices: list[tuple[str, str, list[Rule]]] = []

    def fail(self, problem: str, *, line: bool = True) -> PolicyFileError:
        where = f"line {self.line}: " if line else ""
        return PolicyFileError(f"{self.source}: {where}{problem}")

    def parse(self, raw: bytes) -> PolicyFile:
        if len(raw) > MAX_FILE_BYTES:
            raise self.fail(f"the file is over the {MAX_FILE_BYTES}-byte limit", line=False)
        bad = _ALLOWED.search(raw)
        if bad:
            raise self.fail(f"byte {bad.start()} is not printable ASCII (binary or corrupted "
                            "file)", line=False)
        text = raw.decode("ascii")
        first, _, _ = text.partition("\n")
        self.line = 1
        self._first_line(first)
        body = self._verify_checksum(text)
        for self.line, line in enumerate(body.split("\n")[1:-1], start=2):
            self._line(line)
        missing = [k for k in REQUIRED_HEADER if k not in self.header]
        if missing:
            raise self.fail(f"header '{missing[0]}' is missing", line=False)
        if not any((s, c) == DEFAULT_CONTEXT for s, c, _ in self.slices):
            raise self.fail("no default slice ('slice straggler=none c2c=none')", line=False)
        slices = tuple(Slice(s, c, self._checked(rules)) for s, c, rules in self.slices)
        return PolicyFile(Header(**{k: self.header[k] for k in REQUIRED_HEADER}), slices)

    def _first_line(self, line: str) -> None:
        tok = line.split()
        if len(tok) != 2 or tok[0] != MAGIC or not _DIGITS.fullmatch(tok[1]):
            raise self.fail("not a DynamICCL policy file (no 'DYNAMICCL-POLICY <version>' line)")
        if int(tok[1]) != FORMAT_VERSION:
            raise self.fail(f"format version {tok[1]} is not supported (this version reads "
                            f"{FORMAT_VERSION}); re-export the policy", line=False)

    def _verify_checksum(self, text: str) -> str:
        if not text.endswith("\n"):
            raise self.fail("the file is truncated (it does not end with the checksum line)",
                            line=False)
        start = text.rfind("\n", 0, len(text) - 1) + 1
        m = _CHECKSUM.fullmatch(text[start:-1])
        if not m:
            raise self.fail("the file is truncated or corrupted (its last line is not "
                            "'checksum crc32 XXXXXXXX')", line=False)
        body = text[:start]
        got = checksum(body.encode("ascii"))
        if got != m.group(1):
            raise self.fail(f"checksum mismatch (file says {m.group(1)}, content hashes to {got}):"
                            " the file was edited or corrupted; re-export it", line=False)
        return body

    def _line(self, line: str) -> None:
        if len(line) > MAX_LINE:
            raise self.fail("line longer than 4096 characters")
        stripped = line.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            return
        tok = stripped.split()
        if not self.slices and tok[0] != "slice":
            self._header(stripped)
        elif tok[0] == "slice":
            self._slice(tok)
        else:
            self._rule(tok)

    def _header(self, line: str) -> None:
        m = _HEADER_LINE.fullmatch(line)
        key, value = m.group(1), m.group(2).rstrip(" \t\r")
        if not _WORD.fullmatch(key) or len(key) > 32:
            raise self.fail(f"'{key[:40]}' is not a header key")
        if key in _TOKEN_COLL:
            raise self.fail(f"rule for {key} before the first 'slice' line")
        if not 1 <= len(value) <= MAX_HEADER_VALUE:
            raise self.fail(f"header '{key}' needs a value of 1..200 characters")
        if key in REQUIRED_HEADER:
            if key in self.header:
                raise self.fail(f"header '{key}' appears twice")
            self.header[key] = value

    def _slice(self, tok: list[str]) -> None:
        if len(tok) != 3 or not tok[1].startswith("straggler=") or not tok[2].startswith("c2c="):
            raise self.fail("write a slice as 'slice straggler=BUCKET c2c=BUCKET'")
        s, c = tok[1][10:], tok[2][4:]
        if not all(_WORD.fullmatch(b) and len(b) <= MAX_BUCKET for b in (s, c)):
            raise self.fail("slice buckets are 1..31 characters of a-z, 0-9, _")
        if any((s, c) == (s2, c2) for s2, c2, _ in self.slices):
            raise self.fail("this slice appears twice")
        if len(self.slices) == MAX_SLICES:
            raise self.fail("more than 64 slices")
        self.slices.append((s, c, []))

    def _rule(self, tok: list[str]) -> None:
        coll = _TOKEN_COLL.get(tok[0])
        if coll is None:
            raise self.fail(f"unknown collective '{tok[0][:40]}'")
        if len(tok) != 11:
            raise self.fail("a rule has 11 fields: collective min_bytes max_bytes nodes ranks "
                            "pipe_ops reg_buff algorithm protocol channels chunk")
        lo, hi = _number(tok[1], 0, MAX_BYTES), _number(tok[2], 0, MAX_BYTES)
        if lo is None or hi is None:
            raise self.fail("min_bytes and max_bytes must be unsigned decimal integers < 2^64")
        if lo > hi:
            raise self.fail("min_bytes is larger than max_bytes")
        dims = [None if t == "*" else _number(t, 1, MAX_DIM) for t in tok[3:6]]
        if any(d is None and t != "*" for d, t in zip(dims[:2], tok[3:5], strict=True)):
            raise self.fail("nodes and ranks must be '*' or positive integers")
        nodes, ranks, pipe = dims
        if nodes is not None and ranks is not None and ranks < nodes:
            raise self.fail("ranks must be at least nodes")
        if pipe is None and tok[5] != "*":
            raise self.fail("pipe_ops must be '*' or a positive integer")
        if tok[6] not in ("*", "0", "1"):
            raise self.fail("reg_buff must be '*', 0 or 1")
        reg = None if tok[6] == "*" else int(tok[6])
        decision = self._decision(tok[7:])
        if sum(len(r) for _, _, r in self.slices) == MAX_RULES:
            raise self.fail("more than 1000000 rules")
        self.slices[-1][2].append(Rule(coll, lo, hi, nodes, ranks, pipe, reg, decision,
                                       line=self.line))

    def _decision(self, tok: list[str]) -> Decision | None:
        if tok[0] == "defer":
            if tok[1:] != ["-", "-", "-"]:
                raise self.fail("a defer rule has '-' as protocol, channels and chunk")
            return None
        algo, proto = _TOKEN_ALGO.get(tok[0]), _TOKEN_PROTO.get(tok[1])
        if algo is None:
            raise self.fail(f"unknown algorithm '{tok[0][:40]}'")
        if proto is None:
            raise self.fail(f"unknown protocol '{tok[1][:40]}'")
        channels = None if tok[2] == "-" else _number(tok[2], 1, MAX_CHANNELS)
        if channels is None and tok[2] != "-":
            raise self.fail("channels must be '-' or 1..64")
        chunk = None if tok[3] == "-" else _number(tok[3], MIN_CHUNK, MAX_CHUNK)
        if chunk is None and tok[3] != "-":
            raise self.fail("chunk must be '-' or 2048..1073741824 bytes")
        return Decision(algo, proto, channels, chunk)

    def _checked(self, rules: list[Rule]) -> tuple[Rule, ...]:
        ordered = sorted(rules, key=lambda r: (r.group_key, r.min_bytes))
        for a, b in zip(ordered, ordered[1:], strict=False):
            if a.group_key == b.group_key and a.max_bytes >= b.min_bytes:
                lo, hi = sorted((a.line, b.line))
                self.line = lo
                raise self.fail(f"lines {lo} and {hi}: overlapping size ranges for the same "
                                "collective, nodes, ranks, pipe_ops and reg_buff", line=False)
        return tuple(ordered)
