"""How far the simulator is from published nccl-tests runs, with datasheet and calibrated topologies.

Every fixture under ``tests/fixtures/real/<system>/`` (a measured log plus a sidecar recording its
source, shape, launch mode and forced variables) is predicted with its system's datasheet
``topology.yaml``: NCCL's default pick (the NCCL-default model) for default runs, the forced
algorithm/protocol for forced runs. The error of one measurement is the ratio
``max(pred/meas, meas/pred)`` (1.0 = exact). Per system and size band (< 64 KiB, 64 KiB–16 MiB,
>= 16 MiB) the script prints the median and the worst ratio; then it calibrates on every other size
of the system's logs (the user's path) and prints the same on the sizes the fit never saw, with the
calibration's measured corrections (interpolated between the fitted sizes) and, on the "parameters
only" line, without them.

    python experiments/validate_real.py [--root tests/fixtures/real] [--system NAME] [--json]
                                        [--plot FILE.png]

``--plot`` draws predicted / measured against size, one panel per system: the sign of the error
(below 1x the model is too fast) and where along the sizes it sits, which the medians hide.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from dynamiccl.profiler.fit.calibrate import CalibrationError, calibrate, pick_configs, predict, prepare
from dynamiccl.profiler.fit.fit_report import split_every_other
from dynamiccl.profiler.formats.published import PublishedRun, load_system, system_dirs, system_topology
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.topology import Topology

DEFAULT_ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real"
KIB, MIB = 2**10, 2**20
#: (label, lower bound inclusive, upper bound exclusive) in bytes.
BANDS = (("< 64 KiB", 0, 64 * KIB), ("64 KiB - 16 MiB", 64 * KIB, 16 * MIB),
         (">= 16 MiB", 16 * MIB, math.inf))


@dataclass
class Stats:
    """Median and worst error ratio of one band (``n`` = 0: nothing measured there)."""

    n: int = 0
    median: float | None = None
    worst: float | None = None

    @classmethod
    def of(cls, ratios: np.ndarray) -> Stats:
        if not len(ratios):
            return cls()
        return cls(len(ratios), float(np.median(ratios)), float(np.max(ratios)))

    def to_json(self) -> dict:
        return {"n": self.n, "median": self.median, "worst": self.worst}


@dataclass
class SystemResult:
    system: str
    runs: int
    nodes: list[int]
    forced_runs: int
    datasheet: dict[str, Stats]
    calibrated: dict[str, Stats]
    #: The same fit without its measured corrections: what the physical parameters alone predict.
    parametric: dict[str, Stats] = field(default_factory=dict)
    note: str = ""
    #: Per measurement: (size, predicted / measured), pooled into the overall line and plotted.
    datasheet_points: list[tuple[int, float]] = field(default_factory=list)
    heldout_points: list[tuple[int, float]] = field(default_factory=list)
    parametric_points: list[tuple[int, float]] = field(default_factory=list)
    #: Per run and band, datasheet topology: the error stats and the median pred/meas (its sign:
    #: < 1 the model is too fast, > 1 too slow).
    run_details: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"system": self.system, "runs": self.runs, "nodes": self.nodes,
                "forced_runs": self.forced_runs,
                "datasheet": {b: s.to_json() for b, s in self.datasheet.items()},
                "calibrated_heldout": {b: s.to_json() for b, s in self.calibrated.items()},
                "parametric_heldout": {b: s.to_json() for b, s in self.parametric.items()},
                "note": self.note, "runs_detail": self.run_details}


def error_ratio(predicted: np.ndarray, measured: np.ndarray | float) -> np.ndarray:
    """How far apart the two are, as a factor >= 1 whichever is larger."""
    return np.maximum(predicted / measured, measured / predicted)


def band_stats(records: Sequence[MeasurementRecord], ratios: np.ndarray) -> dict[str, Stats]:
    sizes = np.array([r.nbytes for r in records], dtype=float)
    return {label: Stats.of(ratios[(sizes >= lo) & (sizes < hi)]) for label, lo, hi in BANDS}


def predicted_us(records: Sequence[MeasurementRecord], topology: Topology) -> np.ndarray:
    """Each record re-simulated on ``topology`` resized to its shape, with what NCCL ran."""
    problem = prepare(records, topology)
    return predict(problem, topology, pick_configs(problem, topology))


def fit_topology(records: Sequence[MeasurementRecord], base: Topology) -> Topology:
    """The calibration call (profiler.fit.calibrate's public API), kept in one place to adapt."""
    return calibrate(records, base, keep_undetermined=True).topology


def evaluate_system(system_dir: Path) -> SystemResult:
    runs = load_system(system_dir)
    topology = system_topology(system_dir)
    launches = {run.launch for run in runs}
    if len(launches) == 1:  # how the runs were launched sets the host's launch floor
        topology = replace(topology, launch=launches.pop())
    records = [r for run in runs for r in run.records]
    pred = predicted_us(records, topology)
    measured = np.array([r.time_us for r in records])
    pred_over_meas = pred / measured
    datasheet = band_stats(records, error_ratio(pred, measured))
    train, test = split_every_other(records)
    note, held_points, param_points = "", [], []
    test_us = np.array([r.time_us for r in test])
    try:
        fitted = fit_topology(train, topology)
        held_pred = predicted_us(test, fitted)
        params_only = replace(fitted, calibration=replace(fitted.calibration, corrections=()))
        params_pred = predicted_us(test, params_only)
        calibrated = band_stats(test, error_ratio(held_pred, test_us))
        parametric = band_stats(test, error_ratio(params_pred, test_us))
        held_points = [(r.nbytes, float(x)) for r, x in zip(test, held_pred / test_us, strict=True)]
        param_points = [(r.nbytes, float(x))
                        for r, x in zip(test, params_pred / test_us, strict=True)]
    except CalibrationError as exc:
        calibrated = parametric = {label: Stats() for label, _, _ in BANDS}
        note = f"calibration refused: {exc}"
    points = [(r.nbytes, float(x)) for r, x in zip(records, pred_over_meas, strict=True)]
    return SystemResult(system_dir.name, len(runs), sorted({run.nodes for run in runs}),
                        sum(not run.is_default for run in runs), datasheet, calibrated, parametric,
                        note, points, held_points, param_points, run_details(runs, pred_over_meas))


def run_details(runs: Sequence[PublishedRun], pred_over_meas: np.ndarray) -> list[dict]:
    """Per run (in load order, matching ``pred_over_meas``) and band: where the model is off."""
    out, start = [], 0
    for run in runs:
        rows = pred_over_meas[start:start + len(run.records)]
        sizes = np.array([r.nbytes for r in run.records], dtype=float)
        start += len(run.records)
        bands = {}
        for label, lo, hi in BANDS:
            sel = rows[(sizes >= lo) & (sizes < hi)]
            if len(sel):
                bands[label] = {**Stats.of(np.maximum(sel, 1 / sel)).to_json(),
                                "median_pred_over_meas": float(np.median(sel))}
        out.append({"run": run.name, "nodes": run.nodes, "ranks": run.nranks,
                    "launch": run.launch, "forced": run.forced, "datasheet": bands})
    return out


#: Each pooled column: the per-measurement points and the per-system stats it is made of.
COLUMNS = {"datasheet": ("datasheet_points", "datasheet"),
           "calibrated_heldout": ("heldout_points", "calibrated"),
           "parametric_heldout": ("parametric_points", "parametric")}


def pooled(results: Sequence[SystemResult], which: str) -> dict[str, dict]:
    """Every measurement of every system in one pool per band, plus the worst system's median."""
    points, per_system = COLUMNS[which]
    out = {}
    for label, lo, hi in BANDS:
        signed = np.array([x for res in results for size, x in getattr(res, points) if lo <= size < hi])
        stats = Stats.of(error_ratio(signed, 1.0))  # the points are predicted / measured already
        medians = [getattr(res, per_system)[label].median for res in results]
        medians = [m for m in medians if m is not None]
        out[label] = {**stats.to_json(), "systems": len(medians),
                      "worst_system_median": max(medians) if medians else None}
    return out


def summarize(results: Sequence[SystemResult]) -> dict:
    """The overall lines: datasheet, calibrated (held-out sizes) and calibrated without the
    measured corrections (the physical parameters alone)."""
    return {which: pooled(results, which) for which in COLUMNS}


def _fmt(stats: Stats) -> str:
    return "-" if not stats.n else f"x{stats.median:.2f} / x{stats.worst:.2f}"


def print_table(results: Sequence[SystemResult], summary: dict) -> None:
    from rich.table import Table

    from dynamiccl.console import console as table_console

    table = Table(title="Simulator vs published nccl-tests runs: median / worst error ratio "
                        "(datasheet topology | calibrated on every other size, held-out sizes)")
    table.add_column("system")
    table.add_column("runs (forced)", justify="right")
    table.add_column("nodes")
    for label, _, _ in BANDS:
        table.add_column(f"datasheet {label}", justify="right")
    for label, _, _ in BANDS:
        table.add_column(f"calibrated {label}", justify="right")
    for res in results:
        table.add_row(res.system, f"{res.runs} ({res.forced_runs})", ",".join(map(str, res.nodes)),
                      *[_fmt(res.datasheet[b]) for b, _, _ in BANDS],
                      *[_fmt(res.calibrated[b]) for b, _, _ in BANDS])
    overall = [_fmt(Stats(s["n"], s["median"], s["worst"]))
                for which in ("datasheet", "calibrated_heldout")
                for s in (summary[which][b] for b, _, _ in BANDS)]
    table.add_row("[bold]overall[/bold]", str(sum(r.runs for r in results)), "", *overall)
    worst = ["-" if summary[which][b]["worst_system_median"] is None
             else f"x{summary[which][b]['worst_system_median']:.2f}"
             for which in ("datasheet", "calibrated_heldout") for b, _, _ in BANDS]
    table.add_row("worst system median", "", "", *worst)
    params = summary["parametric_heldout"]
    table.add_row("[dim]parameters only[/dim]", "", "", "", "", "",
                  *[f"[dim]{_fmt(Stats(params[b]['n'], params[b]['median'], params[b]['worst']))}[/dim]"
                    for b, _, _ in BANDS])
    console = table_console()
    console.print(table)
    for res in results:
        if res.note:
            console.print(f"{res.system}: {res.note}")


#: The datasheet goal of issue 10 (median error within x1.25 in every band), shaded in the plot.
GOAL = 1.25


def plot_systems(results: Sequence[SystemResult], path: Path) -> Path:
    """Predicted / measured against size, one panel per system (datasheet topology, and the
    calibrated prediction of the sizes the fit never saw)."""
    from dynamiccl.plots import pyplot, ratio_axis, save, size_axis

    plt = pyplot()
    cols = min(3, len(results))
    rows = math.ceil(len(results) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(results):]:
        ax.set_visible(False)
    for ax, res in zip(axes.flat, results, strict=False):
        ratios = [x for _, x in res.datasheet_points + res.heldout_points]
        ax.axhspan(1 / GOAL, GOAL, color="#2ca02c", alpha=0.12, lw=0)
        for edge in (64 * KIB, 16 * MIB):
            ax.axvline(edge, color="#999999", lw=0.8, ls=":")
        sizes, values = zip(*res.datasheet_points, strict=True)
        ax.scatter(sizes, values, s=12, color="#7f7f7f", label="datasheet topology")
        if res.heldout_points:
            sizes, values = zip(*res.heldout_points, strict=True)
            ax.scatter(sizes, values, s=14, marker="^", color="#1f77b4",
                       label="calibrated, held-out sizes")
        ratio_axis(ax, min(ratios), max(ratios))
        size_axis(ax, [size for size, _ in res.datasheet_points], max_ticks=8)
        ax.set_xlabel("")
        ax.set_title(f"{res.system} ({res.runs} runs, nodes {','.join(map(str, res.nodes))})",
                     fontsize=9)
        ax.set_ylabel("predicted / measured")
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"Simulator vs published nccl-tests runs: below 1x the model is too fast; shaded: "
                 f"within x{GOAL:g}; dotted: the 64 KiB and 16 MiB band edges", fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="folder with one sub-folder per system (default: the fixtures)")
    parser.add_argument("--system", action="append", default=[],
                        help="only this system (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="also draw predicted / measured against size, one panel per system")
    args = parser.parse_args(argv)
    if args.plot is not None:
        from dynamiccl.files import OutputRefused
        from dynamiccl.plots import claim_figure

        try:
            args.plot = claim_figure(args.plot)
        except OutputRefused as exc:
            parser.error(str(exc))
    dirs = [d for d in system_dirs(args.root) if not args.system or d.name in args.system]
    if not dirs:
        parser.error(f"no system folder under {args.root} matches {args.system or 'anything'}")
    # a folder of the project's runner records (no sidecar, e.g. h200_emulated4) is no published run
    runless = [d.name for d in dirs if not load_system(d)]
    dirs = [d for d in dirs if d.name not in runless]
    if not dirs:
        parser.error(f"{', '.join(runless)}: no published run (a log with its sidecar) to validate")
    results = [evaluate_system(d) for d in dirs]
    summary = summarize(results)
    if args.json:
        print(json.dumps({"bands": [b for b, _, _ in BANDS], "error": "max(pred/meas, meas/pred)",
                          "systems": [r.to_json() for r in results], "overall": summary},
                         indent=2))
    else:
        print_table(results, summary)
    if args.plot is not None:
        print(f"wrote {plot_systems(results, args.plot)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
