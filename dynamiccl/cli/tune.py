"""``dynamiccl tune``: a system's measurements -> calibrated model -> gated policy file.

Give the topology and whatever was measured on it (nccl-tests logs of default and forced runs,
``dynamiccl profile collective --record`` files, NCCL TUNING logs beside them); tune fits the model
to them, decides per collective, system and size whether pinning ``NCCL_ALGO``/``NCCL_PROTO`` wins
(a measured pair decides where one exists, measured neighbouring sizes between them, the shipped
learned prior where those leave it open unless ``--no-prior``; elsewhere the gate needs the
predicted gain to clear the margin and the uncertainty), writes the policy file with
its evidence, and prints every decision. A collective measured nowhere is left to NCCL; logs of
other GPUs than the topology's are refused. ``--plan`` prints instead the nccl-tests command lines
(launches, in order) that would settle the most valuable open decisions; measure them, then run
tune again with the new logs.
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli.common import (
    UserError,
    add_gate_margin_arg,
    add_topology_args,
    path_arg,
    topology_from_args,
)

EPILOG = """examples:
  dynamiccl tune --topology dgx_h100 --plan --budget 40
  dynamiccl tune --topology dgx_h100 --measurements logs/ more/*.txt -o tuned.dccl
  dynamiccl tune --topology dgx_h100 --measurements logs/ --plan --budget 40
then: dynamiccl show tuned.dccl; dynamiccl evaluate --policy tuned.dccl"""

_COLLECTIVES = ("allreduce", "allgather", "reducescatter")
MAX_BUDGET = 100_000


def _records(paths: list[str] | None, topology) -> list:
    """Every measurement given (files or folders): the one place tune reads measurements. Files of
    a folder that hold no measurements are skipped with a note; measurements of another GPU than
    the topology's are refused."""
    from dynamiccl.profiler.formats.measurement_paths import load_paths
    from dynamiccl.profiler.formats.records import check_one_system_kind

    try:
        loaded = load_paths(paths or [])
        check_one_system_kind(loaded.records)
    except PermissionError as exc:
        raise UserError(f"{exc.filename}: permission denied; make it readable") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if loaded.skipped:
        shown = "; ".join(loaded.skipped[:3]) + ("; ..." if len(loaded.skipped) > 3 else "")
        print(f"note: skipped {len(loaded.skipped)} file(s) holding no measurements ({shown})",
              file=sys.stderr)
    _check_gpus(loaded.records, topology)
    return loaded.records


def _check_gpus(records: list, topology) -> None:
    """Refuses measurements whose log names a GPU of another architecture than the topology's:
    fitting an A100's times to an H100's model would tune the wrong system."""
    from dynamiccl.gpus import compute_capability, same_architecture
    from dynamiccl.topology import ARCHS

    arch = ARCHS[topology.gpu.arch]
    for rec in records:
        if rec.gpu and not same_architecture(rec.gpu, arch, max(ARCHS.values())):
            raise UserError(
                f"{rec.source}: measured on {rec.gpu} (sm{compute_capability(rec.gpu)}), but the "
                f"topology {topology.name} has {topology.gpu.arch} GPUs; give the topology of the "
                "system the logs come from")


def _scenarios(topology, collectives: list[str], shapes: set[tuple[int, int]]) -> list:
    from dynamiccl.agents.shipping.tune import DECISION_SIZES
    from dynamiccl.knobs import Collective, parse_enum
    from dynamiccl.scenario import Scenario

    systems = [topology]
    for nodes, nranks in sorted(shapes):
        if nranks % nodes == 0 and (nodes, nranks) != (topology.nodes, topology.nranks):
            systems.append(topology.resized(nodes=nodes, gpus_per_node=nranks // nodes))
    return [Scenario(system, Collective(parse_enum(Collective, c)), n)
            for system in systems for c in collectives for n in DECISION_SIZES]


def _report_rows(tuner, scenarios: list) -> list[dict]:
    """Every decision, consecutive sizes merged into one row where the outcome, the evidence,
    NCCL's pick (NCCL's cost model on the topology, as ``show`` and the evidence name it) and the
    best alternative keep their algorithm and protocol; the channel counts NCCL runs for either
    over the row are shown as a range (``ring/ll/1-24ch``)."""
    from dynamiccl.knobs import span_label, without_channels
    from dynamiccl.units import format_size

    rows: list[dict] = []
    for s in scenarios:
        d = tuner.decide(s)
        row = {"collective": s.collective.name.lower(), "nodes": s.topology.nodes,
               "ranks": s.topology.nranks, "from": s.nbytes, "to": s.nbytes,
               "nccl": [d.verdict.nccl], "ours": d.chosen.label(),
               "best_alternative": d.alternative.label(), "alternative": [d.verdict.proposed],
               "gain": round(d.verdict.gain, 4), "uncertainty": round(d.verdict.sigma, 4),
               "evidence": d.verdict.evidence}
        last = rows[-1] if rows else None
        same = last is not None and all(last[k] == row[k] for k in (
            "collective", "nodes", "ranks", "ours", "evidence", "best_alternative")) and \
            without_channels(last["nccl"][-1]) == without_channels(d.verdict.nccl) and \
            last["to"] * 2 == s.nbytes
        if same:
            last["to"] = s.nbytes
            last["gain"] = min(last["gain"], row["gain"]) if row["ours"] != "NCCL default" else \
                max(last["gain"], row["gain"])
            last["uncertainty"] = max(last["uncertainty"], row["uncertainty"])
            last["nccl"].append(d.verdict.nccl)
            last["alternative"].append(d.verdict.proposed)
        else:
            rows.append(row)
    for r in rows:
        r["sizes"] = f"{format_size(r['from'])}..{format_size(r['to'])}"
        r["nccl"] = span_label(r["nccl"])
        proposed = r.pop("alternative")
        if r["best_alternative"] != "NCCL default" and not r["best_alternative"].endswith("ch"):
            r["best_alternative"] = span_label(proposed)  # the channels NCCL runs the pair with
    return rows


def _print_report(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("collective", "nodes", "ranks", "sizes", "NCCL's pick", "ours", "best alternative",
                "gain", "uncertainty", "evidence"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["collective"], str(r["nodes"]), str(r["ranks"]), r["sizes"], r["nccl"],
                      r["ours"], r["best_alternative"], f"{100 * r['gain']:+.1f}%",
                      f"±{100 * r['uncertainty']:.1f}%", r["evidence"])
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    console.print(table)


def _run_plan(planned: list, record: str, emulate_hosts: bool = False) -> None:
    """Measures the plan on this machine's GPUs with the project's runner (``--plan --run``), one
    round of launches after another (:func:`~dynamiccl.agents.shipping.tune_plan.launch_order`: NCCL's
    default first, then each choice), so a choice's launches alternate with its default's and a
    drift over time hits both alike. Each round's records are appended as it finishes."""
    from dynamiccl.agents.shipping.tune_plan import launch_order
    from dynamiccl.profiler.formats.records import write_jsonl
    from dynamiccl.profiler.measure.emulation import EmulationError
    from dynamiccl.profiler.measure.runner import CollectiveSpec, inherited_steering, measure_many

    nranks = {m.nranks for m in planned}
    if len(nranks) != 1:
        raise UserError("--run measures one system shape at a time; narrow the plan with --nodes")
    if ignored := inherited_steering():
        print(f"note: ignoring {', '.join(ignored)} from the environment: each launch runs the "
              "choice the plan measures (NCCL's default runs NCCL alone)", file=sys.stderr)
    ranks = nranks.pop()
    rounds = launch_order(planned)
    total = 0
    for i, launches in enumerate(rounds, 1):
        specs = [CollectiveSpec(m.collective.name.lower(), m.nbytes, "nccl",
                                algorithm=_token(m.choice.algorithm),
                                protocol=_token(m.choice.protocol), channels=m.choice.channels)
                 for m in launches]
        try:
            results = measure_many(specs, ranks, emulate_hosts=emulate_hosts)
        except EmulationError as exc:  # the ranks do not fit the GPUs, or MPS is not running
            raise UserError(str(exc)) from None
        total += write_jsonl([r.to_record() for r in results], record, append=True)
        print(f"round {i}/{len(rounds)}: measured {len(results)} points", file=sys.stderr)
    print(f"measured {total} points into {record}; run tune again with --measurements {record}")


def _learned_prior():
    """The shipped learned prior as tune's prior (:mod:`dynamiccl.agents.shipping.tune_prior`)."""
    from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource

    try:
        return LearnedPriorSource()
    except ValueError as exc:  # the package's file is damaged
        raise UserError(f"{exc}; or run tune with --no-prior") from None


def _token(knob) -> str | None:
    return None if knob is None else knob.name.lower()


def _noise_note(tuner, scenarios: list) -> str:
    """How noisy NCCL's default is taken to be on each shape, per size band, and from what."""
    from dynamiccl.agents.shipping.tune_measurements import DEFAULT
    from dynamiccl.launch_noise import NOISE_BAND_EDGES, NOISE_BANDS

    parts = []
    for system in dict.fromkeys(s.topology for s in scenarios):
        sizes = [1, *NOISE_BAND_EDGES]
        bands = ", ".join(f"{name} {100 * tuner.noise.sigma(system, DEFAULT, n):.1f}% "
                          f"(one launch {100 * tuner.noise.of_mean(system, DEFAULT, 1, n):.1f}%)"
                          for name, n in zip(NOISE_BANDS, sizes, strict=True))
        repeated = any(n == system.nranks for n, _, _ in tuner.measurements.spreads)
        source = "from repeated launches" if repeated else "no repeated launch: the system's default"
        parts.append(f"{system.nranks} ranks: launch noise {bands} ({source})")
    return "; ".join(parts)


def _note_unmeasured(measurements, scenarios: list) -> None:
    """Says which collectives (and shapes) no measurement covers: tune leaves them to NCCL."""
    missing = sorted({(s.collective.name.lower(), s.topology.nranks) for s in scenarios
                      if not measurements.covers(s.collective, s.topology.nranks)})
    if missing:
        shown = ", ".join(f"{c} on {n} ranks" for c, n in missing)
        print(f"note: nothing measured for {shown}: tune leaves those calls to NCCL (measure them "
              "first: tune --plan)", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.shipping import tune, tune_plan

    if not 1 <= args.budget <= MAX_BUDGET:
        raise UserError(f"--budget {args.budget}: give 1..{MAX_BUDGET} measurements")
    output = _claim_output(args)
    topology = topology_from_args(args)
    records = _records(_measurement_paths(args), topology)
    measurements = tune.Measurements(records)
    model, note = (topology, "uncalibrated (--no-calibrate)") if args.no_calibrate else \
        tune.calibrated_topology(records, topology)
    tuner = tune.Tuner(model, measurements, margin=args.margin, calibrated=model is not topology,
                       prior=None if args.no_prior else _learned_prior())
    scenarios = _scenarios(topology, args.collective or list(_COLLECTIVES), measurements.shapes)
    print(f"{len(records)} measurements ({len(measurements)} usable points; "
          f"{_noise_note(tuner, scenarios)}); model: {note}; learned prior: "
          f"{'off (--no-prior)' if args.no_prior else 'on'}", file=sys.stderr)
    if records:
        _note_unmeasured(measurements, scenarios)
    if args.plan:
        planned = tune_plan.plan(tuner, scenarios, args.budget)
        if args.json:
            print(json.dumps([{"collective": m.collective.name.lower(), "ranks": m.nranks,
                               "choice": m.choice.label(), "nbytes": m.nbytes, "launch": m.launch,
                               "value": round(m.value, 5), "reason": m.reason} for m in planned],
                             indent=1))
        else:
            for line in tune_plan.command_lines(planned, topology.gpus_per_node):
                print(line)
        if args.run:
            _run_plan(planned, args.record, args.emulate_hosts)
        return 0
    rows = _report_rows(tuner, scenarios)
    if output is not None:
        _export(args, output, topology, tune.TunedPolicy(tuner),
                sorted({s.topology.nodes for s in scenarios}))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        _print_report(rows, f"tune: {topology.name}, deployable actions (NCCL_ALGO/NCCL_PROTO "
                            f"pairs, channel counts where measured), margin {100 * args.margin:g}%")
    return 0


def _measurement_paths(args: argparse.Namespace) -> list[str]:
    """Every --measurements path, flat (the flag takes several paths and may be repeated)."""
    return [path for group in args.measurements or [] for path in group]


def _claim_output(args: argparse.Namespace):
    """The -o policy file (and its evidence beside it), checked before any work: never an input
    (a measurement, also inside a --measurements folder, or the topology), and --force replaces a
    policy file only; with --plan --run, the --record file likewise."""
    from dynamiccl import policy_file as pf
    from dynamiccl.agents.shipping.export import EVIDENCE, evidence_path
    from dynamiccl.files import claim_output
    from dynamiccl.profiler.formats.records import RECORDS

    inputs = [*_measurement_paths(args), args.topology]
    if args.plan and args.run:
        claim_output(args.record, RECORDS, inputs=[args.topology], flag="--record")
    if not args.output or args.plan:
        return None
    out = claim_output(args.output, pf.KIND, inputs=inputs, force=args.force)
    claim_output(evidence_path(out), EVIDENCE, inputs=inputs, force=True, flag="-o")
    return out


def _export(args: argparse.Namespace, out, topology, policy, node_counts: list[int]) -> None:
    from dynamiccl import policy_file as pf
    from dynamiccl.agents.shipping.export import export_policy, rule_evidence, save_evidence
    from dynamiccl.knobs import Collective, parse_enum

    try:
        collectives = [Collective(parse_enum(Collective, c))
                       for c in (args.collective or _COLLECTIVES)]
        result = export_policy(policy, topology, policy_name="tune", node_counts=node_counts,
                               collectives=collectives, gate=None)
        pf.write(result.policy_file, out)
        save_evidence(out, rule_evidence(result))
    except OSError as exc:
        raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    overrides = sum(1 for c in result.cells if c.decision is not None)
    print(f"wrote {out}: {result.policy_file.n_rules} rules, {overrides} of {len(result.cells)} "
          f"evaluated calls override NCCL; inspect with `dynamiccl show {out}`", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune", help="measurements -> calibrated model -> gated policy (or a measurement plan)",
        description="Decide per collective, system and size whether pinning NCCL_ALGO/NCCL_PROTO "
                    "beats NCCL, from the system's measurements (a measured pair decides) and the "
                    "calibrated model (the gate needs the gain to clear the margin and the "
                    "uncertainty); write the policy file, or plan the next measurements.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_topology_args(parser)
    parser.add_argument("--measurements", action="append", nargs="+", type=path_arg,
                        metavar="PATH",
                        help="nccl-tests logs, measurement records or NCCL TUNING logs (files or "
                             "folders, several after one flag; repeatable)")
    parser.add_argument("--collective", action="append", choices=_COLLECTIVES + (
        "broadcast", "reduce"), help="only these collectives (default: allreduce, allgather, "
                                     "reducescatter)")
    add_gate_margin_arg(parser, "override only where the gain exceeds this and the uncertainty")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="use the topology as given (skip fitting it to the measurements)")
    parser.add_argument("--no-prior", action="store_true",
                        help="decide and plan without the shipped learned prior (which predicts, from "
                             "the measurements, how each pair compares with NCCL where it was not "
                             "measured)")
    parser.add_argument("-o", "--output", type=path_arg, metavar="FILE", help="write the tuned policy file")
    parser.add_argument("--force", action="store_true", help="replace an existing -o file")
    parser.add_argument("--plan", action="store_true",
                        help="print the nccl-tests launches (run them in the order printed) that "
                             "would settle the most valuable open decisions")
    parser.add_argument("--budget", type=int, default=64, metavar="N",
                        help="measurements the plan may use (default 64)")
    parser.add_argument("--run", action="store_true",
                        help="with --plan: measure the plan now on this machine's GPUs, in "
                             "interleaved launches (default, choice, default, choice...)")
    parser.add_argument("--emulate-hosts", action="store_true",
                        help="with --run: more ranks than GPUs, each its own host to NCCL (loopback "
                             "sockets; needs the CUDA MPS daemon); records say so")
    parser.add_argument("--record", default="tune_measurements.jsonl", type=path_arg, metavar="FILE",
                        help="where --run appends its measurements (default tune_measurements.jsonl)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=_run)
