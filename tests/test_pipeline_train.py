"""Training end to end: it learns, it checkpoints, it survives SIGKILL, its entry points run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from dynamiccl.agents.train import train

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def script(name: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "experiments" / name), *args],
                          capture_output=True, text=True, env=ENV, cwd=kw.pop("cwd", REPO),
                          timeout=kw.pop("timeout", 180), **kw)


@pytest.mark.slow
def test_short_maskable_ppo_run_beats_random_and_does_not_lose_to_nccl(tmp_path):
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=[
            "experiment=smoke", "trainer.total_timesteps=4096", "trainer.checkpoint_every=4096",
            "eval.baselines=[nccl_default,random]"])
    metrics = train(cfg, tmp_path)
    rows = {r["policy"]: r for r in json.loads((tmp_path / "eval" / "summary.json").read_text())}
    trained = rows["maskable_ppo"]
    assert trained["geomean_speedup"] == pytest.approx(metrics["geomean_speedup"])
    assert trained["geomean_speedup"] > rows["random"]["geomean_speedup"]
    assert trained["geomean_speedup"] >= rows["nccl_default"]["geomean_speedup"] == 1.0
    assert trained["oracle_share"] >= 0.0
    assert (tmp_path / "model.zip").is_file() and (tmp_path / "config.yaml").is_file()
    assert "total_timesteps: 4096" in (tmp_path / "config.yaml").read_text()
    assert json.loads((tmp_path / "model.json").read_text())["num_timesteps"] == 4096
    # The same command in the finished folder trains no further and re-evaluates the same model.
    again = train(cfg, tmp_path)
    assert again["step"] == 4096 and again["oracle_share"] == pytest.approx(metrics["oracle_share"])
    assert json.loads((tmp_path / "train_state.json").read_text())["started_at_step"] == 4096


@pytest.mark.slow
@pytest.mark.multiproc
def test_sigkilled_run_resumes_from_its_last_checkpoint_at_the_saved_step(tmp_path):
    run_dir = tmp_path / "run"
    common = ["experiment=smoke", f"hydra.run.dir={run_dir}", "trainer.checkpoint_every=256",
              "eval.baselines=[nccl_default]"]
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "experiments" / "train.py"), *common,
         "trainer.total_timesteps=1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, cwd=REPO)
    sidecar = run_dir / "checkpoints" / "last.json"
    deadline = time.monotonic() + 120
    while not sidecar.is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert sidecar.is_file(), proc.stdout.read().decode()[-2000:]
    saved = json.loads(sidecar.read_text())["num_timesteps"]
    assert saved >= 256 and not (run_dir / "model.zip").exists()

    total = saved + 512
    out = script("train.py", *common, f"trainer.total_timesteps={total}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"resuming at step {saved} of {total}" in out.stdout
    state = json.loads((run_dir / "train_state.json").read_text())
    assert state == {"started_at_step": saved, "resumed": True, "total_timesteps": total}
    assert json.loads((run_dir / "model.json").read_text())["num_timesteps"] == total
    steps = [json.loads(line)["step"] for line in (run_dir / "checkpoints" / "history.jsonl")
             .read_text().splitlines()]
    assert steps[-1] == total and saved in steps and steps == sorted(steps)
    assert (run_dir / "eval" / "summary.json").is_file()
    before = (run_dir / "progress.csv").read_text().splitlines()
    after = (run_dir / f"progress_from_{saved}.csv").read_text().splitlines()
    assert len(before) >= 2 and len(after) >= 2, "both runs' SB3 logs are kept"


def test_config_typo_on_the_cli_exits_2_with_one_readable_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dynamiccl.cli.main", "train", "experiment=smoke",
         f"hydra.run.dir={tmp_path}", "+trainer.checkpoint_evry=5"],
        capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
    assert out.returncode == 2
    assert "did you mean 'checkpoint_every'" in out.stderr
    assert "Traceback" not in out.stderr


def test_train_help_lists_the_config_groups():
    out = subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", "train", "--help"],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0 and "hparams_search" in out.stdout and "resume" in out.stdout


@pytest.mark.slow
def test_bench_training_script_prints_its_json_contract():
    out = script("bench_training.py", "--json", "--algos", "maskable_ppo", "--scenario", "smoke",
                 "--suite", "smoke", "--eval-every", "256", "--max-steps", "256")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert set(result) >= {"seconds_to_98pct_oracle", "oracle_share", "runs"}
    assert result["runs"]["maskable_ppo"]["steps"] >= 256  # one PPO rollout at least
    assert result["oracle_share"] == result["runs"]["maskable_ppo"]["oracle_share"]


def test_evaluate_script_scores_a_baseline(tmp_path):
    out = script("evaluate.py", "--policy", "oracle", "--suite", "smoke", "--json",
                 "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    [row] = json.loads(out.stdout)
    assert row["oracle_share"] == 1.0 and row["action_set"] == "deployable actions"
    assert (tmp_path / "summary.csv").is_file()
