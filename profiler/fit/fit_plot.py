"""``calibrate --plot``: measured against predicted time per run, before and after the fit.

One panel per run (same source, collective, shape and forced configuration), time against size on
log axes, so a reader sees at a glance where the model misses: floors, switch points, slopes.
"""

from __future__ import annotations

import math
from pathlib import Path

from dynamiccl.plots import fit_text, pyplot, save
from dynamiccl.profiler.fit.calibrate import FitResult
from dynamiccl.system.knobs import Knobs
from dynamiccl.system.units import format_size


def _runs(fit: FitResult) -> dict[tuple[str, str], list[int]]:
    """Measurement indices per run, keyed by (file, what was run): the panel's two title lines.
    The file is named by its base name; a full path ran across the neighbouring panels."""
    runs: dict[tuple[str, str], list[int]] = {}
    for i, rec in enumerate(fit.problem.records):
        forced = "/".join(str(x) for x in Knobs.of(rec).record().values() if x)
        source = Path(rec.source.rsplit(":", 1)[0]).name or "records"
        what = f"{rec.collective}, {rec.nnodes or '?'} nodes x {rec.nranks} ranks, {forced or 'default'}"
        runs.setdefault((source, what), []).append(i)
    return runs


def plot_fit(fit: FitResult, path: Path) -> Path:
    runs = _runs(fit)
    cols = min(3, len(runs))
    rows = math.ceil(len(runs) / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False,
                                  layout="constrained")
    sizes = fit.problem.sizes
    for ax, ((source, what), idx) in zip(axes.flat, runs.items(), strict=False):
        idx = sorted(idx, key=lambda i: sizes[i])
        xs = [sizes[i] for i in idx]
        ax.plot(xs, [fit.problem.measured_us[i] for i in idx], "ko", ms=4, label="measured")
        ax.plot(xs, [fit.predicted_base_us[i] for i in idx], color="0.6", ls="--", label="base")
        ax.plot(xs, [fit.predicted_us[i] for i in idx], color="tab:blue", label="calibrated")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{fit_text(source, 4.6, 8)}\n{fit_text(what, 4.6, 8)}", fontsize=8)
        ticks = xs[:: max(1, len(xs) // 6)]
        ax.set_xticks(ticks, [format_size(int(s)) for s in ticks], fontsize=7, rotation=45)
        ax.set_ylabel("time (µs)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save(fig, path)
