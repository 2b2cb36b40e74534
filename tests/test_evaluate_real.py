"""``evaluate`` says when a policy file's rules meet no call of the suite (not a silent 1.000x),
and scores real logs without a hand-written suite (``--backend replay --topology``)."""

from __future__ import annotations

import json
from pathlib import Path

from dynamiccl.cli.main import main

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"


def test_a_16_node_policy_scored_on_the_heldout_suite_says_no_rule_applies(tmp_path, capsys):
    policy = tmp_path / "p16.dccl"
    assert main(["export", "--policy", "oracle", "--topology", "dgx_h100", "--nodes", "16",
                 "-o", str(policy)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--policy", str(policy), "--suite", "smoke"]) == 0
    captured = capsys.readouterr()
    assert "no rule of p16.dccl applies to any call of this suite" in captured.err
    row = next(line for line in captured.out.splitlines() if "p16.dccl" in line)
    assert "no rule applies" in row and "1.000x" not in row.split("│")[2]


def test_real_logs_are_scored_on_the_calls_they_measured_without_a_suite(tmp_path, capsys):
    tuned = tmp_path / "t.dccl"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements", str(REAL),
                 "--collective", "allreduce", "--no-calibrate", "-o", str(tuned)]) == 0
    capsys.readouterr()
    args = ["evaluate", "--policy", f"nccl_default,{tuned}", "--backend", "replay", "--replay",
            str(REAL)]
    assert main(args) == 2
    assert "give --topology" in capsys.readouterr().err
    assert main([*args, "--topology", "dgx_h100", "--json"]) == 0
    reports = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert reports["nccl_default"]["geomean_speedup"] == 1.0
    # the tuned file pins ring/LL128 where the NCCL_ALGO=RING runs measured NCCL running it
    assert reports["t.dccl"]["geomean_speedup"] > 1.0
    assert reports["t.dccl"]["scenarios"] == reports["nccl_default"]["scenarios"] > 50
    assert reports["t.dccl"]["backend"] == "replay"
