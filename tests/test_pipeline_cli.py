"""``dynamiccl evaluate``: every built-in baseline on the held-out suite, without training."""

from __future__ import annotations

import json

import pytest

from dynamiccl.cli.main import main
from dynamiccl.envs.workloads import load_suite

HELDOUT_CALLS = sum(len(e.scenarios) for e in load_suite("heldout"))


def evaluate_json(capsys, *args: str):
    code = main(["evaluate", *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("policy", ["nccl_default", "oracle", "static_best", "random",
                                    "coordinate_descent", "bandit"])
def test_evaluate_json_contract_for_every_builtin_on_heldout(capsys, policy):
    result = evaluate_json(capsys, "--policy", policy, "--suite", "heldout")
    assert {"policy", "geomean_speedup", "oracle_share", "worst_speedup", "scenarios"} <= set(result)
    assert result["policy"] == policy and result["scenarios"] == HELDOUT_CALLS
    assert 0 < result["worst_speedup"] <= result["geomean_speedup"]
    if policy == "oracle":
        assert result["oracle_share"] == 1.0
    if policy == "nccl_default":
        assert result["oracle_share"] == 0.0 and result["geomean_speedup"] == 1.0
    if policy == "random":
        assert result["oracle_share"] < 0.0
    if policy in ("coordinate_descent", "bandit"):
        assert result["calls_to_5pct"] >= 1 and 0 < result["reached_5pct"] <= 1


def test_deployable_oracle_gains_no_more_than_the_full_oracle(capsys):
    full = evaluate_json(capsys, "--policy", "oracle", "--suite", "smoke")
    dep = evaluate_json(capsys, "--policy", "oracle", "--suite", "smoke", "--deployable")
    assert 1.0 <= dep["geomean_speedup"] <= full["geomean_speedup"]


def test_several_policies_give_a_list_and_the_table_files_and_plots(capsys, tmp_path):
    rows = evaluate_json(capsys, "--policy", "nccl_default,oracle", "--policy", "random",
                         "--suite", "smoke", "--out", str(tmp_path), "--plots")
    assert [r["policy"] for r in rows] == ["nccl_default", "oracle", "random"]
    assert {p.name for p in tmp_path.iterdir()} == {"summary.csv", "summary.json", "calls.csv",
                                                   "choices.png", "speedup_vs_size.png"}
    assert main(["evaluate", "--policy", "oracle", "--suite", "smoke"]) == 0
    assert "oracle share" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--policy", "oracel"], "unknown policy 'oracel'"),
    (["--policy", "oracle", "--suite", "nosuch"], "unknown scenario 'nosuch'"),
    (["--policy", "oracle", "--plots"], "--plots needs --out"),
    (["--policy", "/nonexistent/model.zip"], "unknown policy"),
])
def test_bad_input_is_one_line_and_exit_code_2(capsys, args, message):
    suite = [] if "--suite" in args else ["--suite", "smoke"]
    assert main(["evaluate", *args, *suite]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
