"""experiments/validate_real.py runs on the published fixtures and reports in a stable JSON shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "validate_real.py"
BANDS = ["< 64 KiB", "64 KiB - 16 MiB", ">= 16 MiB"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_json_shape_on_two_systems() -> None:
    out = _run("--json", "--system", "h100_nvswitch_node", "--system", "sophia_dgx_a100_ib")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["bands"] == BANDS and report["error"] == "max(pred/meas, meas/pred)"
    systems = {s["system"]: s for s in report["systems"]}
    assert set(systems) == {"h100_nvswitch_node", "sophia_dgx_a100_ib"}
    for system in systems.values():
        assert set(system["datasheet"]) == set(BANDS) == set(system["calibrated_heldout"])
        for stats in system["datasheet"].values():
            assert stats["n"] > 0 and 1.0 <= stats["median"] <= stats["worst"]
    for which in ("datasheet", "calibrated_heldout"):
        for band in BANDS:
            line = report["overall"][which][band]
            assert {"n", "median", "worst", "systems", "worst_system_median"} <= set(line)
    details = systems["h100_nvswitch_node"]["runs_detail"]
    assert {d["run"] for d in details} >= {"all_reduce_ring", "all_reduce_default"}
    ring = next(d for d in details if d["run"] == "all_reduce_ring")
    assert ring["forced"] == {"NCCL_ALGO": "RING"} and ring["launch"] == "single_process"
    assert ring["datasheet"][">= 16 MiB"]["median_pred_over_meas"] > 0
    # Large messages on a single NVSwitch node: the datasheet model is close (x1.05 measured).
    assert systems["h100_nvswitch_node"]["datasheet"][">= 16 MiB"]["median"] < 1.2


def test_table_and_help() -> None:
    out = _run("--system", "sophia_dgx_a100_ib")
    assert out.returncode == 0, out.stderr
    assert "sophia_dgx_a100_ib" in out.stdout and "worst system median" in out.stdout
    helped = _run("--help")
    assert helped.returncode == 0 and "--json" in helped.stdout


def test_plot_draws_every_system_and_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    figure = tmp_path / "real.png"
    out = _run("--system", "h100_nvswitch_node", "--system", "l40s_tcp_socket", "--plot", str(figure))
    assert out.returncode == 0, out.stderr
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {figure}" in out.stderr
    assert "l40s_tcp_socket" in out.stdout  # the table is still printed beside the figure
    missing = _run("--system", "h100_nvswitch_node", "--plot", str(tmp_path / "no" / "real.png"))
    assert missing.returncode == 2 and "does not exist; create the folder" in missing.stderr
    assert not (tmp_path / "no").exists()


def test_points_keep_the_sign_of_the_error() -> None:
    """The plotted points are predicted / measured (below 1 the model is too fast); the table's
    error is the same points folded onto >= 1."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import validate_real as vr
    finally:
        sys.path.pop(0)
    result = vr.evaluate_system(ROOT / "tests" / "fixtures" / "real" / "l40s_tcp_socket")
    large = [x for size, x in result.datasheet_points if size >= 16 * 2**20]
    assert large and max(large) < 0.5  # 400 GbE at line rate is far faster than NCCL's sockets
    folded = vr.pooled([result], "datasheet")[">= 16 MiB"]
    assert folded["median"] == pytest.approx(result.datasheet[">= 16 MiB"].median)
    assert folded["median"] > 2.0


def test_unknown_system_is_a_usage_error() -> None:
    out = _run("--system", "no_such_system")
    assert out.returncode == 2 and "no system folder" in out.stderr


def test_every_other_size_split_and_error_ratio() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import validate_real as vr
    finally:
        sys.path.pop(0)
    from dynamiccl.profiler.fit.fit_report import split_every_other
    from dynamiccl.profiler.formats.published import load_system

    assert vr.split_every_other is split_every_other  # the CLI's held-out check holds out the same
    runs = load_system(ROOT / "tests" / "fixtures" / "real" / "sophia_dgx_a100_ib")
    train, test = vr.split_every_other([r for run in runs for r in run.records])
    sizes = sorted(r.nbytes for r in runs[0].records)
    assert [r.nbytes for r in train if r.coll == runs[0].collective] == sizes[0::2]
    assert len(train) + len(test) == sum(len(r.records) for r in runs)
    assert np.allclose(vr.error_ratio(np.array([2.0, 1.0]), np.array([1.0, 2.0])), [2.0, 2.0])


def test_forced_tree_and_ll_are_simulated_as_forced() -> None:
    """Enum members whose value is 0 (Tree, LL) must still count as forced, in the calibration
    and so in the validation that predicts through it."""
    from dynamiccl.profiler.fit.calibrate import pick_configs, prepare
    from dynamiccl.profiler.formats.published import load_system
    from dynamiccl.system.topology import load_topology

    fixtures = ROOT / "tests" / "fixtures" / "real"
    b200 = [r for run in load_system(fixtures / "dgx_b200_ib") for r in run.records
            if r.algorithm == "tree"]
    topo = load_topology(fixtures / "dgx_b200_ib" / "topology.yaml")
    assert {c.algorithm.name for c in pick_configs(prepare(b200, topo), topo)} == {"TREE"}
    ll = [r for run in load_system(fixtures / "rtx5090_socket_2ranks") for r in run.records
          if r.protocol == "ll"]
    topo = load_topology(fixtures / "rtx5090_socket_2ranks" / "topology.yaml")
    assert {c.protocol.name for c in pick_configs(prepare(ll, topo), topo)} == {"LL"}
