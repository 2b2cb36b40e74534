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
    rows = evaluate_json(capsys, "--policy", policy, "--suite", "heldout")
    assert isinstance(rows, list) and len(rows) == 1  # one shape, whatever the number of policies
    result = rows[0]
    assert {"policy", "action_set", "backend", "geomean_speedup", "oracle_share", "slower_calls",
            "worst_speedup", "worst_call", "scenarios"} <= set(result)
    assert result["action_set"] == "deployable actions" and result["backend"] == "sim"
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


def test_deployable_is_the_default_and_all_actions_must_be_asked_for(capsys):
    [full] = evaluate_json(capsys, "--policy", "oracle", "--suite", "smoke", "--all-actions")
    [dep] = evaluate_json(capsys, "--policy", "oracle", "--suite", "smoke")
    [same] = evaluate_json(capsys, "--policy", "oracle", "--suite", "smoke", "--deployable")
    assert 1.0 <= dep["geomean_speedup"] == same["geomean_speedup"] <= full["geomean_speedup"]
    assert full["action_set"].startswith("all actions") and dep["action_set"] == "deployable actions"


def test_an_exported_file_is_scored_next_to_the_policy_it_came_from(capsys, tmp_path):
    out = tmp_path / "oracle.dccl"
    assert main(["export", "--policy", "oracle", "--topology", "dgx_h100", "--nodes", "2",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    rows = evaluate_json(capsys, "--policy", str(out), "--suite", "smoke")
    assert [r["policy"] for r in rows] == ["oracle", "oracle.dccl"]
    source, shipped = rows
    assert shipped["slower_calls"] == 0  # the gate: never slower than NCCL on the model
    assert 1.0 <= shipped["geomean_speedup"] <= source["geomean_speedup"]


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
    (["--policy", "/nonexistent/model.zip"], "/nonexistent/model.zip does not exist"),
    (["--policy", "/nonexistent.zip"], "/nonexistent.zip does not exist"),
    (["--policy", "oracle", "--out", ""], "argument --out: empty"),
    (["--policy", "oracle", "--budget", "0"], "give 1..10000"),
    (["--policy", "oracle", "--backend", "replay"], "needs --replay"),
])
def test_bad_input_is_one_line_and_exit_code_2(capsys, args, message):
    suite = [] if "--suite" in args else ["--suite", "smoke"]
    assert main(["evaluate", *args, *suite]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_evaluate_refuses_what_it_cannot_read_or_must_not_overwrite(capsys, tmp_path):
    bad = tmp_path / "model.zip"
    bad.write_text("not a zip")
    assert main(["evaluate", "--policy", str(bad), "--suite", "smoke"]) == 2
    assert "not a checkpoint" in capsys.readouterr().err
    afile = tmp_path / "results.txt"
    afile.write_text("keep me")
    assert main(["evaluate", "--policy", "oracle", "--suite", "smoke", "--out", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err and afile.read_text() == "keep me"
    outdir = tmp_path / "eval"
    assert main(["evaluate", "--policy", "oracle", "--suite", "smoke", "--out", str(outdir)]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--policy", "oracle", "--suite", "smoke", "--out", str(outdir)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["evaluate", "--policy", "oracle", "--suite", "smoke", "--out", str(outdir),
                 "--force"]) == 0
