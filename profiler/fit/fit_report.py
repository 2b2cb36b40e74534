"""What a calibration achieved: error tables, the held-out check, and the fitted YAML file.

The error tables are computed with exactly what gets written (the fitted topology with its
calibration section), so the numbers a user reads are the numbers training will see. The held-out
check fits again on every other size of each run and predicts the sizes in between, per collective
and size band (the issue's bands: < 64 KiB, 64 KiB - 16 MiB, >= 16 MiB); its per-band error is
written into the calibration section, where ``dynamiccl.system.calibration.uncertainty`` reads it.
"""

from __future__ import annotations

import datetime as _dt
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import yaml

from dynamiccl.files import FileKind, starts_with
from dynamiccl.profiler.fit.calibrate import (
    FitResult,
    Problem,
    calibrate,
    pick_configs,
    placed,
    predict,
    prepare,
)
from dynamiccl.profiler.formats.records import MeasurementRecord
from dynamiccl.system.calibration import SIZE_BANDS
from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import Topology
from dynamiccl.system.units import format_size

#: Size ranges of the error tables: latency-bound, where NCCL's switch points lie, bandwidth-bound.
SIZE_BINS = tuple((lo, hi) for _, lo, hi in SIZE_BANDS)


@dataclass(frozen=True)
class ErrorRow:
    collective: str
    size_range: str
    n: int
    median_abs_pct: float
    max_abs_pct: float
    #: The same statistic for the base (uncalibrated) topology, when known.
    base_median_abs_pct: float | None = None

    def to_json(self) -> dict:
        return self.__dict__.copy()


@dataclass
class Heldout:
    """The every-other-size check: its error rows and relative 1-sigma error per band name."""

    rows: list[ErrorRow]
    band_rel_std: dict[str, float]


def _range_label(lo: float, hi: float) -> str:
    if lo == 0:
        return f"< {format_size(int(hi))}"
    if math.isinf(hi):
        return f">= {format_size(int(lo))}"
    return f"{format_size(int(lo))} - {format_size(int(hi))}"


def error_table(problem: Problem, predicted: np.ndarray,
                predicted_base: np.ndarray | None = None) -> list[ErrorRow]:
    """Median and worst |relative error| per collective and size range."""
    err = 100 * np.abs(predicted / problem.measured_us - 1)
    base_err = None if predicted_base is None else 100 * np.abs(predicted_base / problem.measured_us - 1)
    rows = []
    colls, sizes = problem.collectives, problem.sizes
    for coll in sorted(set(colls)):
        for lo, hi in SIZE_BINS:
            sel = (colls == coll) & (sizes >= lo) & (sizes < hi)
            if not sel.any():
                continue
            rows.append(ErrorRow(
                Collective(coll).name.lower(), _range_label(lo, hi), int(sel.sum()),
                float(np.median(err[sel])), float(np.max(err[sel])),
                None if base_err is None else float(np.median(base_err[sel]))))
    return rows


def heldout_table(fit: FitResult, problem: Problem) -> list[ErrorRow]:
    """The error table of measurements the fit never saw, predicted by the fitted topology."""
    problem = placed(problem)
    configs = pick_configs(problem, fit.topology)
    base = predict(problem, problem.base, problem.configs)
    return error_table(problem, predict(problem, fit.topology, configs), base)


def split_every_other(records: Sequence[MeasurementRecord]) -> tuple[list, list]:
    """Per run (collective, shape and configuration), its distinct sizes in order: even positions
    are fitted, odd positions held out.

    The split is by size, not by record: nccl-tests prints an out-of-place and an in-place time
    for every size, and repeated runs repeat sizes, so alternating over records would fit every
    size the check claims it never saw. Runs of a single size (published summary tables: one
    number per node count) are pooled per collective and configuration and alternate by shape.
    ``dynamiccl calibrate`` and ``experiments/validate_real.py`` both hold out with this.
    """
    runs: dict[tuple, dict[int, list[MeasurementRecord]]] = {}
    for rec in records:
        key = (rec.collective, rec.nnodes or 0, rec.nranks, rec.config_label)
        runs.setdefault(key, {}).setdefault(rec.nbytes, []).append(rec)
    train: list[MeasurementRecord] = []
    test: list[MeasurementRecord] = []
    pooled: dict[tuple, dict[tuple, list[MeasurementRecord]]] = {}
    for (coll, nodes, nranks, config), by_size in runs.items():
        if len(by_size) == 1:
            ((size, recs),) = by_size.items()
            pooled.setdefault((coll, config), {}).setdefault((nodes, nranks, size), []).extend(recs)
        else:
            _alternate(by_size, train, test)
    for by_shape in pooled.values():
        _alternate(by_shape, train, test)
    return train, test


def _alternate(groups: dict, train: list, test: list) -> None:
    """Whole groups, in key order, to ``train`` and ``test`` by turns."""
    for i, key in enumerate(sorted(groups)):
        (train if i % 2 == 0 else test).extend(groups[key])


def heldout_check(records: Sequence[MeasurementRecord], base: Topology,
                  keep_undetermined: bool = False, corrections: bool = True) -> Heldout | None:
    """Fits every other size and predicts the rest (with the measured corrections of the fitted
    sizes, as the written file will); None when too few sizes remain to hold out."""
    train, test = split_every_other(records)
    if not test or not train:
        return None
    fit = calibrate(train, base, keep_undetermined=keep_undetermined, corrections=corrections)
    problem = placed(prepare(test, base))
    pred = predict(problem, fit.topology, pick_configs(problem, fit.topology))
    log_err = np.log(pred / problem.measured_us)
    sizes = problem.sizes
    bands = {name: math.expm1(float(np.sqrt(np.mean(log_err[sel] ** 2))))
             for name, lo, hi in SIZE_BANDS if (sel := (sizes >= lo) & (sizes < hi)).any()}
    base_pred = predict(problem, base, problem.configs)
    return Heldout(error_table(problem, pred, base_pred), bands)


def with_heldout(fit: FitResult, held: Heldout | None, source: str) -> FitResult:
    """``fit`` whose written calibration section also records the held-out error and the source."""
    cal = fit.topology.calibration
    if cal is None:
        return fit
    cal = replace(cal, source=source,
                  heldout_error=tuple(held.band_rel_std.items()) if held else cal.heldout_error)
    return replace(fit, topology=replace(fit.topology, calibration=cal))


#: The first words of every file ``calibrate`` writes: ``--force`` replaces only such a file.
FITTED_HEADER = "# Calibrated by `dynamiccl calibrate`"
FITTED = FileKind("a topology written by `dynamiccl calibrate`", starts_with(FITTED_HEADER.encode()))


def fitted_yaml(fit: FitResult, sources: Sequence[str]) -> str:
    """A normal topology file whose comments say how it was obtained and how well it fits; its
    ``calibration:`` section carries the refinements, the uncertainties and the held-out error."""
    lines = [f"{FITTED_HEADER} on {_dt.date.today().isoformat()} from "
             f"{len(fit.problem.records)} measurements ({', '.join(sources) or 'records'}),",
             f"# starting from {fit.problem.base.name}. RMS log error {fit.rms_log(False):.3f} -> "
             f"{fit.rms_log(True):.3f}."]
    lines += [f"#   not fitted: {note}" for note in fit.skipped]
    for p in fit.params + fit.refinements:
        if p.determined:
            lines.append(f"#   {p.label}: {p.base:g} -> {p.fitted:.4g} (±{100 * p.rel_std:.1f}%)")
        elif p.note:
            lines.append(f"#   {p.label}: kept at {p.base:g}, NOT determined: {p.note}")
    return "\n".join(lines) + "\n" + topology_yaml(fit.topology)


def topology_yaml(topology: Topology) -> str:
    """The topology as the presets are written: one tier per line, values to 4 digits."""

    def tier(t: dict) -> dict:
        t = {k: _digits(v) if isinstance(v, float) else v for k, v in t.items()}
        return {k: v for k, v in t.items() if not (k == "dims" and not v)
                and not (k == "link_share" and v == 1)}

    d = topology.to_dict()
    head = {k: d[k] for k in ("name", "gpu", "features", "launch") if k in d}
    out = yaml.safe_dump(head, sort_keys=False, default_flow_style=None)
    out += "tiers:\n" + "".join("  - " + yaml.safe_dump(tier(t), default_flow_style=True,
                                                         sort_keys=False, width=200)
                                for t in d["tiers"])
    if "calibration" in d:
        out += yaml.safe_dump({"calibration": d["calibration"]}, sort_keys=False, width=100,
                              default_flow_style=None)
    return out


def _digits(v: float) -> float:
    return round(v, 4 - int(math.floor(math.log10(abs(v)))) - 1) if v else v


def report_json(fit: FitResult, heldout: Heldout | None = None) -> dict:
    return {
        "topology": fit.topology.name,
        "measurements": len(fit.problem.records),
        "skipped": list(fit.skipped),
        "rms_log_error": {"base": fit.rms_log(False), "fitted": fit.rms_log(True)},
        "parameters": [p.to_json() for p in fit.params],
        "refinements": [p.to_json() for p in fit.refinements],
        "fit_error": [r.to_json() for r in error_table(fit.problem, fit.predicted_us,
                                                       fit.predicted_base_us)],
        "heldout_error": [r.to_json() for r in heldout.rows] if heldout else [],
        "heldout_rel_std": heldout.band_rel_std if heldout else {},
    }


def format_table(rows: Sequence[ErrorRow]) -> str:
    """The error table as text (a rich table rendered at its natural width, for print or logs)."""
    from rich.table import Table

    from dynamiccl.console import UNBOUNDED_WIDTH
    from dynamiccl.console import console as table_console

    table = Table(box=None)
    for col in ("collective", "sizes", "n", "base med%", "med%", "max%"):
        table.add_column(col, justify="left" if col in ("collective", "sizes") else "right")
    for r in rows:
        base = "" if r.base_median_abs_pct is None else f"{r.base_median_abs_pct:.1f}"
        table.add_row(r.collective, r.size_range, str(r.n), base, f"{r.median_abs_pct:.2f}",
                      f"{r.max_abs_pct:.2f}")
    console = table_console(width=UNBOUNDED_WIDTH, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text().rstrip()
