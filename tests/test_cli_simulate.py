"""`dynamiccl simulate`, `explain` and `topologies`: the JSON contract and the constraint semantics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.decisions import KnobConstraints, best, nccl_default
from dynamiccl.system.knobs import Hierarchy, Schedule
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

CONFIG_KEYS = {"algorithm", "protocol", "channels", "hierarchy", "schedule", "chunks", "chunk_bytes"}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_free_choice_reports_nccl_default_and_the_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "simulate", "--topology", "dgx_h100", "--nodes", "2",
                   "--collective", "allreduce", "--size", "100MB")
    assert out["input"]["size"] == 100 * 2**20  # nccl-tests: the first suffix letter is binary
    assert {"time_us", "time_after_straggler_us", "algbw_GBps", "busbw_GBps", "config",
            "nccl_default", "best"} <= set(out)
    assert set(out["config"]) == CONFIG_KEYS
    assert out["config"] == out["nccl_default"]["config"]
    assert out["time_us"] == out["nccl_default"]["time_us"] == out["time_after_straggler_us"]
    assert out["nccl_default"]["nccl_model_us"] > 0
    assert out["best"]["time_us"] <= out["time_us"]
    # nccl-tests' definitions: algbw = size / time, busbw = algbw * 2(n-1)/n for allreduce
    assert out["algbw_GBps"] == pytest.approx(100 * 2**20 / out["time_us"] / 1e3)
    assert out["busbw_GBps"] == pytest.approx(out["algbw_GBps"] * 2 * 15 / 16)


def test_every_knob_given_pins_both_choices(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "simulate", "--topology", "ring_ring_16to1", "--collective", "allreduce",
                   "--size", "1GB", "--algo", "ring", "--proto", "simple", "--channels", "8",
                   "--hierarchy", "hierarchical", "--schedule", "bw_aware", "--chunks", "4")
    expected = {"algorithm": "ring", "protocol": "simple", "channels": 8, "hierarchy": "hierarchical",
                "schedule": "bw_aware", "chunks": 4, "chunk_bytes": None}
    assert out["nccl_default"]["config"] == out["best"]["config"] == expected
    assert out["nccl_default"]["nccl_model_us"] is None   # NCCL cannot run a scheduled ring-over-ring
    assert out["best"]["time_us"] == out["time_us"]


def test_partial_knobs_constrain_like_nccl_env_vars(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "simulate", "--topology", "dgx_h100", "--nodes", "8",
                   "--collective", "allreduce", "--size", "1GiB", "--proto", "ll")
    assert out["nccl_default"]["config"]["protocol"] == "ll"
    assert out["best"]["config"]["protocol"] == "ll"
    out = run_json(capsys, "simulate", "--topology", "dgx_h100", "--nodes", "8",
                   "--collective", "allreduce", "--size", "4KB", "--channels", "2")
    assert out["nccl_default"]["config"]["channels"] == out["best"]["config"]["channels"] == 2


def test_straggler_times_count_from_first_and_last_arrival(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "simulate", "--topology", "dgx_a100", "--collective", "allreduce",
                   "--size", "1GiB", "--straggler-rank", "7", "--straggler-delay", "20ms")
    assert out["time_us"] >= out["time_after_straggler_us"] + 20_000 * 0.999
    # StragglAR hides its ReduceScatter precondition behind the late arrival (seed 004)
    assert out["best"]["config"]["algorithm"] == "stragglar"
    assert out["best"]["time_us"] < out["time_us"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--collective", "allgather", "--size", "1MB", "--algo", "tree"], "only implements allreduce"),
        (["--collective", "allreduce", "--size", "1MB", "--algo", "nvls", "--proto", "ll"], "simple"),
        (["--collective", "allreduce", "--size", "1MB", "--channels", "99"], "between 1 and 64"),
        (["--collective", "allreduce", "--size", "ten", ], "cannot read size"),
        (["--collective", "allreduce", "--size", "1MB", "--straggler-delay", "5ms"], "--straggler-rank"),
        (["--collective", "allreduce", "--size", "1MB", "--straggler-rank", "99",
          "--straggler-delay", "1ms"], "outside 0..7"),
        (["--collective", "broadcastt", "--size", "1MB"], "unknown collective"),
        (["--collective", "allreduce", "--size", "1MB", "--algo", "tree", "--hierarchy", "flat"],
         "tree is not flat"),
    ],
)
def test_invalid_input_exits_non_zero_with_a_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["simulate", "--topology", "dgx_h100", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_decisions_best_never_loses_to_nccl_default() -> None:
    for topo in (load_topology("dgx_h100", nodes=4), load_topology("pcie_cluster"),
                 load_topology("ring_ring_48to1")):
        for coll in Collective:
            for size in (8, 65536, 64 * 2**20, 2**30):
                scenario = Scenario(topo, coll, size)
                assert best(scenario).time_us <= nccl_default(scenario).time_us * (1 + 1e-12)
                assert best(scenario, deployable=True).config.exportable


def test_schedule_implies_the_hierarchical_ring() -> None:
    constraints = KnobConstraints(schedule=Schedule.BW_AWARE)
    assert constraints.algorithm == Algorithm.RING and constraints.hierarchy == Hierarchy.HIERARCHICAL
    scenario = Scenario(load_topology("ring_ring_48to1"), Collective.ALLREDUCE, 10**9)
    default = nccl_default(scenario, constraints)
    assert default.config.schedule == Schedule.BW_AWARE and default.nccl_model_us is None
    simple = nccl_default(scenario, KnobConstraints(protocol=Protocol.SIMPLE))
    assert simple.config.protocol == Protocol.SIMPLE


def test_explain_sweeps_every_size_and_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "sweep.png"
    assert main(["explain", "--topology", "dgx_h100", "--collective", "allreduce", "--json",
                 "--plot", str(plot)]) == 0
    rows = json.loads(capsys.readouterr().out)
    sizes = [r["size"] for r in rows]
    assert sizes[0] == 8 and sizes[-1] == 4 * 2**30 and len(sizes) == 30
    assert all(r["gain"] >= 1.0 - 1e-9 for r in rows)
    # the protocol regimes of an 8xH100 node show up in the sweep
    assert rows[0]["best_config"].split("/")[1] in ("ll", "ll128")
    assert rows[-1]["best_config"].split("/")[1] == "simple"
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_console_command_runs_with_help_everywhere() -> None:
    cmd = [sys.executable, "-m", "dynamiccl.cli.main"]
    top = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=True)
    assert "simulate" in top.stdout and "explain" in top.stdout
    listing = subprocess.run([*cmd, "topologies"], capture_output=True, text=True, check=True)
    assert "dgx_h100" in listing.stdout and "pcie_cluster" in listing.stdout
    table = subprocess.run([*cmd, "explain", "--topology", "dgx_h100", "--collective", "allreduce",
                            "--max-size", "1KiB"], capture_output=True, text=True, check=True)
    assert "NCCL picks" in table.stdout and "1024" in table.stdout  # sizes in bytes, as nccl-tests
    assert table.stderr == ""  # no progress bar drawn into a pipe


def test_explain_counts_only_deployable_picks_unless_all_actions(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "--topology", "ring_ring_48to1", "--nodes", "4", "--collective", "allreduce",
            "--min-size", "64M", "--json"]
    assert main(args) == 0
    deployable = json.loads(capsys.readouterr().out)
    assert main([*args, "--all-actions"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert not any("hier" in r["best_config"] for r in deployable)
    assert any("hier" in r["best_config"] for r in every)  # ring-over-ring wins at 48:1
    assert all(e["gain"] >= d["gain"] - 1e-9 for d, e in zip(deployable, every, strict=True))
