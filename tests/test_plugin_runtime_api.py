"""The plugin's run-time entry points from Python, through ctypes on the loaded library, as
dynamiccl.runtime uses them: each test runs in a fresh process (the plugin's state is per process),
which plays NCCL's part by calling the tuner ABI on the same loaded library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import dynamiccl
from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

AR = Collective.ALLREDUCE
HEADER = pf.Header("runtime-api", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                   pf.DEFAULT_NCCL_RANGE, "cafe", "ll128,nvls")

TESTS = os.path.dirname(os.path.abspath(__file__))
#: Loads the plugin through the stand-in for NCCL (one v6 communicator, 16 ranks, 2 nodes) and answers
#: JSON commands from argv: ["decide", bytes, coll?, disabled cells?] -> [algo, proto, channels];
#: ["context", spec]; ["pin", coll, lo, hi, algo, proto, ch]; ["counts"] -> [forced, refused];
#: ["hash", len]; ["version"]; ["replace", src, dst] (os.replace); ["communicator"] (a second one,
#: same shape, which later calls ask); ["nccl_version"]; ["logs"] -> [[level, message], ...].
_PROGRAM = textwrap.dedent(f"""
    import ctypes, json, os, sys
    sys.path.insert(0, {TESTS!r})
    from nccl_tuner_standin import NcclTunerStandIn
    nccl = NcclTunerStandIn(sys.argv[1], 16, nodes=2)
    lib = nccl.lib
    lib.dynamiccl_set_context.argtypes = [ctypes.c_char_p]
    lib.dynamiccl_policy_hash.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.dynamiccl_plugin_version.restype = ctypes.c_char_p
    lib.dynamiccl_pin.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_int]
    lib.dynamiccl_pin_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)] * 2
    out = []
    for cmd in json.loads(sys.argv[2]):
        if cmd[0] == "decide":  # cmd[3]: the cells NCCL disabled (IGNORE)
            forced = nccl.decide(cmd[1], int(cmd[2]) if len(cmd) > 2 else 4,
                                 tuple(cmd[3]) if len(cmd) > 3 else ())
            out.append(list(forced) if forced else None)
        elif cmd[0] == "context":
            out.append(lib.dynamiccl_set_context(None if cmd[1] is None else cmd[1].encode()))
        elif cmd[0] == "pin":
            out.append(lib.dynamiccl_pin(*cmd[1:]))
        elif cmd[0] == "hash":
            buf = ctypes.create_string_buffer(b"x" * 100) if cmd[1] else None
            rc = lib.dynamiccl_policy_hash(buf, cmd[1])
            out.append([rc, buf.value.decode() if rc == 0 else None])
        elif cmd[0] == "counts":
            forced, refused = ctypes.c_uint64(0), ctypes.c_uint64(0)
            assert lib.dynamiccl_pin_counts(ctypes.byref(forced), ctypes.byref(refused)) == 0
            out.append([forced.value, refused.value])
        elif cmd[0] == "version":
            out.append(lib.dynamiccl_plugin_version().decode())
        elif cmd[0] == "replace":
            os.replace(cmd[1], cmd[2])
        elif cmd[0] == "communicator":
            nccl.communicator(16, 2)
        elif cmd[0] == "nccl_version":
            out.append(nccl.nccl_version())
        elif cmd[0] == "logs":
            out.append(nccl.logs)
    nccl.finalize()
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds")


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory):
    default = pf.Slice(rules=(
        pf.Rule(AR, 0, 65535, 2, 16, decision=pf.Decision(Algorithm.RING, Protocol.LL, 16)),
        pf.Rule(AR, 65536, pf.MAX_BYTES, 2, 16, decision=pf.Decision(Algorithm.TREE,
                                                                      Protocol.SIMPLE)),
    ))
    late = pf.Slice("long", "none", (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16,
                                             decision=pf.Decision(Algorithm.RING, Protocol.SIMPLE,
                                                                  32)),))
    overlap = pf.Slice("none", "high", (pf.Rule(AR, 0, pf.MAX_BYTES, None, None,
                                                decision=pf.Decision(Algorithm.NVLS,
                                                                     Protocol.SIMPLE, 8)),))
    return pf.write(pf.PolicyFile(HEADER, (default, late, overlap)),
                    tmp_path_factory.mktemp("rt") / "rt.dccl")


def _run(library, commands, policy=None, **extra_env: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    if policy:
        env["DYNAMICCL_POLICY"] = str(policy)
    env.update(extra_env)
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, str(library), json.dumps(commands)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


RING_LL, TREE, LATE, NVLS = [1, 0, 16], [0, 2, 0], [1, 2, 32], [4, 2, 8]


def test_context_switching_changes_decisions(library, policy_path):
    out = _run(library, [["decide", 1000], ["decide", 1 << 20],
                         ["context", "straggler=long c2c=none"], ["decide", 1000], ["decide", 1 << 20],
                         ["context", "c2c=high"], ["decide", 1000],
                         ["context", "straggler=short"], ["decide", 1000],
                         ["context", "straggler=none c2c=none"], ["decide", 1000]], policy_path)
    assert out == [RING_LL, TREE, 0, LATE, LATE, 0, NVLS, 1, NVLS, 0, RING_LL]


def test_pins_win_over_rules_and_clear(library, policy_path):
    ar = int(AR)
    out = _run(library, [["pin", ar, 0, 4096, int(Algorithm.TREE), int(Protocol.LL128), 2],
                         ["decide", 4095], ["decide", 4096], ["decide", 100, 2],
                         ["pin", ar, 0, 2**64 - 1, -1, 0, 0], ["decide", 4095]], policy_path)
    assert out == [0, [0, 1, 2], RING_LL, None, 0, RING_LL]


def test_pin_counts_tell_forced_calls_from_those_nccls_table_refused(library, policy_path):
    """A measurement of a pinned choice must know its calls ran that choice: a cell NCCL disabled
    (-1, as LL128 on a socket network without GPUDirect RDMA) leaves the call to NCCL."""
    ar, tree_ll128 = int(AR), int(Algorithm.TREE) * 3 + int(Protocol.LL128)
    for policy in (policy_path, None):  # pins apply with or without a policy
        out = _run(library, [["counts"], ["decide", 4096],  # nothing pinned: counted nowhere
                             ["pin", ar, 4096, 4097, int(Algorithm.TREE), int(Protocol.LL128), 0],
                             ["decide", 4096], ["decide", 4096, ar, [tree_ll128]], ["decide", 8192],
                             ["counts"]], policy)
        assert out[0] == [0, 0] and out[3] == [0, 1, 0] and out[6] == [1, 1]
        assert out[4] != [0, 1, 0]  # refused: NCCL's choice (or the policy's) stands


def test_hash_matches_the_python_content_hash(library, policy_path):
    out = _run(library, [["hash", 65], ["hash", 64], ["hash", 0]], policy_path)
    assert out == [[0, pf.file_hash(policy_path)], [-1, None], [-1, None]]
    assert _run(library, [["hash", 65]]) == [[-1, None]]  # no policy loaded


def test_version_is_the_package_version(library):
    assert _run(library, [["version"]]) == [dynamiccl.__version__]


@pytest.mark.parametrize("spec", [None, "", "straggler", "straggler=long,", "straggler=long x=1",
                                  "straggler=Long", "straggler=l\u00f6ng", "c2c=" + "a" * 32,
                                  "straggler=long " * 20, "c2c=high c2c=high"])
def test_hostile_context_specs_are_refused(library, policy_path, spec):
    out = _run(library, [["context", spec], ["decide", 1000]], policy_path)
    if spec == "":
        assert out == [0, RING_LL]  # nothing named: the default slice
    elif spec == "straggler=long,":
        assert out == [0, LATE]  # a trailing separator is harmless
    else:
        assert out == [-1, RING_LL]


@pytest.mark.parametrize("args", [[9, 0, 10, 1, 2, 0], [4, 10, 10, 1, 2, 0], [4, 0, 10, 9, 2, 0],
                                  [4, 0, 10, 1, 5, 0], [4, 0, 10, 1, 2, 99], [-5, 0, 10, -1, 0, 0]])
def test_hostile_pins_are_refused(library, policy_path, args):
    assert _run(library, [["pin", *args], ["decide", 5]], policy_path) == [-1, RING_LL]


# ---- fleet safety with the real NCCL: its version, the expected checksum, one read per process ----

WARN = 2


def _with_window(tmp_path, nccl: str):
    from dataclasses import replace

    rules = (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16, decision=pf.Decision(Algorithm.RING, Protocol.LL, 16)),)
    return pf.write(pf.PolicyFile(replace(HEADER, nccl=nccl), (pf.Slice(rules=rules),)),
                    tmp_path / f"{nccl}.dccl")


@pytest.fixture(scope="module")
def real_nccl(library) -> str:
    """The version of the real NCCL the stand-in loads (the nvidia-nccl wheel), as A.B.C."""
    if plugin.find_nccl_library() is None:
        pytest.skip("no nvidia-nccl wheel installed")
    from dynamiccl.system.nccl_versions import NcclVersion

    return str(NcclVersion.from_code(_run(library, [["nccl_version"]])[0]))


def test_the_real_ncclgetversion_admits_a_policy_measured_on_this_nccl(library, tmp_path, real_nccl):
    policy = _with_window(tmp_path, real_nccl)
    decided, logs = _run(library, [["decide", 1000], ["logs"]], policy)
    assert decided == RING_LL and [m for lvl, m in logs if lvl == WARN] == []
    assert f"DynamICCL: NCCL {real_nccl} is within the versions policy runtime-api holds for " \
           f"({real_nccl})" in [m for _, m in logs]


def test_the_real_nccl_outside_the_window_means_nccl_decides(library, tmp_path, real_nccl):
    major, minor, patch = (int(p) for p in real_nccl.split("."))
    window = f"{major}.{minor + 1}.0..{major}.{minor + 3}.0"  # measured on newer releases only
    policy = _with_window(tmp_path, window)
    decided, hashed, logs = _run(library, [["decide", 1000], ["hash", 65], ["logs"]], policy)
    assert decided is None and hashed == [-1, None]
    assert [m for lvl, m in logs if lvl == WARN] == [
        f"DynamICCL: this process runs NCCL {real_nccl}, outside the versions policy runtime-api was "
        f"measured on ({window}): tune it again under this NCCL. NCCL decides every call in this process"]


def test_a_checksum_mismatch_defers_through_the_stand_in(library, policy_path, tmp_path):
    other = _with_window(tmp_path, pf.DEFAULT_NCCL_RANGE)
    want = pf.file_hash(policy_path)
    decided, logs = _run(library, [["decide", 1000], ["logs"]], other, DYNAMICCL_POLICY_SHA256=want)
    assert decided is None
    [warn] = [m for lvl, m in logs if lvl == WARN]
    assert warn.startswith(f"DynamICCL: policy file {other} has sha256 {pf.file_hash(other)}, not the "
                           f"DYNAMICCL_POLICY_SHA256={want} this job expects")
    assert "a communicator spanning both runs mixed choices" in warn
    matched = _run(library, [["decide", 1000]], policy_path, DYNAMICCL_POLICY_SHA256=want)
    assert matched == [RING_LL]


def test_a_policy_replaced_mid_job_is_not_read_by_the_next_communicator(library, policy_path, tmp_path):
    live = tmp_path / "live.dccl"
    live.write_bytes(policy_path.read_bytes())
    newer = _with_window(tmp_path, pf.DEFAULT_NCCL_RANGE)  # ring/ll, 16 channels: no tree anywhere
    out = _run(library, [["decide", 1 << 20], ["replace", str(newer), str(live)], ["communicator"],
                         ["decide", 1 << 20], ["hash", 65], ["logs"]], live)
    assert out[:3] == [TREE, TREE, [0, pf.file_hash(policy_path)]]
    assert [m for lvl, m in out[3] if lvl == WARN] == [
        f"DynamICCL: {live} changed after this process read it; this process keeps what it read "
        f"(sha256 {pf.file_hash(policy_path)}). Replace a policy between jobs: a rank that starts now "
        "reads the new file and decides otherwise than this one"]
