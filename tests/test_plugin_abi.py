"""The C plugin loaded the way NCCL loads it, through every exported ABI version.

A C driver (dynamiccl/csrc/tests/driver.c, compiled with the machine's gcc) dlopens the plugin with
RTLD_NOW | RTLD_LOCAL, looks up one ncclTunerPlugin_vN, calls init with that version's argument
order, getCollInfo on a contiguous float[numAlgo][numProto] table filled like NCCL's (-1 unusable,
microseconds otherwise) and finalize. The driver itself flags any write to an unusable entry or any
non-success return; these tests check the decisions, the logs and the environment variables.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from dynamiccl import plugin
from dynamiccl import policy_file as pf
from dynamiccl.nccl import Algorithm, Collective, Protocol

AR, AG, BC = Collective.ALLREDUCE, Collective.ALLGATHER, Collective.BROADCAST
WARN, INFO, TUNING = 2, 3, 0x40


@dataclass
class Run:
    ctx: list[bool] = field(default_factory=list)
    res: list[tuple[int, int, int]] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)
    logs: list[tuple[int, int, str]] = field(default_factory=list)

    def messages(self, level: int) -> list[str]:
        return [m for lvl, _, m in self.logs if lvl == level]


class Driver:
    """Runs driver commands against the plugin in a fresh process (fresh plugin state)."""

    def __init__(self, exe: Path, library: Path) -> None:
        self.exe, self.library = exe, library

    def run(self, commands: list[str], **env: str) -> Run:
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith("DYNAMICCL_") and k not in ("NCCL_ALGO", "NCCL_PROTO")}
        proc = subprocess.run([str(self.exe), str(self.library)], input="\n".join(commands) + "\n",
                              capture_output=True, text=True, env={**clean, **env}, timeout=120)
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
                out.chunks.append(int(rest))
            elif kind == "LOG":
                level, flags, message = rest.split(" ", 2)
                out.logs.append((int(level), int(flags, 16), message))
        return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Driver:
    cache = tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"  # builds keyed by digest
    src = plugin.source_dir()
    library = plugin.build(cache=cache)
    exe = plugin.compile_c([src / "tests" / "driver.c"], "driver",
                           flags=["-std=c11", "-O1", "-g", "-Wall", "-Wextra"], cache=cache,
                           depends=[src / "tests" / "harness.h", src / "nccl_tuner_abi.h"])
    return Driver(exe, library)


RING_LL = pf.Decision(Algorithm.RING, Protocol.LL, 16)
TREE_SIMPLE = pf.Decision(Algorithm.TREE, Protocol.SIMPLE, None, 1 << 20)
PAT = pf.Decision(Algorithm.PAT, Protocol.SIMPLE, 4)
NVLS = pf.Decision(Algorithm.NVLS, Protocol.SIMPLE, 8)
HEADER = pf.Header("abi-test", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                   pf.DEFAULT_NCCL_RANGE, "cafe")


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory) -> Path:
    default = pf.Slice(rules=(
        pf.Rule(AR, 0, 7, 2, 16),
        pf.Rule(AR, 8, 65535, 2, 16, decision=RING_LL),
        pf.Rule(AR, 65536, 1 << 34, 2, 16, decision=TREE_SIMPLE),
        pf.Rule(AR, (1 << 34) + 1, pf.MAX_BYTES, 2, 16),
        pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16, pipe_ops=2, decision=NVLS),
        pf.Rule(AG, 0, pf.MAX_BYTES, 2, 16, reg_buff=1, decision=PAT),
        pf.Rule(AG, 0, pf.MAX_BYTES, 2, 16, decision=NVLS),
        pf.Rule(BC, 0, pf.MAX_BYTES, None, None, decision=pf.Decision(Algorithm.COLLNET_DIRECT,
                                                                       Protocol.SIMPLE, 2)),
        pf.Rule(AR, 0, pf.MAX_BYTES, None, None),
    ))
    straggler = pf.Slice("long", "none", (pf.Rule(AR, 0, pf.MAX_BYTES, 2, 16,
                                                  decision=pf.Decision(Algorithm.RING,
                                                                       Protocol.SIMPLE, 32)),))
    return pf.write(pf.PolicyFile(HEADER, (default, straggler)),
                    tmp_path_factory.mktemp("abi") / "abi.dccl")


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
    info = run.messages(INFO)[0]
    assert info.startswith("DynamICCL: policy abi-test, 8 rules, for nRanks 16 / nNodes 2")
    assert all(flags == TUNING for _, flags, _ in run.logs)


def test_v2_chooses_through_out_parameters(driver, policy_path):
    run = driver.run([
        "init 2 16 2",
        "v2 0 4 1000 0 0 1",          # ring/ll with 16 channels
        "v2 0 4 1000 0 1 2",          # pipe_ops 2 -> NVLS, allowed (nvlsSupport 1)
        "v2 0 4 1000 0 0 2",          # NVLS but nvlsSupport 0 -> NCCL decides
        "v2 0 0 1000 0 0 1",          # broadcast -> CollNet without collNetSupport -> NCCL
        "v2 0 0 1000 1 0 1",          # ... with collNetSupport
        "v2 0 2 1000 0 1 1",          # allgather: v2 knows no reg_buff, so not the PAT rule
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.res == [(1, 0, 16), (4, 2, 8), (-1, -1, 0), (-1, -1, 0), (2, 2, 2), (4, 2, 8)]


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
        _coll(0, AG, 1000, reg=1, na=7),  # PAT exists: forced at [6][2]
        _coll(0, AG, 1000, reg=1, na=6),  # NCCL 2.22 has six algorithms: no PAT, NCCL decides
        _coll(0, AG, 1000, reg=0, na=6),  # the unregistered rule (NVLS) works with six
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.res == [(6, 2, 4), (-1, -1, 0), (4, 2, 8)]


def test_pipe_ops_and_reg_buff_groups(driver, policy_path):
    run = driver.run([
        "init 6 16 2", "init 3 16 2",
        _coll(0, AR, 1000, pipe=2),       # pipe-specific group
        _coll(0, AR, 1000, pipe=3),       # falls back to the (*, *) group
        _coll(1, AG, 1000, reg=1),        # v3 has no regBuff: the (*, *) group answers
        "fin 0", "fin 1",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.res == [(4, 2, 8), (1, 0, 16), (4, 2, 8)]


def test_chunk_size_only_for_the_rule_nccl_followed(driver, policy_path):
    run = driver.run([
        "init 6 16 2",
        "chunk 0 4 1048576 0 2 1",        # tree/simple as the rule says -> 1 MiB
        "chunk 0 4 1048576 1 2 1",        # NCCL runs ring/simple -> untouched
        "chunk 0 4 1000 1 0 1",           # rule without a chunk -> untouched
        "fin 0",
    ], DYNAMICCL_POLICY=str(policy_path))
    assert run.chunks == [1 << 20, 777, 777]


def test_unset_policy_means_nothing_happens(driver):
    run = driver.run(["init 6 16 2", _coll(0, AR, 1000), "fin 0"])
    assert run.ctx == [False] and run.res == [(-1, -1, 0)] and run.logs == []


@pytest.mark.parametrize("var", ["NCCL_ALGO", "NCCL_PROTO"])
def test_user_algorithm_choice_wins(driver, policy_path, var):
    run = driver.run(["init 6 16 2", _coll(0, AR, 1000), "fin 0"],
                     DYNAMICCL_POLICY=str(policy_path), **{var: "Ring"})
    assert run.ctx == [False] and run.res == [(-1, -1, 0)]
    assert "NCCL_ALGO/NCCL_PROTO are set" in run.messages(INFO)[0]


def _corruptions(good: str) -> dict[str, tuple[bytes | None, str]]:
    body = good[: good.rindex("checksum")]
    return {
        "missing": (None, "cannot open it"),
        "truncated": (good[: len(good) // 2].encode(), "truncated"),
        "flipped byte": (good.replace("ring", "rinG", 1).encode(), "checksum mismatch"),
        "wrong checksum": ((body + "checksum crc32 00000000\n").encode(), "checksum mismatch"),
        "newer version": (good.replace("POLICY 1", "POLICY 7", 1).encode(), "version 7"),
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
    assert run.ctx == [False, False, False]
    assert run.res == [(-1, -1, 0), (-1, -1, 0)]
    warns = run.messages(WARN)
    assert len(warns) == 1, run.logs  # one warning per process, not per communicator
    assert str(path) in warns[0] and reason in warns[0] and "NCCL's own choices stand" in warns[0]
    if kind not in ("missing", "directory"):
        with pytest.raises(pf.PolicyFileError):  # Python refuses the same file
            pf.read(path)


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
                         DYNAMICCL_CONTEXT="straggler=short,c2c=high")
    assert late.res == [(1, 2, 32)]
    assert "slice straggler=long c2c=none" in late.messages(INFO)[0]
    assert unknown.res == [(1, 0, 16)]
    assert any("matches no slice" in m for m in unknown.messages(INFO))


def test_c_and_python_agree_on_random_calls(driver, policy_path):
    """The two parsers/lookups are independent implementations of one format: compare them."""
    policy = pf.read(policy_path)
    rng = random.Random(7)
    calls = [(rng.randrange(5), rng.choice([0, 7, 8, 65535, 65536, 1 << 34, (1 << 34) + 1,
                                            rng.randrange(1 << 36)]),
              rng.choice([1, 2, 3]), rng.choice([0, 1]), rng.choice([(16, 2), (8, 1), (32, 2)]))
             for _ in range(600)]
    systems = sorted({c[4] for c in calls})
    commands = [f"init 6 {r} {n}" for r, n in systems]
    commands += [_coll(systems.index(s), c, b, p, g) for c, b, p, g, s in calls]
    run = driver.run(commands, DYNAMICCL_POLICY=str(policy_path))
    for (coll, nbytes, pipe, reg, (nranks, nnodes)), got in zip(calls, run.res, strict=True):
        rule = policy.decide(Collective(coll), nbytes, nranks, nnodes, pipe, reg)
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
    from dynamiccl.agents.export import export_policy
    from dynamiccl.agents.registry import load_policy
    from dynamiccl.topology import load_topology

    topo = load_topology("dgx_h100", nodes=2)
    policy = (load_policy("oracle", topology=topo, deployable=True) if which == "oracle"
              else LogBucketPolicy())
    contexts = [pf.DEFAULT_CONTEXT, ("long", "high")]
    result = export_policy(policy, topo, node_counts=[1, 2, 4], contexts=contexts)
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


_TOKENS = ["0", "7", "-1", "*", "-", "64", "65", "2047", "2048", "1073741825", str(pf.MAX_BYTES),
           str(pf.MAX_BYTES + 1), "007", "+5", "defer", "ring", "Ring", "ll128", "slice",
           "straggler=none", "c2c=none", "straggler=long", "allreduce", "policy", "x" * 300, "#"]


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
    rng = random.Random(5)
    text = policy_path.read_text()
    verdicts, commands = [], []
    for i in range(400):
        path = tmp_path / f"m{i}.dccl"
        path.write_bytes(_mutant(text, rng).encode("latin-1"))
        try:
            pf.read(path)
            verdicts.append(True)
        except pf.PolicyFileError:
            verdicts.append(False)
        commands += [f"setenv DYNAMICCL_POLICY {path}", "init 6 16 2", f"fin {i}"]
    run = driver.run(commands)
    assert run.ctx == verdicts
    assert 50 < sum(verdicts) < 350  # both outcomes well represented
