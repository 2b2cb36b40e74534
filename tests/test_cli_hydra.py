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
                       "dqn, evidence_tuner, full_info, learned_prior, maskable_ppo, ppo"),
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


@pytest.mark.parametrize(("overrides", "message"), [
    (["hydra.run.dir="], "hydra.run.dir is empty (an unset shell variable?), which would write the "
                         "run into the current folder"),
    (["agent.model.learning_rate=abc"], "agent.model.learning_rate is 'abc'; give a number in (0, 1]"),
    (["agent.model.n_steps=0"], "agent.model.n_steps is 0; give a whole number in [1, 10000000], e.g. "
                                "agent.model.n_steps=2048"),
    (["agent.model.gamma=5"], "agent.model.gamma is 5; give a number in [0, 1]"),
    (["agent.model.n_steps=1"], "collects one step per rollout; PPO needs at least 2"),
    (["agent=dqn", "agent.model.buffer_size=-1"], "agent.model.buffer_size is -1"),
    (["agent=full_info", "agent.model.hidden=0"], "agent.model.hidden is 0"),
    (["trainer.total_timesteps=100000000000000000000"],
     "trainer.total_timesteps is 100000000000000000000, more than the limit of 1000000000"),
    (["scenario.systems=[{topology: bad.yaml, nodes: [2]}]"], "bad.yaml: not valid YAML"),
    (["scenario.systems=[{topology: huge.yaml, nodes: [2]}]"], "which makes more than 131072 ranks"),
    (["experiment=quickstart", "scenario.systems=[{topology: t.yaml, nodes: [2]}]"],
     "agent=full_info learns on random systems (agent.model.systems=random) and would ignore it; to "
     "learn on your systems give a scenario file that lists them, agent.model.systems=FILE.yaml"),
])
def test_training_settings_are_checked_before_work_and_leave_nothing_behind(
        tmp_path: Path, overrides: list[str], message: str) -> None:
    """Issue 23: these trained the full run in the current folder, failed mid-rollout (n_steps=0:
    UnboundLocalError; learning_rate=abc: InstantiationException) or trained into NaN (gamma=5),
    each leaving a run folder; a bad scenario.systems entry failed after config.yaml was written."""
    (tmp_path / "bad.yaml").write_text("not: [a topology\n")
    topology = Path(__file__).parent / "fixtures" / "real" / "sophia_dgx_a100_ib" / "topology.yaml"
    (tmp_path / "t.yaml").write_text(topology.read_text())
    (tmp_path / "huge.yaml").write_text(topology.read_text().replace("size: 2,", "size: 100000,"))
    before = sorted(p.name for p in tmp_path.iterdir())
    run_dir = [] if any(o.startswith("hydra.run.dir") for o in overrides) else [
        f"hydra.run.dir={tmp_path}/run"]
    out = cli("train", "logger=none", *run_dir, *overrides, cwd=tmp_path)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    one_line(out.stderr, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run folder, no log
