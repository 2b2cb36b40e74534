"""The C plugin loaded the way NCCL loads it, through every exported ABI version.

A C driver (dynamiccl/plugin/csrc/tests/driver.c, compiled with the machine's gcc) dlopens the plugin with
RTLD_NOW | RTLD_LOCAL, looks up one ncclTunerPlugin_vN, calls init with that version's argument
order, getCollInfo on a contiguous float[numAlgo][numProto] table filled like NCCL's (-1 unusable,
microseconds otherwise) and finalize. The driver itself flags any write to an unusable entry or any
non-success return; these tests check the decisions, the logs and the environment variables.
"""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import dynamiccl
from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin import policy_format as pf_format
from dynamiccl.system.nccl import Algorithm, Collective, Protocol, version_code
from dynamiccl.system.nccl_versions import NcclVersion, parse_window

AR, AG, BC = Collective.ALLREDUCE, Collective.ALLGATHER, Collective.BROADCAST
WARN, INFO, TUNING = 2, 3, 0x40
#: The version the driver's ncclGetVersion answers (csrc/tests/nccl_version_standin.h) unless told.
STANDIN_NCCL = version_code(2, 30, 7)


@dataclass
class Run:
    ctx: list[bool] = field(default_factory=list)
    res: list[tuple[int, int, int]] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)
    chunk_sizes: list[int] = field(default_factory=list)  # getChunkSize's answers, in order
    api: list[str] = field(default_factory=list)  # SETCTX / PIN / HASH / VERSION answers, in order
    logs: list[tuple[int, int, str]] = field(default_factory=list)

    def messages(self, level: int) -> list[str]:
        return [m for lvl, _, m in self.logs if lvl == level]


class Driver:
    """Runs driver commands against the plugin in a fresh process (fresh plugin state)."""

    def __init__(self, exe: Path, library: Path) -> None:
        self.exe, self.library = exe, library

    def run(self, commands: list[str], cwd: Path | None = None, **env: str) -> Run:
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith("DYNAMICCL_") and k not in ("NCCL_ALGO", "NCCL_PROTO")}
        proc = subprocess.run([str(self.exe), str(self.library)], input="\n".join(commands) + "\n",
                              capture_output=True, text=True, env={**clean, **env}, timeout=120,
                              cwd=cwd)
        assert "VIOLATION" not in proc.stdout, proc.stdout
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = Run()
        for line in proc.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "CTX":
                out.ctx.append(rest.split()[1] == "set")
            elif kind == "RES":
                out.res.append(tuple(int(v) for v in rest.split()))
            elif kind == "CHUNK":
                out.chunks.append(rest)
            elif kind == "CHUNKSIZE":
                out.chunk_sizes.append(int(rest))
            elif kind in ("SETCTX", "PIN", "PINK", "HASH", "VERSION", "DLOPEN"):
                out.api.append(rest)
            elif kind == "LOG":
                level, flags, message = rest.split(" ", 2)
                out.logs.append((int(level), int(flags, 16), message))
        return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Driver:
    cache = tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"  # builds keyed by digest
    src = plugin.source_dir()
    library = plugin.build(cache=cache)
    exe = plugin.compile_c([src / "tests" / "driver.c"], "driver",  # -rdynamic: ncclGetVersion
                           flags=["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-rdynamic"],
                           cache=cache, depends=[*(src / "tests").glob("*.h"), *plugin.headers(src)])
    return Driver(exe, library)


RING_LL = pf.Decision(Algorithm.RING, Protocol.LL, 16)
TREE_SIMPLE = pf.Decision(Algorithm.TREE, Protocol.SIMPLE, None)
PAT = pf.Decision(Algorithm.PAT, Protocol.SIMPLE, 4)
NVLS = pf.Decision(Algorithm.NVLS, Protocol.SIMPLE, 8)
RING_LL128 = pf.Decision(Algorithm.RING, Protocol.LL128, None)
RS = Collective.REDUCESCATTER
HEADER = pf.Header("abi-test", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                   pf.DEFAULT_NCCL_RANGE, "cafe", "ll128,nvls")


def _policy(header: pf.Header = HEADER) -> pf.PolicyFile:
    default = pf.Slice(rules=(
        pf.Rule(AR, 0, 7, 2, 16),
        pf.Rule(AR, 8, 65535, 2, 16, decision=RING_LL),
        pf.Rule(AR, 65536, 1 << 34, 2, 16, decision=TREE_SIMPLE),
        pf.Rule(AR, (1 << 34) + 1, pf.MAX_BYTES, 2, 16),
        pf.Rule(AG, 0, pf.MAX_BYTES, 2, 16, decision=PAT),
        pf.Rule(AR, 0, pf.MAX_BYTES, 4, 32, decision=NVLS),
        pf.Rule(RS, 0, pf.MAX_BYTES, 4, 32, decision=RING_LL128),
        pf.Rule(AR, 0, pf.MAX_BYTES, None, 8, decision=pf.Decision(Algorithm.RING,
                                                                    Protocol.SIMPLE, 2)),
        pf.Rule(BC, 0, pf.MAX_BYTES, None, None, decision=pf.Decision(Algorithm.COLLNET_DIRECT,
                                                                       Protocol.SIMPLE, 2)),
        pf.Rule(AR, 0, pf.MAX_BYTES, None, None),
    ))
    straggler = pf.Slice("long", "none", (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16,
                                                  decision=pf.Decision(Algorithm.RING,
                                                                       Protocol.SIMPLE, 32)),))
    return pf.PolicyFile(header, (default, straggler))


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory) -> Path:
    return pf.write(_policy(), tmp_path_factory.mktemp("abi") / "abi.dccl")


def _policy_loaded(run: Run) -> bool:
    """Whether the run's process applies a policy: the answer of its last run-time call, ``hash``
    (``dynamiccl_policy_hash``), is 0 with one loaded, -1 without (every communicator has a
    context either way)."""
    return run.api[-1].split()[0] == "0"


def _coll(k: int, coll: int, nbytes: int | str, pipe: int = 1, reg: int = 0, na: int = 7,
          fill: str = "all") -> str:
    return f"coll {k} {int(coll)} {nbytes} {pipe} {reg} {na} 3 {fill}"


@pytest.mark.parametrize("version", [3, 4, 5, 6])
def test_every_cost_table_abi_forces_the_rule(driver, policy_path, version):
    run = driver.run([
        f"init {version} 16 2",
        _coll(0, AR, 1000),           # ring/ll, 16 channels
        _coll(0, AR, 1 << 20),        # tree/simple, NCCL's channels
        _coll(0, AR, 0),              # explicit defer below 8 B
        _coll(0, AR, "max"),          # explicit defer beyond the grid
        _coll(0, Collective.REDUCE, 1000),  # no rule at all
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.ctx == [True]
    assert run.res == [(1, 0, 16), (0, 2, 0), (-1, -1, 0), (-1, -1, 0), (-1, -1, 0)]
    [info] = [m for m in run.messages(INFO) if m.startswith("DynamICCL: policy ")]
    assert info.startswith(f"DynamICCL: policy abi-test (sha256 {pf.file_hash(policy_path)}), 6 rules, "
                           "for nRanks 16 / nNodes 2")
    assert all(flags == TUNING for _, flags, _ in run.logs)


def test_v2_forces_only_what_nccl_2_21_and_the_recorded_system_allow(driver, policy_path):
    run = driver.run([
        "init 2 16 2", "init 2 32 4", "init 2 8 1",
        "v2 0 4 1000 0 0 1",          # ring/ll, exact system: forced with 16 channels
        "v2 0 4 1048576 0 0 1",       # tree/simple on allreduce: forced
        "v2 0 2 1000 0 1 1",          # allgather -> PAT: NCCL 2.21 has no PAT
        "v2 0 0 1000 1 0 1",          # broadcast -> CollNet from a "*" rule, no collnet feature
        "v2 1 4 1000 0 1 1",          # NVLS, recorded and supported for this call: forced
        "v2 1 4 1000 0 0 1",          # ... NCCL says this call cannot use NVLS
        "v2 1 3 1000 0 0 1",          # reducescatter ring/ll128, ll128 recorded: forced
        "v2 2 4 1000 0 0 1",          # a ranks-only rule was not exported for this exact system
        "fin 0", "fin 1", "fin 2",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.res == [(1, 0, 16), (0, 2, 0), (-1, -1, 0), (-1, -1, 0), (4, 2, 8), (-1, -1, 0),
                       (1, 1, 0), (-1, -1, 0)]


def test_v2_never_forces_ll128_a_policy_did_not_record(driver, tmp_path):
    no_ll128 = pf.write(_policy(pf.Header(*[getattr(HEADER, f) for f in (
        "policy", "created", "topology", "fingerprint", "nccl", "config_hash")], "nvls")),
        tmp_path / "p.dccl")
    run = driver.run(["init 2 32 4", "init 6 32 4", "v2 0 3 1000 0 0 1", _coll(1, RS, 1000),
                      "fin 0", "fin 1"], DYNAMICCL_POLICY=str(no_ll128))
    assert run.res == [(-1, -1, 0), (1, 1, 0)]  # v6 has NCCL's table to check it against


def test_only_entries_nccl_marked_usable_are_forced(driver, policy_path):
    ring_ll_unusable = "1" * 3 + "011" + "1" * 15   # table[ring][ll] = -1
    run = driver.run([
        "init 6 16 2",
        _coll(0, AR, 1000, fill=ring_ll_unusable),
        _coll(0, AR, 1000, fill="none"),
        _coll(0, AR, 1000, fill="all"),
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    # unusable: NCCL's choice stands, and the rule's channel count is not applied either
    assert run.res == [(-1, -1, 0), (-1, -1, 0), (1, 0, 16)]


def test_runtime_num_algo_is_respected(driver, policy_path):
    run = driver.run([
        "init 6 16 2",
        _coll(0, AG, 1000, na=7),  # PAT exists: forced at [6][2]
        _coll(0, AG, 1000, na=6),  # NCCL 2.22 has six algorithms: no PAT, NCCL decides
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.res == [(6, 2, 4), (-1, -1, 0)]


def test_rank_local_inputs_do_not_change_decisions(driver, policy_path):
    """regBuff (buffer registration) is per rank and numPipeOps per group: no decision depends on
    them, so ranks of one communicator cannot disagree through them."""
    commands = ["init 4 16 2", "init 3 16 2"]
    commands += [_coll(k, c, n, pipe=p, reg=g) for k in (0, 1) for c in (AR, AG)
                 for n in (100, 1 << 20) for p in (1, 2, 7) for g in (0, 1, -1)]
    run = driver.run(commands, DYNAMICCL_POLICY=str(policy_path))
    assert all(run.res[i:i + 9] == run.res[i:i + 1] * 9 for i in range(0, len(run.res), 9))
    assert run.res[0] == (1, 0, 16)


def _chunk_policy(tmp_path: Path, chunk: int | None) -> Path:
    """allreduce 1 MiB..2 MiB on any system: ring/simple with ``chunk`` (None: NCCL's); the rest
    defers."""
    rule = pf.Rule(AR, 1 << 20, 2 << 20, decision=pf.Decision(Algorithm.RING, Protocol.SIMPLE,
                                                              chunk_bytes=chunk))
    return pf.write(pf.PolicyFile(HEADER, (pf.Slice(rules=(rule,)),)), tmp_path / "chunk.dccl")


def _getchunk(k: int, algo: Algorithm = Algorithm.RING, proto: Protocol = Protocol.SIMPLE,
              piece: int = 1 << 16, nccl: int = 1 << 21) -> str:
    return f"getchunk {k} {int(AR)} {piece} {int(algo)} {int(proto)} 1 {nccl}"


def test_getchunksize_gives_a_piece_of_a_decided_call_its_rules_chunk(driver, tmp_path):
    """v6's getChunkSize: NCCL asks per channel piece after getCollInfo decided the call, so the
    rule's chunk reaches every piece of the call's pair, and only those: another pair, NCCL's own
    chunk for a rule keeping it, a call the policy defers."""
    path = _chunk_policy(tmp_path, 65536)
    assert path.read_text().startswith("DYNAMICCL-POLICY 3\n")
    run = driver.run(["chunk", "init 6 16 2", _coll(0, AR, 1 << 20), _getchunk(0), _getchunk(0),
                      _getchunk(0, proto=Protocol.LL), _coll(0, AR, 100), _getchunk(0), "fin 0"],
                     DYNAMICCL_POLICY=str(path), DYNAMICCL_LOG_DECISIONS="1")
    assert run.chunks == ["set"] and run.res == [(1, 2, 0), (-1, -1, 0)]
    assert run.chunk_sizes == [65536, 65536, 1 << 21, 1 << 21]
    logged = [m for m in run.messages(INFO) if m.startswith("DynamICCL chunk:")]
    assert len(logged) == 1 and "allreduce ring/simple piece of 65536 B" in logged[0]
    keep = driver.run(["init 6 16 2", _coll(0, AR, 1 << 20), _getchunk(0), "fin 0"],
                      DYNAMICCL_POLICY=str(_chunk_policy(tmp_path, None)))
    assert keep.chunk_sizes == [1 << 21]


def test_a_group_of_calls_decided_differently_keeps_nccls_chunk(driver, tmp_path):
    """Calls of one group are all decided before NCCL chunks any: where they were decided
    differently the plugin cannot tell a piece's call, so NCCL's chunk stands; the next group
    starts afresh."""
    path = _chunk_policy(tmp_path, 65536)
    run = driver.run(["init 6 16 2", _coll(0, AR, 1 << 20), _coll(0, AR, 100), _getchunk(0),
                      _coll(0, AR, 1 << 20), _getchunk(0), "fin 0"], DYNAMICCL_POLICY=str(path))
    assert run.chunk_sizes == [1 << 21, 65536]


def test_pinned_chunk_sizes_apply_without_a_policy_and_bad_pins_are_refused(driver):
    ar = int(AR)
    run = driver.run([f"pinknobs {ar} 0 max 1 2 -1 262144", "init 6 8 1", _coll(0, AR, 1 << 22),
                      _getchunk(0), f"pinknobs {ar} 0 max NULL", _coll(0, AR, 1 << 22),
                      _getchunk(0), "fin 0"])
    assert run.api == ["0", "0"] and run.res == [(1, 2, 0), (-1, -1, 0)]
    assert run.chunk_sizes == [262144, 1 << 21]
    bad = [f"pinknobs {ar} 0 max 1 2 -1", f"pinknobs {ar} 0 max 1 2 -1 1024",
           f"pinknobs {ar} 0 max 1 2 0 -1", f"pinknobs {ar} 0 max 1 -1 -1 -1"]
    assert driver.run(bad).api == ["-1"] * len(bad)


def test_unset_policy_means_nothing_happens(driver):
    """The communicator still gets a context (a pin's chunk size is carried in it), but nothing is
    decided and nothing logged."""
    run = driver.run(["init 6 16 2", _coll(0, AR, 1000), "getchunk 0 4 1000 1 2 1 2097152", "fin 0"],
                     NCCL_NET_PLUGIN="")
    assert run.ctx == [True] and run.res == [(-1, -1, 0)] and run.logs == []
    assert run.chunk_sizes == [2097152]


@pytest.mark.parametrize("var", ["NCCL_ALGO", "NCCL_PROTO"])
def test_user_algorithm_choice_wins_and_says_so_at_warn(driver, policy_path, var):
    """NCCL_ALGO / NCCL_PROTO (as cloud recipes set them) switch the policy off: a WARN, once per
    process, names the variable and the policy it switched off; without a policy it is an INFO."""
    commands = ["init 6 16 2", "init 5 16 2", _coll(0, AR, 1000), "fin 0", "fin 1"]
    run = driver.run(commands, DYNAMICCL_POLICY=str(policy_path), **{var: "Ring"})
    assert run.ctx == [False, False] and run.res == [(-1, -1, 0)]
    assert run.messages(WARN) == [
        f"DynamICCL: {var}=Ring is set in the environment (as some cloud recipes do), so NCCL's own "
        f"forcing wins and the policy {policy_path} is not used in this process: unset it to let the "
        "policy decide"]
    bare = driver.run(commands, **{var: "Ring"})
    assert bare.messages(WARN) == [] and bare.messages(INFO) == [
        f"DynamICCL: {var}=Ring is set; respecting it, run-time pins are not used"]


def _corruptions(good: str) -> dict[str, tuple[bytes | None, str]]:
    body = good[: good.rindex("checksum")]
    return {
        "missing": (None, "cannot open it"),
        "truncated": (good[: len(good) // 2].encode(), "truncated"),
        "flipped byte": (good.replace("ring", "rinG", 1).encode(), "checksum mismatch"),
        "wrong checksum": ((body + "checksum crc32 00000000\n").encode(), "checksum mismatch"),
        "newer version": (re.sub(r"POLICY [0-9]+", "POLICY 7", good, count=1).encode(), "version 7"),
        "binary": (bytes(range(256)) * 4, "not printable ASCII"),
        "empty": (b"", "not a DynamICCL policy file"),
        "directory": (b"", "not a regular file"),
    }


@pytest.mark.parametrize("kind", ["missing", "truncated", "flipped byte", "wrong checksum",
                                  "newer version", "binary", "empty", "directory"])
def test_bad_policy_file_warns_once_and_steps_aside(driver, policy_path, tmp_path, kind):
    content, reason = _corruptions(policy_path.read_text())[kind]
    path = tmp_path / "bad.dccl"
    if kind == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    run = driver.run(["init 6 16 2", "init 5 16 2", "init 4 8 1", _coll(0, AR, 1000),
                      _coll(1, AR, 1000), "fin 0", "fin 1", "fin 2"], DYNAMICCL_POLICY=str(path))
    assert run.ctx == [True, True, True]  # contexts without a policy: pins only
    assert run.res == [(-1, -1, 0), (-1, -1, 0)]
    warns = run.messages(WARN)
    assert len(warns) == 1, run.logs  # one warning per process, not per communicator
    assert str(path) in warns[0] and reason in warns[0] and "NCCL's own choices stand" in warns[0]
    if kind not in ("missing", "directory"):
        with pytest.raises(pf.PolicyFileError):  # Python refuses the same file
            pf.read(path)


def _ring(channels: int) -> pf.PolicyFile:
    return pf.PolicyFile(HEADER, (pf.Slice(rules=(pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16, decision=pf.Decision(
        Algorithm.RING, Protocol.LL, channels)),)),))


def _policy_hashes(run: Run) -> list[str]:
    """The sha256 of each communicator's "DynamICCL: policy ..." INFO line."""
    return [m.split("sha256 ")[1].split(")")[0] for m in run.messages(INFO)
            if m.startswith("DynamICCL: policy ")]


@pytest.mark.parametrize("how", ["replaced", "rewritten in place, mtime kept"])
def test_a_policy_changed_mid_job_is_not_read_again(driver, tmp_path, how):
    """The policy is read once per process: communicators created after the file changed (replaced,
    or even rewritten in place with its old size and mtime) keep the first file's rules, so the
    communicators of a job cannot split; one WARN says the file changed."""
    live, other = pf.write(_ring(16), tmp_path / "live.dccl"), pf.write(_ring(32), tmp_path / "new.dccl")
    assert live.stat().st_size == other.stat().st_size
    change = f"rename {other} {live}" if how == "replaced" else f"rewrite {other} {live}"
    run = driver.run(["init 6 16 2", _coll(0, AR, 1000), change, "init 6 16 2", "init 5 16 2",
                      _coll(1, AR, 1000), _coll(2, AR, 1000), _coll(0, AR, 1000),
                      "fin 0", "fin 1", "fin 2"], DYNAMICCL_POLICY=str(live))
    assert run.res == [(1, 0, 16)] * 4
    first = pf.content_hash(pf.dumps(_ring(16)).encode())
    assert _policy_hashes(run) == [first] * 3 and pf.file_hash(live) != first
    assert run.messages(WARN) == [
        f"DynamICCL: {live} changed after this process read it; this process keeps what it read "
        f"(sha256 {first}). Replace a policy between jobs: a rank that starts now reads the new file "
        "and decides otherwise than this one"]


def test_a_policy_named_anew_mid_job_is_not_read(driver, tmp_path):
    first, other = pf.write(_ring(16), tmp_path / "a.dccl"), pf.write(_ring(32), tmp_path / "b.dccl")
    run = driver.run(["init 6 16 2", f"setenv DYNAMICCL_POLICY {other}", "init 6 16 2",
                      "init 6 16 2", _coll(1, AR, 1000), "fin 0", "fin 1", "fin 2"],
                     DYNAMICCL_POLICY=str(first))
    assert run.res == [(1, 0, 16)] and _policy_hashes(run) == [pf.file_hash(first)] * 3
    assert run.messages(WARN) == [
        f"DynamICCL: DYNAMICCL_POLICY now names {other}, but this process keeps what it read from "
        f"{first} at its first communicator (sha256 {pf.file_hash(first)}): a policy is read once per "
        "process, so every communicator of a job decides alike"]


def test_what_the_first_read_decided_outlives_nccl_unloading_the_plugin(driver, tmp_path):
    """NCCL closes its tuner when the process's last communicator is destroyed and opens it afresh
    for the next: the plugin keeps itself loaded, so the next communicator still has the first
    read's policy (and a first read that failed still leaves NCCL deciding)."""
    first, other = pf.write(_ring(16), tmp_path / "a.dccl"), pf.write(_ring(32), tmp_path / "b.dccl")
    run = driver.run(["init 6 16 2", "fin 0", "reload", f"setenv DYNAMICCL_POLICY {other}",
                      "init 6 16 2", _coll(1, AR, 1000), "hash 65", "fin 1"],
                     DYNAMICCL_POLICY=str(first))
    assert run.res == [(1, 0, 16)] and run.api == [f"0 {pf.file_hash(first)}"]
    missing = driver.run(["init 6 16 2", "fin 0", "reload", f"setenv DYNAMICCL_POLICY {other}",
                          "init 6 16 2", _coll(1, AR, 1000), "fin 1"],
                         DYNAMICCL_POLICY=str(tmp_path / "absent.dccl"))
    assert missing.ctx == [True, True] and missing.res == [(-1, -1, 0)]
    assert len(missing.messages(WARN)) == 2 and "cannot open it" in missing.messages(WARN)[0]


def test_relative_policy_path_warns_with_the_absolute_path(driver, policy_path):
    run = driver.run(["init 6 16 2", "init 6 16 2", _coll(0, AR, 1000), "fin 0", "fin 1"],
                     cwd=policy_path.parent, DYNAMICCL_POLICY=policy_path.name)
    assert run.ctx == [True, True] and run.res == [(1, 0, 16)]
    warns = run.messages(WARN)
    assert len(warns) == 1 and str(policy_path.resolve()) in warns[0] and "relative" in warns[0]


def test_decisions_are_logged_once_each(driver, policy_path):
    run = driver.run(["init 6 16 2", "init 5 16 2"]
                     + [_coll(k, AR, n) for k in (0, 1) for n in (100, 200, 1000)]
                     + [_coll(0, AR, 1 << 20), _coll(0, AR, 0), _coll(0, AR, 0), "fin 0", "fin 1"],
                     DYNAMICCL_POLICY=str(policy_path), DYNAMICCL_LOG_DECISIONS="1")
    decisions = [m for m in run.messages(INFO) if m.startswith("DynamICCL decision")]
    assert decisions == [
        "DynamICCL decision: allreduce 8-65535 B, nNodes 2 nRanks 16: ring/ll, 16 channels",
        "DynamICCL decision: allreduce 65536-17179869184 B, nNodes 2 nRanks 16: tree/simple, "
        "NCCL's channels",
        "DynamICCL decision: allreduce 0-7 B, nNodes 2 nRanks 16: defer to NCCL",
    ]


def test_context_variable_selects_a_slice(driver, policy_path):
    commands = ["init 6 16 2", _coll(0, AR, 1000), "fin 0"]
    late = driver.run(commands, DYNAMICCL_POLICY=str(policy_path),
                      DYNAMICCL_CONTEXT="straggler=long")
    unknown = driver.run(commands, DYNAMICCL_POLICY=str(policy_path),
                         DYNAMICCL_CONTEXT="straggler=short c2c=high")
    assert late.res == [(1, 2, 32)]
    assert "slice straggler=long c2c=none" in [m for m in late.messages(INFO)
                                                 if m.startswith("DynamICCL: policy ")][0]
    assert unknown.res == [(1, 0, 16)]
    assert any("matches no slice" in m for m in unknown.messages(INFO))


def test_c_and_python_agree_on_random_calls(driver, policy_path):
    """The two parsers/lookups are independent implementations of one format: compare them."""
    policy = pf.read(policy_path)
    rng = random.Random(7)
    calls = [(rng.randrange(5), rng.choice([0, 7, 8, 65535, 65536, 1 << 34, (1 << 34) + 1,
                                            rng.randrange(1 << 36)]),
              rng.choice([1, 2, 3]), rng.choice([0, 1]),
              rng.choice([(16, 2), (8, 1), (8, 2), (32, 2), (32, 4)]))
             for _ in range(600)]
    systems = sorted({c[4] for c in calls})
    commands = [f"init 6 {r} {n}" for r, n in systems]
    commands += [_coll(systems.index(s), c, b, p, g) for c, b, p, g, s in calls]
    run = driver.run(commands, DYNAMICCL_POLICY=str(policy_path))
    for (coll, nbytes, pipe, reg, (nranks, nnodes)), got in zip(calls, run.res, strict=True):
        rule = policy.decide(Collective(coll), nbytes, nranks, nnodes)
        d = rule.decision if rule else None
        want = (-1, -1, 0) if d is None else (int(d.algorithm), int(d.protocol), d.channels or 0)
        assert got == want, (coll, nbytes, pipe, reg, nranks, nnodes)


class LogBucketPolicy:
    """Changes its mind three times per doubling of size (and per system and context), picking
    among the valid exportable actions: many boundaries, every algorithm family."""

    name = "log-buckets"

    def act(self, observation, *, scenario=None, action_mask=None) -> int:
        valid = np.flatnonzero(action_mask)
        key = (int(math.log2(max(scenario.nbytes, 1)) * 3), int(scenario.collective),
               scenario.topology.nodes, scenario.has_straggler)
        return int(valid[hash(key) % len(valid)])


@pytest.mark.parametrize("which", ["oracle", "log-buckets"])
def test_exported_grid_round_trips_through_the_plugin(driver, tmp_path, which):
    """Exhaustive: every call export evaluated gets the same decision from the C plugin."""
    from dynamiccl.agents.policies.registry import load_policy
    from dynamiccl.agents.shipping.export import export_policy
    from dynamiccl.system.topology import load_topology

    topo = load_topology("dgx_h100", nodes=2)
    policy = (load_policy("oracle", topology=topo, deployable=True) if which == "oracle"
              else LogBucketPolicy())
    contexts = [pf.DEFAULT_CONTEXT, ("long", "high")]
    # ungated, so that most calls carry a forced decision for the plugin to reproduce; both
    # policies read the scenario, so no observation is encoded for them (a third of the work)
    result = export_policy(policy, topo, node_counts=[1, 4], contexts=contexts, gate=None,
                           observe=lambda scenario: None)
    path = pf.write(result.policy_file, tmp_path / "grid.dccl")
    forced = 0
    for context in contexts:
        cells = [c for c in result.cells if c.context == context]
        systems = sorted({(c.ranks, c.nodes) for c in cells})
        commands = [f"init 6 {r} {n}" for r, n in systems]
        commands += [_coll(systems.index((c.ranks, c.nodes)), c.collective, c.nbytes)
                     for c in cells]
        run = driver.run(commands, DYNAMICCL_POLICY=str(path),
                         DYNAMICCL_CONTEXT=f"straggler={context[0]},c2c={context[1]}")
        assert all(run.ctx) and len(run.res) == len(cells)
        for cell, got in zip(cells, run.res, strict=True):
            d = cell.decision
            want = (-1, -1, 0) if d is None else (int(d.algorithm), int(d.protocol), d.channels)
            assert got == want, cell
            forced += d is not None
    assert forced > len(result.cells) // 2


#: Numeric spellings the two parsers must judge alike (leading zeros, signs, spaces, overflow) next
#: to the format's own tokens.
_TOKENS = ["0", "7", "-1", "*", "-", "64", "65", "2047", "2048", "1073741825", str(pf.MAX_BYTES),
           str(pf.MAX_BYTES + 1), "007", "+5", "01", "00", "064", "065", "-0", "+0", "0x10", "1e3",
           "1_0", "0" * 21, "0" * 19 + "1", "\t16", "16\t", "\u00b2", "defer", "ring", "Ring",
           "ll128", "slice", "straggler=none", "c2c=none", "straggler=long", "allreduce", "policy",
           "features", "ll128,nvls", "none", "x" * 300, "#",
           # NCCL version windows, read alike by both (the stand-in NCCL is 2.30.7)
           "2.30.7", "2.30.07", "02.30.7", "2.30.7..2.30.7", "2.28.9..2.30.6", "2.31.0..2.30.7",
           "2.30.7..", "2.100.1", "1000.1.1..2.30.7", "2.30.7...2.31.0"]


def _mutant(text: str, rng: random.Random) -> str:
    lines = text.split("\n")[:-2]  # without the checksum line
    i = rng.randrange(1, len(lines))
    kind = rng.randrange(6)
    if kind == 0:  # replace one token
        tok = lines[i].split(" ")
        tok[rng.randrange(len(tok))] = rng.choice(_TOKENS)
        lines[i] = " ".join(tok)
    elif kind == 1:
        lines.insert(i, lines[rng.randrange(1, len(lines))])
    elif kind == 2:
        del lines[i]
    elif kind == 3:  # whitespace the format allows (or not)
        lines[i] = rng.choice(["\t", "  ", " \r", ""]).join(lines[i].split(" "))
    elif kind == 4:
        lines[i] = lines[i] + rng.choice(["\r", " ", "\t# x", " extra"])
    else:
        lines.insert(i, rng.choice(["", "# c", "key value", "slice straggler=a c2c=b",
                                    "allreduce 0 1 * * * * defer - - -"]))
    body = "\n".join(lines) + "\n"
    return f"{body}checksum crc32 {pf.checksum(body.encode('latin-1'))}\n"


def test_c_and_python_parsers_accept_exactly_the_same_files(driver, policy_path, tmp_path):
    """Each file in a driver process of its own (a process reads its policy once). A file both
    parse is then used exactly when its NCCL version window, as Python reads it, holds the stand-in
    NCCL's version: the two read the window alike too."""
    rng = random.Random(5)
    text = policy_path.read_text()
    parsed, used, c_parsed, c_used = [], [], [], []
    for i in range(400):
        path = tmp_path / f"m{i}.dccl"
        path.write_bytes(_mutant(text, rng).encode("latin-1"))
        try:
            window = parse_window(pf.read(path).header.nccl)
            parsed.append(True)
            used.append(window is not None and window[0].code <= STANDIN_NCCL <= window[1].code)
        except pf.PolicyFileError:
            parsed.append(False)
            used.append(False)
        run = driver.run(["init 6 16 2", "hash 65", "fin 0"], DYNAMICCL_POLICY=str(path))
        c_parsed.append(not any("not using policy file" in m for m in run.messages(WARN)))
        c_used.append(_policy_loaded(run))
    assert c_parsed == parsed and c_used == used
    assert 50 < sum(parsed) < 350 and sum(used) < sum(parsed)  # every outcome represented


@pytest.mark.parametrize(("version", "rule", "problem"), [
    (3, "allreduce 0 100 * * ring simple - 65536", None),
    (3, "allreduce 0 100 * * ring simple 8 -", None),
    (3, "allreduce 0 100 * * defer - - -", None),
    (2, "allreduce 0 100 * * ring simple 8", None),  # an older file: NCCL's chunk
    (3, "allreduce 0 100 * * ring simple 8 1024", "chunk_bytes must be '-' or 4096..16777216"),
    (3, "allreduce 0 100 * * ring simple 8 99999999", "chunk_bytes must be '-' or 4096..16777216"),
    (3, "allreduce 0 100 * * ring simple 8 64K", "chunk_bytes must be '-' or 4096..16777216"),
    (3, "allreduce 0 100 * * defer - - 65536", "a defer rule has '-' as protocol, channels and chunk_bytes"),
    (3, "allreduce 0 100 * * ring simple 8", "a rule has 9 fields"),
    (2, "allreduce 0 100 * * ring simple 8 65536", "a rule has 8 fields"),
])
def test_both_parsers_read_the_chunk_column_alike(driver, tmp_path, version, rule, problem):
    """Format 3 adds chunk_bytes; format 2 files are still read (their rules keep NCCL's chunk)."""
    lines = [f"DYNAMICCL-POLICY {version}", *(f"{k} {getattr(HEADER, k)}" for k in pf_format.REQUIRED_HEADER),
             "slice straggler=none c2c=none", rule]
    body = "\n".join(lines) + "\n"
    path = tmp_path / "v.dccl"
    path.write_text(f"{body}checksum crc32 {pf.checksum(body.encode())}\n")
    if problem is None:
        pf.read(path)
    else:
        with pytest.raises(pf.PolicyFileError, match=re.escape(problem)):
            pf.read(path)
    run = driver.run(["init 6 16 2", "hash 65", "fin 0"], DYNAMICCL_POLICY=str(path))
    assert (run.api[0].split()[0] == "0") == (problem is None)
    if problem is not None:
        assert problem in run.messages(WARN)[0]


# ---- the run-time entry points, called the way dynamiccl.runtime calls them -----------------------


def test_set_context_switches_every_communicator(driver, policy_path):
    run = driver.run([
        "context straggler=long c2c=none",   # before any policy is loaded: nothing to match
        "init 6 16 2", "init 4 16 2",
        _coll(0, AR, 1000), _coll(1, AR, 1000),
        "context straggler=long c2c=none",
        _coll(0, AR, 1000), _coll(1, AR, 1000),
        "init 5 16 2", _coll(2, AR, 1000),    # a communicator created later follows it too
        "context straggler=short c2c=high",   # no such slice: the current one stays
        _coll(0, AR, 1000),
        "context c2c=none,straggler=none",   # back to the default, either separator
        _coll(0, AR, 1000), _coll(2, AR, 1000),
        "fin 0", "fin 1", "fin 2",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.api == ["1", "0", "1", "0"]
    late = (1, 2, 32)
    assert run.res == [(1, 0, 16), (1, 0, 16), late, late, late, late, (1, 0, 16), (1, 0, 16)]


@pytest.mark.parametrize("spec", ["NULL", "straggler", "straggler=", "straggler=LONG",
                                  "straggler=long straggler=long", "bogus=1", "c2c=high;x",
                                  "straggler=" + "a" * 32, "c2c=" + "n" * 200])
def test_set_context_refuses_bad_specs(driver, policy_path, spec):
    run = driver.run(["init 6 16 2", f"context {spec}", _coll(0, AR, 1000), "fin 0"],
                     DYNAMICCL_POLICY=str(policy_path))
    assert run.api == ["-1"] and run.res == [(1, 0, 16)]


def test_pins_win_over_rules_and_clear(driver, policy_path):
    run = driver.run([
        "init 6 16 2",
        f"pin {int(AR)} 0 4096 0 1 4",       # tree/ll128, 4 channels, for [0, 4096)
        _coll(0, AR, 1000), _coll(0, AR, 4096), _coll(0, AR, 4095),
        _coll(0, AR, 1000, fill="0" + "1" * 20),  # tree/ll128 usable but tree/ll not: still forced
        _coll(0, AR, 1000, fill="1011" + "1" * 17),  # the pinned entry is unusable: NCCL decides
        f"pin {int(AR)} 1000 2000 -1 0 0",     # unpin a hole in the middle
        _coll(0, AR, 999), _coll(0, AR, 1500), _coll(0, AR, 2000),
        f"pin {int(AR)} 0 max -1 0 0",         # unpin everything
        _coll(0, AR, 1000),
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.api == ["0", "0", "0"]
    pinned, rule = (0, 1, 4), (1, 0, 16)
    assert run.res == [pinned, rule, pinned, pinned, (-1, -1, 0), pinned, rule, pinned, rule]


def test_pins_apply_without_a_policy_but_not_against_nccl_algo(driver):
    pin = f"pin {int(Collective.REDUCE)} 0 max 1 2 0"
    run = driver.run([pin, "init 6 8 1", _coll(0, Collective.REDUCE, 1 << 20), "fin 0"])
    assert run.ctx == [True] and run.res == [(1, 2, 0)]
    user = driver.run(["init 6 8 1", pin, _coll(0, Collective.REDUCE, 1 << 20), "fin 0"],
                      NCCL_ALGO="Tree")
    assert user.res == [(-1, -1, 0)]


@pytest.mark.parametrize("args", ["5 0 10 1 2 0", "-1 0 10 1 2 0", "4 10 10 1 2 0", "4 11 10 1 2 0",
                                  "4 0 10 7 2 0", "4 0 10 -2 2 0", "4 0 10 1 3 0", "4 0 10 1 -1 0",
                                  "4 0 10 1 2 65", "4 0 10 1 2 -1"])
def test_pin_refuses_bad_input(driver, args):
    assert driver.run([f"pin {args}"]).api == ["-1"]


def test_pins_are_bounded(driver):
    commands = [f"pin 4 {2 * i} {2 * i + 1} 1 2 0" for i in range(pf_format.MAX_PINS + 1)]
    answers = driver.run(commands).api
    assert answers == ["0"] * pf_format.MAX_PINS + ["-1"]


def test_policy_hash_and_version(driver, policy_path):
    run = driver.run(["hash 65", "version", "init 6 16 2", "hash 65", "hash 64", "hash 0", "fin 0",
                      "hash 65"], DYNAMICCL_POLICY=str(policy_path))
    want = pf.file_hash(policy_path)
    # the policy is the process's once read: it outlives its communicators
    assert run.api == ["-1 ", f"{dynamiccl.__version__}", f"0 {want}", "-1 ", "-1 ", f"0 {want}"]


def test_both_parsers_cap_ranges_per_group_alike(driver, tmp_path):
    """A decision binary-searches one group, so its size is capped (per-call cost stays bounded
    whatever file is accepted): exactly the cap is accepted by both parsers, one more by neither."""
    cap = pf_format.MAX_GROUP_RANGES
    rules = tuple(pf.Rule(AR, 2 * i, 2 * i, 2, 16, decision=RING_LL) for i in range(cap))
    full = pf.dumps(pf.PolicyFile(HEADER, (pf.Slice(rules=rules),)))
    body = full[: full.rindex(pf_format.CHECKSUM_PREFIX)]
    over = body + f"allreduce {2 * cap} {2 * cap} 2 16 ring ll 16\n"
    over += f"{pf_format.CHECKSUM_PREFIX}{pf.checksum(over.encode())}\n"
    paths = [tmp_path / "cap.dccl", tmp_path / "over.dccl"]
    paths[0].write_text(full)
    paths[1].write_text(over)
    with pytest.raises(pf.PolicyFileError, match=f"more than {cap} size ranges"):
        pf.read(paths[1])
    run = driver.run(["init 6 16 2", _coll(0, AR, 2 * cap - 2), "fin 0"], DYNAMICCL_POLICY=str(paths[0]))
    over = driver.run(["init 6 16 2", "hash 65", "fin 0"], DYNAMICCL_POLICY=str(paths[1]))
    assert run.ctx == [True] and run.res == [(1, 0, 16)] and not _policy_loaded(over)
    assert f"more than {cap} size ranges" in over.messages(WARN)[0]


def test_both_parsers_take_the_optional_source_header_at_most_once(driver, tmp_path):
    from dataclasses import replace

    good = pf.write(_policy(replace(HEADER, source="/runs/quickstart/model.zip")),
                    tmp_path / "good.dccl")
    assert pf.read(good).header.source == "/runs/quickstart/model.zip"
    body = good.read_text()
    body = body[: body.rindex("checksum")].replace("\nsource ", "\nsource /other\nsource ", 1)
    twice = tmp_path / "twice.dccl"
    twice.write_text(f"{body}checksum crc32 {pf.checksum(body.encode())}\n")
    with pytest.raises(pf.PolicyFileError, match="'source' appears twice"):
        pf.read(twice)
    assert [_policy_loaded(driver.run(["init 6 16 2", "hash 65", "fin 0"], DYNAMICCL_POLICY=str(path)))
            for path in (good, twice)] == [True, False]


# ---- fleet safety: the NCCL version window, the expected checksum, a network plugin's tuner ------


def _windowed(tmp_path: Path, nccl: str) -> Path:
    from dataclasses import replace

    return pf.write(_policy(replace(HEADER, nccl=nccl)), tmp_path / f"{nccl.replace('.', '_')}.dccl")


@pytest.mark.parametrize("window, running, used", [
    ("2.30.7", STANDIN_NCCL, True), ("2.28.9..2.30.7", STANDIN_NCCL, True),
    ("2.28.9..2.29.7", STANDIN_NCCL, False), ("2.30.8..2.32.3", STANDIN_NCCL, False),
    (pf.DEFAULT_NCCL_RANGE, version_code(2, 19, 3), False)])
def test_the_plugin_defers_under_an_nccl_outside_the_policys_window(driver, tmp_path, window, running,
                                                                      used):
    path = _windowed(tmp_path, window)
    run = driver.run([f"ncclversion {running}", "init 6 16 2", "init 2 16 2", _coll(0, AR, 1000),
                      "v2 1 4 1000 0 0 1", "hash 65", "fin 0", "fin 1"], DYNAMICCL_POLICY=str(path))
    version = NcclVersion.from_code(running)
    if used:
        assert run.ctx == [True, True] and run.res == [(1, 0, 16)] * 2 and run.messages(WARN) == []
        assert f"DynamICCL: NCCL {version} is within the versions policy abi-test holds for ({window})" \
            in run.messages(INFO)
        return
    assert run.ctx == [True, True] and run.res == [(-1, -1, 0)] * 2 and run.api == ["-1 "]
    assert run.messages(WARN) == [  # once per process, not per communicator
        f"DynamICCL: this process runs NCCL {version}, outside the versions policy abi-test was measured "
        f"on ({window}): tune it again under this NCCL. NCCL decides every call in this process"]


def test_an_nccl_version_that_cannot_be_read_or_a_window_that_cannot_means_nccl_decides(driver,
                                                                                        tmp_path):
    unknown = driver.run(["ncclversion 0", "init 6 16 2", _coll(0, AR, 1000), "fin 0"],
                         DYNAMICCL_POLICY=str(_windowed(tmp_path, pf.DEFAULT_NCCL_RANGE)))
    assert unknown.ctx == [True] and unknown.messages(WARN) == [
        "DynamICCL: no ncclGetVersion is reachable from the tuner, so the NCCL this process runs "
        f"cannot be checked against the versions policy abi-test holds for ({pf.DEFAULT_NCCL_RANGE}). "
        "NCCL decides every call in this process"]
    unreadable = driver.run(["init 6 16 2", "fin 0"],
                            DYNAMICCL_POLICY=str(_windowed(tmp_path, "2.30.x")))
    assert unreadable.ctx == [True] and unreadable.messages(WARN) == [
        "DynamICCL: policy abi-test names no NCCL version window the plugin can read ('nccl 2.30.x'; it "
        "writes A.B.C or A.B.C..X.Y.Z): export it again. NCCL decides every call in this process"]


def test_the_expected_checksum_admits_the_file_it_names_in_either_case(driver, policy_path):
    want = pf.file_hash(policy_path)
    for spelled in (want, want.upper()):
        run = driver.run(["init 6 16 2", _coll(0, AR, 1000), "fin 0"],
                         DYNAMICCL_POLICY=str(policy_path), DYNAMICCL_POLICY_SHA256=spelled)
        assert run.ctx == [True] and run.res == [(1, 0, 16)] and run.messages(WARN) == []
        assert f"DynamICCL: policy file {policy_path} has the sha256 DYNAMICCL_POLICY_SHA256 expects" \
            in run.messages(INFO)
    unset = driver.run(["init 6 16 2", "fin 0"], DYNAMICCL_POLICY=str(policy_path))
    assert unset.ctx == [True] and any("DYNAMICCL_POLICY_SHA256 is not set" in m
                                       for m in unset.messages(INFO))


def test_a_checksum_mismatch_defers_on_that_rank_and_says_so_at_warn(driver, policy_path, tmp_path):
    """The rank read another file than the job was launched with: NCCL decides there, for the
    process's life, and the WARN says the job now runs mixed choices and what to do."""
    stale = pf.write(_ring(32), tmp_path / "stale.dccl")
    want = pf.file_hash(policy_path)
    run = driver.run(["init 6 16 2", "init 4 16 2", _coll(0, AR, 1000), _coll(1, AR, 1000), "hash 65",
                      "fin 0", "fin 1"], DYNAMICCL_POLICY=str(stale), DYNAMICCL_POLICY_SHA256=want)
    assert run.ctx == [True, True] and run.res == [(-1, -1, 0)] * 2 and run.api == ["-1 "]
    assert run.messages(WARN) == [
        f"DynamICCL: policy file {stale} has sha256 {pf.file_hash(stale)}, not the "
        f"DYNAMICCL_POLICY_SHA256={want} this job expects: this rank reads another file than the one "
        "the job was launched with. NCCL decides every call in this process; ranks whose file matches "
        "still apply the policy, so a communicator spanning both runs mixed choices (stop the job and "
        "give every node the same file; dynamiccl/README.md, The plugin)"]
    garbled = driver.run(["init 6 16 2", "fin 0"], DYNAMICCL_POLICY=str(policy_path),
                         DYNAMICCL_POLICY_SHA256=want[:-1] + "g")
    assert garbled.ctx == [True] and garbled.messages(WARN)[0].startswith(
        f"DynamICCL: DYNAMICCL_POLICY_SHA256={want[:-1]}g is not a SHA-256 (64 hexadecimal digits")


@pytest.fixture(scope="module")
def ofi_library(tmp_path_factory) -> Path:
    """A library installed as aws-ofi-nccl's net plugin is (libnccl-net-ofi.so, reached through the
    libnccl-net.so link its installer makes): the no-op tuner under that name, since a network
    plugin cannot be loaded for real without its fabric."""
    src = plugin.source_dir()
    noop = plugin.compile_c([src / "tests" / "noop_tuner.c"], "libnccl-tuner-noop.so",
                            flags=plugin.cflags(src), shared=True,
                            cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds",
                            depends=[src / "nccl_tuner_abi.h"])
    folder = tmp_path_factory.mktemp("ofi")
    (folder / "libnccl-net-ofi.so").write_bytes(noop.read_bytes())
    (folder / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")
    return folder / "libnccl-net.so"


def test_aws_ofi_nccl_is_noticed_and_defer_explained(driver, policy_path, ofi_library):
    """NCCL loads one tuner: with aws-ofi-nccl as the network plugin, DynamICCL replaces its tuner,
    so "defer" means NCCL's built-in model. Said once, at WARN with a policy in use."""
    note = ("the network plugin is aws-ofi-nccl ({}), which ships its own tuner; NCCL loads one "
            "tuner, so DynamICCL replaces it: where the policy defers, and for calls no rule covers, "
            "NCCL's built-in model decides, not the OFI tuner. Measure the default launches with this "
            "plugin loaded and no policy (dynamiccl/README.md, The plugin)")
    loaded = driver.run([f"dlopen {ofi_library}", "init 6 16 2", "init 6 16 2", "fin 0", "fin 1"],
                        DYNAMICCL_POLICY=str(policy_path))
    assert loaded.api == ["ok"] and loaded.ctx == [True, True]
    assert loaded.messages(WARN) == ["DynamICCL: " + note.format(ofi_library.resolve())]
    named = driver.run(["init 6 16 2", "fin 0"], DYNAMICCL_POLICY=str(policy_path),
                       NCCL_NET_PLUGIN="aws-ofi")
    assert named.messages(WARN) == ["DynamICCL: " + note.format("NCCL_NET_PLUGIN=aws-ofi")]
    without_policy = driver.run([f"dlopen {ofi_library}", "init 6 16 2", "fin 0"])
    assert without_policy.messages(WARN) == [] and without_policy.messages(INFO) == [
        "DynamICCL: " + note.format(ofi_library.resolve())]
    other = driver.run(["init 6 16 2", "fin 0"], DYNAMICCL_POLICY=str(policy_path),
                       NCCL_NET_PLUGIN="libnccl-net-gdaki.so")
    assert other.messages(WARN) == []


def test_the_version_is_read_from_the_nccl_library_that_called_init(tmp_path):
    """As in a PyTorch job: NCCL is a library opened RTLD_LOCAL, so its ncclGetVersion is not in the
    global scope and the plugin asks the library its init was called from. A fresh process each,
    with no other NCCL in it: the policy holds for 2.28.9 only."""
    src = plugin.source_dir()
    cache = tmp_path / "builds"
    library = plugin.build(cache=cache)
    nccl = plugin.compile_c([src / "tests" / "nccl_library_standin.c"], "libnccl-standin.so",
                            flags=["-std=c11", "-fPIC", "-fvisibility=hidden"], shared=True,
                            cache=cache, depends=[src / "nccl_tuner_abi.h"])
    policy = _windowed(tmp_path, "2.28.9")
    program = ("import ctypes, os, sys; lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL); "
               "lib.standin_nccl.argtypes = [ctypes.c_char_p, ctypes.c_int]; "
               "print(lib.standin_nccl(sys.argv[2].encode(), int(sys.argv[3])))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    took = [subprocess.run([sys.executable, "-c", program, str(nccl), str(library), str(code)],
                           capture_output=True, text=True, check=True,
                           env={**env, "DYNAMICCL_POLICY": str(policy)}).stdout.strip()
            for code in (version_code(2, 28, 9), version_code(2, 30, 7))]
    assert took == ["1", "0"]
