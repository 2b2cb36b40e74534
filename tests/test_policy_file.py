"""The policy file format in Python: writing, reading, verifying and looking decisions up."""

from __future__ import annotations

import re
import zlib

import pytest

from dynamiccl import policy_file as pf
from dynamiccl.nccl import Algorithm, Collective, Protocol

AR, AG = Collective.ALLREDUCE, Collective.ALLGATHER
HEADER = pf.Header("unit-test", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                   pf.DEFAULT_NCCL_RANGE, "cafe")


def _policy() -> pf.PolicyFile:
    ring_ll = pf.Decision(Algorithm.RING, Protocol.LL, 16)
    tree = pf.Decision(Algorithm.TREE, Protocol.SIMPLE, None, 1 << 20)
    default = pf.Slice(rules=(
        pf.Rule(AR, 0, 65535, 2, 16, decision=ring_ll),
        pf.Rule(AR, 65536, pf.MAX_BYTES, 2, 16, decision=tree),
        pf.Rule(AR, 0, pf.MAX_BYTES, 2, None, decision=pf.Decision(Algorithm.NVLS_TREE,
                                                                    Protocol.SIMPLE, 8)),
        pf.Rule(AR, 0, 1023, 2, 16, pipe_ops=4, decision=pf.Decision(Algorithm.RING,
                                                                      Protocol.LL128, 2)),
        pf.Rule(AR, 0, pf.MAX_BYTES, None, None),
        pf.Rule(AG, 0, 4095, None, 16, reg_buff=1, decision=pf.Decision(Algorithm.PAT,
                                                                         Protocol.SIMPLE, 4)),
    ))
    late = pf.Slice("long", "none", (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16, decision=ring_ll),))
    return pf.PolicyFile(HEADER, (default, late))


def test_write_then_read_gives_back_the_same_policy(tmp_path):
    policy = _policy()
    path = pf.write(policy, tmp_path / "p.dccl")
    again = pf.read(path)
    assert again == policy
    text = path.read_text()
    assert text.startswith("DYNAMICCL-POLICY 1\n")
    body, last = text[: text.rindex("checksum")], text.splitlines()[-1]
    assert last == f"checksum crc32 {zlib.crc32(body.encode()):08x}"
    # readable: one rule per line with the names NCCL uses
    assert any(line.split()[:3] == ["allreduce", "65536", str(pf.MAX_BYTES)]
               and "tree" in line.split() for line in text.splitlines())


def test_lookup_prefers_the_most_specific_group():
    policy = _policy()
    # exact nodes+ranks beats nodes-only beats the catch-all
    assert policy.decide(AR, 100, 16, 2).decision.protocol == Protocol.LL
    assert policy.decide(AR, 100, 32, 2).decision.algorithm == Algorithm.NVLS_TREE
    assert policy.decide(AR, 100, 8, 1).decision is None  # explicit defer
    # pipe_ops-specific group answers for its pipe count; a miss inside it means defer
    assert policy.decide(AR, 100, 16, 2, pipe_ops=4).decision.protocol == Protocol.LL128
    assert policy.decide(AR, 5000, 16, 2, pipe_ops=4) is None
    assert policy.decide(AR, 5000, 16, 2, pipe_ops=1).decision.protocol == Protocol.LL
    # reg_buff-specific rule only for registered buffers; nothing else covers allgather
    assert policy.decide(AG, 100, 16, 1, reg_buff=1).decision.algorithm == Algorithm.PAT
    assert policy.decide(AG, 100, 16, 1, reg_buff=0) is None
    # context slices; an unknown context falls back to the default slice
    assert policy.decide(AR, 1 << 30, 16, 2, context=("long", "none")).decision.protocol == \
        Protocol.LL
    assert policy.decide(AR, 1 << 30, 16, 2, context=("short", "high")).decision.algorithm == \
        Algorithm.TREE


def test_context_buckets_match_the_exported_representatives():
    for straggler, delay in pf.STRAGGLER_BUCKETS.items():
        for c2c_name, c2c in pf.C2C_BUCKETS.items():
            assert pf.context_buckets(delay, c2c) == (straggler, c2c_name)


def _text() -> str:
    return pf.dumps(_policy())


def _resign(text: str) -> str:
    body = text[: text.rindex("checksum crc32 ")]
    return f"{body}checksum crc32 {zlib.crc32(body.encode()):08x}\n"


def _edit(pattern: str, new: str):
    return lambda t: _resign(re.sub(pattern, new, t, count=1))


BAD_FILES = {
    "empty": (lambda t: "", "not a DynamICCL policy file"),
    "foreign": (lambda t: "hello\nworld\n", "not a DynamICCL policy file"),
    "newer version": (lambda t: _resign(t.replace("DYNAMICCL-POLICY 1", "DYNAMICCL-POLICY 2")),
                      "format version 2 is not supported"),
    "truncated": (lambda t: t[: len(t) // 2], "truncated"),
    "no final newline": (lambda t: t[:-1], "truncated"),
    "one byte changed": (lambda t: t.replace("65535", "65534", 1), "checksum mismatch"),
    "binary": (lambda t: t[:100] + "\x00" + t[101:], "not printable ASCII"),
    "overlap": (_edit(" 65536 ", " 65535 "), "overlapping size ranges"),
    "unknown algorithm": (_edit(" tree ", " trea "), "unknown algorithm 'trea'"),
    "unknown collective": (_edit("allgather", "allgathr"), "unknown collective 'allgathr'"),
    "too many channels": (_edit(r"(ring\s+ll\s+)16", r"\g<1>65"), "channels must be '-' or 1..64"),
    "chunk below a grain": (_edit(" 1048576", " 1024"), "chunk must be"),
    "bytes overflow": (_edit(str(pf.MAX_BYTES), str(pf.MAX_BYTES + 1)), "unsigned decimal"),
    "missing header": (_edit("\nfingerprint ", "\n# fingerprint "), "header 'fingerprint'"),
    "duplicate header": (_edit("\ncreated ", "\npolicy again\ncreated "), "appears twice"),
    "no default slice": (_edit("slice straggler=none c2c=none", "slice straggler=x c2c=none"),
                         "no default slice"),
    "rule before slice": (_edit("\nconfig_hash", "\nallreduce 0 1 * * * * defer - - -\n"
                                "config_hash"), "before the first 'slice'"),
    "defer with a protocol": (_edit(r"defer(\s+)-", r"defer\1ll"), "a defer rule"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_files_raise_one_clear_error(tmp_path, kind):
    corrupt, problem = BAD_FILES[kind]
    path = tmp_path / "bad.dccl"
    path.write_bytes(corrupt(_text()).encode("latin-1"))
    with pytest.raises(pf.PolicyFileError) as err:
        pf.read(path)
    message = str(err.value)
    assert str(path) in message and problem in message
    assert "\n" not in message


def test_missing_file_says_how_to_get_one(tmp_path):
    with pytest.raises(pf.PolicyFileError, match="dynamiccl export"):
        pf.read(tmp_path / "nope.dccl")


def test_unknown_header_keys_and_comments_are_ignored():
    text = _resign(_text().replace("\nslice straggler=none", "\nfuture_key some value\n# note\n"
                                   "slice straggler=none", 1))
    assert pf.loads(text) == _policy()


def test_writer_refuses_what_the_plugin_would_refuse():
    bad = pf.PolicyFile(HEADER, (pf.Slice(rules=(
        pf.Rule(AR, 0, 10, decision=pf.Decision(Algorithm.RING, Protocol.LL, 99)),)),))
    with pytest.raises(pf.PolicyFileError, match="channels"):
        pf.dumps(bad)
    non_ascii = pf.PolicyFile(pf.Header("p\u00f6licy", "t", "x", "f", "n", "c"), ())
    with pytest.raises(pf.PolicyFileError, match="printable ASCII"):
        pf.dumps(non_ascii)
