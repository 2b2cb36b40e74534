"""A real Ray Tune sweep on local Ray, started the way a user starts it, with trials logging to
wandb offline; run again in the same folder it resumes instead of starting over."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.sweep import rank_rows

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
       "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}


def sweep(out_dir: Path, *overrides: str, cwd: Path,
          ray_tmp: Path | None = None) -> subprocess.CompletedProcess:
    """The sweep as a user pipes it (stdout is not a terminal); Ray's session in ``ray_tmp``."""
    cmd = [sys.executable, "-m", "dynamiccl.cli.main", "sweep", f"hydra.run.dir={out_dir}",
           "hparams_search=smoke", "ray.num_cpus=2", *overrides]
    env = {**ENV, "WANDB_DIR": str(cwd), **({"RAY_TMPDIR": str(ray_tmp)} if ray_tmp else {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def one_line_error(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr


@pytest.mark.slow
@pytest.mark.multiproc
def test_two_trial_sweep_reports_each_evaluation_groups_wandb_and_resumes(tmp_path):
    out_dir = tmp_path / "sweep"
    # Ray's session in a folder of its own, with a short path (its socket paths must fit 107 bytes).
    with tempfile.TemporaryDirectory(dir="/tmp", ignore_cleanup_errors=True) as ray_tmp:
        first = sweep(out_dir, cwd=tmp_path, ray_tmp=Path(ray_tmp))
        # Ray uploads its staging copy of the experiment whole, every few seconds, while trials run:
        # a run folder written there (files replaced while an upload lists them) fails that upload
        # on a loaded machine, so trials write theirs into the sweep's results folder directly.
        staged = list(Path(ray_tmp).glob("ray/session_*/artifacts/*/smoke/driver_artifacts/*/*"))
        assert staged and not [p for p in staged if p.name == "run"], staged
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "ERROR" not in first.stdout + first.stderr and "Traceback" not in first.stderr
    rows = list(csv.DictReader((out_dir / "results.csv").open()))
    assert len(rows) == 2 and "OK" in {r["status"] for r in rows} <= {"OK", "STOPPED"}
    shares = [float(r["oracle_share"]) for r in rows]
    assert shares == sorted(shares, reverse=True), "best trial first"
    assert len({r["agent.model.learning_rate"] for r in rows}) == 2, "two distinct samples"
    header = next(line for line in first.stdout.splitlines() if "trial" in line and "status" in line)
    assert "train_seconds" in header and len(header) > 80, "the piped table is not cut to 80 columns"
    assert (out_dir / "sweep_results.png").stat().st_size > 0
    data = json.loads((out_dir / "results.json").read_text())
    for row in data:
        trial = Path(row["path"])
        progress = list(csv.DictReader((trial / "progress.csv").open()))
        # The evaluation at step 128 reaches Tune, then the final one unless ASHA stopped the trial.
        steps = [128, 256] if row["status"] == "OK" else [128]
        assert [int(float(p["step"])) for p in progress] == steps
        assert all(float(p["oracle_share"]) <= 1 for p in progress)
        runs = list(trial.glob("run/wandb/offline-run-*/run-*.wandb"))
        assert len(runs) == 1 and runs[0].stat().st_size > 0, f"no wandb run in {trial}"
        assert list(trial.glob("checkpoint_*/last.zip")), "the trial's checkpoint reached Tune"
        recorded = OmegaConf.load(trial / "run" / "config.yaml")
        assert recorded.logger.group == "smoke", "trials are grouped in wandb under the sweep's name"

    again = sweep(out_dir, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stdout
    assert [r["trial"] for r in csv.DictReader((out_dir / "results.csv").open())] == \
        [r["trial"] for r in rows]
    one_line_error(sweep(out_dir, "tune.num_samples=3", cwd=tmp_path),
                   "tune.num_samples (2 -> 3)")


@pytest.mark.parametrize("mode", ["max", "min"])
def test_tied_trials_keep_one_order_whatever_order_ray_returns_them_in(mode):
    """A resumed sweep gets its trials back from Ray in the order they last reported: equal
    scores (two trials ASHA stopped at the same share) must still list the same way."""
    rows = [{"trial": "b_00001", "share": 0.5}, {"trial": "b_00000", "share": 0.5},
            {"trial": "b_00002", "share": None}, {"trial": "b_00003", "share": 0.9 if mode == "max" else 0.1}]
    for order in (rows, rows[::-1]):
        ranked = list(order)
        rank_rows(ranked, "share", mode)
        assert [r["trial"] for r in ranked] == ["b_00003", "b_00000", "b_00001", "b_00002"]


def test_infinite_sweep_is_one_line_before_ray_starts(tmp_path):
    out = sweep(tmp_path / "s", "tune.num_samples=-1", cwd=tmp_path)
    one_line_error(out, "tune.num_samples must be a positive number, got -1")
    assert not (tmp_path / "s" / "ray_results").exists()


@pytest.mark.parametrize("override, message", [
    ("tune.metric=oracle_shar", "tune.metric 'oracle_shar' is not a metric training reports (did you "
                                "mean 'oracle_share'?)"),
    ("tune.max_concurrent_trials=0", "tune.max_concurrent_trials must be a positive number"),
    ("tune.mode=best", "tune.mode must be max or min"),
])
def test_bad_sweep_settings_are_named(override, message):
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("sweep", overrides=[override])
    with pytest.raises(ConfigCheckError) as err:
        validate(cfg, sweep=True)
    assert message in str(err.value)


@pytest.mark.parametrize("search", sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "configs"
                                                           / "hparams_search").glob("*.yaml")))
def test_every_search_composes_and_names_a_metric_its_agent_reports(search):
    """Each search runs its agent through the same sweep (one Ray Tune run per training loop is in
    the suite: SB3's above, the round learners' in test_evidence_agent): what differs is its config,
    checked here as the sweep checks it before Ray starts."""
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("sweep", overrides=[f"hparams_search={search}"])
    validate(cfg, sweep=True)
    assert cfg.tune.metric and cfg.tune.mode in ("max", "min")


def test_a_sweep_into_a_folder_of_the_users_files_or_with_a_broken_record_is_refused(tmp_path):
    """A folder without sweep.yaml that holds the user's own results.csv: refused by name before
    Ray starts (the sweep wrote its results over it); a sweep.yaml cut short is named."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("my own spreadsheet\n")
    out = sweep(mine, cwd=tmp_path)
    one_line_error(out, f"{mine} holds results.csv, which no sweep started there wrote (it has no "
                        "sweep.yaml)")
    assert (mine / "results.csv").read_text() == "my own spreadsheet\n"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sweep.yaml").write_text("num_samples: [\n")
    out = sweep(broken, cwd=tmp_path)
    one_line_error(out, f"{broken / 'sweep.yaml'}: not valid YAML")
