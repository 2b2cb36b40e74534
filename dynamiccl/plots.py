"""Figures a person would rather look at than read, and the one palette every figure uses.

A colour means the same algorithm in every figure and every run (``ALGORITHM_COLOURS``, fixed,
never assigned in order of appearance), a marker the same protocol, and ratio axes read ``0.98×`` or
``2×`` instead of ``9.8×10⁻¹``. Other modules draw with these helpers so their figures agree.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynamiccl.files import FileKind, claim_output, read_head, read_tail, replace_atomically
from dynamiccl.system.nccl import ALGORITHMS, PROTOCOLS
from dynamiccl.system.units import format_size

#: One colour per algorithm (each entry of dynamiccl.system.nccl.ALGORITHMS names its own), and the
#: ring-over-ring's.
ALGORITHM_COLOURS: dict[str, str] = {a.name.lower(): a.colour for a in ALGORITHMS} | {"ring-hier": "#bcbd22"}
#: One marker per protocol, and how light a protocol's shade of its algorithm's colour is in filled
#: cells (heatmaps): each entry of dynamiccl.system.nccl.PROTOCOLS names its own.
PROTOCOL_MARKERS: dict[str, str] = {p.name.lower(): p.marker for p in PROTOCOLS}
PROTOCOL_SHADE: dict[str, float] = {p.name.lower(): p.shade for p in PROTOCOLS}
UNKNOWN_COLOUR = "#7f7f7f"
#: Built-in policies keep their colour in every figure; other (trained) policies get one from
#: ``_OTHER_COLOURS`` chosen by a hash of their name, so a run is drawn alike every time.
POLICY_COLOURS: dict[str, str] = {
    "nccl_default": "#555555", "oracle": "#000000", "static_best": "#2ca02c", "random": "#bbbbbb",
    "coordinate_descent": "#9467bd", "bandit": "#8c564b",
}
_OTHER_COLOURS = ("#1f77b4", "#ff7f0e", "#d62728", "#e377c2", "#17becf", "#bcbd22")
#: File types the figures may be written as (matplotlib's raster and vector formats).
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display needed, safe in any process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: Written into every figure's metadata, so a later run knows the file at its path is a figure of
#: ours to redraw (and not a user's picture to keep).
FIGURE_MARK = "DynamICCL figure"
_IMAGE_MAGIC = (b"\x89PNG", b"%PDF", b"<?xml", b"<svg", b"\xff\xd8\xff")


def _is_our_figure(path: Path) -> bool:
    head = read_head(path)
    if not head.startswith(_IMAGE_MAGIC):
        return False
    mark = FIGURE_MARK.encode()
    return mark in head or mark in read_tail(path)  # a PDF keeps its metadata at the end


#: A figure: a re-run redraws its own figure, and any other file at that path is kept.
FIGURE = FileKind("a figure written by dynamiccl", _is_our_figure, reuse=True)


def figure_path(path: str | Path) -> Path:
    """The file a figure asked for at ``path`` goes to: ``x`` and ``x.v2`` become ``x.png`` and
    ``x.v2.png``, and that is the name reported."""
    path = Path(path)
    if str(path).strip() and path.suffix.lower() not in IMAGE_SUFFIXES:
        path = path.with_name(path.name + ".png")
    return path


def claim_figure(path: str | Path, *, inputs: Sequence[str | Path] = (), flag: str = "--plot") -> Path:
    """:func:`figure_path` of ``path``, checked before any work (``files.claim_output``)."""
    return claim_output(figure_path(path), FIGURE, inputs=inputs, flag=flag)


def save(fig: Any, path: str | Path) -> Path:
    """Writes ``fig`` atomically (a temporary file renamed into place): a reader never sees half a
    figure, and a failed write leaves any earlier file intact. The figure carries
    :data:`FIGURE_MARK`, which marks it as ours to redraw."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    mark = ({"pil_kwargs": {"comment": FIGURE_MARK.encode()}} if fmt in ("jpg", "jpeg") else
            {"metadata": {"Software" if fmt == "png" else "Creator": FIGURE_MARK}})
    try:
        replace_atomically(path, lambda tmp: fig.savefig(tmp, dpi=120, format=fmt, **mark))
    finally:
        pyplot().close(fig)
    return path


def fit_text(text: str, inches: float, fontsize: float = 10.0) -> str:
    """``text`` wrapped onto lines that fit ``inches`` of a figure at ``fontsize`` points (a title
    wider than its figure is cut off on both sides when the file is written)."""
    chars = max(16, int(inches * 72 / (0.6 * fontsize)))
    return textwrap.fill(text, chars)


def algorithm_colour(algorithm: str) -> str:
    """The fixed colour of an algorithm name (``ring``, ``ring-hier(bw_aware,4ck)`` → ring-hier)."""
    key = algorithm.split("(")[0]
    return ALGORITHM_COLOURS.get(key, UNKNOWN_COLOUR)


def policy_colour(name: str) -> str:
    """The fixed colour of a policy name (built-ins fixed, others by a stable hash of the name)."""
    import zlib

    return POLICY_COLOURS.get(name) or _OTHER_COLOURS[zlib.crc32(name.encode()) % len(_OTHER_COLOURS)]


def choice_colour(label: str) -> tuple[float, float, float]:
    """Colour of an ``algorithm/protocol[/…]`` label: the algorithm's hue, lighter for lighter protocols."""
    from matplotlib.colors import to_rgb

    algo, _, rest = label.partition("/")
    proto = rest.split("/")[0]
    base = to_rgb(algorithm_colour(algo))
    mix = PROTOCOL_SHADE.get(proto, 0.0)
    return tuple(c + (1.0 - c) * mix for c in base)  # type: ignore[return-value]


def format_ratio(value: float, _pos: object = None) -> str:
    """``0.98×``, ``1.1×``, ``2×``: how a speedup or gain is said aloud."""
    if value <= 0 or not math.isfinite(value):
        return ""
    text = f"{value:.2f}".rstrip("0").rstrip(".") if value < 10 else f"{value:.0f}"
    return f"{text}×"


def ratio_axis(ax: Any, low: float, high: float, axis: str = "y") -> None:
    """A log ratio axis around 1× whose ticks read as ratios, wide enough that 1.1× is visible."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    low, high = min(low, 1.0), max(high, 1.0)
    span = max(high / low, 1.25)
    pad = span ** 0.06
    lim = (low / pad, max(high * pad, low * 1.25))
    candidates = (0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 0.98, 1.0, 1.02, 1.05, 1.1, 1.2, 1.5, 2, 3, 5, 10,
                  20, 50, 100)
    gap = math.log(lim[1] / lim[0]) / 7  # at most about 8 ticks, never crowded together
    ticks = [1.0]
    for t in candidates:
        if lim[0] <= t <= lim[1] and all(abs(math.log(t / u)) >= gap for u in ticks):
            ticks.append(t)
    ticks.sort()
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    (ax.set_ylim if axis == "y" else ax.set_xlim)(*lim)
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(format_ratio))
    target.set_minor_formatter(NullFormatter())


def size_axis(ax: Any, sizes: Sequence[int], max_ticks: int = 12) -> None:
    """Log2 message-size axis labelled 8B, 64KiB, 1GiB."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    ax.set_xscale("log", base=2)
    ordered = sorted(set(sizes))
    ticks = ordered[:: max(1, math.ceil(len(ordered) / max_ticks))]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([format_size(s) for s in ticks], rotation=45, fontsize=8)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size (nccl-tests' size column)")


def _channel_marker_size(channels: int) -> float:
    return 14 + 10 * math.log2(max(channels, 1))


#: Characters per line of the explain figure's title (its axes are ~850 px wide at 10 pt).
EXPLAIN_TITLE_CHARS = 100


def plot_explain(rows: list[dict], path: Path, title: str) -> Path:
    """Draws :func:`explain_figure` to ``path``."""
    return save(explain_figure(rows, title), path)


def explain_figure(rows: list[dict], title: str) -> Any:
    """Bus bandwidth of NCCL's pick and of the best pick per size, and the gain between them.

    Colour: the algorithm; marker shape: the protocol; marker size: the channel count. The lower
    panel is the gain on a ratio axis that starts at 1×, so a 1.1× gain is plainly visible.
    """
    from matplotlib.lines import Line2D

    plt = pyplot()
    sizes = [r["size"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.4]})
    top.plot(sizes, [r["nccl_busbw_GBps"] for r in rows], color="0.55", lw=1.2, zorder=1)
    top.plot(sizes, [r["best_busbw_GBps"] for r in rows], color="0.1", lw=1.2, ls="--", zorder=1)
    for key, edge in (("nccl", "0.55"), ("best", "0.1")):
        for r in rows:
            marker = PROTOCOL_MARKERS.get(r[f"{key}_protocol"], "x")
            top.scatter(r["size"], r[f"{key}_busbw_GBps"], marker=marker,
                        s=_channel_marker_size(r[f"{key}_channels"]),
                        color=algorithm_colour(r[f"{key}_algorithm"]), edgecolors=edge, linewidths=0.6,
                        zorder=2)
    top.set_yscale("log")
    top.set_ylabel("bus bandwidth (GB/s)")
    # A system's description makes long titles; centred over the axes (which the legend pushes
    # left) a long line runs off the figure's left edge, so it is wrapped to the axes' width.
    top.set_title(textwrap.fill(title, EXPLAIN_TITLE_CHARS), fontsize=10)
    top.grid(True, which="both", alpha=0.3)
    algos = sorted({r["nccl_algorithm"] for r in rows} | {r["best_algorithm"] for r in rows})
    protos = sorted({r["nccl_protocol"] for r in rows} | {r["best_protocol"] for r in rows})
    handles = [Line2D([], [], color="0.55", lw=1.2, label="NCCL's default pick"),
               Line2D([], [], color="0.1", lw=1.2, ls="--", label="best pick (simulated)")]
    handles += [Line2D([], [], ls="", marker="o", color=algorithm_colour(a), label=f"algorithm: {a}")
                for a in algos]
    handles += [Line2D([], [], ls="", marker=PROTOCOL_MARKERS.get(p, "x"), color="0.4",
                       label=f"protocol: {p}") for p in protos]
    handles += [Line2D([], [], ls="", marker="o", color="0.4", markersize=math.sqrt(_channel_marker_size(c)),
                       label=f"{c} channel{'s' if c > 1 else ''}") for c in (1, 8, 64)]
    top.legend(handles=handles, fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0),
               title="colour / shape / size", title_fontsize=7)
    gains = [r["gain"] for r in rows]
    bottom.plot(sizes, gains, color="tab:green", marker="o", ms=3, lw=1.2)
    bottom.fill_between(sizes, 1.0, gains, color="tab:green", alpha=0.15)
    bottom.axhline(1.0, color="0.3", lw=0.8)
    ratio_axis(bottom, 1.0, max(gains))
    for i, (s, g) in enumerate(zip(sizes, gains, strict=True)):
        peak = g >= max(gains[max(i - 1, 0):i + 2])  # label the peaks only, so labels never collide
        if g >= 1.05 and peak:
            bottom.annotate(format_ratio(g), (s, g), textcoords="offset points", xytext=(0, 4),
                            ha="center", fontsize=6)
    bottom.set_ylabel("gain of the best\npick over NCCL's")
    bottom.grid(True, which="major", axis="y", alpha=0.3)
    size_axis(bottom, sizes)
    fig.tight_layout()
    return fig


def plot_arrivals(arrival_us: Any, path: Path, title: str, straggler: int | None = None) -> Path:
    """Draws :func:`arrivals_figure` to ``path``."""
    return save(arrivals_figure(arrival_us, title, straggler), path)


def arrivals_figure(arrival_us: Any, title: str, straggler: int | None = None) -> Any:
    """Per-rank arrival times of ``profile collective``: each rank's lateness behind the first arrival.

    ``arrival_us[rank, iteration]`` on one host clock. A persistent straggler shows as one rank whose
    points sit high in every iteration.
    """
    import numpy as np

    plt = pyplot()
    arrivals = np.asarray(arrival_us, dtype=float)
    late = arrivals - arrivals.min(axis=0, keepdims=True)
    nranks, iters = late.shape
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [3, 1.2]})
    colours = plt.get_cmap("tab10")
    for rank in range(nranks):
        style = {"lw": 2.0, "zorder": 3} if rank == straggler else {"lw": 0.9, "alpha": 0.8}
        left.plot(range(iters), late[rank], color=colours(rank % 10), marker=".", ms=3,
                  label=f"rank {rank}" + (" (straggler)" if rank == straggler else ""), **style)
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("timed iteration")
    left.set_ylabel("arrival after the first rank (µs)")
    left.set_title(title, fontsize=10)
    left.grid(True, alpha=0.3)
    left.legend(fontsize=7, ncol=1 + nranks // 9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    p10, median, p90 = np.percentile(late, [10, 50, 90], axis=1)
    for rank in range(nranks):
        right.errorbar(median[rank], rank, xerr=[[median[rank] - p10[rank]], [p90[rank] - median[rank]]],
                       fmt="o", color=colours(rank % 10), capsize=3)
    right.set_yticks(range(nranks), [str(r) for r in range(nranks)])
    right.set_xlabel("arrival after the first rank (µs)")
    right.set_ylabel("rank")
    right.set_title("median and p10–p90 per rank", fontsize=9)
    right.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
