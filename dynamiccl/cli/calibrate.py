"""``dynamiccl calibrate``: fit a topology to measurements and write it, calibration section included.

The fit (``profiler.fit.calibrate``) sets tier bandwidths and latencies plus the refinements the data
determines (per algorithm/protocol efficiency and base latency, launch floor, transport overhead).
Before the final fit on everything, a held-out check fits every other size of each run and predicts
the others (``fit_report.split_every_other``: by size, so a size's out-of-place and in-place times
stay on one side); its error per collective and size band is printed and its per-band error is
written into the file, where the safety gate's ``dynamiccl.system.calibration.uncertainty`` reads it.
``--json`` prints the fit report; ``--plot FILE`` draws measured against predicted times per run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dynamiccl.cli.common import UserError, collective_arg, path_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a topology to measured collective times",
        description="Fit the base topology to measurements (nccl-tests output or its -J JSON, "
        "NVIDIA's tuner measurement CSV, or `dynamiccl profile collective --record` JSONL files) "
        "by least squares in log-time: per-tier bandwidth and latency plus the refinements the "
        "data determines. Reports the error on held-out sizes per collective and size band and "
        "writes the fitted topology with a calibration section. Tier parameters the data cannot "
        "determine are refused unless --keep-undetermined keeps their base values.")
    p.add_argument("measurements", nargs="+", type=path_arg, metavar="MEASUREMENTS",
                   help="measurement files, any of the formats above")
    p.add_argument("--topology", required=True, type=path_arg, metavar="NAME|FILE.yaml",
                   help="the base topology: a preset or a YAML file (e.g. from `profile topology`)")
    p.add_argument("-o", "--output", required=True, type=path_arg, metavar="FILE.yaml",
                   help="where to write the fitted topology (never one of the inputs)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing -o file written by `dynamiccl calibrate` (and no other)")
    p.add_argument("--collective", type=collective_arg,
                   help="the collective of nccl-tests outputs whose name and content do not say it")
    p.add_argument("--keep-undetermined", action="store_true",
                   help="keep parameters the data cannot determine at their base values")
    p.add_argument("--no-corrections", dest="corrections", action="store_false",
                   help="write only the fitted parameters, not the measured corrections between "
                        "them and the logs (per collective, algorithm/protocol and size)")
    p.add_argument("--plot", type=path_arg, metavar="FILE.png",
                   help="draw measured vs predicted time per run (.png is added when missing)")
    p.add_argument("--json", action="store_true", help="print the fit report as JSON")
    p.set_defaults(func=run_calibrate)


def read_measurements(paths: list[str], collective, topology) -> tuple[list, list[str]]:
    """Records from every file, whatever its format, each file once however it is named; one
    readable line for any file that fails, or for a record ``topology`` could not have produced
    (``profiler.formats.system_fit``)."""
    from dynamiccl.profiler.formats.measurement_paths import distinct_files
    from dynamiccl.profiler.formats.measurements import MeasurementFormatError, read
    from dynamiccl.profiler.formats.system_fit import check_fits

    records, warnings, repeated = [], [], []
    for path in paths:
        if not Path(path).exists():
            raise UserError(f"{path}: no such measurement file; check the path")
    for path in distinct_files(paths, repeated=repeated):
        try:
            recs, warns = read(path, collective)
        except (MeasurementFormatError, ValueError, OSError) as exc:
            message = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
            raise UserError(message.splitlines()[0]) from None
        records += recs
        warnings += warns
    warnings += [f"{r}: given again; read once" for r in repeated]
    if not records:
        raise UserError(f"{', '.join(paths)}: no timed measurement (rows of size 0 are no-op calls "
                        "and are skipped); give logs of sizes that moved data")
    try:
        check_fits(records, topology)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return records, warnings


def run_calibrate(args: argparse.Namespace) -> int:
    from dynamiccl.config_loader import ConfigError
    from dynamiccl.files import claim_output, distinct_outputs, write_text_atomic
    from dynamiccl.plots import claim_figure
    from dynamiccl.profiler.fit.calibrate import CalibrationError, calibrate
    from dynamiccl.profiler.fit.fit_report import (
        FITTED,
        error_table,
        fitted_yaml,
        format_table,
        heldout_check,
        report_json,
        with_heldout,
    )
    from dynamiccl.system.topology import load_topology

    inputs = [*args.measurements, args.topology]
    output = claim_output(args.output, FITTED, inputs=inputs, force=args.force)
    plot = claim_figure(args.plot, inputs=inputs) if args.plot else None
    distinct_outputs(("-o", output), ("--plot", plot))
    try:
        base = load_topology(args.topology)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    records, warnings = read_measurements(args.measurements, args.collective, base)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    try:
        fit = calibrate(records, base, keep_undetermined=args.keep_undetermined,
                        corrections=args.corrections)
        held = heldout_check(records, base, keep_undetermined=True, corrections=args.corrections)
    except CalibrationError as exc:
        raise UserError(str(exc)) from None
    for note in fit.skipped:
        print(f"note: not fitted: {note}", file=sys.stderr)
    fit = with_heldout(fit, held, ", ".join(Path(m).name for m in args.measurements))
    try:
        write_text_atomic(output, fitted_yaml(fit, args.measurements))
    except OSError as exc:
        raise UserError(f"{output}: cannot write the fitted topology ({exc.strerror})") from None
    if plot is not None:
        from dynamiccl.profiler.fit.fit_plot import plot_fit

        plot_fit(fit, plot)
        print(f"plot written to {plot}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        json.dump(report_json(fit, held), sys.stdout, indent=2)
        print()
        return 0
    print(f"fitted {len(records)} measurements: RMS log error {fit.rms_log(False):.3f} (base) -> "
          f"{fit.rms_log(True):.3f}; wrote {output}")
    for p in fit.params + fit.refinements:
        if p.determined:
            print(f"  {p.label:36s} {p.base:g} -> {p.fitted:.4g} (±{100 * p.rel_std:.1f}%)")
        elif p.note:
            print(f"  {p.label:36s} kept at {p.base:g} ({p.note})")
    corrections = fit.topology.calibration.corrections if fit.topology.calibration else ()
    if corrections:
        points = sum(len(c.sizes) for c in corrections)
        print(f"  measured corrections: {len(corrections)} (collective, algorithm/protocol, shape) "
              f"curves over {points} sizes, used between the sizes measured")
    print(format_table(error_table(fit.problem, fit.predicted_us, fit.predicted_base_us)))
    if held is not None:
        print("\nheld-out sizes (fitted on every other size of each run, predicted in between):")
        print(format_table(held.rows))
    return 0
