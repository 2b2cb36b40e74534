"""``dynamiccl profile topology`` and ``dynamiccl profile collective``: measure this system.

``profile collective --json`` is a contract other tools parse: the first five keys are
``time_us`` (median over runs, first arrival to completion), ``algbw_GBps``, ``busbw_GBps``
(nccl-tests factors, from the time after the last rank arrived), ``straggler_rank`` (or null) and
``straggler_delay_us``; context follows them, among it ``time_after_straggler_us`` and the
bandwidths of ``time_us`` (``algbw_with_wait_GBps``, ``busbw_with_wait_GBps``), so each time has
its own bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dynamiccl.cli.common import (
    UserError,
    collective_arg,
    int_between,
    path_arg,
    positive_float,
    positive_int,
    read_text,
    size_arg,
)
from dynamiccl.system.knobs import NCCL_KNOBS, parse_enum
from dynamiccl.system.nccl import MAX_CHANNELS, NCCL_ALGORITHMS, Algorithm, Collective, Protocol
from dynamiccl.system.topology import DEFAULT_NIC_PATH, MAX_RANKS, NIC_PATHS
from dynamiccl.system.units import SIZE_HELP, elements, format_size, format_time_us, parse_duration_us

if TYPE_CHECKING:
    from dynamiccl.profiler.measure.runner import CollectiveResult, CollectiveSpec

#: nccl-tests' default data type; the count column counts its elements.
ELEMENT_TYPE, ELEMENT_BYTES = "float", 4
#: Ranks started on this host: each is a process holding torch (a few hundred MB), and no single
#: host has more GPUs.
MAX_LOCAL_RANKS = 256
#: Iterations per run, runs, and warmup iterations; runs x iters is bounded too, since every rank
#: keeps the timing of each timed iteration and rank 0 gathers them all.
MAX_ITERS, MAX_RUNS, MAX_WARMUP = 100_000, 1_000, 100_000
MAX_TIMED_ITERATIONS = 100_000
#: The flags of NCCL's knobs, as messages name them together.
KNOB_FLAGS = "/".join(f"--{k.name.replace('_', '-')}" for k in NCCL_KNOBS)


def register(sub: argparse._SubParsersAction) -> None:
    from dynamiccl.cli.profile_job import register_job

    p = sub.add_parser("profile", help="measure this system: its GPU topology, one collective or a "
                                       "job's collectives",
                       description="Measure the local system (NVML topology discovery), time "
                       "one collective on N local ranks the way nccl-tests does, or run a job "
                       "with NCCL's profiler loaded and write its collective mix.")
    kinds = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    _register_topology(kinds)
    _register_collective(kinds)
    register_job(kinds)


def _register_topology(kinds: argparse._SubParsersAction) -> None:
    t = kinds.add_parser(
        "topology", help="write a topology YAML from the local GPUs (NVML)",
        description="Read the local GPUs through NVML and write a topology file in the simulator's "
        "schema. NVML sees one node; the tiers above it come from the flags below or defaults, and "
        "the file marks every value that was not measured.")
    t.add_argument("-o", "--output", type=path_arg, metavar="FILE",
                   help="write the YAML here (default: stdout)")
    t.add_argument("--force", action="store_true", help="replace existing --output / --record files")
    t.add_argument("--from", dest="recorded", type=path_arg, metavar="FILE",
                   help="use NVML answers recorded earlier (--record) instead of the driver")
    t.add_argument("--record", type=path_arg, metavar="FILE", help="also save the raw NVML answers to FILE")
    t.add_argument("--name", help="the topology's name (default: from the GPU model)")
    t.add_argument("--nodes", type=int_between(1, MAX_RANKS), default=1, metavar="N",
                   help=f"number of nodes, 1..{MAX_RANKS} (default 1)")
    t.add_argument("--network-bandwidth-GBps", type=positive_float, metavar="X",
                   help="per-NIC network bandwidth each way (default 50, a 400 Gb/s NIC)")
    t.add_argument("--network-latency-us", type=positive_float, metavar="Y",
                   help="network hop latency in µs (default 3)")
    t.add_argument("--nics-per-node", type=positive_int, metavar="K",
                   help="NICs per node (default: one per GPU)")
    t.add_argument("--intra-latency-us", type=positive_float, metavar="Z",
                   help="intra-node hop latency in µs (default: 0.6 NVLink, 1.0 PCIe)")
    t.add_argument("--emulate-hosts", type=int_between(1, MAX_LOCAL_RANKS), metavar="N",
                   help="write instead the system NCCL sees when N ranks run as emulated hosts on "
                        "these GPUs (profile collective --emulate-hosts): one GPU per node, nodes "
                        "joined by NCCL's Socket transport on the loopback")
    t.add_argument("--nic-path", type=str.upper, choices=NIC_PATHS, metavar="PATH",
                   help=f"how far each GPU's NIC is, as `nvidia-smi topo -m` prints it: "
                   f"{', '.join(NIC_PATHS)}; its NODE is PHB (default {DEFAULT_NIC_PATH}: on the "
                   "GPUs' PCIe switch; NCCL keeps LL128 off across nodes beyond PXB)")
    t.set_defaults(func=run_topology)


def _register_collective(kinds: argparse._SubParsersAction) -> None:
    c = kinds.add_parser(
        "collective", help="time one collective on N local ranks (nccl-tests style)",
        description="Time a collective on N local ranks: warmup, then RUNS runs of ITERS timed "
        "iterations; prints the median time, bus bandwidth and the persistent straggler, if any. "
        "Under torchrun (WORLD_SIZE set) it joins the job instead of starting ranks.")
    c.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="nccl (GPUs) or gloo (CPU); default: nccl when a GPU is visible")
    c.add_argument("--nprocs", type=int_between(1, MAX_LOCAL_RANKS), metavar="N",
                   help=f"ranks to start, 1..{MAX_LOCAL_RANKS} (default: GPUs, or 2)")
    c.add_argument("--collective", type=collective_arg, default=Collective.ALLREDUCE,
                   help="allreduce (default), allgather, reducescatter, broadcast or reduce")
    c.add_argument("--size", type=size_arg, default=2**20,
                   help=f"nccl-tests' size column (default 1M): {SIZE_HELP}")
    c.add_argument("--inject-straggler", type=_straggler_arg, metavar="RANK:DELAY",
                   help="make RANK sleep DELAY (e.g. 1:5ms) before every collective")
    c.add_argument("--warmup", type=int_between(0, MAX_WARMUP), default=10,
                   help=f"untimed iterations, 0..{MAX_WARMUP} (default 10)")
    c.add_argument("--iters", type=int_between(1, MAX_ITERS), default=100,
                   help=f"timed iterations per run, 1..{MAX_ITERS} (default 100)")
    c.add_argument("--runs", type=int_between(1, MAX_RUNS), default=5,
                   help=f"runs, 1..{MAX_RUNS}; the median is reported (default 5; runs x iters "
                        f"at most {MAX_TIMED_ITERATIONS})")
    c.add_argument("--algorithm", type=_nccl_name(Algorithm),
                   help="nccl only: force NCCL_ALGO (ring, tree, nvls, …)")
    c.add_argument("--protocol", type=_nccl_name(Protocol),
                   help="nccl only: force NCCL_PROTO (ll, ll128, simple)")
    c.add_argument("--channels", type=int_between(1, MAX_CHANNELS),
                   help="nccl only: pin NCCL_MIN/MAX_NCHANNELS")
    for k in NCCL_KNOBS[3:]:  # the knobs after the channel count: through the plugin, if no variable
        c.add_argument(f"--{k.name.replace('_', '-')}", type=_knob_arg(k), metavar="N",
                       help=f"nccl only: {k.title}, {k.lo}..{k.hi}, set through the tuner plugin's "
                            f"{k.nccl.via} (NCCL {k.nccl.nccl_since} and later): the calls run "
                            "pinned to it and are checked to have been (with --algorithm and "
                            "--protocol, one local launch, not under torchrun)")
    c.add_argument("--emulate-hosts", action="store_true",
                   help="nccl only: more ranks than GPUs, each rank its own host to NCCL (distinct "
                        "NCCL_HOSTID, Socket transport on the loopback, P2P/SHM/IB off; ranks share "
                        "the GPUs). Needs the CUDA MPS daemon; the record says the hosts were emulated")
    c.add_argument("--timeout", type=positive_float, default=300.0, metavar="S",
                   help="give up (and stop every rank) after S seconds (default 300)")
    c.add_argument("--record", type=path_arg, metavar="FILE.jsonl",
                   help="append the measurement record to FILE")
    c.add_argument("--plot", type=path_arg, metavar="FILE.png",
                   help="draw every rank's arrival time per iteration to FILE.png")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=run_collective)


def _knob_arg(knob):
    """An argparse type for a knob's value in its range (a size knob takes nccl-tests' sizes)."""
    def parse(text: str) -> int:
        value = size_arg(text) if knob.size else int_between(knob.lo, knob.hi)(text)
        if not knob.lo <= value <= knob.hi:
            raise argparse.ArgumentTypeError(f"must be {knob.lo}..{knob.hi}, got {value}")
        return value
    return parse


def _straggler_arg(text: str) -> tuple[int, float]:
    rank, sep, delay = text.partition(":")
    if not sep or not rank.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not RANK:DELAY; write e.g. 1:5ms (rank 1 sleeps 5 ms)")
    try:
        late = int(rank), parse_duration_us(delay)
    except ValueError as exc:  # the delay's own problem: no unit, negative, beyond an hour
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if late[1] == 0:
        raise argparse.ArgumentTypeError(f"{text!r} has no delay; write e.g. 1:5ms (rank 1 sleeps 5 ms)")
    return late


def _nccl_name(enum_cls: type[Algorithm] | type[Protocol]):
    """An algorithm or protocol NCCL knows (the simulator-only StragglAR is not one)."""

    def parse(text: str) -> str:
        try:
            value = parse_enum(enum_cls, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if enum_cls is Algorithm and value not in NCCL_ALGORITHMS:
            raise argparse.ArgumentTypeError(f"{value.name.lower()} exists only in the simulator; "
                                             "NCCL cannot run it")
        return value.name.lower()

    parse.__name__ = enum_cls.__name__.lower()
    return parse


def run_topology(args: argparse.Namespace) -> int:
    from dynamiccl.files import claim_output, distinct_outputs, write_text_atomic
    from dynamiccl.profiler.measure.discover import DISCOVERED, NetworkSpec, discover
    from dynamiccl.profiler.measure.nvml import RECORDING, NoDriverError, local_provider, save_snapshot

    inputs = [args.recorded] if args.recorded else []
    for flag, path, kind in (("-o", args.output, DISCOVERED), ("--record", args.record, RECORDING)):
        if path:
            claim_output(path, kind, inputs=inputs, force=args.force, flag=flag)
    distinct_outputs(("-o", args.output), ("--record", args.record))
    if args.recorded:
        read_text(args.recorded, "NVML recording")  # unreadable: one line, before anything else
    try:
        snapshot = local_provider(args.recorded).snapshot()
    except NoDriverError as exc:
        raise UserError(f"no NVIDIA driver found: {exc}, use --from FILE (NVML answers recorded "
                        "with --record on a GPU machine) or a preset (`dynamiccl topologies`)") from None
    except ValueError as exc:  # only a recording is parsed here; the driver path raises NoDriverError
        raise UserError(f"{args.recorded} is not an NVML recording written by --record: {exc}") from None
    if args.record:
        save_snapshot(snapshot, args.record)
    if args.emulate_hosts:
        text, topology = _emulated(snapshot, args.emulate_hosts, args.name)
    else:
        network = NetworkSpec(args.nodes, args.network_bandwidth_GBps, args.network_latency_us,
                              args.nics_per_node, args.intra_latency_us, args.nic_path)
        found = discover(snapshot, network, name=args.name)
        for warning in found.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        text, topology = found.yaml_text, found.topology
    if args.output:
        write_text_atomic(args.output, text)
        print(f"wrote {args.output}: {topology.describe()}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _emulated(snapshot, hosts: int, name: str | None):
    """The emulated-host system of ``snapshot``'s GPUs as YAML text (with where each value came
    from) and as a topology."""
    import yaml

    from dynamiccl.profiler.measure.emulation import LOOPBACK_GBPS, emulated_topology_dict
    from dynamiccl.system.topology import topology_from_dict

    oldest = min(snapshot.gpus, key=lambda g: g.compute_capability)
    sms = min((g.sms for g in snapshot.gpus if g.sms), default=None)
    data = emulated_topology_dict(hosts, oldest.compute_capability, sms)
    if name:
        data["name"] = name
    header = (f"# {hosts} emulated hosts on {len(snapshot.gpus)} x {oldest.name} (NVML on "
              f"{snapshot.hostname or 'this host'}): the system NCCL sees under --emulate-hosts.\n"
              f"# loopback bandwidth_GBps {LOOPBACK_GBPS:g}: measured on an H100, a starting point "
              "for calibration, NOT measured here" + ("" if sms else "; sms: default") + "\n")
    return header + yaml.safe_dump(data, sort_keys=False), topology_from_dict(data, source="emulated")


def _check_collective_args(args: argparse.Namespace, backend: str, nprocs: int) -> None:
    """Everything the ranks would otherwise fail on minutes later, said before they start."""
    if backend == "gloo" and any(getattr(args, k.name) is not None for k in NCCL_KNOBS):
        raise UserError(f"{KNOB_FLAGS} are NCCL knobs; use --backend nccl")
    if backend == "gloo" and args.emulate_hosts:
        raise UserError("--emulate-hosts makes NCCL ranks hosts of their own; use --backend nccl")
    if args.runs * args.iters > MAX_TIMED_ITERATIONS:
        raise UserError(f"--runs {args.runs} x --iters {args.iters} is {args.runs * args.iters} timed "
                        f"iterations, over the limit of {MAX_TIMED_ITERATIONS}; lower one of them")
    if args.inject_straggler and args.inject_straggler[0] >= nprocs:
        raise UserError(f"--inject-straggler rank {args.inject_straggler[0]} is outside "
                        f"0..{nprocs - 1} ({nprocs} ranks)")
    split = args.collective in (Collective.ALLGATHER, Collective.REDUCESCATTER)
    least = ELEMENT_BYTES * (nprocs if split else 1)
    if args.size < least:
        raise UserError(f"--size {args.size} is too small: {args.collective.name.lower()} of "
                        f"{ELEMENT_TYPE} on {nprocs} ranks needs at least {least} bytes")
    if backend == "gloo":
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if 2 * args.size * nprocs > memory:
            raise UserError(f"--size {args.size} on {nprocs} CPU ranks needs about "
                            f"{format_size(2 * args.size * nprocs)} of memory; this machine has "
                            f"{format_size(memory)}")
    if backend == "nccl":
        from dynamiccl.profiler.measure.emulation import EmulationError, check_placement, visible_gpus

        try:
            check_placement(nprocs, visible_gpus(), args.emulate_hosts)
        except EmulationError as exc:
            raise UserError(str(exc)) from None


def run_collective(args: argparse.Namespace) -> int:
    from dynamiccl.files import claim_output
    from dynamiccl.plots import claim_figure
    from dynamiccl.profiler.formats.records import RECORDS
    from dynamiccl.profiler.measure.emulation import EmulationError
    from dynamiccl.profiler.measure.launcher import LaunchError
    from dynamiccl.profiler.measure.runner import (
        CollectiveSpec,
        inherited_steering,
        run_under_torchrun,
    )

    plot = claim_figure(args.plot) if args.plot else None  # before torch loads: refused at once
    if args.record:
        claim_output(args.record, RECORDS, flag="--record")
    backend = args.backend or _default_backend()
    under_torchrun = "WORLD_SIZE" in os.environ and args.nprocs is None
    if under_torchrun and args.emulate_hosts:
        raise UserError("--emulate-hosts starts the ranks itself; run it without torchrun (or give "
                        "--nprocs)")
    nprocs = int(os.environ["WORLD_SIZE"]) if under_torchrun else args.nprocs or _default_nprocs(backend)
    _check_collective_args(args, backend, nprocs)
    unforceable = [f"--{k.name.replace('_', '-')}" for k in NCCL_KNOBS
                   if getattr(args, k.name) is not None and not k.nccl.env]
    if unforceable and (under_torchrun or args.algorithm is None or args.protocol is None):
        raise UserError(f"{', '.join(unforceable)} is set through the tuner plugin's pin, which names "
                        "an algorithm and a protocol and runs in a launch of its own: give "
                        "--algorithm and --protocol, and run it without torchrun")
    if backend == "nccl" and (ignored := inherited_steering()):
        print(f"note: ignoring {', '.join(ignored)} from the environment: the measurement runs what "
              f"{KNOB_FLAGS} say (none: NCCL's own choice)", file=sys.stderr)
    rank, delay = args.inject_straggler or (None, 0.0)
    spec = CollectiveSpec(args.collective.name.lower(), args.size, backend, args.warmup,
                          args.iters, args.runs, rank, delay,
                          **{k.name: getattr(args, k.name) for k in NCCL_KNOBS})
    try:
        if under_torchrun:
            result = run_under_torchrun(spec)
            if result is None:  # not rank 0
                return 0
        else:
            hosts = " (emulated hosts)" if args.emulate_hosts else ""
            with _stderr().status(f"measuring {spec.collective} of {spec.nbytes} B on {nprocs} "
                                  f"{backend} ranks{hosts}: {spec.warmup} warmup + {spec.runs} runs "
                                  f"× {spec.iters} iterations"):
                result = _measure(spec, nprocs, args.timeout, args.emulate_hosts)
    except EmulationError as exc:
        raise UserError(str(exc)) from None
    except LaunchError as exc:
        raise UserError(f"the measurement failed: {exc}") from None
    if args.record:
        from dynamiccl.profiler.formats.records import write_jsonl

        write_jsonl([result.to_record()], args.record, append=True)
    if plot is not None:
        plot = _plot(result, plot)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        print()
    else:
        _print_result(spec, result, backend)
    if plot is not None:
        print(f"plot written to {plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _measure(spec: CollectiveSpec, nprocs: int, timeout_s: float, emulate_hosts: bool
             ) -> CollectiveResult:
    """One launch measuring ``spec``: its knobs through NCCL's variables, or, where it names a knob
    no variable sets (a chunk size), pinned call by call through the plugin and checked to have
    been applied."""
    from dynamiccl.profiler.measure.interleave import measure_interleaved
    from dynamiccl.profiler.measure.runner import measure_collective

    if not spec.knobs.unforceable():
        return measure_collective(spec, nprocs, timeout_s=timeout_s, emulate_hosts=emulate_hosts)
    [result], [why_not] = measure_interleaved([spec], nprocs, timeout_s, emulate_hosts)
    if why_not is not None:
        raise UserError(f"{spec.config_label} was not measured: the plugin could not pin it ({why_not})")
    return result


def _plot(result: CollectiveResult, path: Path) -> Path:
    from dynamiccl.plots import figure_path, plot_arrivals

    if result.arrival_us is None:
        raise UserError("--plot needs the ranks on one host (their arrival clocks must agree)")
    s = result.straggler
    title = (f"{result.spec.collective} of {result.spec.nbytes} B on {result.nranks} "
             f"{result.spec.backend} ranks: arrival of each rank per iteration")
    return plot_arrivals(result.arrival_us, figure_path(path), title,
                         straggler=s.rank if s is not None else None)


def _print_result(spec: CollectiveSpec, result: CollectiveResult, backend: str) -> None:
    """nccl-tests' columns; with a straggler one row per time (first and last arrival)."""
    from rich.table import Table

    from dynamiccl.console import console as table_console

    s = result.straggler
    late = s is not None and s.rank is not None
    out = result.to_json()
    hosts = ", emulated hosts" if result.emulated_hosts else ""
    table = Table(title=f"{spec.collective} on {result.nranks} {backend} ranks ({out['config']}{hosts}), "
                        f"median of {spec.runs} runs (spread {result.spread_pct:.1f}%)")
    for col in ("size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        table.add_column(col, justify="right")
    if late:
        table.add_column("timed from", no_wrap=True)
    cells = [str(spec.nbytes), str(elements(spec.nbytes, ELEMENT_BYTES)), ELEMENT_TYPE]
    rows = [(result.time_us, result.algbw_GBps, result.busbw_GBps, None)]
    if late:
        rows = [(result.time_us, result.algbw_with_wait_GBps, result.busbw_with_wait_GBps,
                 "first arrival (with the wait)"),
                (result.time_after_straggler_us, result.algbw_GBps, result.busbw_GBps,
                 "the straggler's arrival")]
    for time_us, algbw, busbw, since in rows:
        table.add_row(*cells, f"{time_us:.2f}", f"{algbw:.3f}", f"{busbw:.3f}", *([since] if late else []))
    console = table_console()
    console.print(table)
    if s is None:
        return
    if late:
        console.print(f"straggler: rank {s.rank} is last in {100 * s.last_fraction:.0f}% of iterations, "
                      f"late by {format_time_us(s.delay_us)} (p10 {format_time_us(s.delay_p10_us)}, "
                      f"p90 {format_time_us(s.delay_p90_us)})")
    else:
        console.print(f"no persistent straggler (rank {s.candidate} was last most often, in "
                      f"{100 * s.last_fraction:.0f}% of iterations, by {format_time_us(s.delay_us)})")


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


def _default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _default_nprocs(backend: str) -> int:
    import torch

    return max(1, torch.cuda.device_count()) if backend == "nccl" else 2
