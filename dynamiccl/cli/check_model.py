"""``dynamiccl check-model``: NCCL's own tuning table and picks, from a debug log, next to the model's.

Every "NCCL default" DynamICCL reports (explain's NCCL column, the baseline every gain is measured
against, the gate's reference) comes from its model of NCCL's cost model. NCCL prints that cost
model at init and, per call, what it picked, when run with ``NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,TUNING``; this command lays both beside the model's for the user's topology,
so a model that does not match NCCL on that system is seen before a decision is built on it.
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli.common import (
    UserError,
    add_topology_args,
    nccl_version_arg,
    path_arg,
    topology_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-model", help="compare NCCL's tuning table and picks in its debug log with the model's",
        description="Read rank 0's log of a run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING "
        "and print NCCL's latency/bandwidth table next to the NCCL-default model's for the same "
        "system, then every call where NCCL's pick (algorithm, protocol, channels) and the model's "
        "differ. Table bandwidths are NCCL's algorithm bandwidths (GB/s), latencies µs; an entry "
        "agrees within 10 % or at the precision NCCL prints (bandwidth: one decimal; latency: "
        "0.15 µs).")
    p.add_argument("log", type=path_arg, metavar="LOG",
                   help="the NCCL debug log (rank 0 prints the table)")
    add_topology_args(p)
    p.add_argument("--nccl-version", type=nccl_version_arg, metavar="X.Y.Z",
                   help="model this NCCL release (default: the one the log names, where modelled)")
    p.add_argument("--all-releases", action="store_true",
                   help="count the agreeing entries and picks under every modelled release whose "
                        "constants differ")
    p.add_argument("--json", action="store_true", help="print every entry and pick as JSON")
    p.set_defaults(func=run_check_model)


def run_check_model(args: argparse.Namespace) -> int:
    from dynamiccl.nccl_model import NcclModel
    from dynamiccl.profiler.formats.nccl_debug_log import (
        NcclDebugLogError,
        compare_picks,
        compare_tables,
        parse_debug_log_file,
    )

    if args.all_releases and args.nccl_version:
        raise UserError("--all-releases models every release and --nccl-version one; drop one of "
                        "them")
    topology = topology_from_args(args)
    try:
        log = parse_debug_log_file(args.log)
    except NcclDebugLogError as exc:
        raise UserError(str(exc)) from None
    if log.nranks is not None and log.nranks != topology.nranks:
        raise UserError(f"{args.log}: NCCL's communicator has {log.nranks} ranks, the topology "
                        f"{topology.nranks}; give --nodes and --gpus-per-node of the logged run")
    release, why = _release(args, log)
    model = NcclModel(topology, str(release.version))
    table = compare_tables(log.tables[0], model.tables.latency, model.tables.bandwidth) \
        if log.tables else None
    picks = compare_picks(log, model)
    if args.all_releases:
        return _per_release(args, log, topology)
    if args.json:
        json.dump({**_report(args.log, log, topology, table, picks),
                   "model_release": str(release.version)}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.log} (NCCL {log.nccl_version or 'version not logged'}) against the NCCL-default "
          f"model of NCCL {release.version} ({why}) on {topology.name} ({topology.nodes} nodes x "
          f"{topology.gpus_per_node} GPUs)")
    if table is None:
        print("table: the log holds no tuning table (rank 0 prints it at init with "
              "NCCL_DEBUG_SUBSYS=INIT,TUNING)")
    else:
        more = f"; the first of the log's {len(log.tables)} tables" if len(log.tables) > 1 else ""
        print(f"table: {table.matching} of {table.entries} entries agree; worst bandwidth factor "
              f"x{table.worst_bandwidth_ratio:.2f}, worst latency factor "
              f"x{table.worst_latency_ratio:.2f}{more}")
        _print(_entries_table(table))
    differ = [c for c in picks if not c.agrees]
    print(f"\npicks: {len(picks) - len(differ)} of {len(picks)} logged calls agree")
    if differ:
        _print(_picks_table(differ))
    return 0


def _release(args: argparse.Namespace, log):
    """The release the model reproduces here, and why: ``--nccl-version``, else the log's, else
    (not logged or not modelled) the default one."""
    from dynamiccl.nccl_model import releases
    from dynamiccl.system.nccl_versions import parse_version

    if args.nccl_version:
        try:
            return releases.release(args.nccl_version), "--nccl-version"
        except ValueError as exc:
            raise UserError(f"--nccl-version {args.nccl_version}: {exc}") from None
    logged = parse_version(log.nccl_version) if log.nccl_version else None
    if logged is None:
        return releases.DEFAULT, "the log names no release"
    try:
        return releases.release(logged), "the log's release"
    except ValueError:
        return releases.DEFAULT, (f"NCCL {logged} is not modelled ({releases.FIRST} to "
                                  f"{releases.LAST.major}.{releases.LAST.minor}.x): the newest")


def _per_release(args: argparse.Namespace, log, topology) -> int:
    """``--all-releases``: how many table entries and picks agree under each modelled release
    whose constants differ from the one before it."""
    from dynamiccl.nccl_model import NcclModel, releases
    from dynamiccl.profiler.formats.nccl_debug_log import compare_picks, compare_tables

    rows = []
    for release in releases.differing():
        model = NcclModel(topology, str(release.version))
        table = compare_tables(log.tables[0], model.tables.latency, model.tables.bandwidth) \
            if log.tables else None
        picks = compare_picks(log, model)
        rows.append({"release": str(release.version),
                     "table_agreeing": None if table is None else table.matching,
                     "table_entries": None if table is None else table.entries,
                     "picks_agreeing": sum(c.agrees for c in picks), "picks": len(picks)})
    if args.json:
        json.dump({"log": args.log, "nccl_version": log.nccl_version, "releases": rows},
                  sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.log} (NCCL {log.nccl_version or 'version not logged'}) against the model of each "
          f"NCCL release whose constants differ, on {topology.name}")
    for r in rows:
        table = "no table" if r["table_entries"] is None else \
            f"table {r['table_agreeing']}/{r['table_entries']}"
        print(f"  NCCL {r['release']:>7}: {table}, picks {r['picks_agreeing']}/{r['picks']}")
    return 0


def _report(path: str, log, topology, table, picks) -> dict:
    return {
        "log": path, "nccl_version": log.nccl_version, "topology": topology.name,
        "nodes": topology.nodes, "gpus_per_node": topology.gpus_per_node,
        "tables_in_log": len(log.tables),
        "table": None if table is None else {
            "entries": table.entries, "agreeing": table.matching,
            "worst_bandwidth_ratio": table.worst_bandwidth_ratio,
            "worst_latency_ratio": table.worst_latency_ratio,
            "rows": [r.to_json() for r in table.rows]},
        "picks": {"calls": len(picks), "agreeing": sum(c.agrees for c in picks),
                  "rows": [c.to_json() for c in picks]},
    }


def _print(table) -> None:
    from dynamiccl.console import console as table_console

    table_console().print(table)


def _entries_table(agreement):
    from rich.table import Table

    table = Table(box=None)
    for col in ("collective", "algorithm", "protocol", "NCCL µs", "NCCL GB/s", "model µs",
                "model GB/s", "differs"):
        table.add_column(col, justify="left" if col in ("collective", "algorithm", "protocol",
                                                         "differs") else "right")
    for r in agreement.rows:
        table.add_row(r.collective.name.lower(), r.algorithm.name.lower(), r.protocol.name.lower(),
                      f"{r.log_latency_us:g}", f"{r.log_bandwidth_GBps:g}",
                      f"{r.model_latency_us:.3g}", f"{r.model_bandwidth_GBps:.3g}", _difference(r))
    return table


def _difference(entry) -> str:
    """'' when the entry agrees; else what differs, as the model's value over NCCL's."""
    if entry.usable_in_one_only:
        return "usable by the model only" if entry.log_bandwidth_GBps <= 0 else "usable by NCCL only"
    parts = [] if entry.bandwidth_agrees else [f"bandwidth x{entry.bandwidth_ratio:.2f}"]
    if not entry.latency_agrees:
        parts.append(f"latency x{entry.latency_ratio:.2f}")
    return ", ".join(parts)


def _picks_table(comparisons):
    from rich.table import Table

    table = Table(box=None)
    for col in ("collective", "size", "NCCL's pick", "model's pick"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for c in comparisons:
        table.add_row(c.nccl.collective.name.lower(), str(c.nccl.nbytes), c.nccl.label(),
                      "nothing usable" if c.model is None else c.model_label())
    return table
