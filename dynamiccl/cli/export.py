"""``dynamiccl export --policy NAME|PATH --topology NAME|FILE -o policy.dccl``: deploy a policy.

Evaluates the policy over every collective, size (8 B..16 GiB), node count and GPUs-per-node asked
for, and writes the policy file the NCCL tuner plugin reads (or NVIDIA's example-tuner CSV).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from dynamiccl.cli.common import (
    UserError,
    add_topology_args,
    load_policy_arg,
    non_negative_int,
    positive_int,
    topology_from_args,
)

EPILOG = """examples:
  dynamiccl export --policy oracle --topology dgx_h100 --nodes 2 -o oracle.dccl
  dynamiccl export --policy outputs/run/model.zip --topology dgx_h100 --node-counts 1,2,4 \\
      -o policy.dccl
  dynamiccl export --policy oracle --topology dgx_h100 --nodes 2 --format nccl-example-csv \\
      -o nccl_tuner.conf
then: NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) DYNAMICCL_POLICY=policy.dccl torchrun ..."""


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    return values


def _contexts(text: str) -> list[tuple[str, str]]:
    from dynamiccl import policy_file as pf

    if text == "default":
        return [pf.DEFAULT_CONTEXT]
    if text == "all":
        return [(s, c) for s in pf.STRAGGLER_BUCKETS for c in pf.C2C_BUCKETS]
    raise argparse.ArgumentTypeError("--contexts is 'default' or 'all'")


def _checkpoint_digest(name_or_path: str) -> str | None:
    path = Path(name_or_path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.zip")) if path.is_dir() \
        else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _run(args: argparse.Namespace) -> int:
    from dynamiccl import policy_file as pf
    from dynamiccl.agents.export import export_policy
    from dynamiccl.nccl_csv import write_nccl_example_csv

    topology = topology_from_args(args)
    node_counts = args.node_counts or [topology.nodes]
    policy = load_policy_arg(args.policy, topology=topology, deployable=True, seed=args.seed)
    result = export_policy(
        policy, topology, policy_name=Path(args.policy).stem if Path(args.policy).exists()
        else args.policy, node_counts=node_counts, gpus_per_node=args.gpus_per_node_list,
        contexts=args.contexts, points_per_octave=args.points_per_octave,
        policy_digest=_checkpoint_digest(args.policy))
    out = Path(args.output)
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent} does not exist; create the folder or pick another -o path")
    if args.format == "nccl-example-csv":
        write_nccl_example_csv(result.policy_file, out)
    else:
        pf.write(result.policy_file, out)
    n_defer = sum(1 for c in result.cells if c.decision is None)
    print(f"wrote {out}: {result.policy_file.n_rules} rules from {len(result.cells)} evaluated "
          f"calls ({n_defer} left to NCCL), nodes {node_counts}, format {args.format}")
    if args.format == "dccl":
        print(f"inspect: dynamiccl show {out}")
        print(f"use:     NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) DYNAMICCL_POLICY={out} "
              "torchrun ...")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a policy file for the NCCL tuner plugin",
        description="Evaluate a policy over collectives x sizes (8 B..16 GiB, boundaries where the "
                    "decision changes) x node counts x GPUs per node and write the policy file the "
                    "DynamICCL tuner plugin loads. Only exportable knobs are used; anything else, "
                    "and every situation not exported, is written as 'defer to NCCL'.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, metavar="NAME|PATH",
                        help="built-in policy (oracle, nccl_default, static_best, random, ...) or "
                             "a checkpoint")
    add_topology_args(parser)
    parser.add_argument("--node-counts", type=_int_list, default=None, metavar="N,N,...",
                        help="export several node counts (default: the system's own)")
    parser.add_argument("--gpus-per-node-list", type=_int_list, default=None, metavar="G,G,...",
                        help="export several GPUs-per-node values (default: the system's own)")
    parser.add_argument("--contexts", type=_contexts, default="default",
                        help="context slices: 'default' (no straggler, no overlap) or 'all'")
    parser.add_argument("--points-per-octave", type=positive_int, default=8,
                        help="size samples per doubling before bisection (default 8)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of random policies")
    parser.add_argument("--format", choices=("dccl", "nccl-example-csv"), default="dccl",
                        help="dccl (DynamICCL plugin, default) or NVIDIA's example-tuner CSV")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
    parser.set_defaults(func=_run)
