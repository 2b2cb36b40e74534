"""Training runs as a user starts them, for the kill -9 / Ctrl-C / resume tests of every agent:
``python experiments/train.py OVERRIDES`` in a fresh interpreter, watched through its checkpoint
history, killed, resumed and compared with the uninterrupted run; and in-process runs, logging to
wandb offline, with the run folder every round learner leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The steps of the checkpoints the run has completed, in the order they were written."""
    history = run_dir / "checkpoints" / "history.jsonl"
    if not history.is_file():
        return []
    return [json.loads(line)["step"] for line in history.read_text().splitlines() if line.strip()]


def train_command(run_dir: Path, overrides: list[str], total: int, checkpoint_every: int) -> list[str]:
    """``python experiments/train.py OVERRIDES`` into ``run_dir`` for ``total`` steps, checkpointing
    every ``checkpoint_every``."""
    return [sys.executable, str(REPO / "experiments" / "train.py"), *overrides, f"hydra.run.dir={run_dir}",
            f"trainer.total_timesteps={total}", f"trainer.checkpoint_every={checkpoint_every}"]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Runs ``cmd`` to the end; it must succeed."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def sweep(tmp_path: Path, search: str, overrides: list[str], evals: list[int]) -> list[dict]:
    """``dynamiccl sweep hparams_search=SEARCH`` of two trials on local Ray in ``tmp_path/sweep``;
    it must succeed. Returns its ``results.json`` rows, two of them, at least one finished: each
    reported an evaluation at the first round boundary past each step of ``evals`` (a trial the
    scheduler stopped, at the first ones), and its checkpoint reached Tune beside the trial's own run
    folder."""
    import csv
    import sys

    out_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "dynamiccl.cli.main", "sweep", f"hydra.run.dir={out_dir}",
           f"hparams_search={search}", "ray.num_cpus=2", "tune.num_samples=2", *overrides, "logger=none"]
    env = {**ENV, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((out_dir / "results.json").read_text())
    assert len(rows) == 2 and "OK" in {r["status"] for r in rows}
    assert {r["status"] for r in rows} <= {"OK", "STOPPED"}
    for row in rows:
        trial = Path(row["path"])
        steps = [int(float(p["step"])) for p in csv.DictReader((trial / "progress.csv").open())]
        due = evals if row["status"] == "OK" else evals[:max(1, len(steps))]
        assert len(steps) == len(due), steps
        assert all(e <= s < e + evals[0] for s, e in zip(steps, due, strict=True)), steps
        assert list(trial.glob("checkpoint_*/last.pt")), "the trial's checkpoint reached Tune"
        assert (trial / "run" / "progress.csv").is_file()
    return rows


def start_and_wait(cmd: list[str], run_dir: Path, checkpoints: int) -> subprocess.Popen:
    """Starts training and returns once ``checkpoints`` checkpoints are on disk."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV, cwd=REPO)
    deadline = time.monotonic() + 300
    while len(checkpoint_steps(run_dir)) < checkpoints and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
        time.sleep(0.02)
    assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
    return proc


def kill_after_checkpoints(cmd: list[str], run_dir: Path, checkpoints: int = 2) -> None:
    """kill -9 of the training ``cmd`` once ``checkpoints`` checkpoints are on disk."""
    proc = start_and_wait(cmd, run_dir, checkpoints)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def resume(cmd: list[str], step: int, total: int) -> subprocess.CompletedProcess:
    """Runs the killed run's ``cmd`` again, to the end; it must say it resumes at ``step``."""
    out = run(cmd)
    assert f"resuming at step {step} of {total}" in out.stdout, out.stdout[-3000:]
    return out


def same_parameters(resumed: Path, straight: Path, key: str = "state") -> dict:
    """The resumed run's ``model.pt`` (a round learner's), asserted bit-identical to the
    uninterrupted run's: the same steps and every tensor of ``key`` (a tensor or a dict of them)
    equal. Returns the resumed run's."""
    import torch

    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (resumed, straight))
    assert a["samples_seen"] == b["samples_seen"]
    x, y = a[key], b[key]
    if isinstance(x, dict):
        different = [k for k in x if not torch.equal(x[k], y[k])]
        assert x.keys() == y.keys() and not different, \
            f"parameters differ from the uninterrupted run: {different}"
    else:
        assert torch.equal(x, y), "parameters differ from the uninterrupted run"
    steps = checkpoint_steps(resumed)
    assert steps[-1] == a["samples_seen"] and steps == sorted(steps), steps
    return a


def interrupt(proc: subprocess.Popen) -> int:
    """Ctrl-C: the run must end with exit code 130 and one line naming the step it saved at."""
    os.kill(proc.pid, signal.SIGINT)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith("dynamiccl train: interrupted: checkpoint saved at step")
    return int(last.split("at step ")[1].split()[0])


@contextmanager
def wandb_offline(folder: Path) -> Iterator[None]:
    """wandb logs offline into ``folder`` (without asking git) inside the block; the environment is
    as it was afterwards, so the suite's ``WANDB_MODE=disabled`` holds for every other test."""
    keys = ("WANDB_MODE", "WANDB_DIR", "WANDB_DISABLE_GIT")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(WANDB_MODE="offline", WANDB_DIR=str(folder), WANDB_DISABLE_GIT="true")
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def train_config(*overrides: str) -> Any:
    """The ``train`` config with ``overrides``, composed as ``dynamiccl train`` composes it."""
    from hydra import compose, initialize_config_module

    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        return compose("train", overrides=list(overrides))


def train_logged(run_dir: Path, overrides: list[str], total: int, checkpoint_every: int,
                 eval_every: int) -> dict[str, Any]:
    """An in-process run into ``run_dir`` for ``total`` steps, logging to wandb offline beside it;
    returns its metrics."""
    from dynamiccl.agents.training.train import train

    with wandb_offline(run_dir.parent):
        return train(train_config(*overrides, "logger=wandb", f"trainer.total_timesteps={total}",
                                  f"trainer.checkpoint_every={checkpoint_every}",
                                  f"trainer.eval_every={eval_every}"), run_dir)


def check_round_curve(run_dir: Path, metrics: dict[str, Any], evaluated: str) -> None:
    """A round learner's run folder holds its curve: a progress row a round up to the last step,
    each with a finite loss before learning, the periodic evaluations (``evaluated`` among their
    metrics) before the last step, and the plot of both."""
    import csv
    import math

    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    steps = [int(r["time/total_timesteps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] == metrics["step"] and len(steps) >= 3
    assert all(math.isfinite(float(r["train/fresh_loss"])) for r in rows)
    evaluations = [json.loads(line) for line in (run_dir / "evaluations.jsonl").read_text().splitlines()]
    assert evaluations and all(evaluated in e and e["step"] < metrics["step"] for e in evaluations)
    assert (run_dir / "training_curve.png").stat().st_size > 0
