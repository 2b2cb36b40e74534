"""Online tuning inside the job: try configurations for a size bin, keep the fastest, never a loser.

AutoCCL needs a forked NCCL to switch configurations while a job runs; here the plugin's pin does it
(:mod:`dynamiccl.runtime.plugin_control`). The runtime drives a trial at a time: at a step boundary
every rank pins the same candidate (rank 0 asks the tuner and broadcasts its answer), the bucket
all-reduces of that bin are timed on every rank for ``steps_per_trial`` steps, and the per-rank
medians are agreed as their maximum over ranks (what the job waits for), so the tuner on rank 0
learns from a number every rank holds too. NCCL's own choice (nothing pinned) is measured first and
is the gate. Exploration ends when the tuner has nothing more to propose or ``max_trials`` is
reached; then the fastest candidate and NCCL's choice are measured again, alternately, while the
noise leaves the decision open (:func:`verdict`, the rule every online path applies:
:func:`~dynamiccl.system.launch_noise.held_verdict`): the winner is pinned only once it beats
NCCL's time by more than the spread of their trials, from at least
:data:`~dynamiccl.system.launch_noise.MIN_TRIALS` trials each, and the bin stays unpinned when it
cannot (also as soon as :data:`MAX_TRIALS_EACH` trials each could not clear that spread at the gain
measured, and when they leave it open). No pin rests on one trial: a trial's number is a trimmed
mean of its calls (:func:`~dynamiccl.runtime.timing.trimmed_mean`), a choice's the median of its
trials.

The tuner is any object with this protocol (rank 0 calls it; see :class:`OnlineTuner`)::

    propose(size_bin) -> Candidate | None   # the next configuration to measure; None: done
    observe(size_bin, candidate, time_us)    # the agreed time of a proposed candidate

``dynamiccl.agents.policies.runtime_tuner`` adapts the project's coordinate descent and UCB bandit to it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Protocol

import torch

from dynamiccl.system.knobs import NCCL_KNOBS, Collective, Knobs
from dynamiccl.system.launch_noise import DROP, HOLD, BandNoise, held_verdict, trial_spread

#: A configuration to pin: NCCL's knobs, None leaving one to NCCL (``Candidate(ring, simple)``).
Candidate = Knobs


@dataclass(frozen=True)
class SizeBin:
    """Calls of ``collective`` with ``min_bytes`` ≤ size < ``max_bytes`` (a power-of-two bin)."""

    collective: int
    min_bytes: int
    max_bytes: int

    @classmethod
    def of(cls, nbytes: int, collective: int = int(Collective.ALLREDUCE)) -> SizeBin:
        low = 1 << max(int(nbytes).bit_length() - 1, 0)
        return cls(collective, low, 2 * low)

    def __contains__(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes < self.max_bytes


class OnlineTuner(Protocol):
    """What the runtime needs from an online tuner (called on rank 0 only)."""

    def propose(self, size_bin: SizeBin) -> Candidate | None: ...

    def observe(self, size_bin: SizeBin, candidate: Candidate, time_us: float) -> None: ...


#: Encoded step actions broadcast from rank 0: (kind, then each NCCL knob's id, KEEP_ID for NCCL's
#: own); ACTION_LENGTH values.
MEASURE_DEFAULT, MEASURE_CANDIDATE, PIN_WINNER, KEEP_DEFAULT = 0, 1, 2, 3
ACTION_LENGTH = 1 + len(NCCL_KNOBS)
#: At most this many trials of NCCL's choice and of the winner while the noise leaves the decision
#: open (then NCCL's choice stays).
MAX_TRIALS_EACH = 5
#: What the runtime knows of launch noise before its trials measure any: nothing (its trials all
#: fall in the job they decide for, so their own spread is the noise that matters).
_UNMEASURED = BandNoise(core=0.0, tail=0.0)


def verdict(default: list[float], best: list[float]) -> int | None:
    """PIN_WINNER, KEEP_DEFAULT or None (open: measure again) for the winner's trials ``best``
    against NCCL's ``default``, by :func:`~dynamiccl.system.launch_noise.held_verdict`, the noise
    being the spread of these trials (unknown, so nothing decided, until one of them repeats; a
    trial that timed no call, 0 µs, decides nothing either)."""
    if min(default + best) <= 0:
        return None
    spread, dof = trial_spread(default, best)
    advantage = math.log(statistics.median(default) / statistics.median(best))
    decided = held_verdict(advantage, len(best), len(default), _UNMEASURED, spread if dof else math.inf,
                           max_tries=MAX_TRIALS_EACH)
    return {HOLD: PIN_WINNER, DROP: KEEP_DEFAULT}.get(decided)


@dataclass
class TuningEvent:
    """What every rank did at one tuning boundary (the tests compare these across ranks)."""

    step: int
    #: What runs from here on: ``kind`` for ``candidate`` (None: NCCL's own choice) in ``size_bin``.
    size_bin: SizeBin
    kind: int
    candidate: Candidate | None
    #: The trial that just ended, as (bin, configuration, agreed time); None at the first boundary.
    ended: tuple[SizeBin, Candidate | None, float] | None


@dataclass
class BinState:
    size_bin: SizeBin
    current: Candidate | None = None          # what runs now (None: NCCL's own choice)
    #: Agreed time of every trial: NCCL's own choice's, and each candidate's.
    default_us: list[float] = field(default_factory=list)
    measured: dict[Candidate, list[float]] = field(default_factory=dict)
    trials: int = 0
    done: bool = False

    def best(self) -> Candidate | None:
        """The candidate whose trials' median is the lowest (None: none measured)."""
        return min(self.measured, key=lambda c: statistics.median(self.measured[c]), default=None)


class Tuning:
    """Rank 0's bookkeeping plus the encoding every rank decodes; one bin at a time."""

    def __init__(self, tuner: OnlineTuner, bins: list[SizeBin], max_trials: int = 16) -> None:
        self.tuner, self.max_trials = tuner, max_trials
        self.queue = [BinState(b) for b in bins]

    @property
    def active(self) -> BinState | None:
        return next((b for b in self.queue if not b.done), None)

    def next_action(self, agreed_us: float | None) -> torch.Tensor:
        """Rank 0: record the trial that just ended and choose what runs next."""
        state = self.active
        if state is None:
            return self._encode(KEEP_DEFAULT, None)
        if agreed_us is not None:
            if state.current is None:
                state.default_us.append(agreed_us)
            else:
                state.measured.setdefault(state.current, []).append(agreed_us)
                self.tuner.observe(state.size_bin, state.current, agreed_us)
        if not state.default_us:
            return self._encode(MEASURE_DEFAULT, None)
        proposal = None
        if state.trials < self.max_trials and not any(len(t) > 1 for t in state.measured.values()):
            proposal = self.tuner.propose(state.size_bin)
        if proposal is not None:
            state.trials += 1
            return self._encode(MEASURE_CANDIDATE, proposal)
        return self._encode(*self._gate(state))

    def _gate(self, state: BinState) -> tuple[int, Candidate | None]:
        """After exploration: the fastest candidate pinned once it clearly beats NCCL's own choice,
        NCCL's choice kept once it clearly is not beaten; while open, the one of the two with fewer
        trials measured again (up to MAX_TRIALS_EACH each)."""
        best = state.best()
        if best is None:
            return KEEP_DEFAULT, None
        decided = verdict(state.default_us, state.measured[best])
        if decided is not None:
            return decided, best if decided == PIN_WINNER else None
        if len(state.default_us) < len(state.measured[best]):
            if len(state.default_us) < MAX_TRIALS_EACH:
                return MEASURE_DEFAULT, None
        elif len(state.measured[best]) < MAX_TRIALS_EACH:
            return MEASURE_CANDIDATE, best
        return KEEP_DEFAULT, None

    @staticmethod
    def _encode(kind: int, c: Candidate | None) -> torch.Tensor:
        return torch.tensor([kind, *(Knobs() if c is None else c).ids()], dtype=torch.int64)

    def apply(self, action: torch.Tensor) -> tuple[int, Candidate | None]:
        """Every rank: follow rank 0's broadcast action; returns (kind, candidate)."""
        kind, *ids = (int(v) for v in action.tolist())
        knobs = Candidate.from_ids(ids)
        candidate = None if knobs.is_default else knobs
        state = self.active
        if state is not None:
            state.current = candidate
            if kind in (PIN_WINNER, KEEP_DEFAULT):
                state.done = True
        return kind, candidate
