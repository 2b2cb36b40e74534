"""Cost of one DynamICCL decision inside NCCL: nanoseconds per getCollInfo call, and init time.

Builds the plugin as shipped, a no-op tuner with the same flags, and a small C timing driver that
loads both (dlopen, like NCCL) and calls getCollInfo on a freshly filled cost table for a mix of
collectives and sizes, interleaving the two plugins repetition by repetition. The policy is a real
export (the exportable oracle on dgx_h100, 2 nodes), or --policy-file, or with --largest the worst
file the parsers accept: the most rules the format allows, all in the one group every allreduce
consults, size boundaries spread over the sizes the timing loop asks for, padded with comments to
the byte limit. Reports medians; the overhead is the difference, target <= 30 ns; and the time of a
communicator's init, a process's first (read, hash, parse, check, index) and a later one (the
process's policy, read once, indexed for it).

With --pinned, allreduce sizes are pinned first (dynamiccl_pin), timing the pinned path instead.

    python experiments/bench_plugin.py [--json] [--calls N] [--reps N] [--policy-file FILE | --largest]
                                       [--pinned]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin import policy_format as fmt
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

TARGET_OVERHEAD_NS = 30.0


def _export_oracle(path: Path, topology: str, nodes: int) -> tuple[int, int]:
    from dynamiccl.agents.policies.registry import load_policy
    from dynamiccl.agents.shipping.export import export_policy
    from dynamiccl.system.topology import load_topology

    topo = load_topology(topology, nodes=nodes)
    result = export_policy(load_policy("oracle", topology=topo, deployable=True), topo,
                           policy_name="oracle")
    pf.write(result.policy_file, path)
    return topo.nranks, topo.nodes


def _group(nodes: int, ranks: int, n: int) -> list[pf.Rule]:
    """n allreduce ranges for one system, log-spaced over 8 B .. 32 GiB (where the timing loop's
    sizes fall, so every range is visited)."""
    starts: list[int] = [0]
    for i in range(1, n):
        starts.append(max(starts[-1] + 1, int(8 * 2 ** (32 * i / n))))
    ends = [s - 1 for s in starts[1:]] + [pf.MAX_BYTES]
    return [pf.Rule(Collective.ALLREDUCE, lo, hi, nodes, ranks,
                    decision=pf.Decision(Algorithm.RING, Protocol(i % 3), 1 + i % 64))
            for i, (lo, hi) in enumerate(zip(starts, ends, strict=True))]


def _write_largest(path: Path) -> tuple[int, int]:
    """The costliest file the parsers accept (see the module docstring); (nranks, nnodes).

    The timed communicator's group holds the most ranges a group may; more full groups (other node
    counts) follow while the byte limit allows, then comments fill the file to exactly that limit.
    """
    ranks, nodes, n = 16, 2, fmt.MAX_GROUP_RANGES
    header = pf.Header("largest", "2026-01-01T00:00:00Z", "synthetic", "0" * 16,
                       pf.DEFAULT_NCCL_RANGE, "0" * 16, "ll128")

    def text(groups: int) -> str:
        rules = [r for g in range(groups) for r in _group(nodes + g, ranks * (g + 1), n)]
        return pf.dumps(pf.PolicyFile(header, (pf.Slice(rules=tuple(rules[:fmt.MAX_RULES])),)))

    groups = min(fmt.MAX_RULES // n, fmt.MAX_FILE_BYTES // len(text(1)))
    while True:
        try:
            full = text(groups)
            break
        except pf.PolicyFileError:  # over the byte limit: one group fewer
            groups -= 1
    body, _, _ = full.rpartition(fmt.CHECKSUM_PREFIX)
    filler = fmt.MAX_FILE_BYTES - len(full)
    comment = "#" + "x" * (fmt.MAX_LINE - 2) + "\n"
    body += comment * (filler // len(comment)) + "#" * (filler % len(comment) - 1) + "\n"
    path.write_text(f"{body}{fmt.CHECKSUM_PREFIX}{pf.checksum(body.encode())}\n")
    assert path.stat().st_size == fmt.MAX_FILE_BYTES, path.stat().st_size
    pf.read(path)  # the parsers accept it
    return ranks, nodes


def measure(policy_file: Path, nranks: int, nnodes: int, calls: int, reps: int,
            pinned: bool = False) -> dict:
    src = plugin.source_dir()
    if src is None:
        raise SystemExit("the benchmark needs the C sources (a source checkout)")
    tests = src / "tests"
    lib = plugin.build()
    noop = plugin.compile_c([tests / "noop_tuner.c"], "libnccl-tuner-noop.so",
                            flags=plugin.cflags(src), shared=True, depends=[src / "nccl_tuner_abi.h"])
    driver = plugin.compile_c([tests / "bench_driver.c"], "bench_driver",  # exports ncclGetVersion
                              flags=["-std=c11", "-O2", "-rdynamic"],
                              depends=[*plugin.headers(src), tests / "nccl_version_standin.h"])
    env = {**os.environ, fmt.POLICY_ENV: str(policy_file)}
    for name in (fmt.LOG_DECISIONS_ENV, fmt.CONTEXT_ENV):
        env.pop(name, None)
    out = subprocess.run([str(driver), str(lib), str(noop), str(nranks), str(nnodes), str(calls),
                          str(reps), *(["pinned"] if pinned else [])],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"bench driver failed: {out.stderr.strip()}")
    result = json.loads(out.stdout)
    result["overhead_ns"] = round(result["ns_per_call"] - result["noop_ns_per_call"], 2)
    result["rules"] = pf.read(policy_file).n_rules
    result["file_bytes"] = policy_file.stat().st_size
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    # Short repetitions, many of them: on a shared machine most then run without being preempted,
    # so the median is the plugin's cost rather than the neighbours'.
    parser.add_argument("--calls", type=int, default=20_000, help="calls per repetition")
    parser.add_argument("--reps", type=int, default=301, help="repetitions (median reported)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--policy-file", type=Path, default=None,
                        help="a policy to time (default: export the oracle)")
    source.add_argument("--largest", action="store_true",
                        help="time the largest, slowest file the parsers accept")
    parser.add_argument("--pinned", action="store_true",
                        help="pin allreduce sizes first (dynamiccl_pin): time pinned calls")
    parser.add_argument("--topology", default="dgx_h100")
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.largest:
            policy_path = Path(tmp) / "largest.dccl"
            nranks, nnodes = _write_largest(policy_path)
        elif args.policy_file:
            policy_path = args.policy_file
            first = next(r for s in pf.read(policy_path).slices for r in s.rules if r.nodes)
            nranks, nnodes = first.ranks or first.nodes, first.nodes
        else:
            policy_path = Path(tmp) / "oracle.dccl"
            nranks, nnodes = _export_oracle(policy_path, args.topology, args.nodes)
        result = measure(policy_path, nranks, nnodes, args.calls, args.reps, args.pinned)
    if args.json:
        print(json.dumps({k: result[k] for k in ("ns_per_call", "noop_ns_per_call", "overhead_ns",
                                                 "rules", "file_bytes", "init_ms",
                                                 "init_cached_ms")}))
        return 0
    print(f"policy: {result['rules']} rules, communicator nRanks {nranks} / nNodes {nnodes}, "
          f"{args.reps} x {args.calls} calls")
    print(f"{'plugin':<12}{'median ns/call':>16}{'min ns/call':>14}")
    print(f"{'dynamiccl':<12}{result['ns_per_call']:>16.2f}{result['min_ns_per_call']:>14.2f}")
    print(f"{'no-op':<12}{result['noop_ns_per_call']:>16.2f}"
          f"{result['min_noop_ns_per_call']:>14.2f}")
    verdict = "meets" if result["overhead_ns"] <= TARGET_OVERHEAD_NS else "MISSES"
    print(f"overhead {result['overhead_ns']:.2f} ns per decision ({verdict} the "
          f"{TARGET_OVERHEAD_NS:.0f} ns target)")
    print(f"init (fastest of 7): {result['init_ms']:.2f} ms for a process's first communicator "
          f"({result['file_bytes']} bytes read, hashed, parsed, checked), "
          f"{result['init_cached_ms']:.2f} ms for a later one (the policy read once per process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
