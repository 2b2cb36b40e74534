"""One ``dynamiccl simulate`` request: its flags, their checks, the decision and the JSON answer.

The command line and every ``--batch`` line are requests (``simulate.py``, ``simulate_batch.py``).
The JSON output is a contract other tools parse (see the README): ``input`` echoes the request with
every value resolved (keyed by the long flag names, so it can be fed back through ``--batch``);
top-level times describe NCCL's default configuration under the given knobs, ``nccl_default`` adds
NCCL's own predicted time, and ``best`` is the fastest configuration under the same knobs. With a
straggler, ``time_us`` counts from the first arrival (what the punctual ranks wait) and
``time_after_straggler_us`` from the last (what nccl-tests times with punctual ranks); each has its
own bandwidths (``*_with_wait_GBps`` and ``algbw_GBps``/``busbw_GBps``), so time and bandwidth agree.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from dynamiccl.cli.common import (
    UserError,
    add_topology_args,
    collective_arg,
    float_up_to,
    non_negative_int,
    size_arg,
    topology_from_args,
)
from dynamiccl.system.knobs import CHUNK_LEVELS, KNOBS, Hierarchy, Knob, Schedule, parse_enum
from dynamiccl.system.nccl import COLLECTIVE_TOKENS, MAX_CHANNELS, PROTOCOL_TOKENS, Algorithm, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology
from dynamiccl.system.units import SIZE_HELP, format_size, parse_duration_us

if TYPE_CHECKING:
    from dynamiccl.decisions import Decision, KnobConstraints

E = TypeVar("E", bound=enum.IntEnum)

#: The knobs with a flag of their own spelling below; every other knob of the table gets a flag of
#: its name (``--chunk-bytes``).
_SPELLED = ("algorithm", "protocol", "channels", "hierarchy", "schedule", "chunks")
MORE_KNOBS = tuple(k for k in KNOBS if k.name not in _SPELLED)
#: The flags that describe one request, in the order ``input`` echoes them.
REQUEST_FLAGS = ("topology", "nodes", "gpus_per_node", "collective", "size", "algo", "proto",
                 "channels", "hierarchy", "schedule", "chunks", *(k.name for k in MORE_KNOBS),
                 "straggler_rank", "straggler_delay", "c2c")


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


def _delay_arg(text: str) -> float:
    try:
        return parse_duration_us(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: Compute a thousand times longer than the collective already hides it completely; beyond that a
#: ratio only overflows the arithmetic.
MAX_C2C = 1000.0


def add_request_args(p: argparse.ArgumentParser) -> None:
    """The flags of one request; ``--batch`` lines are parsed by a parser holding exactly these."""
    add_topology_args(p, required=False)
    p.add_argument("--collective", type=collective_arg, help=_choices(COLLECTIVE_TOKENS.values()))
    p.add_argument("--size", type=size_arg,
                   help=f"nccl-tests' size column: {SIZE_HELP}; for allgather and reducescatter the "
                   "whole gathered/scattered buffer")
    p.add_argument("--algo", type=_enum_arg(Algorithm),
                   help=_choices(a.name.lower() for a in Algorithm))
    p.add_argument("--proto", type=_enum_arg(Protocol), help=_choices(PROTOCOL_TOKENS.values()))
    p.add_argument("--channels", type=int, help=f"channels 1..{MAX_CHANNELS}")
    p.add_argument("--hierarchy", type=_enum_arg(Hierarchy), help="flat or hierarchical")
    p.add_argument("--schedule", type=_enum_arg(Schedule),
                   help="baseline or bw_aware (hierarchical ring only)")
    p.add_argument("--chunks", type=int, help=f"active chunks, one of {CHUNK_LEVELS}")
    for k in MORE_KNOBS:
        p.add_argument(f"--{k.name.replace('_', '-')}", type=size_arg if k.size else int,
                       help=f"{k.title}, {_knob_range(k)} (default: NCCL's own)")
    p.add_argument("--straggler-rank", type=non_negative_int, metavar="R",
                   help="rank that arrives late (needs --straggler-delay)")
    p.add_argument("--straggler-delay", type=_delay_arg, default=0.0, metavar="DELAY",
                   help="how late the straggler arrives, e.g. 10ms or 250us (a bare number is µs)")
    p.add_argument("--c2c", type=float_up_to(MAX_C2C), default=0.0,
                   help=f"compute-to-communication ratio of compute overlapping the collective "
                   f"(0..{MAX_C2C:g})")


def _knob_range(knob: Knob) -> str:
    """A knob's range as its flag takes it: sizes in binary units with their bytes."""
    if knob.size:
        return f"{format_size(knob.lo)}..{format_size(knob.hi)} ({knob.lo}..{knob.hi} bytes)"
    return f"{knob.lo}..{knob.hi}"


def scenario_from_args(args: argparse.Namespace,
                       load: Callable[[argparse.Namespace], Topology] = topology_from_args) -> Scenario:
    missing = [f"--{name.replace('_', '-')}" for name in ("topology", "collective", "size")
               if getattr(args, name) is None]
    if missing:
        raise UserError(f"give {', '.join(missing)} (or --batch FILE with one request per line)")
    topology = load(args)
    delay = args.straggler_delay
    if args.straggler_rank is None and delay > 0:
        raise UserError("--straggler-delay needs --straggler-rank (which rank is late)")
    if args.straggler_rank is not None and delay == 0:
        raise UserError("--straggler-rank needs --straggler-delay (how late it is, e.g. 10ms)")
    if args.straggler_rank is not None and args.straggler_rank >= topology.nranks:
        raise UserError(f"--straggler-rank {args.straggler_rank} is outside 0..{topology.nranks - 1} "
                        f"({topology.nranks} ranks)")
    return Scenario(topology, args.collective, args.size, args.straggler_rank, delay, args.c2c)


def constraints_from_args(args: argparse.Namespace) -> KnobConstraints:
    from dynamiccl.decisions import KnobConstraints

    if args.channels is not None and not 1 <= args.channels <= MAX_CHANNELS:
        raise UserError(f"--channels must be between 1 and {MAX_CHANNELS}, got {args.channels}")
    if args.chunks is not None and args.chunks not in CHUNK_LEVELS:
        raise UserError(f"--chunks must be one of {CHUNK_LEVELS}, got {args.chunks}")
    for k in MORE_KNOBS:
        value = getattr(args, k.name)
        if value is not None and not k.lo <= value <= k.hi:
            got = f"{value} ({format_size(value)})" if k.size else str(value)
            raise UserError(f"--{k.name.replace('_', '-')} must be {_knob_range(k)}, got {got}")
    return KnobConstraints(args.algo, args.proto, args.channels, args.hierarchy, args.schedule,
                           args.chunks, **{k.name: getattr(args, k.name) for k in MORE_KNOBS})


def timing(decision: Decision) -> dict[str, Any]:
    """Both times of a decision with the bandwidths of each (nccl-tests factors)."""
    wait = decision.time_after_straggler_us / decision.time_us if decision.time_us > 0 else 1.0
    return {
        "time_us": decision.time_us,
        "algbw_with_wait_GBps": decision.algbw_GBps * wait,
        "busbw_with_wait_GBps": decision.busbw_GBps * wait,
        "time_after_straggler_us": decision.time_after_straggler_us,
        "algbw_GBps": decision.algbw_GBps,
        "busbw_GBps": decision.busbw_GBps,
    }


def _echo(args: argparse.Namespace, scenario: Scenario) -> dict[str, Any]:
    """The request as resolved: flag names as keys, values a ``--batch`` line would accept."""
    topo = scenario.topology

    def name(value: enum.IntEnum | None) -> str | None:
        return None if value is None else value.name.lower()

    return {"topology": args.topology, "nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node,
            "collective": name(scenario.collective), "size": scenario.nbytes,
            "algo": name(args.algo), "proto": name(args.proto), "channels": args.channels,
            "hierarchy": name(args.hierarchy), "schedule": name(args.schedule),
            "chunks": args.chunks, **{k.name: getattr(args, k.name) for k in MORE_KNOBS},
            "straggler_rank": scenario.straggler_rank,
            "straggler_delay": scenario.straggler_delay_us, "c2c": scenario.c2c}


def decide(args: argparse.Namespace,
           load: Callable[[argparse.Namespace], Topology] = topology_from_args
           ) -> tuple[Scenario, Decision | None, Decision | None]:
    """The scenario of one request, NCCL's pick and the best pick (None for a size-0 call, which
    is no collective at all); UserError for a bad request."""
    from dynamiccl.decisions import NcclCannotRun, best, nccl_default, why_impossible

    scenario = scenario_from_args(args, load)
    constraints = constraints_from_args(args)
    reason = why_impossible(scenario, constraints) if constraints.given() else None
    if reason:
        raise UserError(f"invalid combination: {reason}")
    if scenario.nbytes == 0:
        return scenario, None, None
    try:
        return scenario, nccl_default(scenario, constraints), best(scenario, constraints)
    except NcclCannotRun as exc:
        if not constraints.given():
            raise
        raise UserError(f"invalid combination: {exc}") from None


#: A size-0 call moves nothing: NCCL queues no task for a collective of count 0 (src/enqueue.cc,
#: taskAppend returns ncclSuccess first), and nccl-tests prints its size-0 rows at the ~1 µs its own
#: call takes. Simulated as no time and no choice of NCCL's.
NO_OP_NOTE = ("a size-0 call is a no-op: NCCL returns without running a collective (nccl-tests "
              "prints such rows at the ~1 µs its own call takes)")


def result_json(args: argparse.Namespace, scenario: Scenario, default: Decision | None,
                top: Decision | None) -> dict[str, Any]:
    """The ``--json`` object of one request (also each ``--batch`` line's answer); a size-0 call
    is a no-op (``no_op`` true, times 0, no configuration)."""
    if default is None or top is None:
        zero = {key: 0.0 for key in ("time_us", "algbw_with_wait_GBps", "busbw_with_wait_GBps",
                                     "time_after_straggler_us", "algbw_GBps", "busbw_GBps")}
        return {"input": _echo(args, scenario), "nranks": scenario.topology.nranks, **zero,
                "config": None, "nccl_default": None, "best": None, "gain": 1.0, "no_op": True,
                "note": NO_OP_NOTE}
    return {
        "input": _echo(args, scenario),
        "nranks": scenario.topology.nranks,
        **timing(default),
        "config": default.config.to_dict(),
        "nccl_default": {"config": default.config.to_dict(), **timing(default),
                         "nccl_model_us": default.nccl_model_us},
        "best": {"config": top.config.to_dict(), **timing(top)},
        "gain": gain(default, top),
    }


def gain(default: Decision, top: Decision) -> float:
    return default.time_us / top.time_us if top.time_us > 0 else 1.0
