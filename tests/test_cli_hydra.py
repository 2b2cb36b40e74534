"""`dynamiccl train` / `dynamiccl sweep`: a config Hydra cannot compose is one line with exit code 2
(not 7-12 lines ending in "Set HYDRA_FULL_ERROR=1", exit code 1), and a refused run leaves nothing
behind (no run folder, no log)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.cli.main import main

ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
       "RAY_USAGE_STATS_ENABLED": "0"}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``dynamiccl ARGS`` in a fresh interpreter (Hydra configures logging in the process it runs in)."""
    return subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", *args], capture_output=True,
                          text=True, env=ENV, cwd=cwd, timeout=180)


def one_line(err: str, message: str) -> None:
    assert message in err and "Traceback" not in err and "HYDRA_FULL_ERROR" not in err, err
    assert err.strip().count("\n") == 0, err


@pytest.mark.parametrize("command", ["train", "sweep"])
@pytest.mark.parametrize(("overrides", "message"), [
    (["experiment=smoke", "trainer.total_timesteps=abc"],
     "trainer.total_timesteps=abc: Value 'abc' of type 'str' could not be converted to Integer; give "
     "a value of type Integer"),
    (["trainer.totl_timesteps=5"],
     "unknown config key 'trainer.totl_timesteps' (did you mean 'total_timesteps'?)"),
    (["agent.model.n_stepz=64"], "unknown config key 'agent.model.n_stepz' (did you mean 'n_steps'?)"),
    (["agent=nosuch"], "agent=nosuch: the config group 'agent' has no option 'nosuch'; choose one of "
                       "dqn, full_info, learned_prior, maskable_ppo, ppo"),
    (["experiment=smok"], "the config group 'experiment' has no option 'smok' (did you mean 'smoke'?)"),
    (["seed=[1,"], "cannot read the override 'seed=[1,'"),
])
def test_a_config_hydra_cannot_compose_is_one_line_before_anything_is_created(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        command: str, overrides: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([command, *overrides]) == 2
    one_line(capsys.readouterr().err, message)
    assert list(tmp_path.iterdir()) == []


def test_hydra_flags_keep_the_one_line_report(tmp_path: Path) -> None:
    """With -m (and --cfg) Hydra composes the config itself; its errors are still one line."""
    for flags in (["-m"], ["--cfg", "job"]):
        out = cli("train", *flags, "trainer.totl_timesteps=5", f"hydra.sweep.dir={tmp_path}/m",
                  cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        one_line(out.stderr, "unknown config key 'trainer.totl_timesteps'")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_sweep_leaves_no_folder_and_no_log(tmp_path: Path) -> None:
    out = cli("sweep", "hparams_search=smoke", "tune.metric=foo", f"hydra.run.dir={tmp_path}/x",
              cwd=tmp_path)
    assert out.returncode == 2
    one_line(out.stderr, "tune.metric 'foo' is not a metric training reports")
    assert not (tmp_path / "x").exists()


def test_a_refused_training_in_the_default_folder_leaves_no_outputs_folder(tmp_path: Path) -> None:
    """The default run folder is named by the time, and refusal comes after Hydra made it."""
    out = cli("train", "experiment=smoke", "hparams_search=smoke", cwd=tmp_path)
    assert out.returncode == 2
    one_line(out.stderr, "is a Ray Tune search; run it with `dynamiccl sweep hparams_search=smoke`")
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_in_an_existing_folder_keeps_what_was_there(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    out = cli("train", "experiment=smoke", "trainer.total_timesteps=-5", f"hydra.run.dir={run_dir}",
              cwd=tmp_path)
    assert out.returncode == 2
    one_line(out.stderr, "trainer.total_timesteps must be a positive number, got -5")
    assert [p.name for p in run_dir.iterdir()] == ["notes.txt"]
