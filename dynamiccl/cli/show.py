"""``dynamiccl show policy.dccl``: what the plugin will make NCCL do, size by size.

A person must be able to check a policy before it steers a job, so the file is verified exactly as
the plugin verifies it (format, version, checksum) and its rules are printed as one table per
collective and system (nodes x ranks), a row per size range.
"""

from __future__ import annotations

import argparse


def _dim(v: int | None) -> str:
    return "any" if v is None else str(v)


def _human_range(lo: int, hi: int) -> str:
    """``64KiB - 1MiB`` with an exclusive upper end, as sizes are usually written."""
    from dynamiccl import policy_file as pf
    from dynamiccl.units import format_size

    if hi == pf.MAX_BYTES:
        return "any size" if lo == 0 else f"above {format_size(lo - 1)}"
    return f"{format_size(lo)} - {format_size(hi + 1)}"


def _title(rule, slice_name: str | None) -> str:
    from dynamiccl.nccl import COLLECTIVE_TOKENS

    parts = [COLLECTIVE_TOKENS[rule.collective], f"nodes {_dim(rule.nodes)}",
             f"ranks {_dim(rule.ranks)}"]
    if slice_name:
        parts.append(slice_name)
    return " | ".join(parts)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from dynamiccl import policy_file as pf
    from dynamiccl.knobs import parse_enum
    from dynamiccl.nccl import ALGORITHM_TOKENS, PROTOCOL_TOKENS, Collective

    policy = pf.read(args.file)
    h = policy.header
    console = Console(width=args.width or max(110, Console().width))
    console.print(f"[bold]{args.file}[/bold]: policy [bold]{h.policy}[/bold], format "
                  f"{pf.FORMAT_VERSION}, checksum OK, {policy.n_rules} rules")
    console.print(f"topology {h.topology} (fingerprint {h.fingerprint}, features {h.features}), "
                  f"NCCL {h.nccl}, created {h.created}, config {h.config_hash}")
    console.print(f"sha256 {pf.file_hash(args.file)} (the plugin logs it at init: every rank must "
                  "show the same)", soft_wrap=True)
    console.print(f"slices: {', '.join(s.name for s in policy.slices)}")
    want = parse_enum(Collective, args.collective) if args.collective else None
    for sl in policy.slices:
        if not args.all_slices and sl.key != pf.DEFAULT_CONTEXT:
            continue
        groups: dict[tuple, list[pf.Rule]] = {}
        for rule in sl.rules:
            if want is not None and rule.collective != want:
                continue
            if args.nodes is not None and rule.nodes not in (None, args.nodes):
                continue
            groups.setdefault(rule.group_key, []).append(rule)
        ordered = sorted(groups.values(), key=lambda g: (g[0].collective, g[0].nodes is None,
                                                          g[0].ranks is None, g[0].group_key))
        for rules in ordered:
            name = None if sl.key == pf.DEFAULT_CONTEXT else sl.name
            table = Table(title=_title(rules[0], name), title_justify="left")
            table.add_column("size [from, to)")
            table.add_column("bytes", overflow="fold")
            for col in ("algorithm", "protocol", "channels"):
                table.add_column(col)
            for rule in rules:
                d = rule.decision
                sizes = (_human_range(rule.min_bytes, rule.max_bytes),
                         f"{rule.min_bytes}-{rule.max_bytes}")
                if d is None:
                    table.add_row(*sizes, "[dim]defer", "", "")
                    continue
                table.add_row(*sizes, ALGORITHM_TOKENS[d.algorithm], PROTOCOL_TOKENS[d.protocol],
                              str(d.channels) if d.channels else "NCCL's")
            console.print(table)
    if not policy.n_rules:
        console.print("no rules: the plugin leaves every choice to NCCL")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "show", help="print a policy file as tables (what the plugin will do per size)",
        description="Verify a DynamICCL policy file the way the plugin does and print its "
                    "decisions: one table per collective and system, one row per size range.")
    parser.add_argument("file", help="policy file written by `dynamiccl export`")
    parser.add_argument("--collective", default=None, help="only this collective (e.g. allreduce)")
    parser.add_argument("--nodes", type=int, default=None, help="only rules for this node count")
    parser.add_argument("--all-slices", action="store_true",
                        help="also print the straggler/overlap context slices")
    parser.add_argument("--width", type=int, default=None,
                        help="table width (default: the terminal, at least 110)")
    parser.set_defaults(func=_run)
