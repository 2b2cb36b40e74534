"""Figures a training run and a sweep leave in their folders: the training curve and the sweep results.

Colours come from the project's one palette (:mod:`dynamiccl.plots`): the agent's line has the
colour the agent has in the evaluation figures, the oracle share the oracle's. Step axes read
12k / 1.5M, metric axes plain decimals; figures are written atomically.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynamiccl.plots import fit_text, policy_colour, pyplot, save


def _steps(value: float, _pos: Any = None) -> str:
    for factor, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def _plain_axis(axis: Any) -> None:
    from matplotlib.ticker import ScalarFormatter

    formatter = ScalarFormatter(useOffset=False)
    formatter.set_scientific(False)
    axis.set_major_formatter(formatter)


def _segments(run_dir: Path) -> list[tuple[int, Path]]:
    """SB3's progress files, by the step each starts at (a resumed segment starts its own)."""
    out = [(0, run_dir / "progress.csv")] if (run_dir / "progress.csv").is_file() else []
    for path in run_dir.glob("progress_from_*.csv"):
        out.append((int(path.stem.rsplit("_", 1)[1]), path))
    return sorted(out)


#: The curve of an SB3 agent: (progress CSV column, axis label).
REWARD = ("rollout/ep_rew_mean", "mean episode reward (sum of log speedups)")


def training_curve(run_dir: Path, column: str = REWARD[0]) -> list[tuple[float, float]]:
    """(step, ``column``) over the whole run; a segment's rows past the step the next segment
    resumed from were trained again there, so they are left out."""
    segments = _segments(run_dir)
    points: list[tuple[float, float]] = []
    for i, (_start, path) in enumerate(segments):
        end = segments[i + 1][0] if i + 1 < len(segments) else math.inf
        with path.open() as fh:
            for row in csv.DictReader(fh):
                point = _point(row.get("time/total_timesteps"), row.get(column))
                if point is not None and point[0] <= end:
                    points.append(point)
    return points


def _point(step: str | None, value: str | None) -> tuple[float, float] | None:
    """A progress row's (step, value); None where either is missing or not a number (the last row
    of a segment a kill cut short)."""
    try:
        return (float(step), float(value)) if step and value else None
    except ValueError:
        return None


#: What the periodic evaluations of a policy show: (evaluations.jsonl key, axis label).
ORACLE_SHARE = ("oracle_share", "share of the oracle's log-speedup")


def plot_training(run_dir: Path, agent: str, curve_of: tuple[str, str] = REWARD,
                  evaluated: tuple[str, str] = ORACLE_SHARE) -> Path | None:
    """``training_curve.png``: the agent's training curve (``curve_of``: its progress column and
    label; default the episode reward), and the periodic evaluations' ``evaluated`` metric
    (default the oracle share)."""
    column, label = curve_of
    curve = training_curve(run_dir, column)
    evals_file = run_dir / "evaluations.jsonl"
    evals = [json.loads(line) for line in evals_file.read_text().splitlines() if line] \
        if evals_file.is_file() else []
    if not curve and not evals:
        return None
    from matplotlib.ticker import FuncFormatter

    fig, ax = pyplot().subplots(figsize=(7, 4), layout="constrained")
    if curve:
        steps, values = zip(*curve, strict=True)
        ax.plot(steps, values, color=policy_colour(agent), label=f"{agent}: {label}")
    ax.set_xlabel("training step")
    ax.set_ylabel(fit_text(label, 3.2))
    ax.xaxis.set_major_formatter(FuncFormatter(_steps))
    _plain_axis(ax.yaxis)
    handles, labels = ax.get_legend_handles_labels()
    key, eval_label = evaluated
    shares = [(e["step"], e[key]) for e in evals if e.get(key) is not None]
    if shares:
        right = ax.twinx()
        eval_steps, values = zip(*shares, strict=True)
        right.plot(eval_steps, values, "o-", color=policy_colour("oracle"),
                   label=f"{key.replace('_', ' ')} (eval)")
        right.set_ylabel(fit_text(eval_label, 3.2))
        _plain_axis(right.yaxis)
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    # Below the axes: inside them the legend hid the curve's last points.
    fig.legend(handles, labels, loc="outside lower center", fontsize=8, frameon=False)
    ax.set_title(fit_text(f"training curve: {agent} in {run_dir.name}", 6.5, 12))
    return save(fig, run_dir / "training_curve.png")


def plot_sweep(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str, agent: str,
               out_dir: Path) -> Path | None:
    """``sweep_results.png``: the metric of every trial against each searched hyperparameter."""
    done = [r for r in rows if isinstance(r.get(metric), (int, float))]
    if not done or not keys:
        return None
    fig, axes = pyplot().subplots(1, len(keys), figsize=(4 * len(keys), 3.6), squeeze=False,
                             layout="constrained", sharey=True)
    for ax, key in zip(axes[0], keys, strict=True):
        values = [r.get(key) for r in done]
        numeric = all(isinstance(v, (int, float)) for v in values)
        x = values if numeric else [str(v) for v in values]
        ax.scatter(x, [r[metric] for r in done], color=policy_colour(agent), zorder=3)
        if numeric and min(values) > 0 and max(values) / min(values) >= 20:
            ax.set_xscale("log")
        elif numeric:
            _plain_axis(ax.xaxis)
        ax.set_xlabel(key)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric)
    _plain_axis(axes[0][0].yaxis)
    fig.suptitle(fit_text(f"sweep of {agent}: {metric} per trial ({len(done)} of {len(rows)} trials "
                          "with a result)", 4 * len(keys) - 0.3, 12))
    return save(fig, out_dir / "sweep_results.png")
