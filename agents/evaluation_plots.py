"""Figures of an evaluation: what each policy picks where, and what it gains by message size.

* ``choices.png`` – one panel per policy: ranks (rows) × message-size bin (columns), each cell
  coloured by the algorithm/protocol the policy picked most often there. Side by side, it shows at a
  glance where a learned policy departs from NCCL and whether it follows the oracle.
* ``speedup_vs_size.png`` – geometric-mean speedup over NCCL per size bin, one line per policy.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dynamiccl.agents.evaluate import PolicyReport
from dynamiccl.envs.observation import size_bin
from dynamiccl.units import format_size


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_choice_maps(reports: Sequence[PolicyReport], path: str | Path) -> Path:
    """Per policy, the most frequent algorithm/protocol in every (ranks × size bin) cell."""
    plt = _pyplot()
    path = Path(path)
    cells: list[dict[tuple[int, int], str]] = []
    for report in reports:
        votes: dict[tuple[int, int], Counter] = defaultdict(Counter)
        for c in report.calls:
            key = (c.scenario.topology.nranks, size_bin(c.scenario.nbytes))
            votes[key][f"{c.algorithm}/{c.protocol}"] += 1
        cells.append({k: v.most_common(1)[0][0] for k, v in votes.items()})
    ranks = sorted({k[0] for cell in cells for k in cell})
    bins = sorted({k[1] for cell in cells for k in cell})
    labels = sorted({v for cell in cells for v in cell.values()})
    colour = {label: i for i, label in enumerate(labels)}
    cmap = plt.get_cmap("tab20", max(len(labels), 1))
    fig, axes = plt.subplots(len(reports), 1, figsize=(max(6, 0.45 * len(bins) + 3),
                                                       1.2 + 0.5 * len(ranks) * len(reports)),
                             squeeze=False)
    for ax, report, cell in zip(axes[:, 0], reports, cells, strict=True):
        grid = np.full((len(ranks), len(bins)), np.nan)
        for (r, b), label in cell.items():
            grid[ranks.index(r), bins.index(b)] = colour[label]
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(labels) - 0.5, aspect="auto")
        ax.set_title(report.policy, fontsize=9)
        ax.set_yticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
        ax.set_xticks(range(len(bins)), [format_size(2**b) for b in bins], rotation=60, fontsize=6)
        ax.set_ylabel("ranks", fontsize=8)
    fig.suptitle(f"choices per size and ranks; {reports[0].action_set}; reality: {reports[0].backend}",
                 fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(colour[label])) for label in labels]
    fig.legend(handles, labels, loc="upper right", fontsize=7, ncol=1)
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_speedup_vs_size(reports: Sequence[PolicyReport], path: str | Path) -> Path:
    """Geometric-mean speedup over NCCL's default per size bin, per policy."""
    plt = _pyplot()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(9, 5))
    for report in reports:
        per_bin: dict[int, list[float]] = defaultdict(list)
        for c in report.calls:
            per_bin[size_bin(c.scenario.nbytes)].append(np.log(c.speedup))
        bins = sorted(per_bin)
        ax.plot([2.0**b for b in bins], [float(np.exp(np.mean(per_bin[b]))) for b in bins],
                marker="o", ms=3, label=report.policy)
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.set_xscale("log", base=2)
    bins = sorted({size_bin(c.scenario.nbytes) for r in reports for c in r.calls})
    ticks = bins[:: max(1, len(bins) // 12)]
    ax.set_xticks([2.0**b for b in ticks], [format_size(2**b) for b in ticks], fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel("speedup over NCCL default (geomean)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"speedup over NCCL per size; {reports[0].action_set}; reality: "
                 f"{reports[0].backend}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_reports(reports: Sequence[PolicyReport], out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {"choices": plot_choice_maps(reports, out / "choices.png"),
            "speedup_vs_size": plot_speedup_vs_size(reports, out / "speedup_vs_size.png")}
