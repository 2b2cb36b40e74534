"""``dynamiccl simulate`` and ``dynamiccl topologies``: one collective on one system, and the presets.

A request's flags, checks and JSON answer live in ``simulate_request.py``; ``--batch`` runs many
requests in one process (``simulate_batch.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from dynamiccl.cli.common import path_arg
from dynamiccl.cli.simulate_request import (
    MORE_KNOBS,
    NO_OP_NOTE,
    add_request_args,
    decide,
    gain,
    result_json,
    timing,
)
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.units import format_size, format_time_us

if TYPE_CHECKING:
    from dynamiccl.decisions import Decision


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="time one collective: NCCL's default pick, the best pick, or a given configuration",
        description="Simulate one collective. Knobs you give constrain the choice like NCCL_ALGO / "
        "NCCL_PROTO / channel limits do; with every knob given both picks are that configuration. "
        "--topology, --collective and --size are required unless --batch gives them.",
    )
    add_request_args(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--batch", type=path_arg, metavar="FILE|-",
                   help="JSON lines in (one request per line, keyed by the long flag names with _ "
                   "for -, e.g. {\"topology\": \"dgx_h100\", \"collective\": \"allreduce\", \"size\": "
                   "\"1MiB\"}), one --json result per line out, in order; flags given here are "
                   "defaults for every line; an invalid line gets {\"error\": ...}")
    p.set_defaults(func=run_simulate)

    t = sub.add_parser("topologies", help="list the topology presets",
                       description="List the topology presets usable with --topology.")
    t.add_argument("--json", action="store_true", help="print the presets as JSON")
    t.set_defaults(func=run_topologies)


def run_simulate(args: argparse.Namespace) -> int:
    if args.batch is not None:
        from dynamiccl.cli.simulate_batch import run_batch

        return run_batch(args)
    scenario, default, top = decide(args)
    if args.json:
        json.dump(result_json(args, scenario, default, top), sys.stdout, indent=2)
        print()
        return 0
    if default is None or top is None:
        print(f"{scenario.collective.name.lower()} of 0 B on {scenario.topology.describe()}: 0 µs; "
              f"{NO_OP_NOTE}")
        return 0
    _print_result(scenario, default, top, _pins(args))
    return 0


def _pins(args: argparse.Namespace) -> str:
    """The knobs the command line pins, as typed (``--algo ring --proto simple``)."""
    given = [(flag, getattr(args, flag)) for flag in ("algo", "proto", "channels", "hierarchy",
                                                     "schedule", "chunks", *(k.name for k in MORE_KNOBS))]
    return " ".join(f"--{flag.replace('_', '-')} {getattr(value, 'name', value)!s}".lower()
                    for flag, value in given if value is not None)


def _print_result(scenario: Scenario, default: Decision, top: Decision, pins: str = "") -> None:
    """One row per pick; with a straggler two, one per time (from the first and the last arrival).
    ``pins`` names the knobs given (``--algo ring``): both picks are then made under them, and the
    rows and a caption say so."""
    from rich.table import Table

    from dynamiccl.console import console as table_console

    late = scenario.has_straggler
    title = (f"{scenario.collective.name.lower()} of {scenario.nbytes} B ({format_size(scenario.nbytes)}) "
             f"on {scenario.topology.describe()}")
    notes = []
    if pins:
        notes.append(f"pinned ({pins}): NCCL's pick and the best pick are made under these knobs, as "
                     "NCCL_ALGO/NCCL_PROTO/channel limits constrain NCCL")
    if late:
        notes.append(f"rank {scenario.straggler_rank} arrives {format_time_us(scenario.straggler_delay_us)} "
                     "late: 'first arrival' is what the punctual ranks spend, 'last arrival' what "
                     "nccl-tests would time with punctual ranks")
    caption = "; ".join(notes) or None
    table = Table(title=title, caption=caption)
    table.add_column("pick", no_wrap=True)
    table.add_column("configuration", no_wrap=True)
    if late:
        table.add_column("timed from", no_wrap=True)
    for header in ("time (us)", "algbw (GB/s)", "busbw (GB/s)", "NCCL's own model (us)"):
        table.add_column(header, justify="right")
    model = "n/a" if default.nccl_model_us is None else f"{default.nccl_model_us:.2f}"
    pinned = ", pinned" if pins else ""
    for label, pick, predicted in ((f"NCCL default{pinned}", default, model), (f"best{pinned}", top, "")):
        t = timing(pick)
        rows = [("first arrival", "time_us", "algbw_with_wait_GBps", "busbw_with_wait_GBps"),
                ("last arrival", "time_after_straggler_us", "algbw_GBps", "busbw_GBps")]
        if not late:
            rows = [(None, "time_us", "algbw_GBps", "busbw_GBps")]
        for i, (since, *keys) in enumerate(rows):
            lead = [label, pick.config.label()] if i == 0 else ["", ""]
            table.add_row(*lead, *([since] if late else []), *(f"{t[k]:.2f}" for k in keys),
                          predicted if i == 0 else "")
    console = table_console()
    console.print(table)
    console.print(f"gain of the best pick over NCCL's: {gain(default, top):.2f}x")


def run_topologies(args: argparse.Namespace) -> int:
    from rich.table import Table

    from dynamiccl.console import console as table_console
    from dynamiccl.system.topology import load_topology, preset_names

    presets = [load_topology(name) for name in preset_names()]
    if args.json:
        json.dump({t.name: t.to_dict() for t in presets}, sys.stdout, indent=2)
        print()
        return 0
    table = Table(title="topology presets (--topology NAME)")
    for col, justify in (("name", "left"), ("ranks", "right"), ("nodes", "right"),
                         ("GPUs/node", "right"), ("GPU", "left"), ("tiers", "left")):
        table.add_column(col, justify=justify)
    for topo in presets:
        tiers = " × ".join(f"{t.size} {t.name} ({t.fabric}, {t.bandwidth_GBps:g} GB/s)" for t in topo.tiers)
        table.add_row(topo.name, str(topo.nranks), str(topo.nodes), str(topo.gpus_per_node),
                      topo.gpu.arch, tiers)
    table_console().print(table)
    return 0
