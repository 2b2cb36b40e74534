"""``dynamiccl calibrate``: fit a topology's tier bandwidths and latencies to measurements.

``--json`` prints the fit report (parameters, fit error per collective and size range, efficiency
diagnostics); the written file is a normal topology YAML that training and evaluation use as is.
"""

from __future__ import annotations

import argparse
import json
import sys

from dynamiccl.cli.common import UserError, collective_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a topology to measured collective times",
        description="Fit the base topology's per-tier bandwidth and latency to measurements "
        "(nccl-tests outputs or `dynamiccl profile collective --record` JSONL files) by least "
        "squares in log-time, report the fit error per collective and size range, and write the "
        "fitted topology. Parameters the data cannot determine are refused unless "
        "--keep-undetermined keeps their base values.")
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS",
                   help="nccl-tests output files and/or JSONL measurement records")
    p.add_argument("--topology", required=True, metavar="NAME|FILE.yaml",
                   help="the base topology: a preset or a YAML file (e.g. from `profile topology`)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.yaml",
                   help="where to write the fitted topology")
    p.add_argument("--collective", type=collective_arg,
                   help="the collective of nccl-tests files whose name and content do not say it")
    p.add_argument("--keep-undetermined", action="store_true",
                   help="keep parameters the data cannot determine at their base values")
    p.add_argument("--json", action="store_true", help="print the fit report as JSON")
    p.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from dynamiccl.config_loader import ConfigError
    from dynamiccl.profiler.calibrate import CalibrationError, calibrate
    from dynamiccl.profiler.fit_report import (
        efficiencies,
        error_table,
        fitted_yaml,
        format_table,
        report_json,
    )
    from dynamiccl.profiler.records import load_measurements
    from dynamiccl.topology import load_topology

    try:
        base = load_topology(args.topology)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    records, warnings = load_measurements(args.measurements, args.collective)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    try:
        fit = calibrate(records, base, keep_undetermined=args.keep_undetermined)
    except CalibrationError as exc:
        raise UserError(str(exc)) from None
    effs = efficiencies(fit)
    with open(args.output, "w") as fh:
        fh.write(fitted_yaml(fit, args.measurements, effs))
    if args.json:
        json.dump(report_json(fit, effs), sys.stdout, indent=2)
        print()
        return 0
    print(f"fitted {len(records)} measurements: RMS log error {fit.rms_log(False):.3f} (base) -> "
          f"{fit.rms_log(True):.3f}; wrote {args.output}")
    for p in fit.params:
        status = (f"{p.base:g} -> {p.fitted:.4g} (±{100 * p.rel_std:.1f}%)" if p.determined
                  else f"kept at {p.base:g} ({p.note})")
        print(f"  {p.label:32s} {status}")
    print(format_table(error_table(fit.problem, fit.predicted_us, fit.predicted_base_us)))
    return 0
