"""One run folder, one run: a lock against a second process, and the settings it was started with.

A folder without a run's ``config.yaml`` starts a new run only when it holds nothing a run writes
over: files of the user's own there (a ``metrics.json``, a ``progress.csv``) are refused by name
(:func:`check_run_folder`). A folder that already holds a run is resumed only with the settings
recorded in its ``config.yaml``; a different setting is refused by name unless
``resume.allow_changes=true``, and then the new settings go to ``config_from_<step>.yaml`` beside
the original, which is never rewritten. Keys that cannot change what is trained (progress bar,
logging, evaluation, how often to checkpoint) may differ freely. A ``config.yaml`` written before a
key was renamed or added reads as today's settings: under the new name (:data:`RENAMED_KEYS`), and
with the value every run then had implicitly (:data:`ADDED_KEYS`), so resuming it with another
value is refused by name; one that is not a run's settings (broken YAML, cut short) is named.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dynamiccl.agents import current_name
from dynamiccl.agents.training.config_checks import ConfigCheckError
from dynamiccl.agents.training.prior_learner import UNRECORDED_REALITIES
from dynamiccl.config_loader import ConfigError, read_config
from dynamiccl.files import write_text_atomic

#: Config keys (and key prefixes) that do not influence the trained model.
NEUTRAL_KEYS = ("resume.", "trainer.progress_bar", "trainer.checkpoint_every", "trainer.eval_every",
                "eval.", "logger.", "tags", "task_name", "ray.", "tune.", "deploy.")

#: Keys renamed since a run folder may have been written: its ``config.yaml`` is read with the new
#: names, so the run resumes (the full-information learner's ``margin`` is ``min_gain`` now); module
#: paths in it are read the same way (:func:`_as_today`).
RENAMED_KEYS = {"agent.model.margin": "agent.model.min_gain"}

#: Keys added since a run folder may have been written, with the value its run had without them: a
#: ``config.yaml`` that lacks one (where today's config has it) reads as that value (the learned
#: prior's ``realities``: it trained against the ``datasheet`` realities before; it learned from no
#: real system before ``real_train``, so none drew real series per round either).
ADDED_KEYS = {"agent.model.realities": UNRECORDED_REALITIES, "agent.model.real_train": [],
              "agent.model.real_validation": [], "agent.model.real_series_per_round": 8}


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def _as_today(key: str, value: Any) -> Any:
    """A recorded value as today's code names it: a ``_target_`` in a module that has moved since
    (:data:`dynamiccl.agents.MOVED`) is the same setting under its new path."""
    return current_name(value) if key.endswith("_target_") and isinstance(value, str) else value


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (recorded value, new value) for every training-relevant difference."""
    flat_old = {RENAMED_KEYS.get(k, k): _as_today(k, v) for k, v in _flat(old).items()}
    flat_new = _flat(new)
    for key, before in ADDED_KEYS.items():
        if key in flat_new:
            flat_old.setdefault(key, before)
    keys = sorted(set(flat_old) | set(flat_new))
    return {k: (flat_old.get(k), flat_new.get(k)) for k in keys
            if flat_old.get(k) != flat_new.get(k) and not k.startswith(NEUTRAL_KEYS)}


#: What a folder holds before a run starts in it: Hydra's log and the run's lock.
_BEFORE_A_RUN = re.compile(r".*\.log|\.lock")
#: Keys every run's ``config.yaml`` has.
RUN_KEYS = ("agent", "trainer", "seed")
#: Changed settings named in a refusal at most.
SHOWN_CHANGES = 8


def check_run_folder(run_dir: Path, recorded: str = "config.yaml", what: str = "run") -> None:
    """A folder that holds no run (no ``recorded`` settings: a run's ``config.yaml``, a sweep's
    ``sweep.yaml``) holds nothing a new one would write over: ConfigCheckError names the files that
    are there (the user's own ``metrics.json``, ``progress.csv``, ``results.csv``, a checkpoint
    copied in), as ``evaluate --out`` does."""
    if (run_dir / recorded).exists():
        return
    foreign = sorted(name for name in os.listdir(run_dir) if not _BEFORE_A_RUN.fullmatch(name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigCheckError(f"{run_dir} holds {shown}, which no {what} started there wrote (it has "
                               f"no {recorded}), and a {what} would write over them; choose an empty "
                               "or new folder (hydra.run.dir=PATH)")


def recorded_settings(run_dir: Path) -> dict[str, Any]:
    """The settings a run folder's ``config.yaml`` recorded; ConfigCheckError naming it when it is
    not a run's settings (broken YAML, cut short, another file of the same name)."""
    recorded = run_dir / "config.yaml"
    fix = (f"it holds the settings the run in {run_dir} was started with: restore it, or choose a "
           "new run folder (hydra.run.dir=PATH)")
    try:
        data, _ = read_config("run", recorded)
    except ConfigError as exc:
        raise ConfigCheckError(f"{exc}; {fix}") from None
    missing = [k for k in RUN_KEYS if k not in data]
    if missing:
        raise ConfigCheckError(f"{recorded} is not the settings of a `dynamiccl train` run (it has no "
                               f"{', '.join(missing)}); {fix}")
    return data


def record_config(cfg: DictConfig, run_dir: Path, step: int) -> str | None:
    """Writes ``config.yaml`` for a new run, or checks the new settings against it for a resumed
    one; returns a line describing accepted changes (None when there are none)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    text = OmegaConf.to_yaml(cfg, resolve=True)
    recorded = run_dir / "config.yaml"
    if not recorded.is_file():
        write_text_atomic(recorded, text)
        return None
    diff = changed_keys(recorded_settings(run_dir), resolved)  # type: ignore[arg-type]
    if not diff:
        return None
    listing = ", ".join(f"{k} ({old!r} -> {new!r})" for k, (old, new) in list(diff.items())[:SHOWN_CHANGES])
    if len(diff) > SHOWN_CHANGES:
        listing += f" and {len(diff) - SHOWN_CHANGES} more"
    if not bool(cfg.resume.allow_changes):
        raise ConfigCheckError(
            f"{run_dir} was started with other settings: {listing}. Resume with the same settings, "
            "choose a new run folder (hydra.run.dir=PATH), or add resume.allow_changes=true to "
            "continue with the new ones")
    write_text_atomic(run_dir / f"config_from_{step}.yaml", text)
    return f"continuing with changed settings (saved in config_from_{step}.yaml): {listing}"


@contextmanager
def locked(run_dir: Path) -> Iterator[Path]:
    """Creates ``run_dir`` and holds its lock file; a second process gets one clear error."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(run_dir / ".lock", "a+")  # noqa: SIM115 (held for the whole run)
    except OSError as exc:
        raise ConfigCheckError(f"cannot write to the run folder {run_dir} ({exc.strerror}); choose "
                               "another with hydra.run.dir=PATH") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise ConfigCheckError(f"{run_dir} is in use by {owner}; wait for it to finish or choose "
                                   "another run folder (hydra.run.dir=PATH)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}")
        handle.flush()
        yield run_dir
