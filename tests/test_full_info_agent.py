"""The full-information learner as a first-class agent: its config, the training pipeline (run
folder, wandb offline, kill -9 / Ctrl-C and resume, evaluation), loading it for evaluate and export,
its Ray Tune sweep and its place in bench_training."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from training_runs import (
    ENV,
    REPO,
    interrupt,
    kill_after_checkpoints,
    resume,
    run,
    same_parameters,
    start_and_wait,
    train_command,
    train_config,
    train_logged,
)

from dynamiccl.agents.policies.full_info import FullInfoConfig
from dynamiccl.agents.policies.registry import load_policy
from dynamiccl.agents.training import full_info_agent
from dynamiccl.agents.training.callbacks import trained_seconds
from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.train import train
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

#: A learner small enough for tests: 256 calls a round on 4 fresh systems.
SMALL = ["agent=full_info", "scenario=smoke", "eval.suite=smoke", "eval.baselines=[nccl_default]",
         "eval.plots=false", "trainer.progress_bar=false", "agent.model.systems_per_round=4",
         "agent.model.calls_per_system=64", "agent.model.hidden=32", "agent.model.layers=2",
         "agent.model.ensemble=2"]


def test_full_info_is_an_agent_option_whose_model_keys_are_the_learners():
    cfg = train_config("agent=full_info")
    validate(cfg)
    assert cfg.agent.name == full_info_agent.NAME and full_info_agent.is_full_info(cfg.agent)
    learner = full_info_agent.AGENT.build(cfg.agent, seed=7)
    assert learner.config == FullInfoConfig(seed=7), "the YAML trains the learner bench_learning does"
    assert not full_info_agent.is_full_info(train_config().agent)
    with pytest.raises(ConfigCheckError, match=r"agent.model.hiden.*did you mean 'hidden'"):
        validate(train_config("agent=full_info", "+agent.model.hiden=3"))
    with pytest.raises(ConfigCheckError, match="agent.model.n_epochs: hyperparameters of "
                                               "maskable_ppo, ppo, not of full_info"):
        validate(train_config("agent=full_info", "+agent.model.n_epochs=3"))
    for setting in ("env.observation=research", "env.deployable=false"):
        with pytest.raises(ConfigCheckError, match="agent=full_info learns only deployable actions"):
            validate(train_config("agent=full_info", setting))
    validate(train_config("agent=full_info", "agent.model.systems=train"))
    with pytest.raises(ConfigCheckError, match="agent.model.systems: unknown scenario 'trian'"):
        validate(train_config("agent=full_info", "agent.model.systems=trian"))


def _decisions(policy) -> list[int]:
    topo = load_topology("dgx_h100", nodes=2)
    return [policy.decide(Scenario(topo, c, 1 << k)) for c in Collective for k in range(3, 34, 3)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short run in a run folder, logging to wandb offline and shipped as the main job ships
    (``deploy``); its printed output is the fixture's third item."""
    run_dir = tmp_path_factory.mktemp("full_info") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = train_logged(run_dir, [*SMALL, "+deploy={topology: dgx_h100, nodes: [2]}"],
                               1024, 512, 512)
    return run_dir, metrics, printed.getvalue()


def test_a_training_run_leaves_its_folder_curve_evaluation_and_wandb_run(trained):
    run_dir, metrics, _ = trained
    assert metrics["step"] == 1024 and metrics["train_seconds"] > 0
    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    assert [int(r["time/total_timesteps"]) for r in rows] == [256, 512, 768, 1024]
    assert all(float(r["train/fresh_loss"]) > 0 for r in rows)
    assert [json.loads(line)["step"] for line in (run_dir / "evaluations.jsonl").read_text().splitlines()] \
        == [512], "periodic evaluations before the end; the end has the full evaluation"
    assert (run_dir / "training_curve.png").stat().st_size > 0
    summary = json.loads((run_dir / "eval" / "summary.json").read_text())
    assert [r["policy"] for r in summary] == ["nccl_default", "full_info"]
    assert summary[1]["oracle_share"] == pytest.approx(metrics["oracle_share"])
    assert json.loads((run_dir / "model.json").read_text())["algo"] == "full_info"
    steps = [json.loads(line)["step"] for line in
             (run_dir / "checkpoints" / "history.jsonl").read_text().splitlines()]
    assert steps == [512, 1024]
    assert [p.name for p in (run_dir / "checkpoints").glob("last_resume_*.pt")] == \
        ["last_resume_1024.pt"]


def test_the_run_ends_by_saying_what_it_shipped_why_and_what_to_run_next(trained):
    """After the table (kept, with the shipped file's row), one paragraph: how much of what the
    learned policy gains the file ships, why the gate held the rest back, and the next command."""
    from dynamiccl.plugin import policy_file as pf
    run_dir, metrics, printed = trained
    table, _, after = printed.partition("policy.dccl (shipped)")
    assert "full_info" in table and "oracle share" in table
    paragraph = " ".join(after.split("[dynamiccl train] ", 1)[1].split())
    overrides = sum(1 for r in pf.read(run_dir / "policy.dccl").slice().rules if r.decision is not None)
    assert (overrides == 0) == ("ships no override: NCCL decides every call (dgx_h100, 2 node(s))"
                                in paragraph)
    assert "but no measurement backs its predicted gains" in paragraph, "the tiny learner proposes"
    assert f"it runs at {metrics['geomean_speedup']:.3f}x NCCL's speed" in paragraph
    assert "Next, on your system: `dynamiccl tune --topology dgx_h100 --plan`" in paragraph


def test_the_training_curve_and_evaluations_reach_wandb_offline(trained):
    run_dir, metrics, _ = trained
    [offline] = sorted((run_dir / "wandb").glob("offline-run-*"))
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline)],
                         capture_output=True, text=True, check=True, timeout=120)
    records = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    items = [r["history"]["item"] for r in records if r.get("type") == "history"]
    curve = [(h["global_step"], h["train/fresh_loss"]) for h in items if "train/fresh_loss" in h]
    assert [step for step, _ in curve] == [256, 512, 768, 1024]
    shares = [h["eval/oracle_share"] for h in items if "eval/oracle_share" in h]
    assert shares[-1] == pytest.approx(metrics["oracle_share"])
    assert any(h.get("eval/summary._type") == "table-file" for h in items)


def test_the_trained_learner_loads_by_file_and_by_run_folder_for_evaluate_and_export(trained, tmp_path):
    run_dir, metrics, _ = trained
    learner, restored = full_info_agent.AGENT.load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert restored and learner.samples_seen == 1024
    by_file, by_folder = load_policy(str(run_dir / "model.pt")), load_policy(str(run_dir))
    assert (by_file.name, by_folder.name) == ("model", "full_info")
    assert _decisions(by_file) == _decisions(by_folder) == _decisions(learner.policy())
    out = subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", "evaluate", "--policy",
                          str(run_dir / "model.pt"), "--suite", "smoke", "--json"],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)[0]["oracle_share"] == pytest.approx(metrics["oracle_share"])
    policy_file = tmp_path / "fi.dccl"
    out = subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", "export", "--policy",
                          str(run_dir), "--topology", "dgx_h100", "--nodes", "2",
                          "--points-per-octave", "1", "-o", str(policy_file)],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    from dynamiccl.plugin import policy_file as pf
    assert pf.read(policy_file).header.policy == "run"


def _evaluate_error(policy: Path) -> str:
    """What ``dynamiccl evaluate --policy`` says about a file it refuses (one line, exit 2)."""
    out = subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", "evaluate", "--policy",
                          str(policy), "--suite", "smoke"], capture_output=True, text=True, env=ENV,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    return out.stderr.strip()


def test_a_damaged_learner_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a torch file")
    assert _evaluate_error(bad) == (f"dynamiccl evaluate: error: {bad} is not a full-information "
                                    "learner saved by `dynamiccl train agent=full_info` (or "
                                    "bench_learning.py --save) that can be read (it is cut short, "
                                    "damaged or another file); move it away (a run folder then "
                                    "trains from its start) or give another checkpoint or run "
                                    "folder")


def test_a_learner_file_from_before_the_trained_on_box_is_one_line_naming_the_fix(tmp_path):
    import torch

    from dynamiccl.agents.policies.full_info import FullInfoConfig, FullInfoLearner

    old = FullInfoLearner(FullInfoConfig(hidden=8, layers=1, ensemble=1)).save(tmp_path / "old.pt")
    blob = torch.load(old, weights_only=True)
    for key in ("support_low", "support_high"):
        del blob["state"][key]
    torch.save(blob, old)
    assert _evaluate_error(old) == (f"dynamiccl evaluate: error: {old} was saved before learners "
                                    "kept the box of observations they trained on, which their "
                                    "policy needs; train it again")


def test_a_run_folder_of_another_agent_is_refused_by_name(trained):
    run_dir, _, _ = trained
    with pytest.raises(ConfigCheckError, match="holds a full_info agent but agent is maskable_ppo"):
        train(train_config("experiment=smoke", "resume.allow_changes=true"), run_dir)


def test_a_run_folder_and_a_learner_file_from_when_min_gain_was_called_margin_still_load(trained,
                                                                                       tmp_path):
    from omegaconf import OmegaConf

    from dynamiccl.agents.policies.full_info import FullInfoLearner
    from dynamiccl.agents.training.run_folder import record_config

    run_dir, _, _ = trained
    recorded = OmegaConf.load(run_dir / "config.yaml")
    old = OmegaConf.to_container(recorded)
    old["agent"]["model"]["margin"] = old["agent"]["model"].pop("min_gain")
    old_run = tmp_path / "old_run"
    old_run.mkdir()
    (old_run / "config.yaml").write_text(OmegaConf.to_yaml(old))
    assert record_config(recorded, old_run, 1024) is None, "the renamed key is the same setting"
    old["agent"]["model"]["margin"] = 0.02
    (old_run / "config.yaml").write_text(OmegaConf.to_yaml(old))
    with pytest.raises(ConfigCheckError, match=r"agent.model.min_gain \(0.02 -> 0.005\)"):
        record_config(recorded, old_run, 1024)

    blob = torch.load(run_dir / "model.pt", weights_only=True)
    blob["config"].pop("min_gain")
    blob["config"]["margin"] = 0.02
    torch.save(blob, tmp_path / "old.pt")
    assert FullInfoLearner.load(tmp_path / "old.pt").config.min_gain == 0.02
    assert FullInfoLearner.load(tmp_path / "old.pt").policy().threshold == pytest.approx(np.log1p(0.02))


# --- kill -9 and Ctrl-C, then resume ---------------------------------------------------------------

TOTAL = 8192


def command(run_dir: Path) -> list[str]:
    return train_command(run_dir, [*SMALL, "logger=none"], TOTAL, 512)


def assert_identical(resumed: Path, straight: Path) -> None:
    assert same_parameters(resumed, straight)["samples_seen"] == TOTAL
    for name in ("calls.csv", "summary.csv"):
        assert (resumed / "eval" / name).read_text() == (straight / "eval" / name).read_text()


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    run(command(run_dir))
    return run_dir


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_run_killed_with_sigkill_and_resumed_ends_bit_identical(straight, tmp_path):
    resumed = tmp_path / "resumed"
    kill_after_checkpoints(command(resumed), resumed)
    saved = json.loads((resumed / "checkpoints" / "last.json").read_text())["num_timesteps"]
    learner, restored = full_info_agent.AGENT.load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert restored and 0 < learner.samples_seen < TOTAL and learner.samples_seen % 512 == 0
    assert saved >= learner.samples_seen and not (resumed / "model.pt").exists()

    out = resume(command(resumed), learner.samples_seen, TOTAL)
    assert "optimizer and generator restored" in out.stdout
    assert_identical(resumed, straight)
    # the seconds of both segments, not the second's alone (it said 0.0 after a resume)
    before = trained_seconds(resumed / "checkpoints", learner.samples_seen)
    assert json.loads((resumed / "metrics.json").read_text())["train_seconds"] > before > 0
    # The progress file of each segment holds the rounds it trained; together, the whole run once.
    first = list(csv.DictReader((resumed / "progress.csv").open()))
    second = list(csv.DictReader((resumed / f"progress_from_{learner.samples_seen}.csv").open()))
    assert int(second[0]["time/total_timesteps"]) == learner.samples_seen + 256
    assert int(first[-1]["time/total_timesteps"]) >= learner.samples_seen


@pytest.mark.slow
@pytest.mark.multiproc
def test_ctrl_c_saves_at_a_round_boundary_exits_with_one_line_and_resume_matches(straight, tmp_path):
    resumed = tmp_path / "resumed"
    step = interrupt(start_and_wait(command(resumed), resumed, checkpoints=1))
    learner, _ = full_info_agent.AGENT.load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert learner.samples_seen == step and step % 256 == 0, "the label is the step actually trained"
    run(command(resumed))
    assert_identical(resumed, straight)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_finished_run_started_again_says_so_and_keeps_its_training_time(straight, tmp_path):
    """Rounds are whole, so 8000 steps end at step 8192: the run started again printed "resuming at
    step 8192 of 8000"."""
    import shutil

    again = tmp_path / "again"
    shutil.copytree(straight, again)
    seconds = json.loads((again / "metrics.json").read_text())["train_seconds"]
    out = run([*command(again), "trainer.total_timesteps=8000", "resume.allow_changes=true"])
    assert f"training already finished at step {TOTAL} of 8000 (whole rollouts end past" in out.stdout
    assert "resuming" not in out.stdout
    assert json.loads((again / "metrics.json").read_text())["train_seconds"] == \
        pytest.approx(seconds, abs=0.01)


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_run_killed_before_its_first_checkpoint_says_it_starts_again_from_0(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [arg if not arg.startswith("trainer.checkpoint_every=") else "trainer.checkpoint_every=1000000"
           for arg in command(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, cwd=REPO)
    progress = run_dir / "progress.csv"
    deadline = time.monotonic() + 300
    while not (progress.is_file() and len(progress.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    again = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, cwd=REPO,
                             text=True)
    try:
        said = next(line for line in again.stdout if line.startswith("[dynamiccl train]"))
    finally:
        again.kill()
        again.wait(timeout=30)
    assert "no checkpoint in" in said and "stopped before its first, due at step 1000000" in said
    assert "from step 0" in said


# --- the Ray Tune sweep and the benchmark ----------------------------------------------------------

def _bench_module(name: str = "bench_training"):
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_training_times_the_full_information_learner_by_default():
    assert "full_info" in _bench_module().ALGOS.split(",")
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "bench_training.py"), "--json",
                          "--algos", "full_info", "--suite", "smoke", "--eval-every", "128",
                          "--max-steps", "256", "agent.model.systems_per_round=2",
                          "agent.model.calls_per_system=64", "agent.model.hidden=16"],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    run_ = json.loads(out.stdout)["runs"]["full_info"]
    assert run_["steps"] == 256 and [c["step"] for c in run_["curve"]] == [128, 256]
    assert set(run_) >= {"seconds_to_98pct_oracle", "oracle_share", "best_oracle_share"}
    assert np.isfinite(run_["oracle_share"])


def test_in_distribution_bands_count_what_a_policy_takes_of_each_calls_best_gain(monkeypatch):
    """A policy that always defers takes nothing and slows nothing; one that pins each call's best
    deployable action takes all of every band's gain."""
    import torch

    from dynamiccl.agents.policies.full_info import FullInfoConfig, FullInfoLearner, FullInfoPolicy
    from dynamiccl.envs.deployable_observation import DEPLOYABLE_HIGH, DEPLOYABLE_LOW

    bench = _bench_module("bench_learning")
    scored = {}  # the values of the calls being scored, which a best-action policy peeks at
    simulated = bench.action_values

    def recorded(topology, calls):
        scored["now"] = simulated(topology, calls)
        return scored["now"]

    monkeypatch.setattr(bench, "action_values", recorded)
    learner = FullInfoLearner(FullInfoConfig(hidden=8, layers=1, ensemble=1))
    with torch.no_grad():
        for p in learner.network.parameters():
            p.zero_()
    learner.network.widen_support(torch.as_tensor(np.stack([DEPLOYABLE_LOW, DEPLOYABLE_HIGH])))
    idle = bench.in_distribution(learner.policy(), systems=4)
    assert idle["all"]["calls"] == 4 * bench.VALIDATION_CALLS
    assert all(b["share"] in (0.0, None) and b["slower_than_nccl_2pct"] == 0.0 for b in idle.values())
    # It ranks some allowed action first all the same; behind a perfect gate that takes what the
    # action gains where it gains, and never loses.
    assert 0.0 <= idle["all"]["perfect_gate_share"] < 1.0

    class BestAction(FullInfoPolicy):
        def preferred(self, observations, allowed):
            gains = scored["now"].gains
            return gains.argmax(axis=1), gains.max(axis=1)

    best = bench.in_distribution(BestAction(learner.network, min_gain=0.0), systems=4)
    assert [b["calls"] for b in best.values()] == [b["calls"] for b in idle.values()]
    assert best["all"]["share"] == pytest.approx(1.0) and best["all"]["slower_than_nccl_2pct"] == 0.0
    assert all(b["share"] is None or b["share"] == pytest.approx(1.0) for b in best.values())
    assert best["all"]["perfect_gate_share"] == pytest.approx(1.0)


def test_bench_learning_refuses_an_unknown_suite_in_one_line():
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "bench_learning.py"), "--suite",
                          "unseen_kind", "--samples", "1"], capture_output=True, text=True, env=ENV,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error: --suite 'unseen_kind': unknown scenario 'unseen_kind'" in out.stderr
    assert "unseen_kinds" in out.stderr.strip().splitlines()[-1]


def test_bench_learning_scores_one_learner_per_seed_and_refuses_save_with_several():
    script = str(REPO / "experiments" / "bench_learning.py")
    out = subprocess.run([sys.executable, script, "--suite", "smoke", "--samples", "1", "--seeds", "2",
                          "--validation-systems", "2", "--json"], capture_output=True, text=True,
                         env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = {r["policy"]: r for r in report["policies"]}
    assert {"full_info seed=0", "full_info seed=1"} <= set(rows) and "full_info" not in rows
    assert all(np.isfinite(rows[f"full_info seed={s}"]["geomean_speedup"]) for s in (0, 1))
    for seed in (0, 1):  # the fast band score of the suite is the evaluation's, call for call
        bands = report["suite_bands"][f"full_info seed={seed}"]
        assert bands["all"]["calls"] == rows[f"full_info seed={seed}"]["calls"]
        assert bands["all"]["share"] == pytest.approx(rows[f"full_info seed={seed}"]["oracle_share"])
    assert sum(report["suite_gain_by_c2c"].values()) == pytest.approx(1.0)
    counts = [[b["calls"] for b in bands.values()] for bands in report["in_distribution"].values()]
    assert len(counts) == 2 and counts[0] == counts[1], "both seeds are scored on the same calls"
    assert counts[0][-1] == sum(counts[0][:-1]) == 2 * 64  # the bands split "all"
    refused = subprocess.run([sys.executable, script, "--seeds", "2", "--save", "x.pt"],
                             capture_output=True, text=True, env=ENV, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--seeds trains several learners; --load and --save take one (drop --seeds)")
