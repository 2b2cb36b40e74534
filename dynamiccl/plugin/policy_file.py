"""The policy file (``*.dccl``): what ``dynamiccl export`` writes and the C tuner plugin reads.

A deployed policy has to be checked by a person before it steers a production job, and read by a
plugin that must never misread it. So the file is plain text, one rule per line, and closed by a
CRC-32 of everything above it; a file that fails any check is refused as a whole, by this module
with one :class:`PolicyFileError` and by the plugin with one NCCL warning (it then steps aside).
Limits, tokens and names are in :mod:`dynamiccl.plugin.policy_format`, which also generates the plugin's
C header, so both parsers accept exactly the same files.

Format, version 2::

    DYNAMICCL-POLICY 2                          first line: magic and format version
    # comment                                   '#' lines and blank lines are ignored
    policy oracle                               header: key value (required keys below;
    created 2026-11-21T08:00:00Z                unknown keys are ignored for forward
    topology dgx_h100                           compatibility)
    fingerprint 1a2b3c4d5e6f7a8b
    features ll128,nvls                         what the exported system can run ('none' or a list)
    nccl 2.21.5..2.32.3                         the NCCL versions it holds for: A.B.C or A.B.C..X.Y.Z
    config_hash 0123456789abcdef                (nccl_versions.parse_window; the plugin defers under others)
    source /runs/quickstart/model.zip           optional: the policy it was exported from
    slice straggler=none c2c=none               a context slice; the rules below belong to it
    allreduce 0 7 2 16 defer - -
    allreduce 8 65535 2 16 ring ll 16
    checksum crc32 89abcdef                     last line: CRC-32 (zlib) of all bytes above it

Rule columns: collective, min_bytes, max_bytes (inclusive, NCCL's nBytes: the whole gathered
buffer for allgather/reducescatter), nodes, ranks (``*`` = any), then one column per NCCL knob of
the file's version, in the knob table's order (``dynamiccl.system.knobs.NCCL_KNOBS``): algorithm and
protocol (NCCL's names) or ``defer -``, channels (``-`` = keep NCCL's). Numbers are unsigned decimal
digits (leading zeros allowed, no sign), exactly as the plugin reads them. A file of an older
version (from ``MIN_FORMAT_VERSION`` on) lacks the later knobs' columns: its rules keep NCCL's
value of them; :func:`dumps` writes the oldest version that holds every rule.

What version 1 had and version 2 dropped, and why: ``reg_buff`` (NCCL's regBuff is a property of
one rank's buffers, so a rule keyed on it can make ranks of one communicator decide differently,
which hangs NCCL), ``pipe_ops`` and the chunk size (nothing exported them; NCCL asks for chunk sizes
per channel piece, so the plugin could not attribute a piece to the call a rule describes).

Lookup (identical in C): the slice is the run-time context (``dynamiccl_set_context``, else
``DYNAMICCL_CONTEXT``, else ``straggler=none c2c=none``); among rule groups whose nodes/ranks match
the communicator the most specific wins per collective -- an exact node count outranks an exact
rank count, which outranks ``*``; a size outside its ranges means "defer to NCCL".

Every rank of a communicator must decide alike, or NCCL hangs: they must load byte-identical files
(:func:`content_hash` is what the plugin logs at init and ``dynamiccl show`` prints; with
``DYNAMICCL_POLICY_SHA256`` set to it, a rank whose file differs lets NCCL decide and says so) and
use the same context. Files are therefore only ever replaced atomically (:func:`replace_file`), and
the plugin reads one once per process.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dynamiccl.files import FileKind, write_text_atomic
from dynamiccl.plugin.policy_format import (
    ANY,
    CHECKSUM_PREFIX,
    CONTEXT_ENV,
    CONTEXT_KEYS,
    DEFAULT_BUCKET,
    DEFER,
    FEATURES,
    FORMAT_VERSION,
    KEEP,
    LOG_DECISIONS_ENV,
    MAGIC,
    MAX_BUCKET,
    MAX_BYTES,
    MAX_DIM,
    MAX_FILE_BYTES,
    MAX_GROUP_RANGES,
    MAX_HEADER_KEY,
    MAX_HEADER_VALUE,
    MAX_LINE,
    MAX_RULES,
    MAX_SLICES,
    MIN_FORMAT_VERSION,
    NO_FEATURES,
    OPTIONAL_HEADER,
    POLICY_ENV,
    REQUIRED_HEADER,
    RULE_DIMS,
    RULE_FIELDS,
    SLICE,
    SUFFIX,
    defer_rest,
    knob_tokens,
    rule_fields,
    versions_read,
)
from dynamiccl.system.knobs import NCCL_KNOBS, Knobs
from dynamiccl.system.nccl import ALGORITHM_TOKENS as ALGO_TOKENS
from dynamiccl.system.nccl import COLLECTIVE_TOKENS as COLL_TOKENS
from dynamiccl.system.nccl import MAX_CHANNELS, Collective
from dynamiccl.system.nccl import PROTOCOL_TOKENS as PROTO_TOKENS

#: Format facts and tokens re-exported for callers of this module (defined in
#: dynamiccl.plugin.policy_format and dynamiccl.system.nccl).
__all__ = ["ALGO_TOKENS", "COLL_TOKENS", "CONTEXT_ENV", "FORMAT_VERSION", "LOG_DECISIONS_ENV",
           "MAGIC", "MAX_BYTES", "MAX_CHANNELS", "MAX_FILE_BYTES", "MAX_HEADER_VALUE", "MAX_RULES",
           "POLICY_ENV", "PROTO_TOKENS", "SUFFIX", "Decision", "Header", "PolicyFile",
           "PolicyFileError", "Rule", "Slice", "content_hash", "context_buckets", "context_spec", "dumps",
           "file_hash", "loads", "read", "replace_file", "system_features", "write"]

#: NCCL releases whose tuner loader finds one of the plugin's ABI versions (v2..v6).
DEFAULT_NCCL_RANGE = "2.21.5..2.32.3"

#: Context buckets a running job can know, with the representative value export evaluates at.
#: Straggler: how late the persistently slowest rank arrives; c2c: compute-to-communication ratio.
STRAGGLER_BUCKETS: dict[str, float] = {"none": 0.0, "short": 50.0, "long": 1000.0}
STRAGGLER_SHORT_MAX_US = 200.0
C2C_BUCKETS: dict[str, float] = {"none": 0.0, "low": 0.5, "high": 2.0}
C2C_LOW_MAX = 1.0
DEFAULT_CONTEXT = (DEFAULT_BUCKET, DEFAULT_BUCKET)

#: Each enum knob's values by their rule token.
_TOKEN_VALUES = {k.name: {token: value for value, token in knob_tokens(k).items()}
                 for k in NCCL_KNOBS if k.is_enum}
_TOKEN_COLL = {v: k for k, v in COLL_TOKENS.items()}
_DIGITS = re.compile(r"[0-9]{1,20}")
_WORD = re.compile(r"[a-z0-9_]+")
_ALLOWED = re.compile(rb"[^\x20-\x7e\t\n\r]")
_CHECKSUM = re.compile(re.escape(CHECKSUM_PREFIX) + r"([0-9a-f]{8})")
_HEADER_LINE = re.compile(r"([^ \t\r]*)[ \t\r]*(.*)", re.DOTALL)


def context_spec(straggler: str, c2c: str) -> str:
    """How a context is written: in a slice line, in DYNAMICCL_CONTEXT and for
    ``dynamiccl_set_context`` (e.g. ``straggler=long c2c=none``)."""
    return f"{CONTEXT_KEYS[0]}={straggler} {CONTEXT_KEYS[1]}={c2c}"


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
class Decision(Knobs):
    """What the plugin makes NCCL do: an algorithm and a protocol, and every other knob of
    :class:`~dynamiccl.system.knobs.Knobs` given or None (keep NCCL's own)."""

    def label(self) -> str:
        return "/".join(self.parts(keep="nccl"))

    def tokens(self, version: int = FORMAT_VERSION) -> list[str]:
        """Its rule columns in a file of ``version``: each knob's token, KEEP where kept."""
        return [KEEP if getattr(self, k.name) is None else k.token(getattr(self, k.name))
                for k in NCCL_KNOBS if k.nccl.format_version <= version]


@dataclass(frozen=True)
class Rule:
    """One line of a slice. ``None`` in nodes/ranks means any; ``decision=None`` means defer to
    NCCL."""

    collective: Collective
    min_bytes: int
    max_bytes: int
    nodes: int | None = None
    ranks: int | None = None
    decision: Decision | None = None
    line: int = field(default=0, compare=False)

    @property
    def group_key(self) -> tuple[int, int, int]:
        """Sort/group key; -1 stands for "any" exactly as in the C plugin."""
        return (int(self.collective), *(-1 if v is None else v for v in (self.nodes, self.ranks)))


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
        return context_spec(self.straggler, self.c2c)


@dataclass(frozen=True)
class Header:
    """The header lines; ``features`` lists what the exported system can run
    (:func:`system_features`), which the plugin needs where NCCL cannot check (its v2 ABI).
    ``source`` (optional) names the policy the file was exported from: a built-in policy or the
    checkpoint's absolute path."""

    policy: str
    created: str
    topology: str
    fingerprint: str
    nccl: str
    config_hash: str
    features: str = NO_FEATURES
    source: str | None = None


def system_features(ll128: bool, nvls: bool, collnet: bool) -> str:
    """The ``features`` header value for a system."""
    present = [name for name, on in zip(FEATURES, (ll128, nvls, collnet), strict=True) if on]
    return ",".join(present) or NO_FEATURES


@dataclass(frozen=True)
class PolicyFile:
    header: Header
    slices: tuple[Slice, ...]
    #: The format version it was read in (None: not read from a file; written as file_version).
    version: int | None = field(default=None, compare=False)

    def ignored_before(self) -> list[tuple[str, str, str]]:
        """(knob, the first NCCL that honours it, how the plugin sets it) for each knob a rule
        names that NCCL releases of the header's ``nccl`` range ignore."""
        oldest = _release(self.header.nccl.partition("..")[0])
        named = {name for s in self.slices for r in s.rules if r.decision is not None
                 for name in r.decision.given()}
        return [(k.name, k.nccl.nccl_since, k.nccl.via) for k in NCCL_KNOBS
                if k.name in named and oldest is not None and oldest < _release(k.nccl.nccl_since)]

    def slice(self, straggler: str = "none", c2c: str = "none") -> Slice:
        for s in self.slices:
            if s.key == (straggler, c2c):
                return s
        raise KeyError(f"no slice {context_spec(straggler, c2c)}")

    @property
    def n_rules(self) -> int:
        return sum(len(s.rules) for s in self.slices)

    def decide(
        self,
        collective: Collective,
        nbytes: int,
        nranks: int,
        nnodes: int,
        *,
        context: tuple[str, str] = DEFAULT_CONTEXT,
    ) -> Rule | None:
        """The rule the plugin applies to this call (None: no rule covers it, NCCL decides).
        A context without a slice falls back to the default slice, as in the plugin at init."""
        try:
            sl = self.slice(*context)
        except KeyError:
            sl = self.slice(*DEFAULT_CONTEXT)
        return next((r for r in _group(sl, collective, nranks, nnodes)
                     if r.min_bytes <= nbytes <= r.max_bytes), None)

    def overrides_on(self, nranks: int, nnodes: int) -> bool:
        """Whether the plugin would pin anything for some call of a communicator of this shape in
        the default context (a rule of the group it looks up names an algorithm): False for a
        file written for other systems only, which leaves every call there to NCCL."""
        sl = next((s for s in self.slices if s.key == DEFAULT_CONTEXT), None)
        return sl is not None and any(r.decision is not None for c in Collective
                                      for r in _group(sl, c, nranks, nnodes))

    def pinned_shapes(self) -> str:
        """The communicators the default context pins anything for, as words
        (``4 nodes x 4 ranks``; ``any`` for a ``*``), or ``none``."""
        shapes = sorted({(r.nodes, r.ranks) for s in self.slices if s.key == DEFAULT_CONTEXT
                         for r in s.rules if r.decision is not None},
                        key=lambda shape: tuple(-1 if v is None else v for v in shape))
        return ", ".join(f"{'any' if n is None else n} nodes x {'any' if r is None else r} ranks"
                         for n, r in shapes) or "none"


def _release(text: str) -> tuple[int, ...] | None:
    """``2.30.3`` as (2, 30, 3); None for text that is no release number."""
    parts = text.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _group(sl: Slice, collective: Collective, nranks: int, nnodes: int) -> list[Rule]:
    """The rules the plugin looks a call up in: of the groups matching the communicator, the most
    specific (an exact node count outranks an exact rank count, which outranks ``*``)."""
    matching = [r for r in sl.rules if r.collective == collective
                and r.nodes in (None, nnodes) and r.ranks in (None, nranks)]
    if not matching:
        return []
    best = max(matching, key=lambda r: 2 * (r.nodes is not None) + (r.ranks is not None))
    return [r for r in matching if r.group_key == best.group_key]


def content_hash(data: bytes) -> str:
    """SHA-256 of a policy file's bytes, lowercase hex: the identity the plugin logs at init and
    caches parsed files by, so ranks holding different files show different hashes."""
    return hashlib.sha256(data).hexdigest()


def file_hash(path: str | Path) -> str:
    """:func:`content_hash` of a file on disk (what ``dynamiccl show`` prints)."""
    return content_hash(Path(path).read_bytes())


def checksum(body: bytes) -> str:
    return f"{zlib.crc32(body) & 0xFFFFFFFF:08x}"


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

_PREAMBLE = f"""\
# DynamICCL tuner policy, read by the NCCL tuner plugin libnccl-tuner-dynamiccl.so:
#   NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) {POLICY_ENV}=<this file> torchrun ...
# `dynamiccl show <this file>` prints it as a table. Do not edit by hand: the last line is a CRC-32
# of everything above it and the plugin ignores a file whose checksum does not match.
"""
def _columns(version: int) -> str:
    keepable = [k.name for k in NCCL_KNOBS if k.nccl.keepable and k.nccl.format_version <= version]
    kept = " or ".join(["channel count" if n == "channels" else n for n in keepable])
    return f"""\
# Each slice holds the rules for one run-time context; without one the plugin uses
# '{context_spec(DEFAULT_BUCKET, DEFAULT_BUCKET)}' (no persistent straggler, no compute overlap).
# Rule columns: {" ".join(rule_fields(version))}.
#   Sizes are NCCL's nBytes, inclusive. '{ANY}' = any value, '{DEFER}' = NCCL decides,
#   '{KEEP}' = keep NCCL's {kept} (or nothing to say, after '{DEFER}').
"""


def _dim(v: int | None, none: str = ANY) -> str:
    return none if v is None else str(v)


def _rule_fields(rule: Rule, version: int) -> list[str]:
    d = rule.decision
    knobs = len(rule_fields(version)) - len(RULE_DIMS)
    tail = [DEFER] + [KEEP] * (knobs - 1) if d is None else d.tokens(version)
    return [COLL_TOKENS[rule.collective], str(rule.min_bytes), str(rule.max_bytes),
            _dim(rule.nodes), _dim(rule.ranks), *tail]


def file_version(pf: PolicyFile) -> int:
    """The oldest format version that holds every rule of ``pf``: a knob's column is written only
    where a rule names that knob, so a file stays readable by every plugin that can apply it."""
    named = {name for s in pf.slices for r in s.rules if r.decision is not None
             for name in r.decision.given()}
    return max([MIN_FORMAT_VERSION, *(k.nccl.format_version for k in NCCL_KNOBS if k.name in named)])


def dumps(pf: PolicyFile) -> str:
    """The file text; the result is re-read, so only a file the plugin accepts is ever produced."""
    version = file_version(pf)
    lines = [f"{MAGIC} {version}", _PREAMBLE.rstrip("\n")]
    for key in (*REQUIRED_HEADER, *OPTIONAL_HEADER):
        if getattr(pf.header, key) is not None:
            lines.append(f"{key} {getattr(pf.header, key)}")
    lines.append(_columns(version).rstrip("\n"))
    for sl in pf.slices:
        lines.append(f"{SLICE} {sl.name}")
        rows = [_rule_fields(r, version) for r in sl.rules]
        widths = [max((len(row[i]) for row in rows), default=0)
                  for i in range(len(rule_fields(version)))]
        lines += [" ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    body = "\n".join(lines) + "\n"
    text = f"{body}{CHECKSUM_PREFIX}{checksum(body.encode('ascii', 'replace'))}\n"
    loads(text, source="<policy being written>")
    return text


def is_policy_file(path: Path) -> bool:
    """Whether ``path`` starts like a policy file of any version (so replacing it loses nothing
    that is not a policy)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC) + 1) == f"{MAGIC} ".encode()


#: What ``export`` and ``tune`` write: ``--force`` replaces a policy file and nothing else.
KIND = FileKind("a DynamICCL policy file", is_policy_file)


def replace_file(path: str | Path, text: str, *, kind: FileKind) -> Path:
    """Writes ``text`` to ``path`` atomically: a temporary file in the same folder, fsync, rename.

    Ranks that start while a policy is being rewritten then read either the old or the new file,
    never a mixture. An existing ``path`` is replaced only if it holds ``kind`` (a policy file,
    say), so a mistyped ``-o model.zip`` cannot destroy a model. (The commands check the same with
    ``files.claim_output`` before any work; this is the last word at the moment of writing.)
    """
    path = Path(path)
    if path.is_dir():
        raise PolicyFileError(f"{path} is a folder; give a file name")
    if path.exists():
        try:
            ours = path.is_file() and kind.written_by(path)
        except OSError as exc:
            raise PolicyFileError(f"cannot read {path} to check what it is ({exc.strerror})") from None
        if not ours:
            raise PolicyFileError(f"refusing to overwrite {path}: it is not {kind.name}; remove it or "
                                  "choose another output file")
    try:
        return write_text_atomic(path, text, encoding="ascii", durable=True)
    except OSError as exc:
        raise PolicyFileError(f"cannot write {path} ({exc.strerror or exc}); the previous file, if "
                              "any, is unchanged") from None


def write(pf: PolicyFile, path: str | Path) -> Path:
    """Writes a policy file atomically; an existing file is replaced only if it is a policy."""
    return replace_file(path, dumps(pf), kind=KIND)


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


def _valid_features(value: str) -> bool:
    if value == NO_FEATURES:
        return True
    names = value.split(",")
    return len(set(names)) == len(names) and all(n in FEATURES for n in names)


def _number(text: str, lo: int, hi: int) -> int | None:
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.version = FORMAT_VERSION
        self.fields = RULE_FIELDS
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
            raise self.fail(f"no default slice ('{SLICE} {context_spec(*DEFAULT_CONTEXT)}')",
                            line=False)
        slices = tuple(Slice(s, c, self._checked(rules)) for s, c, rules in self.slices)
        return PolicyFile(Header(**{k: self.header[k] for k in REQUIRED_HEADER},
                                 **{k: self.header.get(k) for k in OPTIONAL_HEADER}), slices,
                          self.version)

    def _first_line(self, line: str) -> None:
        tok = line.split()
        if len(tok) != 2 or tok[0] != MAGIC or not _DIGITS.fullmatch(tok[1]):
            raise self.fail("not a DynamICCL policy file (no 'DYNAMICCL-POLICY <version>' line)")
        if not MIN_FORMAT_VERSION <= int(tok[1]) <= FORMAT_VERSION:
            raise self.fail(f"format version {tok[1]} is not supported (this version reads "
                            f"{versions_read()}); re-export the policy", line=False)
        self.version = int(tok[1])
        self.fields = rule_fields(self.version)

    def _verify_checksum(self, text: str) -> str:
        if not text.endswith("\n"):
            raise self.fail("the file is truncated (it does not end with the checksum line)",
                            line=False)
        start = text.rfind("\n", 0, len(text) - 1) + 1
        m = _CHECKSUM.fullmatch(text[start:-1])
        if not m:
            raise self.fail("the file is truncated or corrupted (its last line is not "
                            f"'{CHECKSUM_PREFIX}XXXXXXXX')", line=False)
        body = text[:start]
        got = checksum(body.encode("ascii"))
        if got != m.group(1):
            raise self.fail(f"checksum mismatch (file says {m.group(1)}, content hashes to {got}):"
                            " the file was edited or corrupted; re-export it", line=False)
        return body

    def _line(self, line: str) -> None:
        if len(line) > MAX_LINE:
            raise self.fail(f"line longer than {MAX_LINE} characters")
        stripped = line.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            return
        tok = stripped.split()
        if not self.slices and tok[0] != SLICE:
            self._header(stripped)
        elif tok[0] == SLICE:
            self._slice(tok)
        else:
            self._rule(tok)

    def _header(self, line: str) -> None:
        m = _HEADER_LINE.fullmatch(line)
        key, value = m.group(1), m.group(2).rstrip(" \t\r")
        if not _WORD.fullmatch(key) or len(key) > MAX_HEADER_KEY:
            raise self.fail(f"'{key[:40]}' is not a header key")
        if key in _TOKEN_COLL:
            raise self.fail(f"rule for {key} before the first 'slice' line")
        if not 1 <= len(value) <= MAX_HEADER_VALUE:
            raise self.fail(f"header '{key}' needs a value of 1..{MAX_HEADER_VALUE} characters")
        if key in REQUIRED_HEADER or key in OPTIONAL_HEADER:
            if key in self.header:
                raise self.fail(f"header '{key}' appears twice")
            if key == "features" and not _valid_features(value):
                raise self.fail(f"features is '{NO_FEATURES}' or a comma list of "
                                f"{', '.join(FEATURES)}, each at most once")
            self.header[key] = value

    def _slice(self, tok: list[str]) -> None:
        prefixes = [f"{key}=" for key in CONTEXT_KEYS]
        if len(tok) != 3 or not all(t.startswith(p) for t, p in zip(tok[1:], prefixes, strict=True)):
            raise self.fail(f"write a slice as '{SLICE} {context_spec('BUCKET', 'BUCKET')}'")
        s, c = (t[len(p):] for t, p in zip(tok[1:], prefixes, strict=True))
        if not all(_WORD.fullmatch(b) and len(b) <= MAX_BUCKET for b in (s, c)):
            raise self.fail(f"slice buckets are 1..{MAX_BUCKET} characters of a-z, 0-9, _")
        if any((s, c) == (s2, c2) for s2, c2, _ in self.slices):
            raise self.fail("this slice appears twice")
        if len(self.slices) == MAX_SLICES:
            raise self.fail(f"more than {MAX_SLICES} slices")
        self.slices.append((s, c, []))

    def _rule(self, tok: list[str]) -> None:
        coll = _TOKEN_COLL.get(tok[0])
        if coll is None:
            raise self.fail(f"unknown collective '{tok[0][:40]}'")
        if len(tok) != len(self.fields):
            raise self.fail(f"a rule has {len(self.fields)} fields: {' '.join(self.fields)}")
        lo, hi = _number(tok[1], 0, MAX_BYTES), _number(tok[2], 0, MAX_BYTES)
        if lo is None or hi is None:
            raise self.fail("min_bytes and max_bytes must be unsigned decimal integers < 2^64")
        if lo > hi:
            raise self.fail("min_bytes is larger than max_bytes")
        nodes, ranks = (None if t == ANY else _number(t, 1, MAX_DIM) for t in tok[3:5])
        if (nodes is None and tok[3] != ANY) or (ranks is None and tok[4] != ANY):
            raise self.fail("nodes and ranks must be '*' or positive integers")
        if nodes is not None and ranks is not None and ranks < nodes:
            raise self.fail("ranks must be at least nodes")
        decision = self._decision(tok[5:])
        if sum(len(r) for _, _, r in self.slices) == MAX_RULES:
            raise self.fail(f"more than {MAX_RULES} rules")
        self.slices[-1][2].append(Rule(coll, lo, hi, nodes, ranks, decision, line=self.line))

    def _decision(self, tok: list[str]) -> Decision | None:
        if tok[0] == DEFER:
            if any(t != KEEP for t in tok[1:]):
                raise self.fail(f"a defer rule has '{KEEP}' as {defer_rest(self.version)}")
            return None
        return Decision(**{k.name: self._knob(k, t) for k, t in zip(NCCL_KNOBS, tok, strict=False)})

    def _knob(self, knob, token: str):
        """One knob's column of a decision (as the plugin's parse_knob reads it)."""
        if knob.nccl.keepable and token == KEEP:
            return None
        if knob.is_enum:
            value = _TOKEN_VALUES[knob.name].get(token)
            if value is None:
                raise self.fail(f"unknown {knob.name} '{token[:40]}'")
            return value
        value = _number(token, knob.lo, knob.hi)
        if value is None:
            keep = f"'{KEEP}' or " if knob.nccl.keepable else ""
            raise self.fail(f"{knob.name} must be {keep}{knob.lo}..{knob.hi}")
        return value

    def _checked(self, rules: list[Rule]) -> tuple[Rule, ...]:
        ordered = sorted(rules, key=lambda r: (r.group_key, r.min_bytes))
        sizes = Counter(r.group_key for r in ordered)
        crowded = next((k for k, n in sizes.items() if n > MAX_GROUP_RANGES), None)
        if crowded is not None:
            coll, nodes, ranks = crowded
            raise self.fail(f"more than {MAX_GROUP_RANGES} size ranges for {COLL_TOKENS[coll]} "
                            f"nodes {_dim(None if nodes < 0 else nodes)} ranks "
                            f"{_dim(None if ranks < 0 else ranks)} in one slice", line=False)
        for a, b in zip(ordered, ordered[1:], strict=False):
            if a.group_key == b.group_key and a.max_bytes >= b.min_bytes:
                lo, hi = sorted((a.line, b.line))
                self.line = lo
                raise self.fail(f"lines {lo} and {hi}: overlapping size ranges for the same "
                                "collective, nodes and ranks", line=False)
        return tuple(ordered)
