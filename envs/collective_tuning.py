"""``dynamiccl/CollectiveTuning-v0``: choose how NCCL runs each collective of a training iteration."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from dynamiccl.decisions import KnobConstraints, nccl_model_for
from dynamiccl.envs.backends import Backend, ForcingBackend, Measurement, make_backend
from dynamiccl.envs.deployable_observation import (
    DEPLOYABLE_HIGH,
    DEPLOYABLE_LOW,
    DEPLOYABLE_SIZE,
    docstring_table,
    encode_deployable,
    scenario_context,
)
from dynamiccl.envs.observation import OBS_HIGH, OBS_LOW, complete, static_features
from dynamiccl.envs.workloads import Episode, ScenarioDistribution, load_scenario_distribution
from dynamiccl.system.knobs import ACTIONS, ALGO_HIERARCHY_PAIRS, N_ACTIONS, Algorithm, Hierarchy, valid_mask
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.units import format_size, format_time_us

#: Reward for an action the mask forbids (NCCL then runs its own choice): log(1/55), below every
#: valid choice in the train and held-out suites (the worst is about 33x slower than NCCL; a test
#: keeps it so), so an unmasked agent never prefers an impossible action to a possible one.
INVALID_ACTION_REWARD = -4.0
#: Per-scenario facts kept at most this many at once (a long run sees many distinct calls).
_CACHE_LIMIT = 50_000
#: The two observation sets (see the docstring's tables) and their Box bounds.
_BOUNDS = {"research": (OBS_LOW, OBS_HIGH), "deployable": (DEPLOYABLE_LOW, DEPLOYABLE_HIGH)}
OBSERVATIONS = tuple(_BOUNDS)


def observation_set(size: int) -> str:
    """The observation set whose vectors have ``size`` fields: how a trained model tells what it
    was trained on (its observation space is saved with it)."""
    for name, (low, _) in _BOUNDS.items():
        if len(low) == size:
            return name
    sizes = ", ".join(f"{name} {len(low)}" for name, (low, _) in _BOUNDS.items())
    raise ValueError(f"an observation of {size} fields is none of this environment's ({sizes})")


def _algorithm_rows(width: int = 65) -> str:
    """The action table's algorithm row: every (algorithm, hierarchy) pair of the knob space."""
    def name(algo: Algorithm, hierarchical: Hierarchy) -> str:
        token = algo.name.lower()
        if sum(a == algo for a, _ in ALGO_HIERARCHY_PAIRS) == 1:
            return token
        return f"{token}-over-{token} (hierarchical)" if hierarchical else f"{token} (flat)"

    lines = textwrap.wrap(", ".join(name(*pair) for pair in ALGO_HIERARCHY_PAIRS), width)
    return "\n".join(f"| {'algorithm (hierarchy)' if i == 0 else '':<21} | {line:<{width}} |"
                     for i, line in enumerate(lines))


def _documented(doc: str) -> str:
    """The docstring with what follows from the knob space and the deployable fields filled in, so
    adding an algorithm (dynamiccl.system.nccl.ALGORITHMS) never needs an edit here."""
    def table(text: str) -> str:  # at the marker's indentation
        return textwrap.indent(text, "    ").lstrip()

    return (doc.replace("{N_ACTIONS}", str(N_ACTIONS)).replace("{ALGORITHM_ROWS}", table(_algorithm_rows()))
            .replace("{DEPLOYABLE_SIZE}", str(DEPLOYABLE_SIZE))
            .replace("{DEPLOYABLE_TABLE}", table(docstring_table())))


@dataclass(frozen=True)
class _CallFacts:
    """What the environment needs about one scenario, computed once."""

    mask: np.ndarray
    oracle_action: int
    oracle_time_us: float
    static_obs: np.ndarray
    nranks: int


class CollectiveTuningEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    NCCL picks an algorithm, a protocol and a channel count for every collective from a cost model
    that assumes an idle, uniform system. This environment lets a policy make that choice instead,
    call by call, and scores it against NCCL's own pick on the same backend (the simulator by
    default, real GPUs with the ``live`` backend).

    An episode is the sequence of collectives one training iteration issues (DDP gradient buckets,
    FSDP all-gathers and reduce-scatters, tensor-parallel activation all-reduces; see
    ``configs/workload/``), on one system drawn from a scenario distribution (``configs/scenario/``)
    with a compute-to-communication ratio and a straggler that can appear, move or vanish between
    calls. Each step is one call: the policy chooses, the backend runs it, the next call comes.

    ## Action Space

    ``Discrete({N_ACTIONS})``: an index into :data:`dynamiccl.system.knobs.ACTIONS`, the joint table of every
    knob (flat, so a mask can forbid exact combinations, and DQN works too):

    | Knob                  | Values                                                            |
    |-----------------------|-------------------------------------------------------------------|
    {ALGORITHM_ROWS}
    | protocol              | ll, ll128, simple                                                 |
    | channels              | 1, 2, 4, 8, 16, 32, 64                                            |
    | schedule              | baseline, bw_aware (ring-over-ring only)                          |
    | active chunks         | 1, 2, 4, 8 (ring-over-ring only)                                  |
    | chunk size            | NCCL's own in every action; decided per choice, not in the table  |

    Which actions can run depends on the system and the collective: :meth:`action_masks` returns
    the mask (``knobs.valid_mask``; sb3-contrib's MaskablePPO reads it). With ``deployable=True``
    the mask also drops what a tuner plugin cannot make NCCL do (ring-over-ring, StragglAR).

    An action outside the mask is tolerated, since unmasked agents and ``check_env`` sample freely:
    NCCL's own choice runs instead (the observed time equals NCCL's) and the reward is
    ``INVALID_ACTION_REWARD`` (-4.0, below every valid choice's reward in the suites).

    ## Observation Space

    ``Box(shape=(OBS_SIZE,), float32)``, fixed bounds, the same encoding for every system
    (:data:`dynamiccl.envs.observation.OBSERVATION_FIELDS` holds the full table):

    | Num       | Field                                  | Min | Max | Meaning                     |
    |-----------|----------------------------------------|-----|-----|-----------------------------|
    | 0-4       | collective_{broadcast,reduce,allgather,reducescatter,allreduce} | 0 | 1 | one-hot |
    | 5         | size_bin                               | 0   | 1   | floor(log2 bytes) / 36      |
    | 6         | ranks                                  | 0   | 1   | log2(ranks) / 12            |
    | 7         | nodes                                  | 0   | 1   | log2(nodes) / 12            |
    | 8         | gpus_per_node                          | 0   | 1   | log2(GPUs per node) / 7     |
    | 9         | gpu_arch                               | 0   | 1   | (SM version - 70) / 30      |
    | 10        | feature_nvls                           | 0   | 1   | NVLS multicast available    |
    | 11        | feature_collnet                        | 0   | 1   | in-network reduction        |
    | 12        | c2c                                    | 0   | 1   | c2c / (1 + c2c)             |
    | 13+12k    | tier{k}_present (k = 0, 1, 2)          | 0   | 1   | tier exists, size > 1 (*)   |
    | 14+12k    | tier{k}_size                           | 0   | 1   | log2(tier size) / 12        |
    | 15+12k    | tier{k}_bandwidth                      | 0   | 1   | log10(port GB/s) / 3        |
    | 16+12k    | tier{k}_bandwidth_ratio                | 0   | 1   | log2(tier-0 / tier-k) / 8   |
    | 17+12k    | tier{k}_latency                        | 0   | 1   | log10(10 x hop µs) / 3      |
    | 18-21+12k | tier{k}_fabric_{switch,ring,torus2d,fully_connected} | 0 | 1 | one-hot fabric   |
    | 22-24+12k | tier{k}_link_{nvlink,pcie,net}         | 0   | 1   | one-hot link class          |
    | 49        | straggler_present                      | 0   | 1   | a late rank was seen        |
    | 50        | straggler_position                     | 0   | 1   | late rank / (ranks - 1)     |
    | 51        | straggler_delay_bin                    | 0   | 1   | bin / 6, edges .1/.3/1/3/10 ms |
    | 52        | last_time_ratio                        | -1  | 1   | log2(last / NCCL time) / 4  |

    (*) Tier 0 (the node) is always present; an outer tier of size 1 carries no traffic and is
    encoded as absent, all its fields 0.

    The straggler fields and ``last_time_ratio`` report what the backend *observed on the previous
    call* (nothing at the first call of an episode), as a tuner inside a job would know them: a
    straggler that appears at call t shows in the observation of call t + 1.

    With ``observation="deployable"`` (what the training configs use, since it is what ships) the
    observation is instead exactly what the tuner plugin sees per call plus the deployment's
    constants, ``Box(shape=(DEPLOYABLE_SIZE,), float32)`` ({DEPLOYABLE_SIZE} fields,
    :data:`dynamiccl.envs.deployable_observation.DEPLOYABLE_FIELDS`). The context fields are the
    slice the runtime agrees on every rank: straggler none/short/long from the delay observed on the
    previous call (none at the first call), c2c none/low/high. No timing, no straggler rank, no
    exact c2c: a policy trained on it is exported without freezing a feature it learned to use.

    {DEPLOYABLE_TABLE}

    ## Rewards

    ``log(t_nccl_default / t_chosen)`` for the call just made: 0 when the choice is as fast as
    NCCL's, positive when faster, scale-free across message sizes. Summed over an episode it is the
    log of the iteration's geometric-mean speedup times its length.

    ## Starting State

    ``reset`` draws an episode from the scenario distribution with ``self.np_random``: a system, a
    node count, a workload, a c2c value and the straggler's path. ``reset(options={"episode": e})``
    plays a given :class:`~dynamiccl.envs.workloads.Episode` (a suite entry) or list of scenarios
    instead, which is how fixed suites are evaluated.

    ## Episode End

    The episode terminates after its last call: one iteration of the workload, or ``episode_length``
    calls (the trace then repeats, iteration after iteration). There is no truncation.

    ## Info

    ``reset``: ``scenario``, ``episode_name``, ``workload`` (not ``episode``: SB3's Monitor owns
    that key). ``step`` adds ``action``, ``valid``, ``config`` (the chosen
    :class:`~dynamiccl.system.knobs.Config`, None when invalid), ``time_us``, ``default_time_us``,
    ``speedup`` (default / time), ``oracle_action`` and ``oracle_time_us`` (the fastest action the
    mask allows; -1 and NaN when the backend cannot time every action), and ``call`` (the step's
    index in the episode).

    ## Arguments

    * ``scenario``: a distribution name in ``configs/scenario/`` (``train``, ``heldout``,
      ``smoke``), a YAML path, a mapping (e.g. Hydra's composed group) or a ScenarioDistribution;
      None when every episode is given to ``reset`` (how suites are evaluated).
    * ``backend``: ``"sim"`` (default), ``"perturbed"`` (the simulator with a hidden seeded
      miscalibration: a reality that is not the model), ``"replay"`` (real measurements only),
      ``"live"``, or a :class:`~dynamiccl.envs.backends.Backend`.
    * ``deployable``: mask to what the tuner plugin can make NCCL run (the project's default in
      ``configs/env/default.yaml``; ``false`` adds the simulator-only ring-over-ring and StragglAR).
    * ``observation``: ``"research"`` (the class's default, the simulator's full state) or
      ``"deployable"`` (only what the tuner plugin sees; ``configs/env/default.yaml``'s default).
    * ``episode_length``: calls per episode (default: the distribution's, else one iteration).
    * ``render_mode``: None or ``"ansi"`` (a line per call).
    * other keyword arguments go to the backend's constructor.

    ``import dynamiccl.envs`` registers the id. A worker process that has not imported it (SB3's
    SubprocVecEnv starts workers with forkserver or spawn) finds the environment through the
    ``module:id`` form, ``gymnasium.make("dynamiccl.envs:dynamiccl/CollectiveTuning-v0")``.

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        scenario: str | Path | Mapping[str, Any] | ScenarioDistribution | None = "train",
        backend: str | Backend = "sim",
        deployable: bool = False,
        episode_length: int | None = None,
        render_mode: str | None = None,
        observation: str = "research",
        **backend_kwargs: Any,
    ) -> None:
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {', '.join(OBSERVATIONS)}, got {observation!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if episode_length is not None and episode_length < 1:
            raise ValueError(f"episode_length must be a positive number of calls, got {episode_length}")
        self.distribution = None if scenario is None else load_scenario_distribution(scenario)
        self.backend = make_backend(backend, **backend_kwargs)
        self.deployable = bool(deployable)
        self.episode_length = episode_length
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.observation = observation
        low, high = _BOUNDS[observation]
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self._deployable_obs: dict[tuple[Scenario, tuple[str, str]], np.ndarray] = {}
        self._episode = Episode("", "", 0, "", ())
        self._call = 0
        self._last_info: dict[str, Any] = {}
        self._facts: dict[Scenario, _CallFacts] = {}
        self._episode_facts: list[_CallFacts] = []

    @property
    def current_scenario(self) -> Scenario:
        """The call the next action decides (the last call once the episode has ended)."""
        if not self._episode.scenarios:
            raise RuntimeError("call reset() before asking for the current scenario")
        return self._episode.scenarios[min(self._call, len(self._episode.scenarios) - 1)]

    @property
    def episode(self) -> Episode:
        return self._episode

    def action_masks(self) -> np.ndarray:
        """Valid actions for the current call (read-only)."""
        return self._episode_facts[min(self._call, len(self._episode_facts) - 1)].mask

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        given = (options or {}).get("episode")
        if given is None:
            if self.distribution is None:
                raise ValueError("this environment has no scenario distribution (scenario=None): "
                                 "pass reset(options={'episode': ...})")
            self._episode = self.distribution.sample(self.np_random, self.episode_length)
        elif isinstance(given, Episode) and given.scenarios:
            self._episode = given
        elif isinstance(given, Sequence) and given and all(isinstance(s, Scenario) for s in given):
            self._episode = Episode("given", given[0].topology.name, given[0].topology.nodes,
                                    "given", tuple(given))
        else:
            raise ValueError("options['episode'] must be a non-empty Episode (a suite entry) or "
                             "list of Scenario")
        self._call = 0
        self._episode_facts = self._facts_for(self._episode.scenarios)
        scenario, facts = self._episode.scenarios[0], self._episode_facts[0]
        self._last_info = {"scenario": scenario, "episode_name": self._episode.name,
                           "workload": self._episode.workload}
        observation = self._observe(scenario, facts, None, 0.0, 1.0)
        return observation, dict(self._last_info)

    def step(self, action: int | np.integer) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._episode.scenarios or self._call >= len(self._episode.scenarios):
            raise RuntimeError("the episode has ended (or never started): call reset()")
        a = int(action)
        if not 0 <= a < N_ACTIONS:
            raise ValueError(f"action {action!r} is outside Discrete({N_ACTIONS})")
        scenario = self._episode.scenarios[self._call]
        facts = self._episode_facts[self._call]
        valid = bool(facts.mask[a])
        # Outside the mask NCCL runs its own choice (the deployable mask also forbids actions the
        # simulator could time, which a tuner plugin cannot make NCCL run).
        if valid:
            m = self.backend.measure(scenario, a)
        else:
            m = self._forcing().measure_forced(scenario, KnobConstraints())
        time_us = m.time_us if valid else m.default_time_us
        reward = math.log(m.default_time_us / time_us) if valid else INVALID_ACTION_REWARD
        return self._advance(scenario, facts, m, time_us, reward,
                             {"action": a, "valid": valid, "config": ACTIONS[a] if valid else None})

    def step_forced(self, constraints: KnobConstraints
                    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One call run the way a deployed tuner runs it: NCCL with ``constraints`` pinned.

        This is how an exported policy file, NCCL's default (no constraint) or a fixed
        ``NCCL_ALGO``/``NCCL_PROTO`` are scored through the same episode as any agent: the pinned
        knobs may lie outside the action table (NCCL's own channel count). ``info["action"]`` is
        -1 and ``info["constraints"]`` holds what was pinned.
        """
        if not self._episode.scenarios or self._call >= len(self._episode.scenarios):
            raise RuntimeError("the episode has ended (or never started): call reset()")
        scenario = self._episode.scenarios[self._call]
        m = self._forcing().measure_forced(scenario, constraints)
        return self._advance(scenario, self._episode_facts[self._call], m, m.time_us,
                             math.log(m.default_time_us / m.time_us),
                             {"action": -1, "valid": True, "config": None,
                              "constraints": constraints})

    def _forcing(self) -> ForcingBackend:
        if not isinstance(self.backend, ForcingBackend):
            raise ValueError(f"the {self.backend.name} backend cannot run NCCL with pinned knobs "
                             "(it has no measure_forced); use sim, perturbed or replay")
        return self.backend

    def _advance(self, scenario: Scenario, facts: _CallFacts, m: Measurement, time_us: float,
                 reward: float, chosen: dict[str, Any]
                 ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The episode semantics every step shares: the info, the next call, the observation."""
        info = {
            "scenario": scenario, "episode_name": self._episode.name,
            "workload": self._episode.workload, "call": self._call, **chosen,
            "time_us": time_us, "default_time_us": m.default_time_us,
            "speedup": m.default_time_us / time_us, "oracle_action": facts.oracle_action,
            "oracle_time_us": facts.oracle_time_us,
        }
        self._last_info = info
        self._call += 1
        terminated = self._call >= len(self._episode.scenarios)
        following = self._episode_facts[min(self._call, len(self._episode_facts) - 1)]
        upcoming = self._episode.scenarios[min(self._call, len(self._episode.scenarios) - 1)]
        observation = self._observe(upcoming, following, m.straggler_rank, m.straggler_delay_us,
                                    time_us / m.default_time_us)
        return observation, reward, terminated, False, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        s = self.current_scenario
        where = (f"{s.collective.name.lower()} {format_size(s.nbytes)} on {s.topology.name}"
                 f"x{s.topology.nodes}")
        i = self._last_info
        if "action" not in i:
            return f"[{self._episode.name}] call {self._call}: {where}, nothing chosen yet"
        if "constraints" in i:
            pinned = i["constraints"].given()
            chosen = "NCCL pinned to " + ", ".join(f"{k}={getattr(v, 'name', v)}".lower()
                                                  for k, v in pinned.items()) if pinned else "NCCL"
        elif i["valid"]:
            chosen = i["config"].label()
        else:
            chosen = f"invalid action {i['action']} (NCCL's ran)"
        return (f"[{self._episode.name}] call {i['call']}: {where}: {chosen} "
                f"{format_time_us(i['time_us'])} vs NCCL {format_time_us(i['default_time_us'])} "
                f"({i['speedup']:.2f}x)")

    def close(self) -> None:
        """Releases the backend's resources (the live backend's ranks)."""
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def _observe(self, scenario: Scenario, facts: _CallFacts, straggler_rank: int | None,
                 straggler_delay_us: float, last_time_ratio: float) -> np.ndarray:
        """The next call's observation, from what the backend saw on the previous one."""
        if self.observation == "research":
            return complete(facts.static_obs, facts.nranks, straggler_rank, straggler_delay_us,
                            last_time_ratio)
        key = (scenario, scenario_context(scenario, observed_delay_us=straggler_delay_us))
        obs = self._deployable_obs.get(key)
        if obs is None:
            if len(self._deployable_obs) >= _CACHE_LIMIT:
                self._deployable_obs.clear()
            obs = encode_deployable(scenario, nccl_model_for(scenario.topology), key[1])
            obs.setflags(write=False)
            self._deployable_obs[key] = obs
        return obs.copy()

    def _facts_for(self, scenarios: Sequence[Scenario]) -> list[_CallFacts]:
        """Facts of every call, looked up once per episode (a sampled episode reuses one Scenario
        object for repeated calls, so consecutive repeats cost nothing)."""
        out: list[_CallFacts] = []
        previous = None
        for scenario in scenarios:
            if scenario is not previous:
                facts, previous = self._facts_of(scenario), scenario
            out.append(facts)
        return out

    def _facts_of(self, scenario: Scenario) -> _CallFacts:
        facts = self._facts.get(scenario)
        if facts is None:
            if len(self._facts) >= _CACHE_LIMIT:
                self._facts.clear()
            mask = valid_mask(scenario.topology, scenario.collective, deployable=self.deployable)
            available = getattr(self.backend, "available", None)
            if available is not None:  # a replay of measurements answers only what was measured
                mask = mask & available(scenario)
            mask.setflags(write=False)
            times = self.backend.action_times(scenario)
            oracle, oracle_us = -1, math.nan
            if times is not None:
                allowed = np.where(mask, times, np.inf)
                oracle = int(np.argmin(allowed))
                oracle_us = float(allowed[oracle])
            facts = _CallFacts(mask, oracle, oracle_us, static_features(scenario),
                               scenario.topology.nranks)
            self._facts[scenario] = facts
        return facts


CollectiveTuningEnv.__doc__ = _documented(CollectiveTuningEnv.__doc__ or "")
