"""The full-information learner as an agent of the training pipeline: ``dynamiccl train agent=full_info``.

:mod:`dynamiccl.agents.policies.full_info` holds the learner and loads its trained policy from a
``.pt`` file or a run folder (what ``evaluate`` and ``export`` accept); this module holds only what
the pipeline needs around it, so the learner can change without the pipeline changing:

* its config: ``configs/agent/full_info.yaml``'s ``model`` node names
  :class:`~dynamiccl.agents.policies.full_info.FullInfoConfig` as ``_target_``, so the checks of
  ``agent.model`` keys (misspelt, another agent's) work as for the SB3 agents; ``seed`` seeds it;
* checkpoints: the learner's own file (``FullInfoLearner.save``, what ``bench_learning.py --load``
  reads too) plus, for a training checkpoint, the optimizer's state and the generator of the
  systems it draws in ``<name>_resume_<step>.pt``, written first, and a JSON sidecar like the SB3
  agents' (``algo``, ``class``, ``num_timesteps``). Taken at round boundaries, they let a run
  resumed after ``kill -9`` end bit-identical to the uninterrupted one;
* the training curve: the loss on each round's calls before learning from them. Those calls come
  from systems the learner has never seen, so the curve is a held-out loss.

A training step is one call learned from, and a round (``systems_per_round`` x ``calls_per_system``
calls on fresh random systems) is what a rollout is for PPO: checkpoints, evaluations and Ctrl-C act
at its boundaries. The learner draws its systems from :mod:`dynamiccl.envs.system_sampler` (breadth
is the point), not from the ``scenario`` group, and learns only deployable actions from the
deployable observation.
"""

from __future__ import annotations

import numpy as np
import torch

from dynamiccl.agents.policies.full_info import FullInfoConfig, FullInfoLearner, load_learner, masked_loss
from dynamiccl.agents.training.round_agent import RoundAgent
from dynamiccl.envs.action_values import ActionValues


def _fresh_loss(learner: FullInfoLearner, data: ActionValues) -> float:
    """The loss on ``data`` before learning from it (its systems are new to the learner)."""
    with torch.no_grad():
        return float(masked_loss(learner.network(torch.as_tensor(data.observations)),
                                 torch.as_tensor(np.where(data.allowed, data.gains, 0.0),
                                                 dtype=torch.float32),
                                 torch.as_tensor(data.allowed)))


NAME = "full_info"
AGENT = RoundAgent(NAME, FullInfoConfig, FullInfoLearner,
                   curve=("train/fresh_loss", "loss on each round's new systems, before learning from them"),
                   load=load_learner, loss=_fresh_loss)
is_full_info = AGENT.names
