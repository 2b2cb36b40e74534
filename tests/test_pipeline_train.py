"""Training end to end: it learns, one run folder holds one run, bad settings are refused in one
line, its entry points run. (Kill -9 / Ctrl-C and resume: test_pipeline_resume.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from dynamiccl.agents.training.config_checks import ConfigCheckError
from dynamiccl.agents.training.train import train

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
    assert (tmp_path / "training_curve.png").stat().st_size > 0
    # The same command in the finished folder trains no further and re-evaluates the same model.
    again = train(cfg, tmp_path)
    assert again["step"] == 4096 and again["oracle_share"] == pytest.approx(metrics["oracle_share"])
    assert json.loads((tmp_path / "train_state.json").read_text())["started_at_step"] == 4096


def smoke(*overrides: str):
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        return compose("train", overrides=["experiment=smoke", "trainer.total_timesteps=256",
                                           "agent.model.n_steps=128", "eval.baselines=[nccl_default]",
                                           *overrides])


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``dynamiccl ARGS`` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", "import sys; from dynamiccl.cli.main import main; "
                           "sys.exit(main())", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=180)


def one_line_error(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("observation", ["deployable", "research"])
def test_either_observation_set_trains_and_is_evaluated_on_what_it_was_trained_on(tmp_path, observation):
    from dynamiccl.agents.policies.registry import load_policy

    metrics = train(smoke(f"env.observation={observation}"), tmp_path)
    assert metrics["step"] == 256 and f"observation: {observation}" in (tmp_path / "config.yaml").read_text()
    assert [r["policy"] for r in json.loads((tmp_path / "eval" / "summary.json").read_text())] == \
        ["nccl_default", "maskable_ppo"]
    assert load_policy(str(tmp_path)).observation == observation


@pytest.mark.slow
def test_resuming_with_other_settings_is_refused_by_name_unless_allowed(tmp_path, capsys):
    train(smoke(), tmp_path)
    recorded = (tmp_path / "config.yaml").read_text()
    with pytest.raises(ConfigCheckError) as err:
        train(smoke("trainer.total_timesteps=384", "agent.model.ent_coef=0.1"), tmp_path)
    assert "agent.model.ent_coef (0.03 -> 0.1), trainer.total_timesteps (256 -> 384)" in str(err.value)
    assert "resume.allow_changes=true" in str(err.value)
    assert (tmp_path / "config.yaml").read_text() == recorded, "config.yaml is never rewritten"
    # Settings that cannot change the model may differ; the finished run is only re-evaluated.
    assert train(smoke("trainer.progress_bar=true", "eval.plots=true"), tmp_path)["step"] == 256
    capsys.readouterr()
    metrics = train(smoke("trainer.total_timesteps=384", "resume.allow_changes=true"), tmp_path)
    assert metrics["step"] == 384
    assert "continuing with changed settings (saved in config_from_256.yaml): " \
           "trainer.total_timesteps (256 -> 384)" in capsys.readouterr().out
    assert (tmp_path / "config.yaml").read_text() == recorded
    assert "total_timesteps: 384" in (tmp_path / "config_from_256.yaml").read_text()


@pytest.mark.slow
def test_checkpoint_of_another_algorithm_is_refused_before_work_starts(tmp_path):
    train(smoke(), tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigCheckError, match="holds a maskable_ppo agent but agent is ppo; choose "
                                               "agent=maskable_ppo or a new run folder"):
        train(smoke("agent=ppo", "resume.allow_changes=true"), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_second_training_into_a_busy_run_folder_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, str(REPO / "experiments" / "train.py"), "experiment=smoke",
         f"hydra.run.dir={run_dir}", "trainer.total_timesteps=1000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=REPO)
    try:
        deadline = time.monotonic() + 300  # a guard against a run that never starts, as in training_runs
        while not (run_dir / "progress.csv").is_file():
            assert time.monotonic() < deadline and first.poll() is None, "the first run did not start"
            time.sleep(0.1)
        second = cli("train", "experiment=smoke", f"hydra.run.dir={run_dir}")
        one_line_error(second, f"{run_dir} is in use by process {first.pid}")
        assert first.poll() is None, "the first run goes on"
    finally:
        first.kill()
        first.wait(timeout=30)
    assert "total_timesteps: 1000000" in (run_dir / "config.yaml").read_text()


@pytest.mark.parametrize("name, args, message", [
    ("train.py", ["trainer.totl_timesteps=5"],
     "unknown config key 'trainer.totl_timesteps' (did you mean 'total_timesteps'?)"),
    ("sweep.py", ["hparams_search=nosuch"], "the config group 'hparams_search' has no option 'nosuch'"),
])
def test_the_experiment_scripts_refuse_a_mistake_as_the_cli_does(tmp_path, name, args, message):
    one_line_error(script(name, *args, cwd=tmp_path), message)
    assert not any(tmp_path.iterdir()), "a refused run leaves nothing behind"


@pytest.mark.parametrize("args, message", [
    (["trainer.total_timesteps=-5"], "trainer.total_timesteps must be a positive number, got -5"),
    (["agent=dqn"], "agent.model.n_epochs: hyperparameters of maskable_ppo, ppo, not of dqn"),
    (["hydra.run.dir={tmp}/file/run"], "cannot create the run folder {tmp}/file/run: {tmp}/file is "
                                       "not a writable directory"),
    (["hparams_search=smoke"], "hparams_search=smoke is a Ray Tune search; run it with "
                               "`dynamiccl sweep hparams_search=smoke`"),
    (["-m", "hparams_search=smoke"], "run it with `dynamiccl sweep hparams_search=smoke`"),
])
def test_bad_training_settings_are_one_line_on_the_cli(tmp_path, args, message):
    (tmp_path / "file").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    run_dir = [] if any(a.startswith("hydra.run.dir") for a in args) else [f"hydra.run.dir={tmp_path}/r"]
    flags = [a for a in args if a.startswith("-")]  # `train -m ...`: Hydra's flags come first
    out = cli("train", *flags, "experiment=smoke", *run_dir, f"hydra.sweep.dir={tmp_path}/m",
              *[a for a in args if a not in flags], cwd=tmp_path)
    one_line_error(out, message.format(tmp=tmp_path))
    assert not list(tmp_path.glob("*/checkpoints"))


def test_forced_config_typo_on_the_cli_exits_2_with_one_readable_line(tmp_path):
    out = cli("train", "experiment=smoke", f"hydra.run.dir={tmp_path}", "+trainer.checkpoint_evry=5")
    one_line_error(out, "unknown config key 'trainer.checkpoint_evry' (did you mean 'checkpoint_every'?)")


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


def test_a_run_folder_holding_files_no_run_wrote_is_refused_by_name(tmp_path):
    """A folder without a run's config.yaml that holds the user's own files (named as a run's
    are): refused before anything is written, its files as they were, nothing of Hydra's left."""
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    for name in ("metrics.json", "progress.csv", "training_curve.png"):
        (run_dir / name).write_text(f"the user's own {name}")
    out = cli("train", "experiment=smoke", "logger=none", f"hydra.run.dir={run_dir}")
    one_line_error(out, f"{run_dir} holds metrics.json, progress.csv, training_curve.png, which no "
                        "run started there wrote")
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.json", "progress.csv",
                                                         "training_curve.png"]
    assert (run_dir / "metrics.json").read_text() == "the user's own metrics.json"


@pytest.mark.slow
def test_a_damaged_checkpoint_or_config_in_a_run_folder_is_named(tmp_path):
    """A checkpoint cut short (a full disk, an interrupted copy) or a config.yaml that is not a
    run's settings: one line naming the file, for training on and for export, not an internal error."""
    import shutil

    from dynamiccl.config_loader import ConfigError

    done = tmp_path / "done"
    train(smoke(), done)
    damaged = [
        ("checkpoints/last.zip", "truncate", "is not a checkpoint written by `dynamiccl train`"),
        ("config.yaml", "a: [\n", "not valid YAML"),
        ("config.yaml", "- 1\n", "is a mapping of keys"),
        ("config.yaml", "name: another program's settings\n",
         "is not the settings of a `dynamiccl train` run (it has no agent, trainer, seed)"),
    ]
    for i, (name, change, says) in enumerate(damaged):
        folder = tmp_path / f"case{i}"
        shutil.copytree(done, folder)
        path = folder / name
        if change == "truncate":
            os.truncate(path, path.stat().st_size // 2)
        else:
            path.write_text(change)
        with pytest.raises((ConfigCheckError, ConfigError)) as err:
            train(smoke(), folder)
        assert str(path) in str(err.value) and says in str(err.value), str(err.value)
    model = tmp_path / "case0" / "model.zip"
    os.truncate(model, model.stat().st_size // 2)
    out = cli("export", "--policy", str(tmp_path / "case0"), "--topology", "dgx_h100", "-o",
              str(tmp_path / "x.dccl"))
    one_line_error(out, f"{model} is not a checkpoint written by `dynamiccl train` that can be read")


def test_a_resumed_run_drops_an_evaluation_line_a_kill_cut_short(tmp_path):
    """kill -9 while a periodic evaluation is appended leaves half a line in evaluations.jsonl; the
    resumed run drops it with the segment's other evaluations past the checkpoint (it was an
    internal error)."""
    from dynamiccl.agents.training.train import _Evaluations

    path = tmp_path / "evaluations.jsonl"
    path.write_text('{"step": 128, "oracle_share": 0.5}\n{"step": 256, "oracle_share": 0.6}\n'
                    '{"step": 384, "orac')
    _Evaluations(path, 256)
    assert path.read_text() == '{"step": 128, "oracle_share": 0.5}\n{"step": 256, "oracle_share": 0.6}\n'


def test_the_training_curve_passes_over_a_progress_row_a_kill_cut_short(tmp_path):
    from dynamiccl.agents.training.training_plots import training_curve

    (tmp_path / "progress.csv").write_text("time/total_timesteps,rollout/ep_rew_mean\n128,0.5\n"
                                           "256,0.7\n384,-")
    assert training_curve(tmp_path) == [(128.0, 0.5), (256.0, 0.7)]
