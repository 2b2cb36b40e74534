"""The policy file format's facts, written once: limits, tokens, header keys, the plugin's environment.

Two parsers read a policy file -- :mod:`dynamiccl.plugin.policy_file` in Python and the C plugin
(``dynamiccl/plugin/csrc``) -- and they must accept exactly the same files. So every limit, token and name
they share lives here, and the C side's copy (``dynamiccl/plugin/csrc/policy_format.h``) is generated from
this module. The same command generates the plugin's other header, the profiler ring's layout
(``csrc/profiler_format.h`` from :mod:`dynamiccl.plugin.profile_ring`)::

    python -m dynamiccl.plugin.policy_format            # rewrite the headers
    python -m dynamiccl.plugin.policy_format --check    # exit 1 if a checked-in header is stale

A test regenerates the headers and fails on any difference, so the sides can never drift apart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dynamiccl import __version__
from dynamiccl.system.chunking import GRAIN_BYTES
from dynamiccl.system.knobs import KEEP_ID, NCCL_KNOBS, Knob
from dynamiccl.system.nccl import (
    ALGO_ENV,
    ALGORITHM_SPECS,
    ALGORITHM_TOKENS,
    COLLECTIVE_TOKENS,
    GET_VERSION_SYMBOL,
    MAX_CHANNELS,
    NET_PLUGIN_ENV,
    PROTO_ENV,
    PROTOCOL_TOKENS,
    VERSION_CODE_WEIGHTS,
    Algorithm,
    Collective,
    Protocol,
)
from dynamiccl.system.nccl_versions import WINDOW_SEPARATOR, WINDOW_VERSION_DIGITS

MAGIC = "DYNAMICCL-POLICY"
#: Version 2 dropped the reg_buff, pipe_ops and chunk columns of version 1 (nothing exported them;
#: regBuff is a rank-local input) and added the required ``features`` header. A knob's column
#: arrives with the version its entry in dynamiccl.system.knobs.KNOBS names; the current version is
#: the newest of them, and every version from MIN_FORMAT_VERSION on is read.
FORMAT_VERSION = max(k.nccl.format_version for k in NCCL_KNOBS)
#: The oldest format version both parsers read: its rules keep NCCL's value of every later knob.
MIN_FORMAT_VERSION = 2
SUFFIX = ".dccl"

#: MAX_CHANNELS (NCCL's MAXCHANNELS) and the rule tokens of collectives, algorithms and protocols
#: are NCCL facts from dynamiccl.system.nccl; the rest are the format's own.
#: Bounds that keep init time and the per-call lookup cost small for any file the parsers accept
#: (experiments/bench_plugin.py --largest measures the worst case).
MAX_FILE_BYTES = 4 << 20
MAX_LINE = 4096
MAX_RULES = 65536
#: Size ranges of one group (one collective, nodes, ranks, slice): a decision binary-searches one
#: group, and 1024 ranges (24 KiB) stay in a core's L1 cache. Exports have tens per group.
MAX_GROUP_RANGES = 1024
MAX_SLICES = 64
MAX_HEADER_KEY = 32
MAX_HEADER_VALUE = 200
MAX_BUCKET = 31
MAX_BYTES = 2**64 - 1
MAX_DIM = 2**31 - 1
#: Longest run-time context spec ("straggler=B c2c=B") the plugin accepts.
MAX_CONTEXT_SPEC = 96
#: The content hash (SHA-256) as lowercase hex digits.
HASH_HEX_LEN = 64
#: Pins held at once by dynamiccl_pin (a run-time tuner pins a handful of size bins).
MAX_PINS = 256

#: A rule's columns before its knobs: which calls it covers.
RULE_DIMS = ("collective", "min_bytes", "max_bytes", "nodes", "ranks")


def rule_fields(version: int = FORMAT_VERSION) -> tuple[str, ...]:
    """A rule's columns in a file of ``version``: its dimensions, then each NCCL knob's column
    that version has, in the knob table's order."""
    return (*RULE_DIMS, *(k.name for k in NCCL_KNOBS if k.nccl.format_version <= version))


RULE_FIELDS = rule_fields()
ANY = "*"          # nodes / ranks: any value
KEEP = "-"         # a knob: keep NCCL's value (dynamiccl.system.knobs.KEEP in Python)
DEFER = "defer"    # algorithm: leave the call to NCCL


def defer_rest(version: int = FORMAT_VERSION) -> str:
    """The columns a defer rule fills with KEEP, as a message names them (``protocol and
    channels``)."""
    names = rule_fields(version)[len(RULE_DIMS) + 1:]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def versions_read() -> str:
    """The format versions the parsers read, as their messages say it (``2`` or ``2..3``)."""
    return (str(FORMAT_VERSION) if MIN_FORMAT_VERSION == FORMAT_VERSION
            else f"{MIN_FORMAT_VERSION}..{FORMAT_VERSION}")
SLICE = "slice"
CHECKSUM_PREFIX = "checksum crc32 "
REQUIRED_HEADER = ("policy", "created", "topology", "fingerprint", "features", "nccl",
                   "config_hash")
#: Header keys a file may carry, at most once each. ``source``: the policy the file was exported
#: from (a built-in policy's name, or the absolute path of the checkpoint), so ``evaluate`` can
#: score the shipped file next to it. The plugin reads nothing from them.
OPTIONAL_HEADER = ("source",)

#: System features a policy records in its ``features`` header ("none" or a comma list), so the
#: plugin knows what the system it was exported for could run (NCCL's v2 ABI cannot tell it).
FEATURES = ("ll128", "nvls", "collnet")
NO_FEATURES = "none"

#: Context buckets: the default slice (no persistent straggler, no compute overlap) is mandatory.
DEFAULT_BUCKET = "none"
CONTEXT_KEYS = ("straggler", "c2c")

#: Environment variables the plugin reads.
POLICY_ENV = "DYNAMICCL_POLICY"
CONTEXT_ENV = "DYNAMICCL_CONTEXT"
LOG_DECISIONS_ENV = "DYNAMICCL_LOG_DECISIONS"
#: The hex SHA-256 of the policy file every rank must load (``dynamiccl show`` prints it): a rank
#: whose file hashes otherwise defers every call and says so at WARN.
POLICY_SHA256_ENV = "DYNAMICCL_POLICY_SHA256"

#: aws-ofi-nccl, the network plugin of EFA (and Slingshot) clusters, ships its own tuner, which NCCL
#: would use where NCCL_TUNER_PLUGIN names none; NCCL loads one tuner, so DynamICCL replaces it. The
#: plugin recognises it by a loaded library whose resolved name starts with one of these prefixes
#: and contains the mark (libnccl-net-ofi.so, often installed as libnccl-net.so; libnccl-ofi-tuner.so)
#: or by the mark in NCCL_NET_PLUGIN (``ofi``, ``aws-ofi``).
OFI_LIBRARY_PREFIXES = ("libnccl-net", "libnccl-ofi")
OFI_MARK = "ofi"

#: What the v2 ABI (NCCL 2.21) may be told to run: NCCL 2.21 takes the plugin's algorithm and
#: protocol without checking that the algorithm implements the collective, that the protocol is
#: enabled or that the pair has bandwidth. Keyed by algorithm: (collectives the plugin forces it
#: for, the system feature it needs or None), each from its entry in dynamiccl.system.nccl.ALGORITHMS; its
#: protocols are NCCL's. Only allreduce for CollNet and NVLS (what every release since 2.21
#: implements); PAT does not exist in 2.21.
V2_ALLOWED: dict[Algorithm, tuple[frozenset[Collective], str | None]] = {
    algo: (spec.v2_collectives, spec.v2_feature) for algo, spec in ALGORITHM_SPECS.items()
    if spec.v2_collectives
}
#: The protocol that needs a recorded feature wherever it is forced through v2.
V2_PROTO_FEATURE = {Protocol.LL128: "ll128"}

HEADER_PATH = Path(__file__).parent / "csrc" / "policy_format.h"


def _c_string(text: str) -> str:
    assert all(0x20 <= ord(ch) < 0x7F and ch not in '"\\' for ch in text), text
    return f'"{text}"'


def _c_names(name: str, tokens: dict) -> list[str]:
    ordered = [tokens[k] for k in sorted(tokens)]
    assert [int(k) for k in sorted(tokens)] == list(range(len(ordered))), "ids must be 0..n-1"
    body = ", ".join(_c_string(t) for t in ordered)
    return [f"static const char* const {name}[{len(ordered)}] = {{{body}}};"]


def _bitmask(items) -> str:
    return f"0x{sum(1 << int(i) for i in items):x}u"


def _c_by_version(name: str, text) -> list[str]:
    """A string per format version read, indexed by the version."""
    body = ", ".join(f"[{v}] = {_c_string(text(v))}"
                     for v in range(MIN_FORMAT_VERSION, FORMAT_VERSION + 1))
    return [f"static const char* const {name}[DCCL_FORMAT_VERSION + 1] = {{{body}}};"]


def knob_tokens(knob: Knob) -> dict[Any, str]:
    """An enum knob's rule tokens by value: the values a rule may name, lower-cased."""
    return {v: knob.token(v) for v in knob.nccl.values or tuple(knob.kind)}


def _c_knobs() -> list[str]:
    """The knob table as the plugin holds it: a field per knob in ``dccl_knobs_t`` (DCCL_KEEP =
    keep NCCL's value), each knob's column as the parser reads it (an enum knob's tokens by id),
    and field access by index."""
    tokens, columns = [], []
    for k in NCCL_KNOBS:
        names, lo, hi = "NULL", k.lo, k.hi
        if k.is_enum:
            names = f"dccl_{k.name}_tokens"
            tokens += _c_names(names, knob_tokens(k))
            lo, hi = 0, len(knob_tokens(k)) - 1
        columns.append(f"  {{{_c_string(k.name)}, {names}, {lo}, {hi}, {int(k.nccl.keepable)}, "
                       f"{k.nccl.format_version}}},")
    fields = [f"  {k.nccl.c_type} {k.name};" for k in NCCL_KNOBS]
    cases = "\n".join(f"    case DCCL_KNOB_{k.name.upper()}: k->{k.name} = ({k.nccl.c_type})v; break;"
                      for k in NCCL_KNOBS)
    gets = "\n".join(f"    case DCCL_KNOB_{k.name.upper()}: return k->{k.name};" for k in NCCL_KNOBS)
    return [
        *tokens,
        "/* A decision: one field per NCCL knob, DCCL_KEEP where NCCL keeps its own value. */",
        "typedef struct {", *fields, "} dccl_knobs_t;",
        f"static const dccl_knobs_t dccl_knobs_keep = {{{', '.join(['DCCL_KEEP'] * len(NCCL_KNOBS))}}};",
        "/* Each knob's column of a rule: the tokens of an enum knob by id (NULL: a number lo..hi),",
        " * whether '-' (keep NCCL's) may stand in a decision, the format version that added it. */",
        "static const struct {",
        "  const char* name;",
        "  const char* const* names;",
        "  long long lo, hi;",
        "  int keepable, format_version;",
        "} dccl_knob_columns[DCCL_NUM_KNOBS] = {",
        *columns,
        "};",
        "static inline void dccl_knobs_set(dccl_knobs_t* k, int i, long long v) {",
        "  switch (i) {", cases, "  }", "}",
        "static inline long long dccl_knobs_get(const dccl_knobs_t* k, int i) {",
        "  switch (i) {", gets, "  }", "  return DCCL_KEEP;", "}",
    ]


def c_header() -> str:
    """The text of ``csrc/policy_format.h`` for the facts above."""
    feature_bit = {f: 1 << i for i, f in enumerate(FEATURES)}
    lines = [
        "/* generated by `python -m dynamiccl.plugin.policy_format` from",
        " * dynamiccl/plugin/policy_format.py; do not edit (a test regenerates it and fails on any",
        " * difference). */",
        "#ifndef DYNAMICCL_POLICY_FORMAT_H",
        "#define DYNAMICCL_POLICY_FORMAT_H",
        "",
        "#include <stdint.h>",
        "",
        f"#define DCCL_PLUGIN_VERSION {_c_string(__version__)}",
        f"#define DCCL_FORMAT_MAGIC {_c_string(MAGIC)}",
        f"#define DCCL_FORMAT_VERSION {FORMAT_VERSION}",
        f"#define DCCL_FORMAT_VERSION_MIN {MIN_FORMAT_VERSION}",
        f"#define DCCL_FORMAT_VERSIONS_READ {_c_string(versions_read())}",
        f"#define DCCL_MAX_FILE_BYTES {MAX_FILE_BYTES}u",
        f"#define DCCL_MAX_LINE {MAX_LINE}",
        f"#define DCCL_MAX_RULES {MAX_RULES}u",
        f"#define DCCL_MAX_GROUP_RANGES {MAX_GROUP_RANGES}u",
        f"#define DCCL_MAX_SLICES {MAX_SLICES}",
        f"#define DCCL_MAX_HEADER_KEY {MAX_HEADER_KEY}",
        f"#define DCCL_MAX_HEADER_VALUE {MAX_HEADER_VALUE}",
        f"#define DCCL_MAX_BUCKET {MAX_BUCKET}",
        f"#define DCCL_MAX_CHANNELS {MAX_CHANNELS}",
        f"#define DCCL_MAX_CONTEXT_SPEC {MAX_CONTEXT_SPEC}",
        f"#define DCCL_HASH_HEX_LEN {HASH_HEX_LEN}",
        f"#define DCCL_MAX_PINS {MAX_PINS}",
        f"#define DCCL_RULE_FIELDS {len(RULE_FIELDS)}",
        f"#define DCCL_RULE_DIMS {len(RULE_DIMS)}",
        f"#define DCCL_NUM_KNOBS {len(NCCL_KNOBS)}",
        f"#define DCCL_KEEP ({KEEP_ID})",
        f"#define DCCL_TOKEN_ANY {_c_string(ANY)}",
        f"#define DCCL_TOKEN_KEEP {_c_string(KEEP)}",
        f"#define DCCL_TOKEN_DEFER {_c_string(DEFER)}",
        f"#define DCCL_TOKEN_SLICE {_c_string(SLICE)}",
        f"#define DCCL_CHECKSUM_PREFIX {_c_string(CHECKSUM_PREFIX)}",
        f"#define DCCL_DEFAULT_BUCKET {_c_string(DEFAULT_BUCKET)}",
        f"#define DCCL_CONTEXT_KEY_STRAGGLER {_c_string(CONTEXT_KEYS[0])}",
        f"#define DCCL_CONTEXT_KEY_C2C {_c_string(CONTEXT_KEYS[1])}",
        f"#define DCCL_NO_FEATURES {_c_string(NO_FEATURES)}",
        f"#define DCCL_ENV_POLICY {_c_string(POLICY_ENV)}",
        f"#define DCCL_ENV_CONTEXT {_c_string(CONTEXT_ENV)}",
        f"#define DCCL_ENV_LOG_DECISIONS {_c_string(LOG_DECISIONS_ENV)}",
        f"#define DCCL_ENV_NCCL_ALGO {_c_string(ALGO_ENV)}",
        f"#define DCCL_ENV_NCCL_PROTO {_c_string(PROTO_ENV)}",
        f"#define DCCL_ENV_POLICY_SHA256 {_c_string(POLICY_SHA256_ENV)}",
        f"#define DCCL_ENV_NCCL_NET_PLUGIN {_c_string(NET_PLUGIN_ENV)}",
        f"#define DCCL_NCCL_GET_VERSION {_c_string(GET_VERSION_SYMBOL)}",
        "#define DCCL_NCCL_VERSION_CODE(major, minor, patch) \\",
        f"  ((major) * {VERSION_CODE_WEIGHTS[0]} + (minor) * {VERSION_CODE_WEIGHTS[1]} + (patch))",
        f"#define DCCL_NCCL_WINDOW_SEPARATOR {_c_string(WINDOW_SEPARATOR)}",
        f"#define DCCL_NCCL_VERSION_DIGITS {{{', '.join(str(n) for n in WINDOW_VERSION_DIGITS)}}}",
        f"#define DCCL_OFI_LIBRARY_PREFIXES {{{', '.join(_c_string(p) for p in OFI_LIBRARY_PREFIXES)}}}",
        f"#define DCCL_NUM_OFI_LIBRARY_PREFIXES {len(OFI_LIBRARY_PREFIXES)}",
        f"#define DCCL_OFI_MARK {_c_string(OFI_MARK)}",
        f"#define DCCL_NUM_COLLS {len(COLLECTIVE_TOKENS)}",
        f"#define DCCL_NUM_ALGOS {len(ALGORITHM_TOKENS)}",
        f"#define DCCL_NUM_PROTOS {len(PROTOCOL_TOKENS)}",
        f"#define DCCL_NUM_REQUIRED_HEADER {len(REQUIRED_HEADER)}",
        f"#define DCCL_NUM_OPTIONAL_HEADER {len(OPTIONAL_HEADER)}",
        f"#define DCCL_NUM_FEATURES {len(FEATURES)}",
        "/* Each protocol's grain, bytes: NCCL rounds a chunk down to it (src/include/device.h). */",
        f"#define DCCL_PROTO_GRAIN_BYTES {{{', '.join(str(GRAIN_BYTES[p]) for p in PROTOCOL_TOKENS)}}}",
        "",
        "enum {",
        *[f"  DCCL_COLL_{c.name} = {int(c)}," for c in COLLECTIVE_TOKENS],
        *[f"  DCCL_ALGO_{a.name} = {int(a)}," for a in ALGORITHM_TOKENS],
        *[f"  DCCL_PROTO_{p.name} = {int(p)}," for p in PROTOCOL_TOKENS],
        *[f"  DCCL_FEATURE_{f.upper()} = {bit}," for f, bit in feature_bit.items()],
        *[f"  DCCL_KNOB_{k.name.upper()} = {i}," for i, k in enumerate(NCCL_KNOBS)],
        "};",
        "",
        *_c_names("dccl_coll_names", COLLECTIVE_TOKENS),
        *_c_names("dccl_algo_names", ALGORITHM_TOKENS),
        *_c_names("dccl_proto_names", PROTOCOL_TOKENS),
        *_c_names("dccl_feature_names", dict(enumerate(FEATURES))),
        *_c_names("dccl_required_header", dict(enumerate(REQUIRED_HEADER))),
        *_c_names("dccl_optional_header", dict(enumerate(OPTIONAL_HEADER))),
        *_c_by_version("dccl_rule_field_names", lambda v: " ".join(rule_fields(v))),
        *_c_by_version("dccl_defer_rest", defer_rest),
        "",
        *_c_knobs(),
        "",
        "/* The v2 ABI (NCCL 2.21): per algorithm, the collectives (bit = collective id) and",
        " * protocols (bit = protocol id) it may be forced for, and the feature bit it needs (0: none). */",
        "static const struct {",
        "  unsigned colls, protos, feature;",
        "} dccl_v2_allowed[DCCL_NUM_ALGOS] = {",
    ]
    for algo in ALGORITHM_TOKENS:
        colls, feature = V2_ALLOWED.get(algo, (frozenset(), None))
        protos = ALGORITHM_SPECS[algo].protocols if algo in V2_ALLOWED else frozenset()
        bit = feature_bit[feature] if feature else 0
        lines.append(f"  {{{_bitmask(colls)}, {_bitmask(protos)}, {bit}u}}, /* {ALGORITHM_TOKENS[algo]} */")
    lines += ["};"]
    lines += ["static const unsigned dccl_v2_proto_feature[DCCL_NUM_PROTOS] = {"
              + ", ".join(f"{feature_bit[V2_PROTO_FEATURE[p]] if p in V2_PROTO_FEATURE else 0}u"
                          for p in PROTOCOL_TOKENS) + "};"]
    lines += ["", "#endif", ""]
    return "\n".join(lines)


def generated_headers() -> dict[str, str]:
    """Every generated header of the plugin: file name in ``csrc/`` -> its text."""
    from dynamiccl.plugin import profile_ring
    return {HEADER_PATH.name: c_header(), profile_ring.HEADER_PATH.name: profile_ring.c_header()}


#: The command that regenerates the headers.
REGENERATE = "python -m dynamiccl.plugin.policy_format"


def stale_headers(folder: Path = HEADER_PATH.parent) -> list[Path]:
    """The generated headers in ``folder`` that differ from what the Python side generates now
    (missing ones too): NCCL's table or the formats changed and the C side was not regenerated."""
    return [folder / name for name, text in generated_headers().items()
            if not (folder / name).is_file() or (folder / name).read_text() != text]


def stale_message(stale: list[Path]) -> str:
    """One line naming the stale headers and the command that regenerates them."""
    names = " and ".join(str(path) for path in stale)
    return (f"{names} {'is' if len(stale) == 1 else 'are'} out of date with the Python side "
            f"(dynamiccl/system/nccl.py, dynamiccl/plugin/policy_format.py, profile_ring.py): "
            f"regenerate with `{REGENERATE}`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the C plugin's headers (dynamiccl/plugin/csrc/"
                                                 "policy_format.h and profiler_format.h).")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a checked-in header differs")
    parser.add_argument("--output-dir", type=Path, default=HEADER_PATH.parent,
                        help="where the headers are (default: the package's csrc/)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_headers(args.output_dir)
        if stale:
            print(stale_message(stale), file=sys.stderr)
        return 1 if stale else 0
    for name, text in generated_headers().items():
        path = args.output_dir / name
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
