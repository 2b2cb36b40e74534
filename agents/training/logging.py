"""Experiment logging: wandb (offline by default, so nobody needs an account) or nothing.

The Hydra group ``logger`` instantiates one of these classes. wandb's SB3 integration
(``wandb.integration.sb3.WandbCallback``) records the model's hyperparameters; it logs no scalars,
so training curves reach wandb through an SB3 ``KVWriter``. Evaluation tables go as ``wandb.Table``
and plots as images. Every value is logged against ``global_step`` (the training step), not
wandb's own row counter, so a resumed run may log a step again without wandb dropping it.

A run's wandb id is kept in its run folder, so a resumed training run continues the same wandb run.
Offline, each start of the process writes its own ``wandb/offline-run-<time>-<id>`` directory;
``wandb sync`` given all of them uploads them in order of start time into the one run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter

_MODES = ("offline", "online", "disabled")
#: The x axis of every logged value: the training step.
STEP = "global_step"


class NullLogger:
    """``logger=none``: every call does nothing."""

    def start(self, run_dir: Path, config: Mapping[str, Any], name: str | None = None) -> None:
        """Nothing to open."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Nothing to record."""

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Nothing to record."""

    def log_images(self, images: Mapping[str, Path]) -> None:
        """Nothing to record."""

    def sb3_writer(self) -> KVWriter | None:
        return None

    def sb3_callbacks(self) -> list[BaseCallback]:
        return []

    def finish(self) -> None:
        """Nothing to close."""


class WandbWriter(KVWriter):
    """Forwards SB3's scalar logs (rollout/ep_rew_mean, train/loss, ...) to a wandb run."""

    def __init__(self, logger: WandbLogger) -> None:
        self.logger = logger

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]],
              step: int = 0) -> None:
        scalars = {
            key: float(value) for key, value in key_values.items()
            if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
            and "wandb" not in (key_excluded.get(key) or ())
        }
        if scalars:
            self.logger.log_metrics(scalars, step=int(step))

    def close(self) -> None:
        """The run is finished by its owner, not by SB3."""


class WandbLogger:
    """A wandb run in ``mode`` offline (default), online or disabled."""

    def __init__(self, project: str = "dynamiccl", mode: str = "offline", entity: str | None = None,
                 group: str | None = None, tags: Sequence[str] = (), save_dir: str | None = None,
                 name: str | None = None) -> None:
        if mode not in _MODES:
            raise ValueError(f"logger.mode must be one of {', '.join(_MODES)}, got {mode!r}")
        self.project, self.mode, self.entity, self.group = project, mode, entity, group
        self.tags, self.save_dir, self.name = list(tags), save_dir, name
        self.run: Any = None
        self._last_step = 0

    def start(self, run_dir: Path, config: Mapping[str, Any], name: str | None = None) -> None:
        """Opens (or, for a resumed run, re-opens) the wandb run; its files go under ``run_dir``."""
        import wandb

        run_dir = Path(run_dir)
        save_dir = Path(self.save_dir) if self.save_dir else run_dir
        save_dir.mkdir(parents=True, exist_ok=True)
        id_file = run_dir / "wandb_id.txt"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        # Ray trials and subprocesses read the mode from the environment, not from init's argument.
        os.environ.setdefault("WANDB_MODE", self.mode)
        self.run = wandb.init(
            project=self.project, entity=self.entity, group=self.group, tags=self.tags,
            name=self.name or name, dir=str(save_dir), id=run_id, resume="allow",
            mode=self.mode, config=dict(config), reinit="finish_previous",
        )
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Logs at training step ``step`` (default: the latest step seen)."""
        if self.run is not None:
            self._last_step = self._last_step if step is None else int(step)
            self.run.log({STEP: self._last_step, **metrics})

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if self.run is None or not rows:
            return
        import wandb

        columns = list(rows[0])
        data = [[_plain(row.get(c)) for c in columns] for row in rows]
        self.log_metrics({name: wandb.Table(columns=columns, data=data)})

    def log_images(self, images: Mapping[str, Path]) -> None:
        if self.run is None:
            return
        import wandb

        self.log_metrics({key: wandb.Image(str(path)) for key, path in images.items()})

    def sb3_writer(self) -> KVWriter | None:
        return WandbWriter(self) if self.run is not None else None

    def sb3_callbacks(self) -> list[BaseCallback]:
        if self.run is None:
            return []
        from wandb.integration.sb3 import WandbCallback

        return [WandbCallback()]

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value
