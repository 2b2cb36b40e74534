"""``dynamiccl explain``: which algorithm NCCL uses at which size, why, and what the best pick gains.

This answers the most common NCCL user question with one table (and optionally a plot): for every
power-of-two size from 8 B to 4 GiB, NCCL's own pick with its predicted and simulated time, next to
the best configuration the simulator finds. Sizes are printed as nccl-tests prints them (bytes).
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli.common import (
    UserError,
    add_action_set_args,
    add_topology_args,
    collective_arg,
    path_arg,
    size_arg,
    topology_from_args,
)
from dynamiccl.system.knobs import NCCL_KNOBS
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology
from dynamiccl.system.units import SIZE_HELP

MIN_SIZE, MAX_SIZE = 8, 4 * 2**30


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="sweep 8 B … 4 GiB: NCCL's pick, the best pick and the gain at every size",
        description="For every power-of-two size from 8 B to 4 GiB print NCCL's default choice "
        "(with NCCL's own predicted time and the simulated time), the best choice, and the gain. "
        f"Sizes: {SIZE_HELP}.",
    )
    add_topology_args(p)
    p.add_argument("--collective", required=True, type=collective_arg,
                   help="allreduce, allgather, reducescatter, broadcast or reduce")
    add_action_set_args(p, "the best pick")
    p.add_argument("--min-size", type=size_arg, default=MIN_SIZE, help="smallest size (default 8)")
    p.add_argument("--max-size", type=size_arg, default=MAX_SIZE, help="largest size (default 4G)")
    p.add_argument("--plot", type=path_arg, metavar="FILE.png",
                   help="also draw the sweep to FILE.png (.png is added when missing)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as JSON (each names its action_set)")
    p.set_defaults(func=run_explain)


def sweep_sizes(lo: int, hi: int) -> list[int]:
    sizes, size = [], max(1, lo)
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def explain_row(topology: Topology, collective: Collective, size: int, deployable: bool) -> dict:
    from dynamiccl.agents.shipping.evaluate import action_set
    from dynamiccl.decisions import best, nccl_default, refined

    scenario = Scenario(topology, collective, size)
    default = nccl_default(scenario)
    top = best(scenario, deployable=deployable)
    chunked = refined(scenario, default.config)  # NCCL's pick with the knobs decided per choice
    return {
        "size": size,
        "action_set": action_set(deployable),
        "nccl_config": default.config.label(),
        "nccl_model_us": default.nccl_model_us,
        "nccl_time_us": default.time_us,
        "nccl_busbw_GBps": default.busbw_GBps,
        "best_config": top.config.label(),
        "best_time_us": top.time_us,
        "best_busbw_GBps": top.busbw_GBps,
        **{f"best_{k.name}": k.record(getattr(top.config, k.name)) for k in NCCL_KNOBS},
        **{f"nccl_{k.name}": k.record(getattr(default.config, k.name)) for k in NCCL_KNOBS},
        "gain": default.time_us / top.time_us,
        "refined_config": chunked.config.label(),
        "refined_time_us": chunked.time_us,
        "refined_gain": default.time_us / chunked.time_us,
    }


def explain_rows(topology: Topology, collective: Collective, sizes: list[int],
                 deployable: bool) -> list[dict]:
    """One row per size, with a progress bar on stderr (a cold sweep takes seconds)."""
    from rich.progress import Progress

    rows = []
    console = _stderr()
    with Progress(transient=True, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"simulating {len(sizes)} sizes", total=len(sizes))
        for size in sizes:
            rows.append(explain_row(topology, collective, size, deployable))
            progress.advance(task)
    return rows


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


def run_explain(args: argparse.Namespace) -> int:
    from dynamiccl.plots import claim_figure

    plot = claim_figure(args.plot, inputs=[args.topology]) if args.plot else None
    topology = topology_from_args(args)
    lo, hi = args.min_size, args.max_size
    if lo > hi:
        raise UserError(f"--min-size {lo} is larger than --max-size {hi}")
    if hi == 0:
        raise UserError("--max-size 0 leaves only size 0, a no-op call NCCL does not run; give a "
                        "--max-size of 1 byte or more")
    sizes = sweep_sizes(lo, hi)
    deployable = not args.all_actions
    rows = explain_rows(topology, args.collective, sizes, deployable)
    which = ("deployable configurations" if deployable
             else "all configurations, simulator-only ones included")
    title = f"{args.collective.name.lower()} on {topology.describe()}; best pick among {which}"
    if plot is not None:
        from dynamiccl.plots import plot_explain

        plot_explain(rows, plot, title)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        _print_table(rows, title)
    if plot is not None:
        print(f"plot written to {plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _print_table(rows: list[dict], title: str) -> None:
    from rich.table import Table

    from dynamiccl.console import console as table_console

    table = Table(title=title)
    for col, justify in (("size (B)", "right"), ("NCCL picks", "left"), ("NCCL model (us)", "right"),
                         ("simulated (us)", "right"), ("best pick", "left"), ("best (us)", "right"),
                         ("gain", "right"), ("NCCL's pick, chunk size decided", "left")):
        table.add_column(col, justify=justify)
    for r in rows:
        model = "n/a" if r["nccl_model_us"] is None else f"{r['nccl_model_us']:.2f}"
        gain = f"{r['gain']:.2f}x"
        refined = ("" if r["refined_config"] == r["nccl_config"]
                   else f"{r['refined_config']} {r['refined_gain']:.2f}x")
        table.add_row(str(r["size"]), r["nccl_config"], model, f"{r['nccl_time_us']:.2f}",
                      r["best_config"], f"{r['best_time_us']:.2f}",
                      f"[bold green]{gain}[/]" if r["gain"] >= 1.05 else gain, refined)
    table_console().print(table)
    print("last column: NCCL's own pick with the chunk size the simulator finds fastest (NCCL 2.30.3+ "
          "through the plugin's getChunkSize; blank: NCCL's own chunk is the fastest)")
