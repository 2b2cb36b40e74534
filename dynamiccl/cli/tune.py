"""``dynamiccl tune``: a system's measurements -> calibrated model -> gated policy file.

Give the topology and whatever was measured on it (nccl-tests logs of default and forced runs,
``dynamiccl profile collective --record`` files, NCCL TUNING logs beside them); tune fits the model
to them, decides per collective, system and size whether pinning ``NCCL_ALGO``/``NCCL_PROTO`` wins
(a measured pair decides where one exists, measured neighbouring sizes between them, with
``--prior`` the shipped learned prior where those leave it open on a calibrated model; elsewhere
the gate needs the predicted gain to clear the margin and the uncertainty), writes the policy file with
its evidence, and prints every decision. A collective measured nowhere is left to NCCL; records the
topology could not have produced (another GPU, emulated hosts, more ranks per node than its nodes
have GPUs) are refused, and so is tuning from no usable measurement (``--no-measurements`` writes a
policy that leaves every call to NCCL instead). ``--plan`` prints instead the nccl-tests command lines
(launches, in order) that would settle the most valuable open decisions; measure them, then run
tune again with the new logs.
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli import tune_launches
from dynamiccl.cli.common import (
    UserError,
    add_gate_margin_arg,
    add_topology_args,
    check_output_format,
    nccl_version_arg,
    path_arg,
    topology_from_args,
)

EPILOG = """examples:
  dynamiccl tune --topology dgx_h100 --plan --budget 40
  dynamiccl tune --topology dgx_h100 --measurements logs/ --workload prof/job.jsonl --plan
  dynamiccl tune --topology dgx_h100 --measurements logs/ more/*.txt -o tuned.dccl
  dynamiccl tune --topology dgx_h100 --measurements logs/ --plan --budget 40
then: dynamiccl show tuned.dccl; dynamiccl evaluate --policy tuned.dccl"""

_COLLECTIVES = ("allreduce", "allgather", "reducescatter")
DEFAULT_RECORD = "tune_measurements.jsonl"


def _records(paths: list[str] | None, topology, nccl_version=None) -> tuple[list, list[str]]:
    """Every measurement given (files or folders), each file once: the one place tune reads
    measurements, and the notes to print if tune goes on. Files of a folder that hold no
    measurements are skipped (a note says which); records the topology could not have produced
    (another GPU, emulated hosts, more ranks per node than it has: ``profiler.formats.system_fit``)
    are refused, and so are logs that do not say whether NCCL was forced and measurements of
    several NCCL releases (unless ``nccl_version`` picks one: :mod:`~dynamiccl.profiler.formats.
    provenance`)."""
    from dynamiccl.profiler.formats import provenance
    from dynamiccl.profiler.formats.measurement_paths import load_paths
    from dynamiccl.profiler.formats.system_fit import check_fits

    try:
        loaded = load_paths(paths or [])
    except PermissionError as exc:
        raise UserError(f"{exc.filename}: permission denied; make it readable") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    records = loaded.records
    unlabelled = provenance.unlabelled_files(records)
    if unlabelled:
        raise UserError(provenance.unlabelled_message(unlabelled, provenance.steered_files(records)))
    by_version = provenance.versions(records)
    if nccl_version is not None:
        if not by_version:
            raise UserError(f"--nccl-version {nccl_version}: no measurement states its NCCL release, "
                            "so there is none to pick; drop --nccl-version (a log states it where "
                            "NCCL_DEBUG=INFO was set, a sidecar in its nccl_version)")
        if nccl_version not in by_version:
            raise UserError(f"--nccl-version {nccl_version}: no measurement states that release "
                            f"(they state: {', '.join(map(str, by_version))}); give one of those")
        records = provenance.of_version(records, nccl_version)
    elif len(by_version) > 1:
        raise UserError(provenance.mixed_versions_message(by_version))
    try:
        check_fits(records, topology)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    notes = list(loaded.warnings)
    for what, files in (("skipped {} file(s) holding no measurements", loaded.skipped),
                        ("read {} file(s) given again once", loaded.repeated)):
        if files:
            shown = "; ".join(files[:3]) + ("; ..." if len(files) > 3 else "")
            notes.append(f"{what.format(len(files))} ({shown})")
    unversioned = provenance.unversioned_files(records)
    if by_version and unversioned:
        notes.append(f"{len(unversioned)} file(s) do not state their NCCL release "
                     f"({provenance.listed(unversioned)}); taken as the others' "
                     f"({', '.join(map(str, by_version))})")
    return records, notes


def _check_flags(args: argparse.Namespace) -> None:
    """Flags that do nothing in the mode asked for are refused, not ignored."""
    if args.plan and args.output:
        raise UserError("--plan prints the launches to measure and writes no policy; drop -o (or "
                        "drop --plan to write the policy)")
    needs = (("--run", args.run, args.plan, "--plan"),
             ("--budget", args.budget is not None, args.plan, "--plan"),
             ("--launcher", args.launcher is not None, args.plan, "--plan"),
             ("--script", args.script is not None, args.plan, "--plan"),
             ("--logs", args.logs != "logs", args.plan, "--plan"),
             ("--format", args.format != "dccl", args.output and not args.plan, "-o"),
             ("--emulate-hosts", args.emulate_hosts, args.run, "--plan --run"),
             ("--record", args.record is not None, args.run, "--plan --run"))
    for flag, given, mode, what in needs:
        if given and not mode:
            raise UserError(f"{flag} only applies with {what}; add it or drop {flag}")
    if args.run and args.launcher not in (None, "local"):
        raise UserError(f"--run measures the plan now on this machine's GPUs, not through "
                        f"{args.launcher}; drop --launcher {args.launcher} (or --run, to print the "
                        "launches for it)")
    if args.no_measurements and args.measurements:
        raise UserError("--no-measurements says there are none, but --measurements gives some; "
                        "drop one of them")


def _refuse_without_evidence(args: argparse.Namespace, records: list, usable: int,
                             notes: list[str]) -> None:
    """A policy (or a table of decisions) from no usable measurement is refused unless
    ``--no-measurements`` asks for one that leaves every call to NCCL."""
    if usable or args.plan or args.no_measurements:
        return
    given = _measurement_paths(args)
    read = (f"{len(records)} measurement(s) read, none of NCCL's default or a pinned choice "
            "without an injected straggler" if records else "; ".join(notes) if notes else
            f"{', '.join(given)} hold{'s' if len(given) == 1 else ''} no timed measurement" if given
            else "no measurements given")
    raise UserError(f"no usable measurement ({read}), so nothing to tune from; measure first "
                    f"(`dynamiccl tune --topology {args.topology} --plan` prints what), or pass "
                    "--no-measurements to write a policy that leaves every call to NCCL")


def _scenarios(topology, collectives: list[str], shapes: set[tuple[int, int]]) -> list:
    from dynamiccl.agents.shipping.tune import DECISION_SIZES
    from dynamiccl.system.knobs import Collective, parse_enum
    from dynamiccl.system.scenario import Scenario

    systems = [topology]
    for nodes, nranks in sorted(shapes):
        if nranks % nodes == 0 and (nodes, nranks) != (topology.nodes, topology.nranks):
            systems.append(topology.resized(nodes=nodes, gpus_per_node=nranks // nodes))
    return [Scenario(system, Collective(parse_enum(Collective, c)), n)
            for system in systems for c in collectives for n in DECISION_SIZES]


def _report_rows(tuner, scenarios: list) -> list[dict]:
    """Every decision, consecutive sizes merged into one row where the decision and NCCL's pick
    (NCCL's cost model on the topology, as ``show`` and the evidence name it) keep their algorithm
    and protocol; the channel counts NCCL runs either with over the row are shown as a range
    (``ring/ll/1-24ch``). A row shows one size's gain, uncertainty and evidence, as ``show`` does:
    an override's least convincing, a defer's most tempting alternative."""
    from dynamiccl.agents.shipping.gate import clearance
    from dynamiccl.system.knobs import span_label, without_channels
    from dynamiccl.system.units import format_size

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
            "collective", "nodes", "ranks", "ours")) and \
            without_channels(last["nccl"][-1]) == without_channels(d.verdict.nccl) and \
            last["to"] * 2 == s.nbytes
        if same:
            last["to"] = s.nbytes
            last["nccl"].append(d.verdict.nccl)
            shown = (min if row["ours"] != "NCCL default" else max)(
                (last, row), key=lambda r: clearance(r["gain"], r["uncertainty"]))
            if shown is row:
                last.update({k: row[k] for k in ("best_alternative", "gain", "uncertainty",
                                                  "evidence")}, alternative=[])
            if last["best_alternative"] == row["best_alternative"]:
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
    weighed = bool(rows) and "job_share" in rows[0]
    for col in ("collective", "nodes", "ranks", "sizes", "NCCL's pick", "ours", "best alternative",
                "gain", "uncertainty", "evidence", *(["job's time"] if weighed else [])):
        table.add_column(col)
    for r in rows:
        table.add_row(r["collective"], str(r["nodes"]), str(r["ranks"]), r["sizes"], r["nccl"],
                      r["ours"], r["best_alternative"], f"{100 * r['gain']:+.1f}%",
                      f"±{100 * r['uncertainty']:.1f}%", r["evidence"],
                      *([f"{100 * r['job_share']:.1f}%"] if weighed else []))
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    console.print(table)


def _run_plan(planned: list, record: str, emulate_hosts: bool = False, backend: str = "nccl") -> None:
    """Measures the plan on this machine's GPUs with the project's runner (``--plan --run``), one
    round of launches after another (:func:`~dynamiccl.agents.shipping.tune_plan.launch_order`:
    round k holds every k-th launch), each round as the sweep measures
    (:func:`~dynamiccl.profiler.measure.interleave.measure_choices`: NCCL's default and every
    choice the plugin can pin interleaved call by call in one launch, the others each in a launch
    of its own, the order alternating from round to round), so every choice's launches sit beside
    its default's. Each round's records are appended as it finishes. ``backend`` gloo rehearses
    the same rounds on the CPU."""
    from dynamiccl.agents.shipping.tune_plan import launch_order
    from dynamiccl.profiler.formats.records import write_jsonl
    from dynamiccl.profiler.measure.emulation import EmulationError
    from dynamiccl.profiler.measure.interleave import measure_choices
    from dynamiccl.profiler.measure.runner import CollectiveSpec, inherited_steering

    nranks = {m.nranks for m in planned}
    if len(nranks) != 1:
        raise UserError("--run measures one system shape at a time; narrow the plan with --nodes")
    if ignored := inherited_steering():
        print(f"note: ignoring {', '.join(ignored)} from the environment: each launch runs the "
              "choice the plan measures (NCCL's default runs NCCL alone)", file=sys.stderr)
    ranks = nranks.pop()
    rounds = [[CollectiveSpec(m.collective.name.lower(), m.nbytes, backend, **m.choice.record())
               for m in launches] for launches in launch_order(planned)]
    written = [0]

    def append(results: list) -> None:
        written[0] += write_jsonl([r.to_record() for r in results], record, append=True)
        print(f"round done: {len(results)} points appended to {record}", file=sys.stderr)

    try:
        sweep = measure_choices(rounds, ranks, emulate_hosts=emulate_hosts, round_done=append,
                                progress=lambda line: print(line, file=sys.stderr))
    except EmulationError as exc:  # the ranks do not fit the GPUs, or MPS is not running
        raise UserError(str(exc)) from None
    for label, why in sweep.not_measured.items():
        print(f"note: {label} was not measured: the plugin could not pin it ({why}) and no NCCL "
              "variable sets it", file=sys.stderr)
    print(f"measured {written[0]} points in {len(sweep.launches)} launches into {record}; run tune "
          f"again with --measurements {record}")


def _learned_prior():
    """The shipped learned prior as tune's prior (:mod:`dynamiccl.agents.shipping.tune_prior`)."""
    from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource

    try:
        return LearnedPriorSource()
    except ValueError as exc:  # the package's file is damaged
        raise UserError(f"{exc}; or run tune without --prior") from None


def _noise_note(tuner, scenarios: list) -> str:
    """How noisy NCCL's default is taken to be on each shape, per size band, and from what."""
    from dynamiccl.agents.shipping.tune_measurements import DEFAULT, MIN_TAIL_DEVIATIONS
    from dynamiccl.system.launch_noise import NOISE_BAND_EDGES, NOISE_BANDS

    parts = []
    for system in dict.fromkeys(s.topology for s in scenarios):
        sizes = [1, *NOISE_BAND_EDGES]
        bands = ", ".join(f"{name} {100 * tuner.noise.sigma(system, DEFAULT, n):.1f}% "
                          f"(one launch {100 * tuner.noise.of_mean(system, DEFAULT, 1, n):.1f}%)"
                          for name, n in zip(NOISE_BANDS, sizes, strict=True))
        repeated = any(n == system.nranks for n, _, _ in tuner.measurements.spreads)
        matched = any(len(tuner.noise.matched(system, band).deviations) >= MIN_TAIL_DEVIATIONS
                      for band in range(len(NOISE_BANDS)))
        source = "from repeated launches" if repeated else (
            "no repeated launch: NCCL's default against the forced runs closest to it" if matched
            else "no repeated launch: the system's default")
        parts.append(f"{system.nranks} ranks: launch noise {bands} ({source})")
    return "; ".join(parts)


def _note_unmeasured(measurements, scenarios: list, plan: bool) -> None:
    """Says which collectives (and shapes) no measurement covers: tune leaves them to NCCL."""
    missing = sorted({(s.collective.name.lower(), s.topology.nranks) for s in scenarios
                      if not measurements.covers(s.collective, s.topology.nranks)})
    if missing:
        shown = ", ".join(f"{c} on {n} ranks" for c, n in missing)
        fix = "until they are measured" if plan else "(measure them first: tune --plan)"
        print(f"note: nothing measured for {shown}: tune leaves those calls to NCCL {fix}",
              file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.shipping import tune, tune_plan

    _check_flags(args)
    budget = args.budget or tune_launches.Budget(measurements=tune_launches.DEFAULT_BUDGET)
    output = _claim_output(args)
    topology = topology_from_args(args)
    records, notes = _records(_measurement_paths(args), topology, args.nccl_version)
    measurements = tune.Measurements(records)
    _refuse_without_evidence(args, records, len(measurements), notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not len(measurements) and not args.plan:
        _defer_everywhere(args, output, topology)
        return 0
    model, note = (topology, "uncalibrated (--no-calibrate)") if args.no_calibrate else \
        tune.calibrated_topology(records, topology)
    tuner = tune.Tuner(model, measurements, margin=args.margin, calibrated=model is not topology,
                       prior=_learned_prior() if args.prior else None)
    workload = _workload(args.workload, topology)
    scenarios = _scenarios(topology, args.collective or _workload_collectives(workload),
                           measurements.shapes | (workload.shapes if workload else set()))
    prior_note = "off (--prior asks it)" if not args.prior else "on" if tuner.calibrated else \
        "on, pinning nothing (the model is not calibrated: its predictions only rank the plan)"
    print(f"{len(records)} measurements ({len(measurements)} usable points; "
          f"{_noise_note(tuner, scenarios)}); model: {note}; learned prior: {prior_note}",
          file=sys.stderr)
    if records:
        _note_unmeasured(measurements, scenarios, args.plan)
    if args.plan:
        call_us = tune_launches.cached_call_us(topology)
        planned = tune_plan.plan(tuner, scenarios, budget.measurements,
                                 weight=workload.weight if workload else None,
                                 fits=tune_launches.plan_fits(budget, topology.gpus_per_node, call_us))
        if not planned:
            print(f"note: nothing to measure: {_why_nothing_planned(workload, scenarios, budget)}",
                  file=sys.stderr)
        tune_launches.emit(args, planned, topology, call_us, _made_by())
        if args.run:
            _run_plan(planned, args.record or DEFAULT_RECORD, args.emulate_hosts)
        return 0
    rows = _report_rows(tuner, scenarios)
    if workload is not None:
        _weigh_rows(rows, workload, scenarios)
    if output is not None:
        _export(args, output, topology, tune.TunedPolicy(tuner),
                sorted({s.topology.nodes for s in scenarios}), _stamp(records))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        _print_report(rows, f"tune: {topology.name}, deployable actions (NCCL_ALGO/NCCL_PROTO "
                            f"pairs, channel counts where measured), margin {100 * args.margin:g}%")
    return 0


def _made_by() -> str:
    """The command line that made a plan, as its script records it."""
    import shlex

    return shlex.join(["dynamiccl", *sys.argv[1:]]) if sys.argv[1:2] == ["tune"] else "dynamiccl tune"


def _stamp(records: list) -> str:
    """The policy's ``nccl`` header: the releases the measurements state (``2.26.2..2.26.2``), else
    the plugin's whole range, said in a note."""
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.profiler.formats.provenance import versions
    from dynamiccl.system.nccl_versions import window_text

    measured = versions(records)
    if measured:
        return window_text(measured)
    print(f"note: no measurement states its NCCL release, so the policy is stamped with the "
          f"plugin's whole range ({pf.DEFAULT_NCCL_RANGE}); measure with NCCL_DEBUG=INFO (NCCL "
          "prints its version) to stamp the release it holds for", file=sys.stderr)
    return pf.DEFAULT_NCCL_RANGE


def _workload(path: str | None, topology):
    """The job's mix ``--workload`` names (:mod:`dynamiccl.agents.shipping.tune_workload`), checked
    against the system as measurements are (``profiler.formats.system_fit``: ranks per node the
    topology does not have, nodes without a network, another GPU, emulated hosts on a real
    system); a mix of one-rank calls only (which move nothing between GPUs) is refused too."""
    if path is None:
        return None
    from dynamiccl.agents.shipping.tune_workload import Workload
    from dynamiccl.cli.common import read_head
    from dynamiccl.profiler.formats.system_fit import check_fits

    read_head(path, "job mix", 1, "give the job.jsonl `dynamiccl profile job` wrote")
    try:
        workload = Workload.read(path)
        check_fits(workload.records, topology)
    except ValueError as exc:
        raise UserError(f"--workload {exc}" if not str(exc).startswith(str(path)) else str(exc)) from None
    if all(r.nranks == 1 for r in workload.records):
        raise UserError(f"--workload {path}: every call of the job's mix ran on one rank, which moves "
                        "nothing between GPUs, so there is nothing to tune; profile the job on the "
                        "ranks it runs on (dynamiccl profile job -- torchrun --nproc-per-node N ...)")
    if workload.partial:
        print(f"note: --workload {path} is a partial mix ({workload.partial}): its shares are those "
              "of the calls it holds", file=sys.stderr)
    return workload


def _why_nothing_planned(workload, scenarios: list, budget: tune_launches.Budget) -> str:
    """Why the plan is empty, in words (an empty plan with no reason reads as a failure)."""
    if workload is not None and workload.uncovered(scenarios) > 1 - 1e-9:
        return (f"the job's mix ({workload.source}) spends none of its collective time in the calls "
                "tune decides here (other collectives, sizes or rank counts), so no launch is worth "
                "anything to it; give --collective or the system the job ran on")
    if budget.measurements is not None and budget.measurements < 2:
        return (f"--budget {budget.measurements} holds no measurement worth taking: a choice is "
                "measured beside NCCL's default, so give --budget 2 or more")
    short = (f", or --budget {budget} does not hold the first launch worth taking (give more "
             "node-hours, or a number of measurements)" if budget.node_hours is not None else "")
    return ("every decision tune makes here is settled by the measurements, or no choice could beat "
            f"NCCL's default by enough to be worth a launch (`tune` without --plan shows them){short}")


def _workload_collectives(workload) -> list[str]:
    """Without --collective: the job's collectives where a workload is given, else the default."""
    if workload is None:
        return list(_COLLECTIVES)
    return [c.name.lower() for c in sorted(workload.collectives)]


def _weigh_rows(rows: list[dict], workload, scenarios: list) -> None:
    """Each row's share of the job's collective time (``job_share``), and one line: what the
    decisions predict for the job's collective time, and what of it no decision covers."""
    from dynamiccl.system.knobs import Collective, parse_enum

    saving = changed = 0.0
    for r in rows:
        coll = Collective(parse_enum(Collective, r["collective"]))
        r["job_share"] = round(workload.share(coll, r["ranks"], r["from"], r["to"]), 4)
        if r["ours"] != "NCCL default":
            changed += r["job_share"]
            saving += r["job_share"] * r["gain"]
    uncovered = workload.uncovered(scenarios)
    print(f"the job ({workload.source}): {100 * changed:.1f}% of its collective time is in calls "
          f"this policy overrides; predicted saving {100 * saving:.1f}% of its collective time"
          + (f"; {100 * uncovered:.1f}% of it is in calls tune does not decide here (other "
             "collectives or shapes)" if uncovered > 1e-4 else ""), file=sys.stderr)


def _measurement_paths(args: argparse.Namespace) -> list[str]:
    """Every --measurements path, flat (the flag takes several paths and may be repeated)."""
    return [path for group in args.measurements or [] for path in group]


def _claim_output(args: argparse.Namespace):
    """The -o policy file (and its evidence beside it), checked before any work: never an input
    (a measurement, also inside a --measurements folder, or the topology), and --force replaces a
    policy file only; with --plan --run, the --record file likewise."""
    from dynamiccl.agents.shipping.export import EVIDENCE, evidence_path
    from dynamiccl.files import claim_output
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.profiler.formats.records import RECORDS

    inputs = [*_measurement_paths(args), args.topology, *([args.workload] if args.workload else [])]
    if args.plan and args.run:
        claim_output(args.record or DEFAULT_RECORD, RECORDS, inputs=[args.topology], flag="--record")
    if args.plan:
        from dynamiccl.cli.tune_launches import claim_script

        claim_script(args, inputs)
    if not args.output or args.plan:
        return None
    check_output_format(args.output, args.format)
    if args.format == "nccl-example-csv":
        from dynamiccl.plugin import nccl_csv

        return claim_output(args.output, nccl_csv.KIND, inputs=inputs, force=args.force)
    out = claim_output(args.output, pf.KIND, inputs=inputs, force=args.force)
    claim_output(evidence_path(out), EVIDENCE, inputs=inputs, force=True, flag="-o")
    return out


def _defer_everywhere(args: argparse.Namespace, output, topology) -> None:
    """``--no-measurements``: nothing to tune from, so the policy (if -o) leaves every call to NCCL."""
    from dynamiccl.agents.policies.registry import load_policy

    if output is not None:
        _export(args, output, topology, load_policy("nccl_default", deployable=True), [topology.nodes])
    if args.json:
        print("[]")  # no decision rows: nothing was decided
    print(f"no measurements (--no-measurements): the policy leaves every call to NCCL"
          f"{'' if output is not None else ' (no -o: nothing written)'}; measure with `dynamiccl tune "
          f"--topology {args.topology} --plan` and tune again", file=sys.stderr)


def _export(args: argparse.Namespace, out, topology, policy, node_counts: list[int],
            nccl_range: str | None = None) -> None:
    from dynamiccl.agents.shipping import export as exporting
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.nccl_csv import write_nccl_example_csv
    from dynamiccl.system.knobs import Collective, parse_enum

    csv_note = ""
    try:
        collectives = [Collective(parse_enum(Collective, c))
                       for c in (args.collective or _COLLECTIVES)]
        result = exporting.export_policy(policy, topology, policy_name="tune",
                                         node_counts=node_counts, collectives=collectives, gate=None,
                                         nccl_range=nccl_range or pf.DEFAULT_NCCL_RANGE)
        if args.format == "nccl-example-csv":
            shipped = exporting.for_example_tuner(result, topology)
            notes = exporting.example_tuner_notes(result, shipped)
            write_nccl_example_csv(shipped, out, notes=notes)
            guessed = sum(note == exporting.MODEL_PICK_NOTE for note in notes.values())
            csv_note = (f"; {guessed} of its {len(notes)} lines only spell out NCCL's own pick as "
                        "the model predicts it (NVIDIA's example tuner cannot defer, and runs a call "
                        "no line matches on 1 channel)")
        else:
            pf.write(result.policy_file, out)
            exporting.save_evidence(out, exporting.rule_evidence(result))
    except OSError as exc:
        raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    overrides = sum(1 for c in result.cells if c.decision is not None)
    print(f"wrote {out} ({args.format}, NCCL {result.policy_file.header.nccl}): "
          f"{result.policy_file.n_rules} rules, {overrides} of {len(result.cells)} evaluated calls "
          f"override NCCL{csv_note}; inspect with `dynamiccl show {out}`", file=sys.stderr)


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
    parser.add_argument("--prior", action=argparse.BooleanOptionalAction, default=False,
                        help="also ask the shipped learned prior, which predicts from the measurements "
                             "how each pair compares with NCCL where it was not measured, to rank the "
                             "plan and, on a calibrated model, to decide (off by default: on real "
                             "measurements it has pinned no call, experiments/bench_prior_real.py)")
    parser.add_argument("-o", "--output", type=path_arg, metavar="FILE", help="write the tuned policy file")
    parser.add_argument("--no-measurements", action="store_true",
                        help="there are none yet: write (with -o) a policy that leaves every call to "
                             "NCCL instead of refusing to tune from nothing")
    parser.add_argument("--force", action="store_true", help="replace an existing -o file")
    parser.add_argument("--plan", action="store_true",
                        help="print the nccl-tests launches (run them in the order printed) that "
                             "would settle the most valuable open decisions")
    tune_launches.add_plan_args(parser)
    parser.add_argument("--run", action="store_true",
                        help="with --plan: measure the plan now on this machine's GPUs, round "
                             "by round: the choices interleaved call by call in one launch (those "
                             "the plugin cannot pin in launches of their own), alternating order")
    parser.add_argument("--emulate-hosts", action="store_true",
                        help="with --run: more ranks than GPUs, each its own host to NCCL (loopback "
                             "sockets; needs the CUDA MPS daemon); records say so")
    parser.add_argument("--record", type=path_arg, metavar="FILE",
                        help=f"where --run appends its measurements (default {DEFAULT_RECORD})")
    parser.add_argument("--workload", type=path_arg, metavar="JOB.jsonl",
                        help="a job's collective mix (`dynamiccl profile job`): weigh the report's "
                             "rows and the plan's launches by the job's own time per size, and "
                             "decide its collectives (unless --collective)")
    parser.add_argument("--format", choices=("dccl", "nccl-example-csv"), default="dccl",
                        help="with -o: dccl (the DynamICCL plugin's file with its evidence beside it, "
                             "default) or NVIDIA's example-tuner CSV (measured overrides as comments "
                             "say; NCCL's own pick spelled out elsewhere, as that tuner cannot defer)")
    parser.add_argument("--nccl-version", type=nccl_version_arg, default=None, metavar="X.Y.Z",
                        help="tune only the measurements of this NCCL release (measurements of "
                             "several releases are refused together: NCCL's default differs)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=_run)
