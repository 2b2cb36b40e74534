"""``dynamiccl explain``: which algorithm NCCL uses at which size, why, and what the best pick gains.

This answers the most common NCCL user question with one table (and optionally a plot): for every
power-of-two size from 8 B to 4 GiB, NCCL's own pick with its predicted and simulated time, next to
the best configuration the simulator finds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dynamiccl.cli.common import add_topology_args, collective_arg, topology_from_args
from dynamiccl.cli.main import UserError
from dynamiccl.nccl import Collective
from dynamiccl.scenario import Scenario
from dynamiccl.topology import Topology
from dynamiccl.units import format_size, format_time_us, parse_size

MIN_SIZE, MAX_SIZE = 8, 4 * 2**30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="sweep 8 B … 4 GiB: NCCL's pick, the best pick and the gain at every size",
        description="For every power-of-two size from 8 B to 4 GiB print NCCL's default choice "
        "(with NCCL's own predicted time and the simulated time), the best choice, and the gain.",
    )
    add_topology_args(p)
    p.add_argument("--collective", required=True, type=collective_arg,
                   help="allreduce, allgather, reducescatter, broadcast or reduce")
    p.add_argument("--deployable", action="store_true",
                   help="restrict the best pick to what a tuner plugin can make NCCL do")
    p.add_argument("--min-size", default=str(MIN_SIZE), help="smallest size (default 8B)")
    p.add_argument("--max-size", default="4GiB", help="largest size (default 4GiB)")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the sweep to FILE.png")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run_explain)


def sweep_sizes(lo: int, hi: int) -> list[int]:
    sizes, size = [], max(1, lo)
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def explain_rows(
    topology: Topology, collective: Collective, sizes: list[int], deployable: bool
) -> list[dict]:
    from dynamiccl.decisions import best, nccl_default

    rows = []
    for size in sizes:
        scenario = Scenario(topology, collective, size)
        default = nccl_default(scenario)
        top = best(scenario, deployable=deployable)
        rows.append({
            "size": size,
            "nccl_config": default.config.label(),
            "nccl_model_us": default.nccl_model_us,
            "nccl_time_us": default.time_us,
            "nccl_busbw_GBps": default.busbw_GBps,
            "best_config": top.config.label(),
            "best_time_us": top.time_us,
            "best_busbw_GBps": top.busbw_GBps,
            "best_algorithm": top.config.algorithm.name.lower(),
            "nccl_algorithm": default.config.algorithm.name.lower(),
            "gain": default.time_us / top.time_us,
        })
    return rows


def run_explain(args: argparse.Namespace) -> int:
    topology = topology_from_args(args)
    try:
        lo, hi = parse_size(args.min_size), parse_size(args.max_size)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if lo > hi:
        raise UserError(f"--min-size {args.min_size} is larger than --max-size {args.max_size}")
    rows = explain_rows(topology, args.collective, sweep_sizes(lo, hi), args.deployable)
    if args.plot:
        from dynamiccl.plots import plot_explain

        plot_explain(rows, args.plot, f"{args.collective.name.lower()} on {topology.describe()}")
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    _print_table(rows, f"{args.collective.name.lower()} on {topology.describe()}")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col, justify in (("size", "right"), ("NCCL picks", "left"), ("NCCL model", "right"),
                         ("simulated", "right"), ("best pick", "left"), ("best time", "right"),
                         ("gain", "right")):
        table.add_column(col, justify=justify)
    for r in rows:
        model = "n/a" if r["nccl_model_us"] is None else format_time_us(r["nccl_model_us"])
        gain = f"{r['gain']:.2f}x"
        table.add_row(format_size(r["size"]), r["nccl_config"], model,
                      format_time_us(r["nccl_time_us"]), r["best_config"],
                      format_time_us(r["best_time_us"]),
                      f"[bold green]{gain}[/]" if r["gain"] >= 1.05 else gain)
    Console(width=max(120, Console().width)).print(table)
