"""A real Ray Tune sweep on local Ray, started the way a user starts it, with trials logging to
wandb offline; run again in the same folder it resumes instead of starting over."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.multiproc
def test_two_trial_sweep_on_local_ray_writes_results_logs_to_wandb_and_resumes(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "WANDB_DISABLE_GIT": "true", "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    out_dir = tmp_path / "sweep"
    cmd = [sys.executable, str(REPO / "experiments" / "sweep.py"), f"hydra.run.dir={out_dir}",
           "scenario=smoke", "tune.num_samples=2", "trainer.total_timesteps=256",
           "trainer.checkpoint_every=128", "eval.suite=smoke", "ray.num_cpus=2"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    rows = list(csv.DictReader((out_dir / "results.csv").open()))
    assert len(rows) == 2 and {r["status"] for r in rows} == {"OK"}
    shares = [float(r["oracle_share"]) for r in rows]
    assert shares == sorted(shares, reverse=True), "best trial first"
    assert all(-5 < s <= 1.0 for s in shares)
    assert len({r["agent.hparams.learning_rate"] for r in rows}) == 2, "two distinct samples"
    assert "sweep results" in first.stdout
    data = json.loads((out_dir / "results.json").read_text())
    assert [d["trial"] for d in data] == [r["trial"] for r in rows]
    for row in data:
        trial = Path(row["path"])
        runs = list(trial.glob("run/wandb/offline-run-*/run-*.wandb"))
        assert len(runs) == 1 and runs[0].stat().st_size > 0, f"no wandb run in {trial}"
        assert (trial / "run" / "model.zip").is_file()
        assert list(trial.glob("checkpoint_*/last.zip")), "the trial's checkpoint reached Tune"

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stdout
    rows_again = list(csv.DictReader((out_dir / "results.csv").open()))
    assert [r["trial"] for r in rows_again] == [r["trial"] for r in rows]
