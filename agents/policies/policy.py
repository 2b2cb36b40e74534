"""The one interface every tuning policy speaks, learned or hand-written.

A policy maps what the environment shows (the observation vector) to an action id into
:data:`dynamiccl.system.knobs.ACTIONS`. Baselines that are *defined* by the true state (NCCL's default,
the oracle) read it from ``scenario``; a learned policy must do with the observation. ``action_mask``
is the environment's mask (already restricted to exportable actions in deployable mode): a policy
must never return an action the mask forbids.

Two optional extensions exist:

* :class:`OnlinePolicy` – tuners that learn while they run (AutoCCL-style search, bandits) get each
  measured time back through ``update``; they never see the simulator's internals.
* :class:`ForcingPolicy` – a policy that acts the way a deployed tuner does: it names the knobs it
  pins in NCCL (nothing pinned = NCCL decides; an algorithm and protocol with NCCL's own channel
  count; ...). NCCL's default, a fixed ``NCCL_ALGO``/``NCCL_PROTO`` and an exported policy file are
  such policies; the evaluator runs them with ``env.step_forced``, so NCCL's default is judged as
  NCCL runs it (24 or 13 channels) and not as its nearest table entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from dynamiccl.decisions import KnobConstraints
from dynamiccl.system.knobs import ACTIONS, Config, valid_mask

if TYPE_CHECKING:
    from dynamiccl.system.scenario import Scenario


@runtime_checkable
class Policy(Protocol):
    """Chooses one action id per collective call."""

    name: str

    def act(
        self,
        observation: np.ndarray,
        *,
        scenario: Scenario | None = None,
        action_mask: np.ndarray | None = None,
    ) -> int: ...


@runtime_checkable
class OnlinePolicy(Policy, Protocol):
    """A policy that improves from the times it measures (black-box online tuning)."""

    def update(self, scenario: Scenario, action: int, time_us: float) -> None: ...

    def reset(self) -> None: ...


@runtime_checkable
class ForcingPolicy(Protocol):
    """A policy that tells NCCL what to pin instead of picking an action id."""

    def force(self, scenario: Scenario) -> KnobConstraints:
        """The knobs pinned for this call; ``KnobConstraints()`` leaves the call to NCCL."""
        ...


def scenario_mask(scenario: Scenario, *, deployable: bool = False) -> np.ndarray:
    """The valid-action mask for ``scenario``: the same one the environment exposes."""
    return valid_mask(scenario.topology, scenario.collective, deployable=deployable)


def allowed_actions(scenario: Scenario, action_mask: np.ndarray | None,
                    deployable: bool) -> np.ndarray:
    """The mask the caller gave, else the scenario's own (what the environment would give)."""
    if action_mask is None:
        return scenario_mask(scenario, deployable=deployable)
    return np.asarray(action_mask, dtype=bool)


def require_scenario(policy_name: str, scenario: Scenario | None) -> Scenario:
    """Baselines defined by the true state cannot run from an observation alone."""
    if scenario is None:
        raise ValueError(
            f"policy {policy_name!r} needs the true scenario: pass scenario=env.unwrapped."
            "current_scenario to act()"
        )
    return scenario


def masked_argmax(values: np.ndarray, mask: np.ndarray | None) -> int:
    """Best-valued action the mask allows; used to keep unmasked networks inside the valid set."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if mask is None:
        return int(np.argmax(values))
    mask = np.asarray(mask, dtype=bool).reshape(-1)
    if not mask.any():
        raise ValueError("the action mask allows no action")
    return int(np.argmax(np.where(mask, values, -np.inf)))


def nearest_valid_action(config: Config, mask: np.ndarray) -> int:
    """The allowed table entry closest to ``config`` (same algorithm and protocol first, then the
    channel count nearest on a log scale): how an off-table pick is expressed as an action id."""
    cost = np.zeros(len(ACTIONS))
    for i, c in enumerate(ACTIONS):
        cost[i] = (
            4.0 * (c.algorithm != config.algorithm)
            + 2.0 * (c.protocol != config.protocol)
            + 1.0 * (c.hierarchy != config.hierarchy)
            + 0.5 * ((c.schedule != config.schedule) + (c.chunks != config.chunks))
            + 0.1 * abs(np.log2(c.channels) - np.log2(max(config.channels, 1)))
        )
    return masked_argmax(-cost, mask)


def forced_action(scenario: Scenario, constraints: KnobConstraints, mask: np.ndarray) -> int:
    """The action id closest to what NCCL runs with ``constraints`` pinned (for callers that need an
    id, such as export; the evaluator runs the pinned knobs themselves)."""
    from dynamiccl import decisions

    try:
        config = decisions.nccl_default(scenario, constraints).config
    except ValueError:
        config = decisions.nccl_default(scenario).config
    return nearest_valid_action(config, mask)
