"""``dynamiccl simulate`` and ``dynamiccl topologies``: one collective on one system, and the presets.

The JSON output is a contract other tools parse (see the README): top-level times describe NCCL's
default configuration under the given knobs, ``nccl_default`` adds NCCL's own predicted time, and
``best`` is the fastest configuration under the same knobs.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from dynamiccl.cli.common import (
    add_topology_args,
    collective_arg,
    size_arg,
    topology_from_args,
)
from dynamiccl.cli.main import UserError
from dynamiccl.knobs import CHUNK_LEVELS, Hierarchy, Schedule, parse_enum
from dynamiccl.nccl import COLLECTIVE_TOKENS, MAX_CHANNELS, PROTOCOL_TOKENS, Algorithm, Protocol
from dynamiccl.scenario import Scenario
from dynamiccl.units import format_size, format_time_us, parse_duration_us

if TYPE_CHECKING:
    from dynamiccl.decisions import KnobConstraints

E = TypeVar("E", bound=enum.IntEnum)


def _enum_arg(enum_cls: type[E]) -> Callable[[str], E]:
    def parse(text: str) -> E:
        try:
            return enum_cls(parse_enum(enum_cls, text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = enum_cls.__name__.lower()
    return parse


def _choices(names: Iterable[str]) -> str:
    """``a, b or c``: the help text lists exactly the names the vocabulary has."""
    *head, last = names
    return f"{', '.join(head)} or {last}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="time one collective: NCCL's default pick, the best pick, or a given configuration",
        description="Simulate one collective. Knobs you give constrain the choice like NCCL_ALGO / "
        "NCCL_PROTO / channel limits do; with every knob given both picks are that configuration.",
    )
    add_topology_args(p)
    p.add_argument("--collective", required=True, type=collective_arg,
                   help=_choices(COLLECTIVE_TOKENS.values()))
    p.add_argument("--size", required=True, type=size_arg,
                   help="bytes as nccl-tests' size column (e.g. 100MB, 64KiB); for allgather and "
                   "reducescatter the whole gathered/scattered buffer")
    p.add_argument("--algo", type=_enum_arg(Algorithm),
                   help=_choices(a.name.lower() for a in Algorithm))
    p.add_argument("--proto", type=_enum_arg(Protocol), help=_choices(PROTOCOL_TOKENS.values()))
    p.add_argument("--channels", type=int, help=f"channels 1..{MAX_CHANNELS}")
    p.add_argument("--hierarchy", type=_enum_arg(Hierarchy), help="flat or hierarchical")
    p.add_argument("--schedule", type=_enum_arg(Schedule),
                   help="baseline or bw_aware (hierarchical ring only)")
    p.add_argument("--chunks", type=int, help=f"active chunks, one of {CHUNK_LEVELS}")
    p.add_argument("--straggler-rank", type=int, metavar="R", help="rank that arrives late")
    p.add_argument("--straggler-delay", default="0", metavar="DELAY",
                   help="how late the straggler arrives, e.g. 10ms or 250us")
    p.add_argument("--c2c", type=float, default=0.0,
                   help="compute-to-communication ratio of compute overlapping the collective")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_simulate)

    t = sub.add_parser("topologies", help="list the topology presets",
                       description="List the topology presets usable with --topology.")
    t.add_argument("--json", action="store_true", help="print the presets as JSON")
    t.set_defaults(func=run_topologies)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    topology = topology_from_args(args)
    try:
        delay = parse_duration_us(args.straggler_delay)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.straggler_rank is None and delay > 0:
        raise UserError("--straggler-delay needs --straggler-rank (which rank is late)")
    try:
        return Scenario(topology, args.collective, args.size, args.straggler_rank, delay, args.c2c)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def constraints_from_args(args: argparse.Namespace) -> KnobConstraints:
    from dynamiccl.decisions import KnobConstraints

    if args.channels is not None and not 1 <= args.channels <= MAX_CHANNELS:
        raise UserError(f"--channels must be between 1 and {MAX_CHANNELS}, got {args.channels}")
    if args.chunks is not None and args.chunks not in CHUNK_LEVELS:
        raise UserError(f"--chunks must be one of {CHUNK_LEVELS}, got {args.chunks}")
    return KnobConstraints(args.algo, args.proto, args.channels, args.hierarchy, args.schedule,
                           args.chunks)


def run_simulate(args: argparse.Namespace) -> int:
    from dynamiccl.decisions import best, nccl_default

    scenario = scenario_from_args(args)
    constraints = constraints_from_args(args)
    try:
        default = nccl_default(scenario, constraints)
        top = best(scenario, constraints)
    except ValueError as exc:
        raise UserError(f"invalid combination: {exc}") from None
    out = {
        "time_us": default.time_us,
        "time_after_straggler_us": default.time_after_straggler_us,
        "algbw_GBps": default.algbw_GBps,
        "busbw_GBps": default.busbw_GBps,
        "config": default.config.to_dict(),
        "nccl_default": {"config": default.config.to_dict(), "time_us": default.time_us,
                         "nccl_model_us": default.nccl_model_us},
        "best": {"config": top.config.to_dict(), "time_us": top.time_us},
    }
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    topo = scenario.topology
    print(f"{args.collective.name.lower()} of {format_size(args.size)} on {topo.describe()}")
    if scenario.has_straggler:
        print(f"straggler: rank {scenario.straggler_rank} arrives "
              f"{format_time_us(scenario.straggler_delay_us)} late")
    model = "n/a" if default.nccl_model_us is None else format_time_us(default.nccl_model_us)
    print(f"  NCCL default  {default.config.label():34s} {format_time_us(default.time_us):>10s}"
          f"  busbw {default.busbw_GBps:8.2f} GB/s  (NCCL's own model: {model})")
    print(f"  best          {top.config.label():34s} {format_time_us(top.time_us):>10s}"
          f"  busbw {top.busbw_GBps:8.2f} GB/s")
    print(f"  gain          {default.time_us / top.time_us:.2f}x")
    return 0


def run_topologies(args: argparse.Namespace) -> int:
    from dynamiccl.topology import load_topology, preset_names

    presets = [load_topology(name) for name in preset_names()]
    if args.json:
        json.dump({t.name: t.to_dict() for t in presets}, sys.stdout, indent=2)
        print()
        return 0
    for topo in presets:
        print(topo.describe())
    return 0
