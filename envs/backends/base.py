"""The interface between the environment and whatever runs a collective for it.

The environment never knows whether a step's time came from the simulator or from a real GPU: it
asks a :class:`Backend` to *measure* one action in one scenario and gets a :class:`Measurement`
back. Two backends exist: ``sim`` (:mod:`dynamiccl.envs.backends.sim`, the simulator, the default)
and ``live`` (:mod:`dynamiccl.envs.backends.live`, class ``LiveBackend``, the profiler's measurements
on real GPUs). :func:`dynamiccl.envs.backends.make_backend` resolves these names lazily, so the
environment imports torch only when a live backend is asked for; keyword arguments the environment
does not know are passed to the backend's constructor.

A backend reports, besides the chosen action's time, what NCCL's default would have taken in the
same conditions (the reward's reference) and the straggler it *observed*: on a live system nobody
tells the tuner which rank is late, so the observation is built from what the backend saw, not from
the scenario's ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from dynamiccl.decisions import KnobConstraints
    from dynamiccl.system.scenario import Scenario


class UnmeasuredChoice(ValueError):
    """A reality that answers only from measurements was asked about a choice nobody measured."""


@dataclass(frozen=True)
class Measurement:
    """What one call of a collective took, as the backend saw it."""

    #: Wall time of the chosen action (µs), including any straggler wait.
    time_us: float
    #: Wall time NCCL's own choice takes in the same conditions (µs): the reward's reference.
    default_time_us: float
    #: The rank observed arriving last (None when no rank was noticeably late).
    straggler_rank: int | None = None
    #: How late that rank arrived (µs); 0 when there is no straggler.
    straggler_delay_us: float = 0.0


@runtime_checkable
class Backend(Protocol):
    """Runs (or models) one collective call for the environment.

    ``measure`` must accept any action id in ``range(knobs.N_ACTIONS)``; for an action that cannot
    run in the scenario it measures NCCL's default instead (the environment has already penalised
    the choice). ``action_times`` returns the time of *every* action at once (``inf`` where the
    action is invalid) when that is cheap, which only a model can do; live backends return None and
    the environment then reports no oracle time. A backend holding resources (processes, GPUs)
    may also define ``close()``; the environment's ``close()`` calls it.

    Two optional methods serve what a deployed tuner does rather than what an agent does:
    ``measure_forced(scenario, constraints)`` runs NCCL with the knobs a tuner plugin or
    ``NCCL_ALGO``/``NCCL_PROTO`` pins (a :class:`~dynamiccl.decisions.KnobConstraints`; no
    constraint at all is NCCL's own choice), which may lie outside the action table (NCCL's channel
    count); ``available(scenario)`` narrows the mask to what the backend can answer (a replay of
    measurements only knows what was measured). See :class:`ForcingBackend`.
    """

    name: str

    def measure(self, scenario: Scenario, action: int) -> Measurement: ...

    def action_times(self, scenario: Scenario) -> np.ndarray | None: ...


@runtime_checkable
class ForcingBackend(Backend, Protocol):
    """A backend that can also run NCCL under pinned knobs (what an exported policy file does)."""

    def measure_forced(self, scenario: Scenario, constraints: KnobConstraints) -> Measurement: ...
