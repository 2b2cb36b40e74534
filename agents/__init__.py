"""Tuning policies, and the stages that ship and train them (installed as ``dynamiccl.agents``).

Three rooms, each importing only the ones above it in this list (``tests/test_architecture.py``):

* :mod:`dynamiccl.agents.policies` – what chooses NCCL's algorithm, protocol and channels for a
  call: the ``Policy`` interface, baselines, online tuners, the learners' trained policies, shipped
  files, and ``load_policy(name_or_path)``;
* :mod:`dynamiccl.agents.shipping` – what turns policies and measurements into a policy file a job
  loads: scoring on a suite, export through the safety gate, ``dynamiccl tune`` and the learned
  prior it consults;
* :mod:`dynamiccl.agents.training` – the Hydra pipeline that trains every learner (exact resume,
  wandb, Ray Tune sweeps), then scores and ships what it trained.

Run folders written before these rooms existed name modules by their old flat paths in
``config.yaml`` (Hydra ``_target_`` strings); :func:`current_name` reads those names as today's.
"""

from __future__ import annotations

#: Old module path -> its path now, for exactly the modules that saved artifacts name: the
#: ``_target_`` strings a run folder's ``config.yaml`` records (``agent.model`` of the
#: full-information learner and of the learned prior, MaskablePPO's ``learning_rate`` schedule, the
#: logger). Nothing else needs one: SB3 zips pickle that schedule by value, and ``.pt`` files hold
#: only tensors and plain dicts (tests/fixtures/old_artifacts/README.md).
MOVED = {
    "dynamiccl.agents.full_info": "dynamiccl.agents.policies.full_info",
    "dynamiccl.agents.sb3_agents": "dynamiccl.agents.policies.sb3_agents",
    "dynamiccl.agents.prior_learner": "dynamiccl.agents.training.prior_learner",
    "dynamiccl.agents.logging": "dynamiccl.agents.training.logging",
}


def current_name(dotted: str) -> str:
    """A module, or a name inside one, under its module's present path (unchanged if it never moved)."""
    for old, new in MOVED.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old):]
    return dotted
