"""Full information: every action's time for a batch of calls, next to NCCL's own pick.

The simulator is deterministic and times all 336 actions of a call at the price of one, so a learner
need not discover an action's value by trying it (one sampled reward per step, as PPO does): it can
be told every action's value at once. This module turns a batch of calls on one system into what
such a learner trains on — the deployable observation, the gain of every action over NCCL's default
and the mask of actions the tuner plugin can make NCCL run — with one vectorized simulator call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamiccl.decisions import nccl_model_for
from dynamiccl.envs.deployable_observation import encode_batch
from dynamiccl.envs.system_sampler import CallBatch
from dynamiccl.plugin.policy_file import context_buckets
from dynamiccl.simulator import simulate
from dynamiccl.system.knobs import Collective, ConfigBatch, nccl_config, valid_mask
from dynamiccl.system.topology import Topology

ALL_ACTIONS = ConfigBatch.all_actions()


@dataclass(frozen=True)
class ActionValues:
    """B calls: observation [B, D], log(t_default / t_action) [B, A] (-inf where not allowed),
    the allowed mask [B, A] and NCCL default's simulated time [B] (µs)."""

    observations: np.ndarray
    gains: np.ndarray
    allowed: np.ndarray
    default_us: np.ndarray


def action_values(topology: Topology, calls: CallBatch, *, deployable: bool = True) -> ActionValues:
    """Every action's gain over NCCL's default for ``calls`` on ``topology``."""
    model = nccl_model_for(topology)
    contexts = [context_buckets(d, c) for d, c in zip(calls.straggler_delay_us, calls.c2c, strict=True)]
    obs, picks = encode_batch(topology, model, calls.collectives, calls.nbytes, contexts)
    times = simulate(topology, calls.collectives, calls.nbytes, ALL_ACTIONS, calls.straggler_delay_us,
                     calls.c2c).time_us
    allowed = np.stack([valid_mask(topology, Collective(int(c)), deployable=deployable)
                        for c in calls.collectives])
    unique, inverse = np.unique(picks, axis=0, return_inverse=True)
    defaults = ConfigBatch.from_configs([nccl_config(*map(int, row)) for row in unique])
    default_times = simulate(topology, calls.collectives, calls.nbytes, defaults,
                             calls.straggler_delay_us, calls.c2c).time_us
    default_us = default_times[np.arange(len(inverse)), inverse.reshape(-1)]
    with np.errstate(divide="ignore"):
        gains = np.where(allowed, np.log(default_us[:, None] / times), -np.inf)
    return ActionValues(obs, gains, allowed, default_us)
