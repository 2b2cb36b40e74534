"""Policies by name or by checkpoint path: what ``dynamiccl evaluate --policy`` and export accept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dynamiccl.agents.policies.baselines import (
    NcclDefaultPolicy,
    OraclePolicy,
    RandomPolicy,
    StaticBestPolicy,
    training_scenarios,
)
from dynamiccl.agents.policies.online import CoordinateDescentTuner, UcbBandit

if TYPE_CHECKING:
    from dynamiccl.agents.policies.policy import Policy
    from dynamiccl.system.topology import Topology

#: Online tuners' default budget of measured calls per context.
DEFAULT_BUDGET = 64


def _static_best(topology: Topology | None, deployable: bool, seed: int) -> Policy:
    return StaticBestPolicy.fit(training_scenarios(topology=topology))


BUILTIN: dict[str, Callable[[Topology | None, bool, int], Policy]] = {
    "nccl_default": lambda topo, dep, seed: NcclDefaultPolicy(deployable=dep),
    "oracle": lambda topo, dep, seed: OraclePolicy(deployable=dep),
    "static_best": _static_best,
    "random": lambda topo, dep, seed: RandomPolicy(seed=seed, deployable=dep),
    "coordinate_descent": lambda topo, dep, seed: CoordinateDescentTuner(DEFAULT_BUDGET, dep),
    "bandit": lambda topo, dep, seed: UcbBandit(DEFAULT_BUDGET, seed=seed, deployable=dep,
                                                safety_gate=0.05),
}


def load_policy(name_or_path: str, *, topology: Topology | None = None, deployable: bool = False,
                seed: int = 0) -> Policy:
    """A built-in policy by name, a trained checkpoint (an SB3 agent's ``.zip``, the
    full-information learner's ``.pt``, or a training run folder), or a shipped policy file.

    ``topology`` matters only for ``static_best``: its one configuration is then chosen for that
    system (the training suite's calls moved onto it) instead of across the training systems.
    """
    key = name_or_path.strip().lower()
    if key in BUILTIN:
        return BUILTIN[key](topology, deployable, seed)
    path = Path(name_or_path)
    from dynamiccl.agents.policies.deployed import is_policy_file, load_deployed

    if is_policy_file(path):
        return load_deployed(path)
    from dynamiccl.agents.policies import full_info

    if full_info.checkpoint_in(path) is not None:
        return full_info.load_policy(path)
    if path.exists() or path.with_suffix(".zip").exists():
        from dynamiccl.agents.policies.sb3_agents import SB3Policy

        return SB3Policy.load(path, deployable=deployable)
    raise ValueError(
        f"unknown policy {name_or_path!r}: give one of {', '.join(BUILTIN)}, the path of a "
        "checkpoint written by `dynamiccl train` (a .zip, a .pt or its run folder), or an exported "
        "policy file (.dccl or NVIDIA example-tuner CSV)"
    )
