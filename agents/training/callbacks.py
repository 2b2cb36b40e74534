"""SB3 callbacks of the training pipeline: checkpoints, evaluations and Ctrl-C, at rollout boundaries.

A PPO model is updated only after a whole rollout, and DQN after every ``train_freq`` steps. A
checkpoint taken in between would hold weights older than its step count and drop the half-collected
rollout, so a resumed run could not continue as the uninterrupted one would. Everything here
therefore acts at the start of a rollout (SB3's ``on_rollout_start``, right after the previous
update), through SB3's own :class:`EveryNTimesteps` event machinery.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback, EveryNTimesteps

from dynamiccl.agents.policies.sb3_agents import save_checkpoint
from dynamiccl.agents.training.resume_state import capture, preserved_rng


class AtRolloutBoundary(EveryNTimesteps):
    """SB3's ``EveryNTimesteps``, fired at the first rollout boundary past each multiple of
    ``n_steps``; multiples, not distances from the last firing, so a resumed run fires at the same
    steps as the uninterrupted one. A child that returns False stops training before the next
    update."""

    def __init__(self, n_steps: int, callback: BaseCallback) -> None:
        super().__init__(n_steps, callback)
        self._go_on = True

    def _floor(self, step: int) -> int:
        return step - step % self.n_steps

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self.last_time_trigger = self._floor(self.model.num_timesteps)

    def _on_rollout_start(self) -> None:
        step = self.model.num_timesteps
        if step - self.last_time_trigger >= self.n_steps:
            self.last_time_trigger = self._floor(step)
            self._go_on = self._on_event()

    def _on_step(self) -> bool:
        return self._go_on


def parameters_digest(state: Mapping[str, Any]) -> str:
    """A digest of a network's parameters (``state_dict()``: names, shapes, dtypes and bits), equal
    exactly when they are bit-identical: two runs' checkpoints compare without their files."""
    digest = hashlib.sha256()
    for name, tensor in state.items():
        values = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(values.shape)}:{values.dtype};".encode())
        digest.update(values.flatten().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def record_checkpoint(folder: Path, step: int, train_seconds: float | None = None,
                      parameters: str | None = None) -> None:
    """Appends a checkpoint taken at ``step`` to ``<folder>/history.jsonl``, with the seconds spent
    training up to it over every segment of the run (a resumed run starts its clock there) and the
    :func:`parameters_digest` of the network it holds."""
    row: dict[str, Any] = {"event": "checkpoint", "step": step, "time": time.time()}
    if train_seconds is not None:
        row["train_seconds"] = round(train_seconds, 3)
    if parameters is not None:
        row["parameters"] = parameters
    with (folder / "history.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def trained_seconds(folder: Path, step: int) -> float:
    """The training seconds recorded with the checkpoint at ``step`` (0 when none were)."""
    path = folder / "history.jsonl"
    if not path.is_file():
        return 0.0
    seconds = 0.0
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("event") == "checkpoint" and row.get("step") == step:
            seconds = float(row.get("train_seconds", 0.0))
    return seconds


class SaveCheckpoint(BaseCallback):
    """Replaces ``<folder>/last.zip`` with the model and its resume state, and appends the save to
    ``history.jsonl``; ``last_step`` is the step of the newest checkpoint (``start`` before any)."""

    def __init__(self, folder: Path, algo: str, start: int = 0,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.algo = algo
        self.last_step = start
        #: The run's training seconds so far (recorded with each checkpoint), if known.
        self.clock = clock

    def save_now(self, model: Any) -> Path:
        """Saves ``model``; call only at a rollout boundary (or after ``learn`` returned)."""
        step = int(model.num_timesteps)
        path = save_checkpoint(model, self.folder / "last.zip", self.algo, resume=capture(model))
        record_checkpoint(self.folder, step, None if self.clock is None else self.clock(),
                          parameters_digest(model.policy.state_dict()))
        self.last_step = step
        return path

    def _on_step(self) -> bool:
        self.save_now(self.model)
        return True


class Evaluate(BaseCallback):
    """Calls ``evaluate(step)`` (True: stop training) with the global generators preserved, so
    evaluating never changes what is trained; its time is kept apart from training time."""

    def __init__(self, evaluate: Callable[[int], bool | None]) -> None:
        super().__init__()
        self.evaluate = evaluate
        self.eval_seconds = 0.0

    def _on_step(self) -> bool:
        start = time.perf_counter()
        with preserved_rng():
            stop = self.evaluate(int(self.num_timesteps))
        self.eval_seconds += time.perf_counter() - start
        return not stop


class Interrupt:
    """Ctrl-C while training: the first asks for a checkpoint at the next rollout boundary, a
    second stops at once (KeyboardInterrupt). Outside the main thread (a Ray trial) it does nothing."""

    def __init__(self) -> None:
        self.requested = False
        #: The step of the checkpoint taken because of the request (None: not taken yet).
        self.saved_at: int | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    @contextmanager
    def installed(self) -> Iterator[Interrupt]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


class SaveAndStopOnInterrupt(BaseCallback):
    """Saves at the first rollout boundary after Ctrl-C and stops training there."""

    def __init__(self, interrupt: Interrupt, saver: SaveCheckpoint) -> None:
        super().__init__()
        self.interrupt = interrupt
        self.saver = saver

    def _on_rollout_start(self) -> None:
        if self.interrupt.requested and self.interrupt.saved_at is None:
            self.saver.save_now(self.model)
            self.interrupt.saved_at = int(self.model.num_timesteps)

    def _on_step(self) -> bool:
        return self.interrupt.saved_at is None
