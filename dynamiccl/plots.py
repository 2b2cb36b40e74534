"""Figures a person would rather look at than read: the explain sweep as bandwidth-vs-size curves."""

from __future__ import annotations

from pathlib import Path

from dynamiccl.units import format_size


def plot_explain(rows: list[dict], path: Path, title: str) -> None:
    """Bus bandwidth of NCCL's pick and of the best pick per size, algorithms marked by colour.

    The lower panel shows the gain, so a reader sees at a glance where tuning pays.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in rows]
    algos = sorted({r["nccl_algorithm"] for r in rows} | {r["best_algorithm"] for r in rows})
    colours = dict(zip(algos, plt.get_cmap("tab10").colors, strict=False))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    top.plot(sizes, [r["nccl_busbw_GBps"] for r in rows], color="0.6", lw=1, zorder=1)
    top.plot(sizes, [r["best_busbw_GBps"] for r in rows], color="0.2", lw=1, ls="--", zorder=1)
    for key, marker, label in (("nccl", "o", "NCCL default"), ("best", "^", "best")):
        for algo in algos:
            pts = [(r["size"], r[f"{key}_busbw_GBps"]) for r in rows if r[f"{key}_algorithm"] == algo]
            if pts:
                xs, ys = zip(*pts, strict=True)
                top.scatter(xs, ys, marker=marker, color=colours[algo], zorder=2,
                            label=f"{label}: {algo}")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("bus bandwidth (GB/s)")
    top.set_title(title, fontsize=10)
    top.legend(fontsize=8, ncol=2)
    top.grid(True, which="both", alpha=0.3)
    bottom.bar(sizes, [r["gain"] for r in rows], width=[s * 0.6 for s in sizes], color="tab:green")
    bottom.axhline(1.0, color="0.3", lw=0.8)
    bottom.set_ylabel("gain (x)")
    bottom.set_xlabel("message size")
    ticks = sizes[:: max(1, len(sizes) // 10)]
    bottom.set_xticks(ticks, [format_size(s) for s in ticks], rotation=45, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
