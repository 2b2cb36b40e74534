"""The policy file format in Python: writing, reading, verifying and looking decisions up."""

from __future__ import annotations

import hashlib
import os
import re
import zlib

import pytest

from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

AR, AG = Collective.ALLREDUCE, Collective.ALLGATHER
HEADER = pf.Header("unit-test", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                   pf.DEFAULT_NCCL_RANGE, "cafe", "ll128,nvls")


def _policy() -> pf.PolicyFile:
    ring_ll = pf.Decision(Algorithm.RING, Protocol.LL, 16)
    tree = pf.Decision(Algorithm.TREE, Protocol.SIMPLE, None)
    default = pf.Slice(rules=(
        pf.Rule(AR, 0, 65535, 2, 16, decision=ring_ll),
        pf.Rule(AR, 65536, pf.MAX_BYTES, 2, 16, decision=tree),
        pf.Rule(AR, 0, pf.MAX_BYTES, 2, None, decision=pf.Decision(Algorithm.NVLS_TREE,
                                                                    Protocol.SIMPLE, 8)),
        pf.Rule(AR, 0, pf.MAX_BYTES, None, None),
        pf.Rule(AG, 0, 4095, None, 16, decision=pf.Decision(Algorithm.PAT, Protocol.SIMPLE, 4)),
    ))
    late = pf.Slice("long", "none", (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16, decision=ring_ll),))
    return pf.PolicyFile(HEADER, (default, late))


def test_write_then_read_gives_back_the_same_policy(tmp_path):
    policy = _policy()
    path = pf.write(policy, tmp_path / "p.dccl")
    again = pf.read(path)
    assert again == policy
    text = path.read_text()
    # no rule names a chunk size: the oldest version read, which every plugin since applies
    assert text.startswith(f"DYNAMICCL-POLICY {pf.MIN_FORMAT_VERSION}\n")
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
    # the ranks-only group answers for 16 ranks on any node count; a size it lacks means defer
    assert policy.decide(AG, 100, 16, 1).decision.algorithm == Algorithm.PAT
    assert policy.decide(AG, 5000, 16, 1) is None
    assert policy.decide(AG, 100, 8, 1) is None
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
    "newer version": (lambda t: _resign(t.replace("DYNAMICCL-POLICY 2", "DYNAMICCL-POLICY 4")),
                      "format version 4 is not supported"),
    "version 1": (lambda t: _resign(t.replace("DYNAMICCL-POLICY 2", "DYNAMICCL-POLICY 1")),
                  "format version 1 is not supported"),
    "truncated": (lambda t: t[: len(t) // 2], "truncated"),
    "no final newline": (lambda t: t[:-1], "truncated"),
    "one byte changed": (lambda t: t.replace("65535", "65534", 1), "checksum mismatch"),
    "binary": (lambda t: t[:100] + "\x00" + t[101:], "not printable ASCII"),
    "overlap": (_edit(" 65536 ", " 65535 "), "overlapping size ranges"),
    "unknown algorithm": (_edit(" tree ", " trea "), "unknown algorithm 'trea'"),
    "unknown collective": (_edit("allgather", "allgathr"), "unknown collective 'allgathr'"),
    "too many channels": (_edit(r"(ring\s+ll\s+)16", r"\g<1>65"), "channels must be '-' or 1..64"),
    "old chunk column": (_edit(r"(ring\s+ll\s+16)", r"\g<1> 1048576"), "a rule has 8 fields"),
    "unknown feature": (_edit("features ll128,nvls", "features ll128,sharp"), "features is"),
    "repeated feature": (_edit("features ll128,nvls", "features nvls,nvls"), "features is"),
    "bytes overflow": (_edit(str(pf.MAX_BYTES), str(pf.MAX_BYTES + 1)), "unsigned decimal"),
    "missing header": (_edit("\nfingerprint ", "\n# fingerprint "), "header 'fingerprint'"),
    "duplicate header": (_edit("\ncreated ", "\npolicy again\ncreated "), "appears twice"),
    "no default slice": (_edit("slice straggler=none c2c=none", "slice straggler=x c2c=none"),
                         "no default slice"),
    "rule before slice": (_edit("\nconfig_hash", "\nallreduce 0 1 * * * * defer - - -\n"
                                "config_hash"), "before the first 'slice'"),
    "defer with a protocol": (_edit(r"defer(\s+)-", r"defer\1ll"), "a defer rule"),
    "signed number": (_edit(r"(ring\s+ll\s+)16", r"\g<1>+16"), "channels must be"),
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


def test_content_hash_is_sha256_of_the_file(tmp_path):
    path = pf.write(_policy(), tmp_path / "p.dccl")
    assert pf.file_hash(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(pf.file_hash(path)) == 64


def test_write_replaces_atomically_and_only_a_policy(tmp_path, monkeypatch):
    path = pf.write(_policy(), tmp_path / "p.dccl")
    before = path.stat().st_ino
    pf.write(_policy(), path)  # a policy may be replaced ...
    assert path.stat().st_ino != before  # ... by a rename, never rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.dccl"]  # no temporary left behind
    model = tmp_path / "model.zip"
    model.write_bytes(b"PK\x03\x04 a trained model")
    with pytest.raises(pf.PolicyFileError, match="refusing to overwrite .*model.zip"):
        pf.write(_policy(), model)
    assert model.read_bytes() == b"PK\x03\x04 a trained model"
    with pytest.raises(pf.PolicyFileError, match="is a folder"):
        pf.write(_policy(), tmp_path)

    def crash(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(pf.PolicyFileError, match="No space left on device"):
        pf.write(_policy(), path)
    assert pf.read(path) == _policy()  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip", "p.dccl"]


def test_written_file_is_readable_by_other_users_like_any_file(tmp_path):
    path = pf.write(_policy(), tmp_path / "p.dccl")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_features_record_what_the_system_runs():
    assert pf.system_features(True, False, True) == "ll128,collnet"
    assert pf.system_features(False, False, False) == "none"


def test_show_prints_the_content_hash(tmp_path, capsys):
    from dynamiccl.cli.main import main

    path = pf.write(_policy(), tmp_path / "p.dccl")
    assert main(["show", str(path)]) == 0
    assert f"sha256 {pf.file_hash(path)}" in capsys.readouterr().out


def test_csv_export_is_written_atomically_and_never_over_a_foreign_file(tmp_path):
    from dynamiccl.plugin.nccl_csv import write_nccl_example_csv

    policy = pf.PolicyFile(HEADER, (pf.Slice(rules=(
        pf.Rule(AR, 0, 4095, 2, 16, decision=pf.Decision(Algorithm.RING, Protocol.LL, 8)),)),))
    path = write_nccl_example_csv(policy, tmp_path / "nccl_tuner.conf")
    inode = path.stat().st_ino
    write_nccl_example_csv(policy, path)
    assert path.stat().st_ino != inode and "allreduce,0,4095,ring,ll,8,2,16,-1,-1" in path.read_text()
    theirs = tmp_path / "hand_written.conf"
    theirs.write_text("allreduce,0,100,tree,simple,4,-1,-1\n")
    with pytest.raises(pf.PolicyFileError, match="refusing to overwrite"):
        write_nccl_example_csv(policy, theirs)
    assert theirs.read_text() == "allreduce,0,100,tree,simple,4,-1,-1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hand_written.conf", "nccl_tuner.conf"]
