"""SB3 callbacks of the training pipeline: periodic checkpoints and periodic evaluation.

Both count environment steps (``num_timesteps``), not callback calls, so their period means the
same thing for one environment or eight.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from dynamiccl.agents.sb3_agents import save_checkpoint


class _EveryNSteps(BaseCallback):
    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = int(every)
        self._last = 0

    def _on_training_start(self) -> None:
        self._last = self.num_timesteps

    def _due(self) -> bool:
        if self.every > 0 and self.num_timesteps - self._last >= self.every:
            self._last = self.num_timesteps
            return True
        return False


class CheckpointEvery(_EveryNSteps):
    """Replaces ``<folder>/last.zip`` (and its replay buffer and sidecar) every ``every`` steps and
    appends each save to ``history.jsonl`` so a resumed run can be checked against it."""

    def __init__(self, every: int, folder: Path, algo: str, extra: dict[str, Any] | None = None,
                 on_save: Callable[[Path, int], None] | None = None) -> None:
        super().__init__(every)
        self.folder = Path(folder)
        self.algo = algo
        self.extra = extra or {}
        self.on_save = on_save

    def save_now(self, model: Any) -> Path:
        """Saves ``model`` now (also usable outside ``learn``, e.g. for the final checkpoint)."""
        step = int(model.num_timesteps)
        path = save_checkpoint(model, self.folder / "last.zip", self.algo, self.extra)
        with (self.folder / "history.jsonl").open("a") as fh:
            fh.write(json.dumps({"event": "checkpoint", "step": step, "time": time.time()}) + "\n")
        if self.on_save is not None:
            self.on_save(path, step)
        return path

    def _on_step(self) -> bool:
        if self._due():
            self.save_now(self.model)
        return True


class EvaluateEvery(_EveryNSteps):
    """Calls ``evaluate(step)`` every ``every`` steps; the time it takes is measured separately, so
    training-time figures can leave evaluation out."""

    def __init__(self, every: int, evaluate: Callable[[int], bool | None]) -> None:
        super().__init__(every)
        self.evaluate = evaluate
        self.eval_seconds = 0.0

    def _on_step(self) -> bool:
        if self._due():
            start = time.perf_counter()
            stop = self.evaluate(int(self.num_timesteps))
            self.eval_seconds += time.perf_counter() - start
            return not stop
        return True
