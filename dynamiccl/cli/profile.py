"""``dynamiccl profile topology`` and ``dynamiccl profile collective``: measure this system.

``profile collective --json`` is a contract other tools parse: the first five keys are
``time_us`` (median over runs, first arrival to completion), ``algbw_GBps``, ``busbw_GBps``
(nccl-tests factors, from the time after the last rank arrived), ``straggler_rank`` (or null) and
``straggler_delay_us``; context follows them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from dynamiccl.cli.common import collective_arg, size_arg
from dynamiccl.cli.main import UserError
from dynamiccl.nccl import Collective
from dynamiccl.units import format_size, format_time_us, parse_duration_us


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure this system: its GPU topology or one collective",
                       description="Measure the local system (NVML topology discovery) or time "
                       "one collective on N local ranks the way nccl-tests does.")
    kinds = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    _register_topology(kinds)
    _register_collective(kinds)


def _register_topology(kinds: argparse._SubParsersAction) -> None:
    t = kinds.add_parser(
        "topology", help="write a topology YAML from the local GPUs (NVML)",
        description="Read the local GPUs through NVML and write a topology file in the simulator's "
        "schema. NVML sees one node; the tiers above it come from the flags below or defaults, and "
        "the file marks every value that was not measured.")
    t.add_argument("-o", "--output", metavar="FILE", help="write the YAML here (default: stdout)")
    t.add_argument("--from", dest="recorded", metavar="FILE",
                   help="use NVML answers recorded earlier (--record) instead of the driver")
    t.add_argument("--record", metavar="FILE", help="also save the raw NVML answers to FILE")
    t.add_argument("--name", help="the topology's name (default: from the GPU model)")
    t.add_argument("--nodes", type=int, default=1, metavar="N", help="number of nodes (default 1)")
    t.add_argument("--network-bandwidth-GBps", type=float, metavar="X",
                   help="per-NIC network bandwidth each way (default 50, a 400 Gb/s NIC)")
    t.add_argument("--network-latency-us", type=float, metavar="Y",
                   help="network hop latency in µs (default 3)")
    t.add_argument("--nics-per-node", type=int, metavar="K", help="NICs per node (default: one per GPU)")
    t.add_argument("--intra-latency-us", type=float, metavar="Z",
                   help="intra-node hop latency in µs (default: 0.6 NVLink, 1.0 PCIe)")
    t.set_defaults(func=run_topology)


def _register_collective(kinds: argparse._SubParsersAction) -> None:
    c = kinds.add_parser(
        "collective", help="time one collective on N local ranks (nccl-tests style)",
        description="Time a collective on N local ranks: warmup, then RUNS runs of ITERS timed "
        "iterations; prints the median time, bus bandwidth and the persistent straggler, if any. "
        "Under torchrun (WORLD_SIZE set) it joins the job instead of starting ranks.")
    c.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="nccl (GPUs) or gloo (CPU); default: nccl when a GPU is visible")
    c.add_argument("--nprocs", type=int, metavar="N", help="ranks to start (default: GPUs, or 2)")
    c.add_argument("--collective", type=collective_arg, default=Collective.ALLREDUCE,
                   help="allreduce (default), allgather, reducescatter, broadcast or reduce")
    c.add_argument("--size", type=size_arg, default=2**20,
                   help="bytes as nccl-tests' size column, e.g. 1MB (default 1MiB)")
    c.add_argument("--inject-straggler", type=_straggler_arg, metavar="RANK:DELAY",
                   help="make RANK sleep DELAY (e.g. 1:5ms) before every collective")
    c.add_argument("--warmup", type=int, default=10, help="untimed iterations (default 10)")
    c.add_argument("--iters", type=int, default=100, help="timed iterations per run (default 100)")
    c.add_argument("--runs", type=int, default=5, help="runs; the median is reported (default 5)")
    c.add_argument("--algorithm", help="nccl only: force NCCL_ALGO (ring, tree, nvls, …)")
    c.add_argument("--protocol", help="nccl only: force NCCL_PROTO (ll, ll128, simple)")
    c.add_argument("--channels", type=int, help="nccl only: pin NCCL_MIN/MAX_NCHANNELS")
    c.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="give up (and stop every rank) after S seconds (default 300)")
    c.add_argument("--record", metavar="FILE.jsonl", help="append the measurement record to FILE")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=run_collective)


def _straggler_arg(text: str) -> tuple[int, float]:
    rank, sep, delay = text.partition(":")
    try:
        if not sep or not rank.strip().isdigit():
            raise ValueError
        return int(rank), parse_duration_us(delay)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not RANK:DELAY; write e.g. 1:5ms (rank 1 sleeps 5 ms)") from None


def run_topology(args: argparse.Namespace) -> int:
    from dynamiccl.profiler.discover import NetworkSpec, discover
    from dynamiccl.profiler.nvml import NoDriverError, local_provider, save_snapshot

    try:
        snapshot = local_provider(args.recorded).snapshot()
    except NoDriverError as exc:
        raise UserError(f"no NVIDIA driver found: {exc}, use --from FILE (NVML answers recorded "
                        "with --record on a GPU machine) or a preset (`dynamiccl topologies`)") from None
    if args.record:
        save_snapshot(snapshot, args.record)
    network = NetworkSpec(args.nodes, args.network_bandwidth_GBps, args.network_latency_us,
                          args.nics_per_node, args.intra_latency_us)
    found = discover(snapshot, network, name=args.name)
    for warning in found.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(found.yaml_text)
        print(f"wrote {args.output}: {found.topology.describe()}", file=sys.stderr)
    else:
        sys.stdout.write(found.yaml_text)
    return 0


def run_collective(args: argparse.Namespace) -> int:
    from dynamiccl.profiler.launcher import LaunchError
    from dynamiccl.profiler.runner import CollectiveSpec, measure_collective, run_under_torchrun

    backend = args.backend or _default_backend()
    if backend == "gloo" and (args.algorithm or args.protocol or args.channels):
        raise UserError("--algorithm/--protocol/--channels are NCCL knobs; use --backend nccl")
    rank, delay = args.inject_straggler or (None, 0.0)
    spec = CollectiveSpec(args.collective.name.lower(), args.size, backend, args.warmup,
                          args.iters, args.runs, rank, delay, args.algorithm, args.protocol,
                          args.channels)
    try:
        if "WORLD_SIZE" in os.environ and args.nprocs is None:
            result = run_under_torchrun(spec)
            if result is None:  # not rank 0
                return 0
        else:
            result = measure_collective(spec, args.nprocs or _default_nprocs(backend),
                                        timeout_s=args.timeout)
    except LaunchError as exc:
        raise UserError(f"the measurement failed: {exc}") from None
    if args.record:
        from dynamiccl.profiler.records import write_jsonl

        write_jsonl([result.to_record()], args.record, append=True)
    out = result.to_json()
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"{spec.collective} of {format_size(spec.nbytes)} on {result.nranks} {backend} ranks "
          f"({out['config']}): {format_time_us(result.time_us)} (spread {result.spread_pct:.1f}% "
          f"over {spec.runs} runs), algbw {result.algbw_GBps:.3f} GB/s, busbw "
          f"{result.busbw_GBps:.3f} GB/s")
    s = result.straggler
    if s is None:
        return 0
    if s.rank is not None:
        print(f"straggler: rank {s.rank} is last in {100 * s.last_fraction:.0f}% of iterations, "
              f"late by {format_time_us(s.delay_us)} (p10 {format_time_us(s.delay_p10_us)}, "
              f"p90 {format_time_us(s.delay_p90_us)})")
    else:
        print(f"no persistent straggler (rank {s.candidate} was last most often, in "
              f"{100 * s.last_fraction:.0f}% of iterations, by {format_time_us(s.delay_us)})")
    return 0


def _default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _default_nprocs(backend: str) -> int:
    import torch

    return max(1, torch.cuda.device_count()) if backend == "nccl" else 2
