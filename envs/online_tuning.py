"""``dynamiccl/OnlineTuning-v0``: which choice to try next on a system whose truth is unknown.

The zero-shot environment (:mod:`dynamiccl.envs.collective_tuning`) is a contextual bandit over
the simulator. The sequential problem is online: inside a real job the truth differs from the
model, timings are noisy, every call counts, and a tuner must decide what to measure next and when
to stop. Here one episode is one context — a system, a collective and a message size — in a hidden
:mod:`perturbed <dynamiccl.envs.backends.perturbed>` reality, played for ``n_calls`` calls.

The choices are a small candidate set the model proposes (:class:`Candidates`): NCCL's own pick
(slot 0), and for every deployable (algorithm, protocol) pair the channel count the simulator
predicts fastest, ordered by that prediction. The miscalibrations of a perturbed reality act per
(algorithm, protocol) pair, so the reality's best deployable choice lies in this set (or within
2 % of it) on every preset system, collective and size measured; the set is what makes the model a
prior rather than an answer.

Exploring a candidate costs a real call, so only affordable ones may be tried (:func:`affordable`,
part of the action mask): those the model predicts at most :data:`MAX_PREDICTED_SLOWDOWN` times
NCCL's time, NCCL's time being the larger of its prediction and, once NCCL's pick has run, its
measurement. Without the bound every online tuner tried tree/LL on a 1 GiB all-reduce of two DGX
H100 in some held-out reality: 34x slower than NCCL's pick. Anchoring on the measurement too keeps
the choices that win where the model underrates NCCL's own time (on a 32 KiB broadcast in a DGX
H100, ring/Simple is predicted 2.3x NCCL's pick and is 2.4x faster than it in a held-out reality
where NCCL's pick takes 2.8x its predicted time).

:class:`CallLog` keeps what the tuner has measured and :func:`encode` turns the context, the prior
and the log into the observation; the online tuner in :mod:`dynamiccl.agents.policies.adaptive` uses the
same two pieces inside a job, so the policy sees the same vector in training and deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from dynamiccl import decisions
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.envs.observation import OBSERVATION_FIELDS, static_features
from dynamiccl.system.knobs import ACTIONS, ActionColumns, valid_mask
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology

#: Calls per episode: the horizon the issue's goals are stated over.
N_CALLS = 50
#: Slots in the action space: NCCL's pick and up to seven (algorithm, protocol) pairs.
MAX_CANDIDATES = 8
#: A candidate predicted more than this many times NCCL's time is not tried (:func:`affordable`).
MAX_PREDICTED_SLOWDOWN = 2.0
#: Log-ratios are encoded as log(ratio) / LOG_RANGE, clipped to [-1, 1] (8x either way).
LOG_RANGE = math.log(8.0)
#: The pooled noise estimate is encoded as sigma / NOISE_SCALE, clipped to [0, 1].
NOISE_SCALE = 0.10
#: Message sizes drawn in training: log-uniform integers from 8 B to 1 GiB.
LOG2_BYTES_RANGE = (3.0, 30.0)
#: Systems drawn in training: (preset, nodes). Realities are what is held out, not the presets.
TRAIN_SYSTEMS: tuple[tuple[str, int], ...] = (
    ("dgx_h100", 1), ("dgx_h100", 2), ("dgx_h100", 4), ("dgx_a100", 1), ("dgx_a100", 2),
    ("dgx_a100", 4), ("pcie_cluster", 1), ("pcie_cluster", 2), ("pcie_cluster", 4),
    ("ring_ring_8to1", 2), ("ring_ring_8to1", 4), ("ring_ring_4to1", 2), ("switch", 2),
)
TRAIN_COLLECTIVES: tuple[Collective, ...] = (Collective.ALLREDUCE, Collective.ALLGATHER,
                                             Collective.REDUCESCATTER, Collective.BROADCAST,
                                             Collective.REDUCE)
#: The research observation's per-call fields (straggler, last time) start here; the rest is context.
CONTEXT_SIZE = [f.name for f in OBSERVATION_FIELDS].index("straggler_present")
SLOT_FIELDS = ("present", "prior_gain", "tries", "measured_gain", "gap_to_best", "best")
#: Lower bounds of the slot fields (upper bounds are all 1).
_SLOT_LOW = (0.0, -1.0, 0.0, -1.0, -1.0, 0.0)
OBS_SIZE = CONTEXT_SIZE + 2 + len(SLOT_FIELDS) * MAX_CANDIDATES
_PAIR = ActionColumns.algorithm * 16 + ActionColumns.protocol


@dataclass(frozen=True)
class Candidates:
    """The choices of one context. Slot 0 is NCCL's own pick (``actions[0] == -1``: run with
    nothing pinned); slot k > 0 is an action id into :data:`dynamiccl.system.knobs.ACTIONS`."""

    actions: tuple[int, ...]
    #: The model's (nominal simulator's) predicted time of each slot, µs.
    predicted_us: tuple[float, ...]

    @classmethod
    def of(cls, scenario: Scenario) -> Candidates:
        nominal = decisions.action_times(scenario)
        mask = valid_mask(scenario.topology, scenario.collective, deployable=True) & np.isfinite(nominal)
        nccl = decisions.nccl_default(scenario)
        best_per_pair = []
        for pair in np.unique(_PAIR[mask]):
            in_pair = np.where(mask & (_PAIR == pair), nominal, np.inf)
            action = int(np.argmin(in_pair))
            if ACTIONS[action] != nccl.config:
                best_per_pair.append(action)
        best_per_pair.sort(key=lambda a: nominal[a])
        kept = best_per_pair[: MAX_CANDIDATES - 1]
        return cls((-1, *kept), (float(nccl.time_us), *(float(nominal[a]) for a in kept)))

    def __len__(self) -> int:
        return len(self.actions)

    def mask(self) -> np.ndarray:
        """Which of the :data:`MAX_CANDIDATES` slots hold a choice."""
        return np.arange(MAX_CANDIDATES) < len(self)


class CallLog:
    """What a tuner has measured in one context: per slot, tries and sums of log times."""

    def __init__(self) -> None:
        self.tries = np.zeros(MAX_CANDIDATES, dtype=np.int64)
        self.log_sum = np.zeros(MAX_CANDIDATES)
        self.log_sq_sum = np.zeros(MAX_CANDIDATES)

    @property
    def calls(self) -> int:
        return int(self.tries.sum())

    def record(self, slot: int, time_us: float) -> None:
        x = math.log(max(float(time_us), 1e-9))
        self.tries[slot] += 1
        self.log_sum[slot] += x
        self.log_sq_sum[slot] += x * x

    def mean_log(self) -> np.ndarray:
        """Mean log time per slot (NaN where untried)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.tries > 0, self.log_sum / self.tries, np.nan)

    def noise(self) -> float:
        """Pooled standard deviation of log times over slots tried at least twice (0 before)."""
        repeated = self.tries >= 2
        dof = int((self.tries[repeated] - 1).sum())
        if dof == 0:
            return 0.0
        means = self.log_sum[repeated] / self.tries[repeated]
        ss = self.log_sq_sum[repeated] - self.tries[repeated] * means**2
        return math.sqrt(max(float(ss.sum()), 0.0) / dof)


def affordable(candidates: Candidates, log: CallLog) -> np.ndarray:
    """The slots a tuner may run next: NCCL's pick, and the candidates the model predicts at most
    :data:`MAX_PREDICTED_SLOWDOWN` times NCCL's time, the larger of its predicted time and (once it
    has run) its measured one (geometric mean)."""
    predicted = np.array(candidates.predicted_us)
    nccl = predicted[0]
    if log.tries[0] > 0:
        nccl = max(nccl, math.exp(log.mean_log()[0]))
    out = np.zeros(MAX_CANDIDATES, dtype=bool)
    out[: len(predicted)] = predicted <= MAX_PREDICTED_SLOWDOWN * nccl
    out[0] = True
    return out


def _log_unit(x: np.ndarray | float) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.float64) / LOG_RANGE, -1.0, 1.0)


def encode(scenario: Scenario, candidates: Candidates, log: CallLog, n_calls: int) -> np.ndarray:
    """The observation (float32 [OBS_SIZE]); see :class:`OnlineTuningEnv` for the table."""
    k = len(candidates)
    pred = np.array(candidates.predicted_us)
    means = log.mean_log()[:k]
    # NCCL's measured time once it has been run, its predicted time until then.
    ref = means[0] if log.tries[0] > 0 else math.log(pred[0])
    slots = np.zeros((MAX_CANDIDATES, len(SLOT_FIELDS)))
    slots[:k, 0] = 1.0
    slots[:k, 1] = _log_unit(np.log(pred[0] / pred))
    slots[:k, 2] = np.log2(1.0 + log.tries[:k]) / math.log2(1.0 + n_calls)
    slots[:k, 3] = np.where(log.tries[:k] > 0, _log_unit(ref - np.nan_to_num(means)), 0.0)
    if log.calls:
        best = int(np.nanargmin(means))
        slots[:k, 4] = np.where(log.tries[:k] > 0, _log_unit(means[best] - np.nan_to_num(means)), 0.0)
        slots[best, 5] = 1.0
    head = [min(log.calls / n_calls, 1.0), min(log.noise() / NOISE_SCALE, 1.0)]
    return np.concatenate([static_features(scenario)[:CONTEXT_SIZE], head, np.clip(slots, -1.0, 1.0).ravel()]
                          ).astype(np.float32)


@dataclass(frozen=True)
class Context:
    """One episode's hidden setting: which reality and which call."""

    reality_seed: int
    scenario: Scenario


class OnlineTuningEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    One context (system, collective, message size) on a system whose truth is a hidden
    perturbation of the simulator (per-(algorithm, protocol) bandwidth x[0.6, 1.4], latency floors
    x[1/3, 3], 1-5 % log-normal timing noise; :mod:`dynamiccl.envs.backends.perturbed`). The job
    issues this call ``n_calls`` times; each step the policy picks which candidate runs it, sees the
    noisy time, and pays for it. What to stop trying is implicit: exploiting is running the best
    choice again.

    ## Action Space

    ``Discrete(8)``: a candidate slot (:class:`Candidates`). Slot 0 is NCCL's own pick (nothing
    pinned); slots 1.. are the simulator's best channel count for each deployable (algorithm,
    protocol) pair, fastest predicted first. :meth:`action_masks` says which slots hold a choice;
    an empty slot runs NCCL's pick (slot 0) and is recorded as such.

    ## Observation Space

    ``Box(shape=(OBS_SIZE,), float32)``, fixed bounds:

    | Num            | Field              | Min | Max | Meaning                                    |
    |----------------|--------------------|-----|-----|--------------------------------------------|
    | 0-48           | context            | 0   | 1   | the call and the system: ``static_features``|
    |                |                    |     |     | (collective, size bin, ranks, nodes, tiers, |
    |                |                    |     |     | GPU, features; see envs/observation.py)     |
    | 49             | progress           | 0   | 1   | calls made / n_calls                        |
    | 50             | noise              | 0   | 1   | pooled std of log times (slots tried twice) |
    |                |                    |     |     | / 0.1                                       |
    | 51+6k          | slot k present     | 0   | 1   | slot k holds a choice                       |
    | 52+6k          | slot k prior_gain  | -1  | 1   | log(model's NCCL time / model's slot time)  |
    |                |                    |     |     | / log 8                                     |
    | 53+6k          | slot k tries       | 0   | 1   | log2(1 + tries) / log2(1 + n_calls)         |
    | 54+6k          | slot k measured    | -1  | 1   | log(reference / geomean measured time) /    |
    |                |  _gain             |     |     | log 8; 0 while untried. Reference: NCCL's   |
    |                |                    |     |     | measured geomean once slot 0 has run, its   |
    |                |                    |     |     | predicted time before                       |
    | 55+6k          | slot k gap_to_best | -1  | 0   | log(best geomean / slot's geomean) / log 8; |
    |                |                    |     |     | 0 while untried                             |
    | 56+6k          | slot k best        | 0   | 1   | 1 for the slot with the best measured mean  |

    for k = 0..7. Nothing here is free: NCCL's time is known only by running slot 0.

    ## Rewards

    ``-log(t_run / t_nccl)`` per call: ``t_run`` the noisy measured time of the call actually run
    (the reality's true time times the reality's log-normal noise, drawn from ``self.np_random`` so
    the episode is reproducible from ``reset``'s seed), ``t_nccl`` the true (noise-free) time of
    NCCL's own choice in this reality. Every exploration call is charged; running NCCL's pick earns
    noise around 0.

    ## Starting State

    ``reset`` draws with ``self.np_random`` a reality seed from ``seeds`` (training: below
    ``HELDOUT_SEED_START``), a system from ``systems``, a collective and a log-uniform size
    from 8 B to 1 GiB. ``reset(options={"context": Context(...)})`` plays a given context.

    ## Episode End

    Terminates after ``n_calls`` calls (default 50); no truncation.

    ## Info

    ``reset``: ``reality_seed``, ``scenario``, ``candidates``. ``step`` adds ``slot``, ``action``
    (-1 for NCCL's pick), ``time_us`` (measured), ``true_time_us``, ``nccl_time_us`` (true) and
    ``best_time_us`` (the fastest candidate in the reality).

    ## Arguments

    * ``seeds``: the reality seeds episodes draw from; default ``range(0, HELDOUT_SEED_START)``.
    * ``heldout``: allow seeds from ``HELDOUT_SEED_START`` on (evaluation only); a training env
      refuses them, so a held-out reality cannot leak into training.
    * ``systems``: (preset, nodes) pairs (default :data:`TRAIN_SYSTEMS`).
    * ``n_calls``: calls per episode (default 50).

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": []}

    def __init__(self, seeds: range | None = None, heldout: bool = False,
                 systems: tuple[tuple[str, int], ...] = TRAIN_SYSTEMS, n_calls: int = N_CALLS) -> None:
        self.seeds = range(0, HELDOUT_SEED_START) if seeds is None else seeds
        if len(self.seeds) == 0:
            raise ValueError("seeds is empty: give at least one reality seed")
        if not heldout and max(self.seeds) >= HELDOUT_SEED_START:
            raise ValueError(f"seeds from {HELDOUT_SEED_START} on are held out for evaluation; "
                             "pass heldout=True only to evaluate")
        if n_calls < 1:
            raise ValueError(f"n_calls must be at least 1, got {n_calls}")
        self.heldout = bool(heldout)
        self.n_calls = n_calls
        self.topologies: tuple[Topology, ...] = tuple(load_topology(n, nodes=k) for n, k in systems)
        self.action_space = spaces.Discrete(MAX_CANDIDATES)
        low = np.concatenate([np.zeros(CONTEXT_SIZE + 2),
                              np.tile(_SLOT_LOW, MAX_CANDIDATES)])
        self.observation_space = spaces.Box(low.astype(np.float32), np.ones(OBS_SIZE, np.float32),
                                            dtype=np.float32)
        self._realities: dict[int, PerturbedBackend] = {}
        self._context: Context | None = None

    @property
    def realities_seen(self) -> frozenset[int]:
        """Every reality seed an episode of this environment has been played in."""
        return frozenset(self._realities)

    def _reality(self, seed: int) -> PerturbedBackend:
        if seed not in self._realities:
            self._realities[seed] = PerturbedBackend(seed, noisy=False)
        return self._realities[seed]

    def _draw(self) -> Context:
        rng = self.np_random
        seed = int(self.seeds[int(rng.integers(len(self.seeds)))])
        while True:
            topo = self.topologies[int(rng.integers(len(self.topologies)))]
            collective = TRAIN_COLLECTIVES[int(rng.integers(len(TRAIN_COLLECTIVES)))]
            if valid_mask(topo, collective, deployable=True).any():
                break
        nbytes = int(round(2.0 ** rng.uniform(*LOG2_BYTES_RANGE)))
        return Context(seed, Scenario(topo, collective, nbytes))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        context = (options or {}).get("context") or self._draw()
        if not self.heldout and context.reality_seed >= HELDOUT_SEED_START:
            raise ValueError(f"reality {context.reality_seed} is held out; this env trains")
        self._context = context
        s = context.scenario
        reality = self._reality(context.reality_seed)
        self._candidates = Candidates.of(s)
        self._log = CallLog()
        self._true = np.array([self._true_time(reality, s, a) for a in self._candidates.actions])
        info = {"reality_seed": context.reality_seed, "scenario": s, "candidates": self._candidates}
        return encode(s, self._candidates, self._log, self.n_calls), info

    @staticmethod
    def _true_time(reality: PerturbedBackend, s: Scenario, action: int) -> float:
        if action < 0:
            return reality.true_time(s, decisions.nccl_default(s).config)
        return float(reality.action_times(s)[action])

    def action_masks(self) -> np.ndarray:
        return self._candidates.mask() & affordable(self._candidates, self._log)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._context is None:
            raise RuntimeError("call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        slot = int(action) if int(action) < len(self._candidates) else 0
        s = self._context.scenario
        reality = self._realities[self._context.reality_seed]
        chosen = self._candidates.actions[slot]
        measured = float(self._true[slot] * math.exp(self.np_random.normal(0.0, reality.truth.noise)))
        self._log.record(slot, measured)
        reward = -math.log(measured / self._true[0])
        info = {"slot": slot, "action": chosen, "time_us": measured,
                "true_time_us": float(self._true[slot]), "nccl_time_us": float(self._true[0]),
                "best_time_us": float(self._true.min())}
        terminated = self._log.calls >= self.n_calls
        return encode(s, self._candidates, self._log, self.n_calls), reward, terminated, False, info
