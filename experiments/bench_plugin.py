"""Cost of one DynamICCL decision inside NCCL: nanoseconds per getCollInfo call.

Builds the plugin as shipped, a no-op tuner with the same flags, and a small C timing driver that
loads both (dlopen, like NCCL) and calls getCollInfo on a freshly filled cost table for a mix of
collectives and sizes, interleaving the two plugins repetition by repetition. The policy is a real
export (the exportable oracle on dgx_h100, 2 nodes, unless --policy-file is given). Reports medians;
the overhead is the difference, target <= 30 ns.

    python experiments/bench_plugin.py [--json] [--calls N] [--reps N] [--policy-file FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dynamiccl import plugin
from dynamiccl import policy_file as pf

TARGET_OVERHEAD_NS = 30.0


def _export_oracle(path: Path, topology: str, nodes: int) -> tuple[int, int]:
    from dynamiccl.agents.export import export_policy
    from dynamiccl.agents.registry import load_policy
    from dynamiccl.topology import load_topology

    topo = load_topology(topology, nodes=nodes)
    result = export_policy(load_policy("oracle", topology=topo, deployable=True), topo,
                           policy_name="oracle")
    pf.write(result.policy_file, path)
    return topo.nranks, topo.nodes


def measure(policy_file: Path, nranks: int, nnodes: int, calls: int, reps: int) -> dict:
    src = plugin.source_dir()
    if src is None:
        raise SystemExit("the benchmark needs the C sources (a source checkout)")
    tests = src / "tests"
    lib = plugin.build()
    noop = plugin.compile_c([tests / "noop_tuner.c"], "libnccl-tuner-noop.so",
                            flags=plugin.CFLAGS, shared=True, depends=[src / "nccl_tuner_abi.h"])
    driver = plugin.compile_c([tests / "bench_driver.c"], "bench_driver",
                              flags=["-std=c11", "-O2"], depends=[src / "nccl_tuner_abi.h"])
    env = dict(os.environ, DYNAMICCL_POLICY=str(policy_file))
    env.pop("DYNAMICCL_LOG_DECISIONS", None)
    out = subprocess.run([str(driver), str(lib), str(noop), str(nranks), str(nnodes), str(calls),
                          str(reps)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"bench driver failed: {out.stderr.strip()}")
    result = json.loads(out.stdout)
    result["overhead_ns"] = round(result["ns_per_call"] - result["noop_ns_per_call"], 2)
    result["rules"] = pf.read(policy_file).n_rules
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--calls", type=int, default=200_000, help="calls per repetition")
    parser.add_argument("--reps", type=int, default=31, help="repetitions (median reported)")
    parser.add_argument("--policy-file", type=Path, default=None,
                        help="a policy to time (default: export the oracle)")
    parser.add_argument("--topology", default="dgx_h100")
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.policy_file:
            policy_path = args.policy_file
            first = next(r for s in pf.read(policy_path).slices for r in s.rules if r.nodes)
            nranks, nnodes = first.ranks or first.nodes, first.nodes
        else:
            policy_path = Path(tmp) / "oracle.dccl"
            nranks, nnodes = _export_oracle(policy_path, args.topology, args.nodes)
        result = measure(policy_path, nranks, nnodes, args.calls, args.reps)
    if args.json:
        print(json.dumps({k: result[k] for k in ("ns_per_call", "noop_ns_per_call")}))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
