"""Checkpoints of the learners that train in rounds (the full-information learner, the learned
prior): the learner's own file, a JSON sidecar like the SB3 agents' (``algo``, ``class``,
``num_timesteps``) and, for a training checkpoint, the optimizer's state and the learner's random
generator in ``<name>_resume_<step>.pt``. The resume file and the sidecar are written first, so a
kill at any moment leaves a complete checkpoint; a run resumed from one ends bit-identical to the
uninterrupted run.

A round learner has ``samples_seen``, ``optimizer`` (a torch optimizer), ``rng`` (a numpy
``Generator``) and ``save(path)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dynamiccl.config_loader import CHECKPOINT_FIX, read_as
from dynamiccl.files import replace_atomically, write_text_atomic


def resume_file(path: Path, step: int) -> Path:
    return path.with_name(f"{path.stem}_resume_{step}.pt")


def save(learner: Any, path: str | Path, *, algo: str, config_class: str, resume: bool = True) -> Path:
    """Writes the learner to ``path`` (``.pt``), after its sidecar and, with ``resume``, after the
    state a resumed run needs; older resume files are removed once the new one is complete."""
    path = Path(path).with_suffix(".pt")
    path.parent.mkdir(parents=True, exist_ok=True)
    step = learner.samples_seen
    # The sidecar first: a learner file never lacks one (it may name the step being written).
    write_text_atomic(path.with_suffix(".json"), json.dumps(
        {"algo": algo, "class": config_class, "num_timesteps": step}, indent=2))
    keep = None
    if resume:
        keep = resume_file(path, step)
        state = {"optimizer": learner.optimizer.state_dict(), "rng": learner.rng.bit_generator.state}
        replace_atomically(keep, lambda tmp: torch.save(state, tmp))
    learner.save(path)
    for stale in path.parent.glob(f"{path.stem}_resume_*.pt"):
        if stale != keep:
            stale.unlink()
    return path


def learned_state(learner: Any) -> dict[str, torch.Tensor]:
    """What the learner has learned, named: every tensor its optimizer steps (a network's weights,
    the evidence tuner's spreads), so checkpoints of every round learner get a parameters digest."""
    return {f"{g}.{i}": p for g, group in enumerate(learner.optimizer.param_groups)
            for i, p in enumerate(group["params"])}


def restore(learner: Any, path: str | Path) -> bool:
    """Gives the learner loaded from ``path`` its optimizer and generator back; False when the
    checkpoint holds only the network (e.g. a final ``model.pt``)."""
    resume = resume_file(Path(path), learner.samples_seen)
    if not resume.is_file():
        return False
    with read_as(resume, "the resume state of a checkpoint saved by `dynamiccl train`", CHECKPOINT_FIX):
        state = torch.load(resume, map_location="cpu", weights_only=True)
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.rng.bit_generator.state = state["rng"]
    return True
