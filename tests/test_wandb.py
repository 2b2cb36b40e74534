"""The wandb logger against real wandb in offline mode: the run files must hold what was logged.

The offline run's ``.wandb`` transaction log is read back with wandb's own reader
(``wandb leet inspect --json``), not with a stub.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamiccl.agents.training.logging import NullLogger, WandbLogger


def read_records(offline_dir: Path) -> list[dict]:
    """Every record of one offline run directory, via wandb's own reader."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline_dir)],
                         capture_output=True, text=True, check=True, timeout=60)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def read_offline_run(run_dir: Path) -> list[dict]:
    """Every record of the single offline run under ``run_dir``."""
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline run under {run_dir}, found {runs}"
    return read_records(runs[0])


def history(records: list[dict]) -> list[dict]:
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    return tmp_path


def test_offline_run_directory_contains_logged_metrics_config_and_table(offline_wandb):
    run_dir = offline_wandb / "run"
    logger = WandbLogger(project="dynamiccl-test", mode="offline", group="sweep-a")
    logger.start(run_dir, {"agent": {"algo": "maskable_ppo"}, "seed": 3}, name="t")
    writer = logger.sb3_writer()
    for step, loss in ((128, 0.75), (256, 0.5)):
        writer.write({"train/loss": loss, "rollout/ep_rew_mean": step / 1000, "note": "text"},
                     {"train/loss": None}, step=step)
    logger.log_metrics({"eval/oracle_share": 0.9}, step=256)
    logger.log_table("eval/summary", [{"policy": "oracle", "oracle_share": 1.0}])
    logger.finish()

    records = read_offline_run(run_dir)
    items = history(records)
    losses = [(h["global_step"], h["train/loss"]) for h in items if "train/loss" in h]
    assert losses == [(128, 0.75), (256, 0.5)]
    assert any(h.get("eval/oracle_share") == 0.9 for h in items)
    assert all("note" not in h for h in items), "non-numeric SB3 values must not be logged"
    run = next(r["run"] for r in records if r.get("type") == "run")
    assert run["run_group"] == "sweep-a"
    config = run["config"]["update"]
    assert config["seed"] == 3 and config["agent"] == {"algo": "maskable_ppo"}
    assert any(h.get("eval/summary._type") == "table-file" for h in items)
    tables = list((run_dir / "wandb").glob("offline-run-*/files/media/table/eval/summary_*.table.json"))
    assert len(tables) == 1
    assert json.loads(tables[0].read_text())["data"] == [["oracle", 1.0]]
    assert (run_dir / "wandb_id.txt").read_text() in str(sorted((run_dir / "wandb").iterdir()))


def test_resumed_run_reuses_the_wandb_run_id_and_keeps_every_segment(offline_wandb):
    """After a kill the resumed segment logs again from its checkpoint's step, below the last step
    the killed segment logged: both segments keep their rows (the x axis is global_step), and
    `wandb sync` given both directories uploads them in start order into the one run."""
    run_dir = offline_wandb / "run"
    first = WandbLogger(mode="offline")
    first.start(run_dir, {})
    run_id = first.run.id
    first.log_metrics({"train/loss": 1.0}, step=128)
    first.log_metrics({"train/loss": 0.9}, step=192)
    first.finish()
    time.sleep(1.1)  # offline directories are named by the second they start in
    second = WandbLogger(mode="offline")
    second.start(run_dir, {})
    assert second.run.id == run_id
    second.log_metrics({"train/loss": 0.8}, step=128)
    second.finish()
    segments = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert [p.name.rsplit("-", 1)[1] for p in segments] == [run_id, run_id]
    logged = [[(h["global_step"], h["train/loss"]) for h in history(read_records(p))] for p in segments]
    assert logged == [[(128, 1.0), (192, 0.9)], [(128, 0.8)]]


def test_bad_mode_is_refused_and_null_logger_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="offline, online, disabled"):
        WandbLogger(mode="offlin")
    logger = NullLogger()
    logger.start(tmp_path, {"a": 1})
    logger.log_metrics({"x": 1.0}, step=1)
    logger.finish()
    assert logger.sb3_writer() is None
    assert list(tmp_path.iterdir()) == []
    assert os.environ.get("WANDB_MODE") != "online"


@pytest.mark.slow
def test_training_run_logs_curves_evaluation_table_and_plots_to_offline_wandb(offline_wandb):
    from hydra import compose, initialize_config_module

    from dynamiccl.agents.training.train import train

    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=[
            "experiment=smoke", "logger=wandb", "trainer.total_timesteps=256",
            "agent.model.n_steps=128", "eval.baselines=[nccl_default]", "eval.plots=true"])
    run_dir = offline_wandb / "train_run"
    metrics = train(cfg, run_dir)
    records = read_offline_run(run_dir)
    items = history(records)
    recorded = {k: v for r in records if r.get("type") == "config" for k, v in r["config"]["update"].items()}
    assert recorded["algo"] == "MaskablePPO" and recorded["n_steps"] == 128, "wandb's SB3 callback ran"
    curve_keys = {k for h in items for k in h if k.startswith(("train/", "rollout/", "time/"))}
    assert {"train/loss", "time/fps"} <= curve_keys
    shares = [h["eval/oracle_share"] for h in items if "eval/oracle_share" in h]
    assert shares == [pytest.approx(metrics["oracle_share"])]
    assert any(h.get("eval/summary._type") == "table-file" for h in items)
    assert any(h.get("eval/choices._type") == "image-file" for h in items)
    assert any(h.get("eval/speedup_vs_size._type") == "image-file" for h in items)
