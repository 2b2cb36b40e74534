"""Plots a person can read: fixed colours, ratio axes in ×, legends that explain and never cover."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynamiccl.cli.explain import explain_rows
from dynamiccl.cli.main import main
from dynamiccl.plots import (
    ALGORITHM_COLOURS,
    PROTOCOL_MARKERS,
    algorithm_colour,
    choice_colour,
    explain_figure,
    format_ratio,
    policy_colour,
    pyplot,
    ratio_axis,
)
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology


def test_every_algorithm_and_protocol_has_a_fixed_distinct_look() -> None:
    assert {a.name.lower() for a in Algorithm} <= set(ALGORITHM_COLOURS)
    assert len(set(ALGORITHM_COLOURS.values())) == len(ALGORITHM_COLOURS)
    assert {p.name.lower() for p in Protocol} == set(PROTOCOL_MARKERS)
    assert algorithm_colour("ring-hier(bw_aware,4ck)") == ALGORITHM_COLOURS["ring-hier"]
    shades = {choice_colour(f"ring/{p}") for p in ("ll", "ll128", "simple")}
    assert len(shades) == 3 and choice_colour("tree/ll") != choice_colour("ring/ll")
    # a trained policy's colour depends on its name only, so every figure and run agree
    assert policy_colour("runs/2024-01-01/model") == policy_colour("runs/2024-01-01/model")
    assert policy_colour("nccl_default") != policy_colour("oracle")


@pytest.mark.parametrize(("value", "text"), [(0.98, "0.98×"), (1.0, "1×"), (1.1, "1.1×"), (2.0, "2×"),
                                             (0.5, "0.5×"), (20.0, "20×"), (1.25, "1.25×")])
def test_ratios_read_as_people_say_them(value: float, text: str) -> None:
    assert format_ratio(value) == text


def _tick_labels(ax) -> list[str]:
    ax.figure.canvas.draw()
    return [t.get_text() for t in ax.get_yticklabels() if t.get_text()]


@pytest.mark.parametrize(("low", "high"), [(1.0, 1.1), (0.9, 2.0), (0.5, 30.0), (1.0, 1.0)])
def test_a_ratio_axis_shows_x_ticks_and_room_for_a_small_gain(low: float, high: float) -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [low, high])
    ratio_axis(ax, low, high)
    labels = _tick_labels(ax)
    assert "1×" in labels and all(label.endswith("×") for label in labels)
    assert 2 <= len(labels) <= 9
    bottom, top = ax.get_ylim()
    assert bottom < low <= high < top
    plt.close(fig)


def test_the_explain_figure_makes_a_ten_percent_gain_visible_and_explains_its_marks() -> None:
    rows = explain_rows(load_topology("dgx_h100", nodes=2), Collective.ALLREDUCE,
                        [2**k for k in range(3, 31, 3)], deployable=False)
    fig = explain_figure(rows, "allreduce on dgx_h100 x2; best pick among all configurations")
    top, bottom = fig.axes
    lo, hi = bottom.get_ylim()
    import math

    assert lo < 1.0 and hi >= max(r["gain"] for r in rows)
    assert (math.log(1.1) - math.log(lo)) / (math.log(hi) - math.log(lo)) > 0.1  # 1.1× stands out
    assert all(label.endswith("×") for label in _tick_labels(bottom))
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert "NCCL's default pick" in legend and "best pick (simulated)" in legend
    assert any(t.startswith("protocol: ") for t in legend) and "64 channels" in legend
    assert any(t.startswith("algorithm: ") for t in legend)
    assert bottom.get_xlabel().startswith("message size") and top.get_ylabel().startswith("bus bandwidth")
    pyplot().close(fig)


@pytest.fixture(scope="module")
def smoke_reports():
    from dynamiccl.agents.policies.registry import load_policy
    from dynamiccl.agents.shipping.evaluate import evaluate_policies
    from dynamiccl.envs.workloads import load_suite

    suite = load_suite("smoke")
    return evaluate_policies([load_policy("nccl_default"), load_policy("oracle")], suite)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_heatmaps_have_labels_a_title_and_a_legend_beside_them(smoke_reports) -> None:
    from dynamiccl.agents.shipping.evaluation_plots import choice_maps_figure, describe_run

    fig = choice_maps_figure(smoke_reports, describe_run("smoke", deployable=True))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    title = fig._suptitle.get_window_extent(renderer)
    assert not _overlaps(title, legend)
    for ax in fig.axes:
        assert ax.get_ylabel() == "ranks" and ax.get_title(loc="left").startswith("policy: ")
        assert not _overlaps(legend, ax.get_tightbbox(renderer))  # panels, tick labels included
        assert not _overlaps(title, ax.get_tightbbox(renderer))  # the first panel's title too
    assert fig.axes[-1].get_xlabel().startswith("message size")
    assert "smoke suite" in fig._suptitle.get_text() and "deployable actions" in fig._suptitle.get_text()
    pyplot().close(fig)


def test_speedup_plot_reads_in_ratios_and_names_the_run(smoke_reports) -> None:
    from dynamiccl.agents.shipping.evaluation_plots import describe_run, speedup_figure

    fig = speedup_figure(smoke_reports, describe_run("heldout", deployable=False))
    ax = fig.axes[0]
    assert all(label.endswith("×") for label in _tick_labels(ax))
    assert "heldout suite, all simulator actions" in ax.get_title()
    colours = {line.get_label(): line.get_color() for line in ax.get_lines() if line.get_label()[0] != "_"}
    assert colours == {"nccl_default": policy_colour("nccl_default"), "oracle": policy_colour("oracle")}
    pyplot().close(fig)


@pytest.mark.multiproc
def test_profile_collective_reports_both_times_and_draws_arrivals(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "arrivals"
    assert main(["profile", "collective", "--backend", "gloo", "--nprocs", "2", "--size", "64K",
                 "--warmup", "1", "--iters", "8", "--runs", "1", "--inject-straggler", "1:30ms",
                 "--plot", str(plot), "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    size = 64 * 2**10
    assert out["algbw_with_wait_GBps"] == pytest.approx(size / out["time_us"] / 1e3)
    assert out["algbw_GBps"] == pytest.approx(size / out["time_after_straggler_us"] / 1e3)
    assert out["time_us"] >= 30_000  # the punctual rank waited for the late one
    assert f"plot written to {plot}.png" in captured.err
    assert Path(f"{plot}.png").read_bytes()[:4] == b"\x89PNG"


def test_profile_table_has_nccl_tests_columns_and_one_row_per_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A measurement with rank 1 arriving 30 ms late, summarized by the runner's own code."""
    import numpy as np

    from dynamiccl.cli.profile import _plot, _print_result
    from dynamiccl.profiler.measure.runner import CollectiveSpec, summarize

    spec = CollectiveSpec("allreduce", 2**20, "gloo", warmup=0, iters=10, runs=1, straggler_rank=1,
                          straggler_delay_us=30_000.0)
    rng = np.random.default_rng(0)
    times = np.zeros((2, 2, 1, 10))
    arrival = np.cumsum(np.full(10, 50_000.0))
    times[0, 1, 0], times[1, 1, 0] = arrival, arrival + 30_000 + rng.uniform(0, 500, 10)
    times[1, 0, 0] = 400 + rng.uniform(0, 20, 10)  # the late rank finds everyone waiting
    times[0, 0, 0] = times[1, 1, 0] - times[0, 1, 0] + times[1, 0, 0]
    result = summarize(spec, times)
    assert result.straggler.rank == 1
    _print_result(spec, result, "gloo")
    table = capsys.readouterr().out
    for column in ("size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        assert column in table
    assert "1048576" in table and "262144" in table and "float" in table
    assert "first arrival (with the wait)" in table and "the straggler's arrival" in table
    assert f"{result.time_us:.2f}" in table and f"{result.time_after_straggler_us:.2f}" in table
    assert result.algbw_with_wait_GBps == pytest.approx(2**20 / result.time_us / 1e3)
    plot = _plot(result, tmp_path / "arrivals")
    assert plot.name == "arrivals.png" and plot.read_bytes()[:4] == b"\x89PNG"


def test_the_explain_title_stays_inside_the_figure() -> None:
    """A system's description makes a long title; centred over the axes the legend pushes left,
    one line ran off the figure's left edge."""
    topo = load_topology("dgx_h100", nodes=2)
    rows = explain_rows(topo, Collective.ALLREDUCE, [2**k for k in range(3, 31, 9)],
                        deployable=True)
    title = (f"allreduce on {topo.describe()}; best pick among all configurations, "
             "simulator-only ones included")
    fig = explain_figure(rows, title)
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    assert fig.axes[0].get_title().replace("\n", " ") == title
    pyplot().close(fig)


@pytest.mark.parametrize(("flag", "words"), [([], "deployable actions"),
                                             (["--all-actions"], "all actions")])
def test_explain_json_rows_name_their_action_set(capsys, flag, words) -> None:
    assert main(["explain", "--topology", "dgx_h100", "--collective", "allreduce",
                 "--max-size", "1K", "--json", *flag]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["action_set"].startswith(words) for r in rows)


# --- issue 23: every figure the project writes, read at a glance -----------------------------------

def _texts_inside(fig) -> None:
    """Every title, axis label and legend lies wholly inside the figure (a title wider than its
    figure lost its first letters; a long y-label ran off the left edge)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax.xaxis.label, ax.yaxis.label]
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_text()]
    boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
    for box in boxes:
        assert box.x0 >= -1 and box.y0 >= -1, box
        assert box.x1 <= fig.bbox.width + 1 and box.y1 <= fig.bbox.height + 1, box


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch):
    """The figures written through ``plots.save`` by the modules under test, kept for inspection."""
    figures = []

    def keep(fig, path):
        figures.append(fig)
        return Path(path)

    for module in ("dynamiccl.agents.training.training_plots", "dynamiccl.agents.shipping.evaluation_plots",
                   "dynamiccl.profiler.fit.fit_plot"):
        monkeypatch.setattr(f"{module}.save", keep)
    yield figures
    for fig in figures:
        pyplot().close(fig)


def test_the_training_curve_keeps_its_labels_and_its_last_point_in_view(tmp_path: Path, captured) -> None:
    from dynamiccl.agents.training.full_info_agent import AGENT
    from dynamiccl.agents.training.training_plots import plot_training

    steps = range(8192, 204801, 8192)
    (tmp_path / "progress.csv").write_text("time/total_timesteps," + AGENT.curve[0] + "\n" + "".join(
        f"{s},{0.4 / (1 + s / 20000):.4f}\n" for s in steps))
    (tmp_path / "evaluations.jsonl").write_text("".join(
        json.dumps({"step": s, "oracle_share": s / 250000}) + "\n" for s in range(40960, 204801, 40960)))
    plot_training(tmp_path, "full_info", AGENT.curve)
    fig = captured[0]
    _texts_inside(fig)
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert all(not _overlaps(legend, ax.get_window_extent(renderer)) for ax in fig.axes)


@pytest.mark.parametrize("keys", [["learning_rate"], ["learning_rate", "n_steps", "gamma"]])
def test_the_sweep_title_fits_one_panel_or_many(tmp_path: Path, captured, keys: list[str]) -> None:
    from dynamiccl.agents.training.training_plots import plot_sweep

    rows = [{"learning_rate": 10 ** (-4 + i / 3), "n_steps": 64 * (i + 1), "gamma": 0.9 + i / 100,
             "oracle_share": 0.3 + i / 20} for i in range(8)]
    plot_sweep(rows, keys, "oracle_share", "maskable_ppo", tmp_path)
    _texts_inside(captured[0])
    assert captured[0]._suptitle.get_text().replace("\n", " ").startswith("sweep of maskable_ppo")


def test_the_choice_maps_title_keeps_its_first_letter(smoke_reports, captured, tmp_path: Path) -> None:
    from dynamiccl.agents.shipping.evaluation_plots import plot_reports

    plot_reports(smoke_reports, tmp_path, suite="smoke", deployable=True)
    for fig in captured:
        _texts_inside(fig)
    assert captured[0]._suptitle.get_text().startswith("most frequent pick per cell")


def test_calibration_panels_are_titled_by_file_name_without_overlap(tmp_path: Path, captured) -> None:
    from dynamiccl.profiler.fit.calibrate import calibrate
    from dynamiccl.profiler.fit.fit_plot import plot_fit
    from dynamiccl.profiler.formats.measurements import read

    folder = Path(__file__).parent / "fixtures" / "real" / "sophia_dgx_a100_ib"
    records = [r for name in ("all_reduce_n2.txt", "all_gather_n2.txt") for r in read(folder / name)[0]]
    plot_fit(calibrate(records, load_topology(folder / "topology.yaml"), keep_undetermined=True),
             tmp_path / "fit.png")
    fig = captured[0]
    _texts_inside(fig)
    renderer = fig.canvas.get_renderer()
    titles = [ax.title for ax in fig.axes if ax.get_title()]
    assert [t.get_text().splitlines()[0] for t in titles] == ["all_reduce_n2.txt", "all_gather_n2.txt"]
    assert not _overlaps(*(t.get_window_extent(renderer) for t in titles))
    assert str(folder) not in "".join(t.get_text() for t in titles)


def test_a_figure_of_ours_is_told_from_a_users_picture(tmp_path: Path) -> None:
    from dynamiccl.plots import FIGURE, save

    for suffix in (".png", ".pdf", ".svg", ".jpg"):
        fig, ax = pyplot().subplots()
        ax.plot([1, 2])
        ours = save(fig, tmp_path / f"ours{suffix}")
        assert FIGURE.written_by(ours), suffix
    picture = tmp_path / "photo.png"
    picture.write_bytes((tmp_path / "ours.png").read_bytes().replace(b"DynamICCL figure", b"my holiday....."))
    assert not FIGURE.written_by(picture)


@pytest.mark.parametrize("argv", [
    ["simulate", "--topology", "dgx_h100", "--collective", "allreduce", "--size", "1M"],
    ["explain", "--topology", "dgx_h100", "--collective", "allreduce", "--max-size", "1K"],
    ["evaluate", "--policy", "nccl_default", "--policy", "oracle", "--suite", "smoke"],
])
def test_tables_printed_to_a_pipe_keep_every_header_whole(capsys, argv: list[str]) -> None:
    """Outside a terminal rich squeezed tables to 80 columns: "cal…", "ncc…", "tun…"."""
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) > 80  # the whole table, not a squeezed one
