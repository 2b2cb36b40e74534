"""What a calibration achieved: error tables, efficiency diagnostics, and the fitted YAML file.

The error table is computed with exactly what gets written (the fitted topology alone), so the
numbers a user reads are the numbers training will see. Protocol/algorithm efficiencies are fitted
afterwards as *diagnostics*: how much faster or slower each (algorithm, protocol) ran than the
fitted model says, expressed as the factor on the tier bandwidths that would explain it. The
topology schema has no place for them, so they are reported, not written.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import yaml

from dynamiccl.knobs import Config
from dynamiccl.nccl import Collective
from dynamiccl.profiler.calibrate import FitResult, Problem, pick_configs, predict, scaled_bandwidth
from dynamiccl.topology import Topology
from dynamiccl.units import format_size

#: Size ranges of the error table: latency-bound, in between, bandwidth-bound.
SIZE_BINS = ((0, 64 * 2**10), (64 * 2**10, 4 * 2**20), (4 * 2**20, math.inf))
_MIN_EFFICIENCY_SENSITIVITY = 0.05


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


@dataclass(frozen=True)
class Efficiency:
    algorithm: str
    protocol: str
    n: int
    #: Bandwidth factor that best explains this group's times (1 = the model is right); None when
    #: no measurement of the group is bandwidth-bound.
    factor: float | None
    median_abs_pct_after: float | None

    def to_json(self) -> dict:
        return self.__dict__.copy()


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
    configs = pick_configs(problem, fit.topology)
    base = predict(problem, problem.base, pick_configs(problem, problem.base))
    return error_table(problem, predict(problem, fit.topology, configs), base)


def efficiencies(fit: FitResult) -> list[Efficiency]:
    """Per (algorithm, protocol): the bandwidth factor that best explains its measurements."""
    problem = fit.problem
    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(problem.configs):
        groups.setdefault((c.algorithm.name.lower(), c.protocol.name.lower()), []).append(i)
    out = []
    for (algo, proto), rows in sorted(groups.items()):
        sub = _subproblem(problem, rows)
        configs = [problem.configs[i] for i in rows]
        factor = _fit_factor(sub, fit.topology, configs)
        after = None
        if factor is not None:
            pred = predict(sub, scaled_bandwidth(fit.topology, factor), configs)
            after = float(np.median(100 * np.abs(pred / sub.measured_us - 1)))
        out.append(Efficiency(algo, proto, len(rows), factor, after))
    return out


def _subproblem(problem: Problem, rows: list[int]) -> Problem:
    return Problem([problem.records[i] for i in rows], problem.base,
                   [problem.shapes[i] for i in rows], problem.measured_us[rows],
                   [problem.configs[i] for i in rows])


def _fit_factor(sub: Problem, topology: Topology, configs: Sequence[Config]) -> float | None:
    """1-D Gauss-Newton on log(factor); None when the group's times do not depend on it."""

    def resid(log_f: float) -> np.ndarray:
        return np.log(predict(sub, scaled_bandwidth(topology, math.exp(log_f)), configs) / sub.measured_us)

    log_f, h = 0.0, 1e-4
    for _ in range(30):
        r = resid(log_f)
        d = (resid(log_f + h) - resid(log_f - h)) / (2 * h)
        if np.max(np.abs(d)) < _MIN_EFFICIENCY_SENSITIVITY:
            return None
        step = float(np.clip(-(d @ r) / (d @ d), -0.5, 0.5))
        log_f += step
        if abs(step) < 1e-6:
            break
    return math.exp(log_f)


def fitted_yaml(fit: FitResult, sources: Sequence[str], effs: Sequence[Efficiency]) -> str:
    """A normal topology file whose comments say how it was obtained and how well it fits."""
    lines = [f"# Calibrated by `dynamiccl calibrate` on {_dt.date.today().isoformat()} from "
             f"{len(fit.problem.records)} measurements ({', '.join(sources) or 'records'}),",
             f"# starting from {fit.problem.base.name}. RMS log error {fit.rms_log(False):.3f} -> "
             f"{fit.rms_log(True):.3f}."]
    for p in fit.params:
        if p.determined:
            lines.append(f"#   {p.label}: {p.base:g} -> {p.fitted:.4g} (±{100 * p.rel_std:.1f}%)")
        else:
            lines.append(f"#   {p.label}: kept at {p.base:g}, NOT determined: {p.note}")
    known = [e for e in effs if e.factor is not None]
    if known:
        lines.append("# Efficiency diagnostics (not used by the simulator; bandwidth factor per "
                     "algorithm/protocol):")
        lines += [f"#   {e.algorithm}/{e.protocol}: x{e.factor:.3f} over {e.n} measurements"
                  for e in known]
    return "\n".join(lines) + "\n" + topology_yaml(fit.topology)


def topology_yaml(topology: Topology) -> str:
    """The topology as the presets are written: one tier per line, values to 4 digits."""

    def tier(t: dict) -> dict:
        t = {k: round(v, 4 - int(math.floor(math.log10(abs(v)))) - 1) if isinstance(v, float)
             and v else v for k, v in t.items()}
        return {k: v for k, v in t.items() if not (k == "dims" and not v)
                and not (k == "link_share" and v == 1)}

    d = topology.to_dict()
    head = yaml.safe_dump({"name": d["name"], "gpu": d["gpu"], "features": d["features"]},
                          sort_keys=False, default_flow_style=None)
    tiers = "".join("  - " + yaml.safe_dump(tier(t), default_flow_style=True, sort_keys=False,
                                             width=200)
                    for t in d["tiers"])
    return head + "tiers:\n" + tiers


def report_json(fit: FitResult, effs: Sequence[Efficiency],
                heldout: Sequence[ErrorRow] = ()) -> dict:
    return {
        "topology": fit.topology.name,
        "measurements": len(fit.problem.records),
        "rms_log_error": {"base": fit.rms_log(False), "fitted": fit.rms_log(True)},
        "parameters": [p.to_json() for p in fit.params],
        "fit_error": [r.to_json() for r in error_table(fit.problem, fit.predicted_us,
                                                       fit.predicted_base_us)],
        "heldout_error": [r.to_json() for r in heldout],
        "efficiencies": [e.to_json() for e in effs],
    }


def format_table(rows: Sequence[ErrorRow]) -> str:
    head = f"{'collective':14s} {'sizes':20s} {'n':>4s} {'base med%':>10s} {'med%':>7s} {'max%':>7s}"
    out = [head, "-" * len(head)]
    for r in rows:
        base = "" if r.base_median_abs_pct is None else f"{r.base_median_abs_pct:10.1f}"
        out.append(f"{r.collective:14s} {r.size_range:20s} {r.n:4d} {base:>10s} "
                   f"{r.median_abs_pct:7.2f} {r.max_abs_pct:7.2f}")
    return "\n".join(out)
