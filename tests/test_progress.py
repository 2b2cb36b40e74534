"""Long work shows a progress bar on a terminal and writes nothing extra into a pipe: the commands
run with their stderr on a real pseudo-terminal, then piped."""

from __future__ import annotations

import io
import os
import pty
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from dynamiccl.agents.shipping.progress import progress_bar

#: rich reads these to force or forbid a terminal; the tests decide what stderr is.
_RICH_OVERRIDES = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS",
                   "LINES", "TERM")
ENV = {**{k: v for k, v in os.environ.items() if k not in _RICH_OVERRIDES},
       "TERM": "xterm-256color", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}


def dynamiccl(*args: str, terminal: bool, cwd: Path) -> tuple[subprocess.CompletedProcess, str]:
    """``dynamiccl ARGS`` with stderr on a pseudo-terminal (``terminal``) or a pipe; returns the
    finished process and what reached stderr."""
    cmd = [sys.executable, "-m", "dynamiccl.cli.main", *args]
    if not terminal:
        out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)
        return out, out.stderr
    import fcntl
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    shown: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: every writer has exited
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=read, daemon=True)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=follower, env=ENV, cwd=cwd) as proc:
        os.close(follower)
        reader.start()
        stdout, _ = proc.communicate(timeout=600)
    reader.join(timeout=30)
    os.close(leader)
    out = subprocess.CompletedProcess(cmd, proc.returncode, stdout.decode(), "")
    return out, b"".join(shown).decode(errors="replace")


def test_a_bar_is_drawn_on_a_terminal_console_and_nothing_elsewhere():
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    with progress_bar("scoring things", 3, console=terminal) as advance:
        advance(3)
    assert "scoring things" in terminal.file.getvalue()
    piped = Console(file=io.StringIO())
    with progress_bar("scoring things", 3, console=piped) as advance:
        advance(3)
    assert piped.file.getvalue() == ""


@pytest.mark.parametrize("terminal", [True, False])
def test_evaluate_shows_its_progress_on_a_terminal_only(tmp_path, terminal):
    out, stderr = dynamiccl("evaluate", "--policy", "oracle,random", "--suite", "smoke", "--json",
                            terminal=terminal, cwd=tmp_path)
    assert out.returncode == 0, stderr[-3000:]
    assert ("evaluating 2 policies" in stderr) == terminal, stderr[-2000:]
    assert out.stdout.lstrip().startswith("["), "stdout stays the JSON"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An (untrained) agent on the deployable observation, saved as `dynamiccl train` saves one."""
    from omegaconf import OmegaConf

    from dynamiccl.agents.policies.sb3_agents import build_model, save_checkpoint
    from dynamiccl.envs.collective_tuning import CollectiveTuningEnv

    agent = OmegaConf.create({"name": "ppo", "model": {
        "_target_": "stable_baselines3.PPO", "policy": "MlpPolicy", "n_steps": 32, "batch_size": 16,
        "policy_kwargs": {"net_arch": [8]}}})
    model = build_model(agent, CollectiveTuningEnv("smoke", observation="deployable"))
    return save_checkpoint(model, tmp_path_factory.mktemp("ckpt") / "model.zip", "ppo")


@pytest.mark.parametrize("terminal", [True, False])
def test_exporting_a_checkpoint_shows_its_progress_on_a_terminal_only(tmp_path, checkpoint, terminal):
    out, stderr = dynamiccl("export", "--policy", str(checkpoint), "--topology", "dgx_h100",
                            "--points-per-octave", "1", "-o", str(tmp_path / "p.dccl"),
                            terminal=terminal, cwd=tmp_path)
    assert out.returncode == 0, stderr[-3000:]
    assert ("exporting model" in stderr) == terminal, stderr[-2000:]
    assert (tmp_path / "p.dccl").is_file()


@pytest.mark.slow
def test_the_evaluation_after_training_shows_its_progress_on_a_terminal_only(tmp_path):
    args = ("train", "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}",
            "trainer.total_timesteps=128", "agent.model.n_steps=128", "eval.baselines=[nccl_default]")
    out, stderr = dynamiccl(*args, terminal=True, cwd=tmp_path)
    assert out.returncode == 0, stderr[-3000:]
    assert "evaluating 2 policies" in stderr
    # The same command in the finished run folder evaluates again, this time into a pipe.
    out, stderr = dynamiccl(*args, terminal=False, cwd=tmp_path)
    assert out.returncode == 0, stderr[-3000:]
    assert "evaluating" not in stderr and "━" not in stderr
    assert "maskable_ppo" in out.stdout
