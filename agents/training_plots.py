"""Figures a training run and a sweep leave in their folders: the training curve and the sweep results.

Colours come from one fixed palette keyed by what a line means, so the same quantity has the same
colour in every figure and every run; step axes read 12k / 1.5M, metric axes plain decimals.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Series -> colour (Okabe-Ito, readable by colour-blind readers).
PALETTE = {"episode_reward": "#0072B2", "oracle_share": "#D55E00", "geomean_speedup": "#009E73",
           "worst_speedup": "#CC79A7", "trial": "#0072B2", "error": "#999999"}


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


def training_curve(run_dir: Path) -> list[tuple[float, float]]:
    """(step, mean episode reward) over the whole run; a segment's rows past the step the next
    segment resumed from were trained again there, so they are left out."""
    segments = _segments(run_dir)
    points: list[tuple[float, float]] = []
    for i, (_start, path) in enumerate(segments):
        end = segments[i + 1][0] if i + 1 < len(segments) else math.inf
        with path.open() as fh:
            for row in csv.DictReader(fh):
                step, reward = row.get("time/total_timesteps"), row.get("rollout/ep_rew_mean")
                if step and reward and float(step) <= end:
                    points.append((float(step), float(reward)))
    return points


def plot_training(run_dir: Path) -> Path | None:
    """``training_curve.png``: episode reward, and the periodic evaluations' oracle share."""
    curve = training_curve(run_dir)
    evals_file = run_dir / "evaluations.jsonl"
    evals = [json.loads(line) for line in evals_file.read_text().splitlines() if line] \
        if evals_file.is_file() else []
    if not curve and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    if curve:
        steps, rewards = zip(*curve, strict=True)
        ax.plot(steps, rewards, color=PALETTE["episode_reward"], label="mean episode reward")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean episode reward (sum of log speedups)")
    ax.xaxis.set_major_formatter(FuncFormatter(_steps))
    _plain_axis(ax.yaxis)
    handles, labels = ax.get_legend_handles_labels()
    shares = [(e["step"], e["oracle_share"]) for e in evals if e.get("oracle_share") is not None]
    if shares:
        right = ax.twinx()
        eval_steps, values = zip(*shares, strict=True)
        right.plot(eval_steps, values, "o-", color=PALETTE["oracle_share"], label="oracle share (eval)")
        right.set_ylabel("share of the oracle's log-speedup")
        _plain_axis(right.yaxis)
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, loc="lower right")
    ax.set_title(f"training curve: {run_dir.name}")
    out = run_dir / "training_curve.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_sweep(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str,
               out_dir: Path) -> Path | None:
    """``sweep_results.png``: the metric of every trial against each searched hyperparameter."""
    done = [r for r in rows if isinstance(r.get(metric), (int, float))]
    if not done or not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.6), squeeze=False,
                             layout="constrained", sharey=True)
    for ax, key in zip(axes[0], keys, strict=True):
        values = [r.get(key) for r in done]
        numeric = all(isinstance(v, (int, float)) for v in values)
        x = values if numeric else [str(v) for v in values]
        ax.scatter(x, [r[metric] for r in done], color=PALETTE["trial"], zorder=3)
        if numeric and min(values) > 0 and max(values) / min(values) >= 20:
            ax.set_xscale("log")
        elif numeric:
            _plain_axis(ax.xaxis)
        ax.set_xlabel(key)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric)
    _plain_axis(axes[0][0].yaxis)
    fig.suptitle(f"sweep: {metric} per trial ({len(done)} of {len(rows)} trials with a result)")
    out = out_dir / "sweep_results.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
