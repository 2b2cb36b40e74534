"""Smoke tests of the simulator's experiment scripts, each run as a user would, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_bench_prints_both_rates_as_json() -> None:
    out = json.loads(_run("experiments/bench_simulator.py", "--json", "--seconds", "0.05",
                          "--states", "32", "--naive-pairs", "20"))
    assert set(out) == {"evals_per_s", "naive_evals_per_s"}
    assert out["evals_per_s"] > out["naive_evals_per_s"] > 0


CSV = ROOT.parent / "shared" / "reference" / "published_points.csv"


@pytest.mark.skipif(not CSV.is_file(), reason="the shared reference published_points.csv is not here")
def test_validate_reports_every_published_row() -> None:
    report = json.loads(_run("experiments/validate_simulator.py", "--json", "--csv", str(CSV)))
    rows = report["published_points"]
    assert len(rows) == CSV.read_text().strip().count("\n")
    for row in rows:
        assert "skipped" in row or row["simulator"] is not None
    formula = {r["id"]: r for r in rows}["s004_t1_sar"]
    assert abs(formula["ratio"] - 1.0) < 0.01   # the simulator reduces to seed 004's Table 1
    assert len(report["seed000"]) == 19
    for r in report["seed000"]:  # charging the flat ring intra-node bandwidth inflates the slowdown
        assert r["intra_charged_flat_slowdown"] > r["physical_slowdown"]
    grid = {(r["collective"], r["npus"], r["size"]): r for r in report["seed001"]}
    assert len(grid) == 30  # AllReduce and AllGather x 5 NPU counts x 3 sizes
    latency_bound = grid[("allreduce", 64, "1 KiB")]
    assert latency_bound["seed001"] == "14"
    assert latency_bound["link_only"] == pytest.approx(126 / 14, rel=0.01)  # 2·63 two-cable / 28 hops
    assert 1.0 < latency_bound["physical"] <= latency_bound["link_only"]
    assert abs(grid[("allreduce", 64, "1 GiB")]["physical_one_chunk"] - 1.0) < 0.05


def test_scripts_have_help() -> None:
    for script in ("experiments/bench_simulator.py", "experiments/validate_simulator.py"):
        assert "usage" in _run(script, "--help")
