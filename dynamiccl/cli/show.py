"""``dynamiccl show policy.dccl``: what the plugin will make NCCL do, size by size.

A person must be able to check a policy before it steers a job, so the file is verified exactly as
the plugin verifies it (format, version, checksum) and its rules are printed as one table per
collective and system (nodes x ranks), a row per size range, with what NCCL would pick there, the
predicted gain, its uncertainty and the evidence behind it (model, calibrated model, learned prior,
extrapolated, interpolated, measured once, measured) as export or tune recorded them beside the file
(``<file>.evidence.json``). NCCL's pick is NCCL's cost
model on the exported topology, as the gate compared against; where it changes inside a rule (a
deferring rule over all sizes spans several), the rule is printed as one row per run of sizes with
the same pick.

``show FILE --json`` prints the rules as a JSON list, one object per rule with the keys of
:data:`JSON_KEYS` — a contract other tools rely on: ``nodes``/``ranks`` null = any, ``[min_bytes,
max_bytes)`` the call's size range as NCCL's tuner sees it (max exclusive), ``algorithm``/
``protocol`` null and ``defer`` true where NCCL decides, ``channels`` (and every later knob of
``dynamiccl.system.knobs.NCCL_KNOBS``) null = NCCL's own value. Where
evidence is known, ``nccl``, ``gain``, ``uncertainty`` and ``evidence`` are added (``nccl`` null
where NCCL's pick changes inside the rule), and ``nccl_by_size``: the rule's runs of sizes with
one NCCL pick each (``min_bytes``, ``max_bytes`` exclusive, ``nccl``).
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli.common import UserError, collective_arg, int_between, path_arg, positive_int
from dynamiccl.console import UNBOUNDED_WIDTH
from dynamiccl.plugin.policy_format import POLICY_SHA256_ENV
from dynamiccl.system.knobs import NCCL_KNOBS
from dynamiccl.system.nccl_versions import parse_window

#: The keys of every ``show --json`` object (a contract; tests hold it): the rule's dimensions,
#: one key per NCCL knob, ``defer``.
JSON_KEYS = ("collective", "nodes", "ranks", "min_bytes", "max_bytes", *(k.name for k in NCCL_KNOBS),
             "defer")


def keepable(version: int | None) -> tuple:
    """The knobs a decision may leave to NCCL that a file of ``version`` has a column for: a table
    column each, after the pair it names."""
    return tuple(k for k in NCCL_KNOBS if k.nccl.keepable
                 and (version is None or k.nccl.format_version <= version))


#: Narrower tables print one word per line.
MIN_WIDTH = 60
#: Rows printed as tables before the rest is summarised (a 10^6-rule file must not flood a terminal).
MAX_TABLE_ROWS = 400


def _dim(v: int | None) -> str:
    return "any" if v is None else str(v)


def _human_range(lo: int, hi: int) -> str:
    """``64KiB - 1MiB`` with an exclusive upper end, as sizes are usually written."""
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.system.units import format_size

    if hi == pf.MAX_BYTES:
        return "any size" if lo == 0 else f"above {format_size(lo - 1)}"
    return f"{format_size(lo)} - {format_size(hi + 1)}"


def _byte_range(lo: int, hi: int) -> str:
    """The bytes column: ``lo-hi`` inclusive, and no 20-digit sentinel for "no upper end"."""
    from dynamiccl.plugin import policy_file as pf
    if hi == pf.MAX_BYTES:
        return "any size" if lo == 0 else f"{lo} and up"
    return f"{lo}-{hi}"


def _title(rule, slice_name: str | None) -> str:
    from dynamiccl.system.nccl import COLLECTIVE_TOKENS

    parts = [COLLECTIVE_TOKENS[rule.collective], f"nodes {_dim(rule.nodes)}",
             f"ranks {_dim(rule.ranks)}"]
    if slice_name:
        parts.append(slice_name)
    return " | ".join(parts)


def rule_json(rule, evidence: list[dict] | None = None) -> dict:
    """One rule as the ``--json`` contract spells it, with its evidence rows (one per run of sizes
    with one NCCL pick) folded in: the rule answers for its least convincing override, or its most
    tempting rejected one (its gain, uncertainty and evidence together)."""
    from dynamiccl.agents.shipping.gate import clearance
    from dynamiccl.plugin import policy_file as pf

    d = rule.decision
    row = {"collective": pf.COLL_TOKENS[rule.collective], "nodes": rule.nodes, "ranks": rule.ranks,
           "min_bytes": rule.min_bytes, "max_bytes": rule.max_bytes + 1,
           **(pf.Decision() if d is None else d).record(), "defer": d is None}
    if evidence:
        worst = (min if d is not None else max)(
            evidence, key=lambda e: clearance(float(e["gain"]), float(e["uncertainty"])))
        picks = {e["nccl"] for e in evidence}
        row.update({"nccl": picks.pop() if len(picks) == 1 else None, "gain": worst["gain"],
                    "uncertainty": worst["uncertainty"],
                    "evidence": worst["evidence"],
                    "nccl_by_size": [{k: e[k] for k in ("min_bytes", "max_bytes", "nccl")}
                                     for e in evidence]})
    return row


def _evidence_index(path: str) -> tuple[dict[tuple, list[dict]], str]:
    """Evidence rows per (collective, nodes, ranks), in size order, and why there are none where
    an evidence file is there but cannot be used ("" otherwise)."""
    from dynamiccl.agents.shipping.export import read_evidence

    rows, problem = read_evidence(path)
    index: dict[tuple, list[dict]] = {}
    for r in rows or []:
        index.setdefault((r["collective"], r["nodes"], r["ranks"]), []).append(r)
    for group in index.values():
        group.sort(key=lambda r: r["min_bytes"])
    return index, problem


def _rule_evidence(index: dict[tuple, list[dict]], rule) -> list[dict]:
    """The evidence rows inside ``rule``'s size range."""
    from dynamiccl.plugin import policy_file as pf
    rows = index.get((pf.COLL_TOKENS[rule.collective], rule.nodes, rule.ranks), [])
    return [r for r in rows if rule.min_bytes <= r["min_bytes"] and r["max_bytes"] <= rule.max_bytes + 1]


def _selected(policy, args: argparse.Namespace) -> list[tuple[object, list]]:
    """(slice, rules) pairs after the --collective/--nodes/--all-slices filters."""
    from dynamiccl.plugin import policy_file as pf
    want = args.collective
    out = []
    for sl in policy.slices:
        if not args.all_slices and sl.key != pf.DEFAULT_CONTEXT:
            continue
        rules = [r for r in sl.rules if (want is None or r.collective == want)
                 and (args.nodes is None or r.nodes in (None, args.nodes))]
        out.append((sl, rules))
    return out


#: Channels NVIDIA's example tuner gives a call before it looks for a matching line, kept for a
#: line with channels -1 and for a call no line matches (NCCL's plugins/tuner/example/plugin.c,
#: ``pluginGetCollInfo``: ``*nChannels = 1`` first, overridden only by a line's own count).
EXAMPLE_TUNER_CHANNELS = 1


def csv_rule_json(rule) -> dict:
    """One example-tuner CSV line in the ``--json`` contract (its max_bytes is inclusive); its
    channels are what that tuner runs, so a line's -1 reads 1 (:data:`EXAMPLE_TUNER_CHANNELS`)."""
    from dynamiccl.plugin import policy_file as pf
    return {"collective": pf.COLL_TOKENS[rule.collective], "nodes": rule.nodes, "ranks": rule.ranks,
            "min_bytes": rule.min_bytes, "max_bytes": rule.max_bytes + 1,
            **pf.Decision(rule.algorithm, rule.protocol).record(),  # the knobs it cannot set: NCCL's
            "channels": EXAMPLE_TUNER_CHANNELS if rule.channels is None else rule.channels,
            "defer": False}


def _show_csv(args: argparse.Namespace) -> int:
    """The example tuner's CSV (what ``export --format nccl-example-csv`` writes): its lines in
    file order, since the example tuner applies the first line that matches a call."""
    from rich.table import Table

    from dynamiccl.console import console as table_console
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.nccl_csv import read_nccl_example_csv_file

    rules = read_nccl_example_csv_file(args.file)
    if not rules:
        raise UserError(f"{args.file}: neither a DynamICCL policy file nor NVIDIA example-tuner CSV "
                        "lines; give a file written by `dynamiccl export`")
    rows = [csv_rule_json(r) for r in rules]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    console = table_console(width=args.width)
    console.print(f"[bold]{args.file}[/bold]: NVIDIA example-tuner CSV, {len(rules)} rules; the "
                  "first line matching a call wins; a call no line matches keeps NCCL's algorithm "
                  f"and protocol but runs on {EXAMPLE_TUNER_CHANNELS} channel, as a line with "
                  "channels -1 does (the example tuner sets one channel before it looks: NCCL's "
                  "plugins/tuner/example/plugin.c)")
    table = Table(title_justify="left")
    for col in ("#", "collective", "nodes", "ranks", "size [from, to)", "algorithm", "protocol",
                "channels"):
        table.add_column(col)
    for i, row in enumerate(rows[:MAX_TABLE_ROWS], 1):
        table.add_row(str(i), row["collective"], _dim(row["nodes"]), _dim(row["ranks"]),
                      _human_range(row["min_bytes"], min(row["max_bytes"] - 1, pf.MAX_BYTES)),
                      row["algorithm"], row["protocol"], str(row["channels"]))
    console.print(table)
    if len(rows) > MAX_TABLE_ROWS:
        console.print(f"... {len(rows) - MAX_TABLE_ROWS} more rules not printed (read them all "
                      "with --json)")
    return 0


def _run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from dynamiccl.cli.policy_sniff import policy_file_kind
    from dynamiccl.console import console as table_console
    from dynamiccl.plugin import policy_file as pf

    if policy_file_kind(args.file) == "csv":
        return _show_csv(args)
    policy = pf.read(args.file)
    evidence, evidence_problem = _evidence_index(args.file)
    selected = _selected(policy, args)
    pins = any(r.decision is not None for _, rules in selected for r in rules)
    if args.nodes is not None and not pins:
        print(f"note: no rule of {args.file} pins anything for {args.nodes} node(s) (it was written "
              f"for {policy.header.topology}, pinning {policy.pinned_shapes()}): the plugin leaves "
              f"every call of a {args.nodes}-node communicator to NCCL", file=sys.stderr)
    if args.json:
        rows = []
        for sl, rules in selected:
            for rule in rules:
                row = rule_json(rule, _rule_evidence(evidence, rule) if sl.key == pf.DEFAULT_CONTEXT
                                else None)
                if args.all_slices:
                    row["slice"] = sl.name
                rows.append(row)
        print(json.dumps(rows, indent=1))
        return 0
    h = policy.header
    console = table_console(width=args.width)
    console.print(f"[bold]{args.file}[/bold]: policy [bold]{h.policy}[/bold], format "
                  f"{policy.version}, checksum OK, {policy.n_rules} rules")
    console.print(f"topology {h.topology} (fingerprint {h.fingerprint}, features {h.features}), "
                  f"created {h.created}, config {h.config_hash}")
    console.print(_nccl_line(h.nccl), soft_wrap=True)
    console.print(f"sha256 {pf.file_hash(args.file)} (the plugin logs it at init: every rank must "
                  f"show the same; with {POLICY_SHA256_ENV} set to it, a rank that reads another "
                  "file lets NCCL decide and says so at WARN)", soft_wrap=True)
    for line in deploy_lines(args.file):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(f"slices: {', '.join(s.name for s in policy.slices)}")
    console.print("defer: NCCL's built-in model decides (NCCL loads one tuner, so a network "
                  "plugin's own, such as aws-ofi-nccl's on EFA, is not used)", soft_wrap=True)
    for knob, since, via in policy.ignored_before():
        console.print(f"[yellow]{knob}: only NCCL {since} and later take it (the plugin sets it "
                      f"through {via}); the older NCCL releases of {h.nccl} ignore the column and "
                      "run NCCL's own[/yellow]")
    if evidence_problem:
        console.print(f"{evidence_problem}: NCCL's pick, gain and uncertainty are unknown; "
                      "export or tune the policy again to rewrite it")
    elif not evidence:
        console.print("no evidence file beside it (export and tune write <file>.evidence.json): "
                      "NCCL's pick, gain and uncertainty are unknown")
    shown = 0
    for sl, rules in selected:
        groups: dict[tuple, list[pf.Rule]] = {}
        for rule in rules:
            groups.setdefault(rule.group_key, []).append(rule)
        ordered = sorted(groups.values(), key=lambda g: (g[0].collective, g[0].nodes is None,
                                                          g[0].ranks is None, g[0].group_key))
        for group in ordered:
            if shown >= MAX_TABLE_ROWS:
                break
            name = None if sl.key == pf.DEFAULT_CONTEXT else sl.name
            table = Table(title=_title(group[0], name), title_justify="left")
            kept = keepable(policy.version)
            for col in ("size [from, to)", "bytes", "NCCL's pick", "ours", *(k.name for k in kept),
                        "predicted gain", "uncertainty", "evidence"):
                table.add_column(col, overflow="fold" if col == "bytes" else None)
            for rule in group[: MAX_TABLE_ROWS - shown]:
                for ev in (_rule_evidence(evidence, rule) if name is None else []) or [None]:
                    table.add_row(*_row(rule, ev, kept))
                shown += 1
            console.print(table)
    total = sum(len(rules) for _, rules in selected)
    if total > shown:
        console.print(f"... {total - shown} more rules not printed (narrow with --collective or "
                      "--nodes, or read them all with --json)")
    _note_model_only(console, selected, evidence)
    if not policy.n_rules:
        console.print("no rules: the plugin leaves every choice to NCCL")
    elif policy.pinned_shapes() == "none":
        console.print("every rule defers: the plugin leaves every choice to NCCL")
    return 0


def deploy_lines(path: str) -> list[str]:
    """How to load the file into a job on every rank (its absolute path: ranks start on other
    nodes; its hash, which a rank whose file differs defers on), how to verify it there, and that
    rolling back is running without it."""
    import shlex
    from pathlib import Path

    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.policy_format import POLICY_ENV
    from dynamiccl.system.nccl import TUNER_PLUGIN_ENV

    env = (f"{TUNER_PLUGIN_ENV}=$(dynamiccl plugin path) {POLICY_ENV}="
           f"{shlex.quote(str(Path(path).resolve()))} {POLICY_SHA256_ENV}={pf.file_hash(path)}")
    names = " ".join(f"-x {v}" for v in (TUNER_PLUGIN_ENV, POLICY_ENV, POLICY_SHA256_ENV))
    check = f"echo {shlex.quote(pf.file_hash(path) + '  ' + str(Path(path).resolve()))}"
    return [f"check every node first: {check} | srun --ntasks-per-node=1 sha256sum --check --quiet",
            f"deploy (Slurm): {env} srun --export=ALL ... <your job>",
            f"deploy (OpenMPI): the same variables, and mpirun {names} ... <your job>",
            f"verify: dynamiccl ab run --policy {shlex.quote(path)} -- <your job's command> "
            "(interleaved launches with and without it); roll back: launch without the variables"]


def _nccl_line(nccl: str) -> str:
    """The policy's NCCL version window, as the plugin reads it."""
    if parse_window(nccl) is None:
        return (f"NCCL {nccl}: no version window the plugin can read, so it lets NCCL decide every "
                "call; export the policy again")
    return (f"NCCL {nccl}: the plugin applies the policy under these NCCL versions only (under any "
            "other it lets NCCL decide and says so at WARN)")


def _note_model_only(console, selected: list, evidence: dict[tuple, list[dict]]) -> None:
    """Says how many overrides rest on the uncalibrated model alone (``export
    --allow-model-only``): by default the gate lets none through."""
    from dynamiccl.agents.shipping.gate import MODEL_ONLY
    from dynamiccl.system.calibration import MODEL_RATIO_ERROR

    alone = sum(1 for _, rules in selected for rule in rules if rule.decision is not None
                and any(MODEL_ONLY in str(e["evidence"]) for e in _rule_evidence(evidence, rule)))
    if alone:
        console.print(f"{alone} rule(s) override NCCL on the uncalibrated model's word alone "
                      "(exported with --allow-model-only): on real systems the model's ratios were "
                      f"off by {MODEL_RATIO_ERROR['rdma']:.2f} (RDMA) to {MODEL_RATIO_ERROR['tcp']:.2f} "
                      "(TCP) of log time on average; measure these calls (`dynamiccl tune --plan`) "
                      "before trusting them")


def _row(rule, ev: dict | None, kept: tuple) -> tuple[str, ...]:
    from dynamiccl.plugin import policy_file as pf
    d = rule.decision
    lo, hi = (rule.min_bytes, rule.max_bytes) if ev is None else (ev["min_bytes"], ev["max_bytes"] - 1)
    sizes = (_human_range(lo, hi), _byte_range(lo, hi))
    known = ("", "", "", "") if ev is None else (
        str(ev["nccl"]), f"{100 * float(ev['gain']):+.1f}%", f"±{100 * float(ev['uncertainty']):.1f}%",
        str(ev["evidence"]))
    nccl, gain, sigma, source = known
    if d is None:
        proposed = f" (proposed {ev.get('proposed')})" if ev and ev.get("proposed") not in (
            None, ev["nccl"]) else ""
        return (*sizes, nccl, f"[dim]defer{proposed}", *("" for _ in kept),
                gain if proposed else "", sigma if proposed else "", source)
    ours = f"{pf.ALGO_TOKENS[d.algorithm]}/{pf.PROTO_TOKENS[d.protocol]}"
    values = ("NCCL's" if getattr(d, k.name) is None else k.token(getattr(d, k.name)) for k in kept)
    return (*sizes, nccl, ours, *values, gain, sigma, source)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "show", help="print a policy file as tables (what the plugin will do per size)",
        description="Verify a DynamICCL policy file the way the plugin does and print its "
                    "decisions: one table per collective and system, one row per size range, with "
                    "NCCL's pick, the predicted gain, its uncertainty and the evidence.")
    parser.add_argument("file", type=path_arg,
                        help="policy file written by `dynamiccl export` (a .dccl, or NVIDIA's "
                             "example-tuner CSV from --format nccl-example-csv)")
    parser.add_argument("--collective", type=collective_arg, default=None,
                        help="only this collective (e.g. allreduce)")
    parser.add_argument("--nodes", type=positive_int, default=None, help="only rules for this node count")
    parser.add_argument("--all-slices", action="store_true",
                        help="also print the straggler/overlap context slices")
    parser.add_argument("--width", type=int_between(MIN_WIDTH, UNBOUNDED_WIDTH), default=None,
                        help=f"table width in columns, {MIN_WIDTH}..{UNBOUNDED_WIDTH} (default: the "
                             "terminal's; piped, the whole table)")
    parser.add_argument("--json", action="store_true",
                        help="print the rules as a JSON list (collective, nodes, ranks, min_bytes, "
                             f"max_bytes [exclusive], {', '.join(k.name for k in NCCL_KNOBS)}, defer)")
    parser.set_defaults(func=_run)
