"""Figures of an evaluation: what each policy picks where, and what it gains by message size.

* ``choices.png`` – one panel per policy: ranks (rows) × message-size bin (columns), each cell
  coloured by the algorithm/protocol the policy picked most often there. Side by side, it shows at a
  glance where a learned policy departs from NCCL and whether it follows the oracle.
* ``speedup_vs_size.png`` – geometric-mean speedup over NCCL per size bin, one line per policy.

Colours come from :mod:`dynamiccl.plots` (an algorithm's hue, lighter for LL, darker for Simple),
so ``ring/ll128`` is the same colour here, in the explain plot and in every run. Titles say which
suite was evaluated and over which action set, since both change what a speedup means.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynamiccl.agents.shipping.evaluate import PolicyReport
from dynamiccl.envs.observation import size_bin
from dynamiccl.plots import choice_colour, fit_text, policy_colour, pyplot, ratio_axis, save, size_axis
from dynamiccl.system.units import format_size


def describe_run(suite: str | None, deployable: bool | None) -> str:
    """``heldout suite, deployable actions``: what a figure's numbers are about."""
    where = f"{suite} suite" if suite else "suite not named"
    if deployable is None:
        return where
    actions = "deployable actions (what the plugin can make NCCL do)" if deployable else \
        "all simulator actions"
    return f"{where}, {actions}"


def plot_choice_maps(reports: Sequence[PolicyReport], path: str | Path, context: str = "") -> Path:
    return save(choice_maps_figure(reports, context), path)


def choice_maps_figure(reports: Sequence[PolicyReport], context: str = "") -> Any:
    """Per policy, the most frequent algorithm/protocol in every (ranks × size bin) cell."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = pyplot()
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
    index = {label: i for i, label in enumerate(labels)}
    cmap = ListedColormap([choice_colour(label) for label in labels] or ["white"])
    height = 1.6 + (0.45 * len(ranks) + 0.9) * len(reports)
    width = max(7.0, 0.45 * len(bins) + 4.5)
    fig, axes = plt.subplots(len(reports), 1, figsize=(width, height), squeeze=False, sharex=True)
    for ax, report, cell in zip(axes[:, 0], reports, cells, strict=True):
        grid = np.full((len(ranks), len(bins)), np.nan)
        for (r, b), label in cell.items():
            grid[ranks.index(r), bins.index(b)] = index[label]
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=max(len(labels), 1) - 0.5, aspect="auto",
                  interpolation="nearest")
        ax.set_title(f"policy: {report.policy}", fontsize=9, loc="left")
        ax.set_yticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
        ax.set_ylabel("ranks", fontsize=8)
        ax.set_xticks(range(len(bins)), [format_size(2**b) for b in bins], rotation=60, fontsize=7)
    axes[-1, 0].set_xlabel("message size bin (nccl-tests' size column, from this size up)", fontsize=8)
    handles = [Patch(color=choice_colour(label), label=label) for label in labels]
    what = "most frequent pick per cell"
    title = fit_text(f"{what}; {context}" if context else what, width - 0.4, 9)
    fig.suptitle(title, fontsize=9)
    # The panels start below the title's lines (tight_layout leaves a suptitle out of its room),
    # and the legend gets its own column right of them, so neither covers a cell or a label.
    top = 1 - ((title.count("\n") + 1) * 9 * 1.4 / 72 + 0.05) / height
    fig.tight_layout(rect=(0, 0, 0.78, top))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.79, top), fontsize=7,
               title="algorithm/protocol", title_fontsize=7, frameon=False)
    return fig


def plot_speedup_vs_size(reports: Sequence[PolicyReport], path: str | Path, context: str = "") -> Path:
    return save(speedup_figure(reports, context), path)


def speedup_figure(reports: Sequence[PolicyReport], context: str = "") -> Any:
    """Geometric-mean speedup over NCCL's default per size bin, per policy."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    curves = []
    for report in reports:
        per_bin: dict[int, list[float]] = defaultdict(list)
        for c in report.calls:
            per_bin[size_bin(c.scenario.nbytes)].append(np.log(c.speedup))
        bins = sorted(per_bin)
        values = [float(np.exp(np.mean(per_bin[b]))) for b in bins]
        curves.append(values)
        ax.plot([2.0**b for b in bins], values, marker="o", ms=3, label=report.policy,
                color=policy_colour(report.policy))
    ax.axhline(1.0, color="0.4", lw=0.8)
    bins = sorted({size_bin(c.scenario.nbytes) for r in reports for c in r.calls})
    size_axis(ax, [2**b for b in bins])
    flat = [v for values in curves for v in values] or [1.0]
    ratio_axis(ax, min(flat), max(flat))
    ax.set_ylabel("speedup over NCCL's default (geomean)")
    ax.set_title(f"speedup by message size; {context}" if context else "speedup by message size",
                 fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, title="policy", title_fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


#: The figures :func:`plot_reports` writes into its folder.
FIGURES = ("choices.png", "speedup_vs_size.png")


def plot_reports(reports: Sequence[PolicyReport], out_dir: str | Path, *, suite: str | None = None,
                 deployable: bool | None = None) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    context = describe_run(suite, deployable)
    if reports:  # the reports know their action set and the reality that timed them
        if deployable is None:
            context = f"{context}, {reports[0].action_set}"
        context = f"{context}; reality: {reports[0].backend}"
    choices, speedups = FIGURES
    return {"choices": plot_choice_maps(reports, out / choices, context),
            "speedup_vs_size": plot_speedup_vs_size(reports, out / speedups, context)}
