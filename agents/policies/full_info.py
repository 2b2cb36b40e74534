"""A full-information learner: supervised on every action's value, anchored on NCCL's own pick.

The tuning problem the plugin faces is a contextual bandit (a call's best choice does not depend on
earlier choices), and the simulator returns the time of all 336 actions of a call at once. A policy
gradient learning from one sampled reward per step throws that away; this learner regresses the
gain of *every* action over NCCL's default, log(t_NCCL / t_action), from the deployable observation
(:mod:`dynamiccl.envs.deployable_observation`: only what the plugin sees, so export freezes nothing).

Doing nothing is the safe default: the policy deviates from NCCL's pick only where the most cautious
of its ensemble's predictions for the best action exceeds ``min_gain``, so an uncertain prediction
costs nothing. The ensemble, not ``min_gain``, carries the caution: nine members disagree where a
system lies outside what they learned from, and their smallest prediction is then low. A high
``min_gain`` instead throws away every gain below it wherever the members agree — on the held-out
suite a perfect predictor that deviates only above 2 % keeps only 0.88 of the oracle's gain, above
0.5 % 0.99. So ``min_gain`` is only the size of a gain worth a deviation: 0.5 %, about the noise of a
timed call (nccl-tests' in-place / out-of-place pairs differ by 1-2 %).

Members can also agree and all be wrong: beyond anything trained on they extrapolate alike (for a
1 MiB all-reduce on two GB200 NVL72 racks, a 72-GPU NVLink domain where training nodes hold at most
16, all nine members of one learner rated a hierarchical LL128 tree 1.03-1.18x faster than NCCL's
pick; it ran at 0.26x). So the policy acts
only inside the box of observations it trained on: a call with any field beyond the range its
training calls spanned keeps NCCL's pick. Training calls come
from systems drawn around physical ranges (:mod:`dynamiccl.envs.system_sampler`), fresh ones every
round, so the learner never sees a held-out system and never sees the same system twice; with
``systems`` naming a scenario distribution (``train``) they come from that distribution's systems
instead, the ones the SB3 agents train on (``bench_training.py`` compares the learners that way).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import InitVar, asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dynamiccl import decisions
from dynamiccl.agents.policies.policy import allowed_actions, nearest_valid_action, require_scenario
from dynamiccl.config_loader import CHECKPOINT_FIX, ConfigError, read_as
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.action_values import ActionValues, action_values
from dynamiccl.envs.deployable_observation import DEPLOYABLE_SIZE, encode_batch, scenario_context
from dynamiccl.envs.system_sampler import random_calls, random_topology
from dynamiccl.envs.workloads import load_scenario_distribution
from dynamiccl.files import replace_atomically
from dynamiccl.system.knobs import ACTIONS, N_ACTIONS, Collective, valid_mask
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

#: Gains are learned in [-GAIN_CLIP, GAIN_CLIP]: an action 2.7x slower than NCCL is as useless as one
#: 30x slower, and the loss should spend its capacity near the top of each call's ranking.
GAIN_CLIP = 1.0
#: Slack on the trained-on box: encodings are float32 and the same system encodes identically.
SUPPORT_TOLERANCE = 1e-6


@dataclass
class FullInfoConfig:
    """Hyper-parameters (every field is a Hydra override under ``agent.``)."""

    #: Hidden units per layer and hidden layers of the MLP.
    hidden: int = 256
    layers: int = 3
    learning_rate: float = 1e-3
    batch_size: int = 512
    #: Fresh random systems per round, and calls drawn on each.
    systems_per_round: int = 64
    calls_per_system: int = 128
    #: Gradient passes over a round's calls before new systems are drawn.
    epochs_per_round: int = 3
    #: Deviate from NCCL's pick only where the best predicted gain exceeds this (relative).
    min_gain: float = 0.005
    #: Independently initialised networks; an action's gain is the *smallest* of their predictions,
    #: so the policy deviates only where every member agrees (disagreement = uncertainty).
    ensemble: int = 9
    #: Where training systems come from: ``random`` (the sampler) or a scenario distribution's name.
    systems: str = "random"
    seed: int = 0
    #: ``min_gain``'s name until it had one of its own (the gate's margin is another value), so
    #: configs and learner files saved before still load; never saved.
    margin: InitVar[float | None] = None

    def __post_init__(self, margin: float | None) -> None:
        if margin is not None:
            self.min_gain = margin


class GainNetwork(nn.Module):
    """Deployable observation -> predicted log(t_NCCL / t_action) for every action, by each of
    ``ensemble`` independently initialised MLPs ([K, B, A])."""

    def __init__(self, hidden: int, layers: int, ensemble: int = 1) -> None:
        super().__init__()
        dims = [DEPLOYABLE_SIZE] + [hidden] * layers

        def member() -> nn.Sequential:
            blocks: list[nn.Module] = []
            for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
                blocks += [nn.Linear(d_in, d_out), nn.ReLU()]
            return nn.Sequential(*blocks, nn.Linear(dims[-1], N_ACTIONS))

        self.members = nn.ModuleList(member() for _ in range(ensemble))
        # The box of observations trained on (empty until the first round; saved with the weights).
        self.register_buffer("support_low", torch.full((DEPLOYABLE_SIZE,), math.inf))
        self.register_buffer("support_high", torch.full((DEPLOYABLE_SIZE,), -math.inf))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(obs) for m in self.members])

    def widen_support(self, obs: torch.Tensor) -> None:
        """Grows the box of trained-on observations to hold ``obs``."""
        self.support_low = torch.minimum(self.support_low, obs.min(dim=0).values)
        self.support_high = torch.maximum(self.support_high, obs.max(dim=0).values)

    def supports(self, obs: np.ndarray) -> np.ndarray:
        """Whether each observation lies inside the box trained on, every field within the range
        its training calls spanned ([B] bool)."""
        low, high = self.support_low.numpy(), self.support_high.numpy()
        return ((obs >= low - SUPPORT_TOLERANCE) & (obs <= high + SUPPORT_TOLERANCE)).all(axis=1)


def masked_loss(predicted: torch.Tensor, gains: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Huber loss over the allowed actions of every call and every ensemble member ([K, B, A]
    predictions against [B, A] clipped targets)."""
    target = torch.clamp(torch.where(allowed, gains, torch.zeros_like(gains)), -GAIN_CLIP, GAIN_CLIP)
    err = nn.functional.huber_loss(predicted, target.expand_as(predicted), reduction="none", delta=0.1)
    return (err * allowed).sum() / (allowed.sum() * predicted.shape[0]).clamp(min=1)


class FullInfoLearner:
    """Trains :class:`GainNetwork` on fresh random systems, round after round."""

    def __init__(self, config: FullInfoConfig | None = None) -> None:
        self.config = config or FullInfoConfig()
        torch.manual_seed(self.config.seed)
        self.rng = np.random.default_rng(self.config.seed)
        self.network = GainNetwork(self.config.hidden, self.config.layers, self.config.ensemble)
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=self.config.learning_rate)
        self.samples_seen = 0
        self.rounds = 0
        self._pool = (None if self.config.systems == "random"
                      else load_scenario_distribution(self.config.systems).topologies())

    def draw_round(self) -> ActionValues:
        """One round of training calls: ``systems_per_round`` systems, their calls' values."""
        cfg = self.config
        parts = [action_values(self.draw_system(self.rounds * cfg.systems_per_round + i),
                               random_calls(self.rng, cfg.calls_per_system))
                 for i in range(cfg.systems_per_round)]
        return ActionValues(*(np.concatenate([getattr(p, f) for p in parts])
                              for f in ("observations", "gains", "allowed", "default_us")))

    def draw_system(self, index: int) -> Topology:
        """The system of a round's ``index``-th call batch: a fresh random one, or one of the
        scenario distribution's."""
        if self._pool is None:
            return random_topology(self.rng, index)
        return self._pool[int(self.rng.integers(len(self._pool)))]

    def train_round(self, data: ActionValues) -> float:
        """Gradient passes over ``data``; returns the mean loss of the last pass."""
        cfg = self.config
        obs = torch.as_tensor(data.observations)
        self.network.widen_support(obs)
        gains = torch.as_tensor(np.where(data.allowed, data.gains, 0.0), dtype=torch.float32)
        allowed = torch.as_tensor(data.allowed)
        gen = torch.Generator().manual_seed(cfg.seed + self.rounds)
        last = math.nan
        for _ in range(cfg.epochs_per_round):
            order = torch.randperm(len(obs), generator=gen)
            losses = []
            for start in range(0, len(obs), cfg.batch_size):
                idx = order[start:start + cfg.batch_size]
                loss = masked_loss(self.network(obs[idx]), gains[idx], allowed[idx])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(float(loss.detach()))
            last = float(np.mean(losses))
        self.samples_seen += len(obs)
        self.rounds += 1
        return last

    def learn(self, total_samples: int, *,
              callback: Callable[[int, float], bool | None] | None = None) -> FullInfoLearner:
        """Trains until ``total_samples`` calls have been seen; ``callback(samples, loss)`` may
        return False to stop early (evaluation, progress bars, wandb)."""
        while self.samples_seen < total_samples:
            loss = self.train_round(self.draw_round())
            if callback is not None and callback(self.samples_seen, loss) is False:
                break
        return self

    def policy(self, name: str = "full_info") -> FullInfoPolicy:
        return FullInfoPolicy(self.network, self.config.min_gain, name=name)

    def save(self, path: str | Path) -> Path:
        blob = {"config": asdict(self.config), "state": self.network.state_dict(),
                "samples_seen": self.samples_seen, "rounds": self.rounds}
        return replace_atomically(path, lambda tmp: torch.save(blob, tmp))

    @classmethod
    def load(cls, path: str | Path) -> FullInfoLearner:
        blob = torch.load(Path(path), map_location="cpu", weights_only=True)
        if "support_low" not in blob["state"]:
            raise ConfigError(f"{path} was saved before learners kept the box of observations they "
                             "trained on, which their policy needs; train it again")
        learner = cls(FullInfoConfig(**blob["config"]))
        learner.network.load_state_dict(blob["state"])
        learner.samples_seen, learner.rounds = int(blob["samples_seen"]), int(blob["rounds"])
        return learner


class FullInfoPolicy:
    """The learned gains, deferring to NCCL unless the best predicted gain exceeds ``min_gain``.

    It is a :class:`~dynamiccl.agents.policies.policy.ForcingPolicy`: it tells NCCL what to pin, and
    deferring pins nothing, so NCCL runs its own pick with its own channel count (which need not be
    an action-table level) and is scored exactly as NCCL runs it. It only ever pins deployable
    choices: what it learned is NCCL's knob space.
    """

    def __init__(self, network: GainNetwork, min_gain: float, name: str = "full_info") -> None:
        self.network = network.eval()
        self.threshold = math.log1p(min_gain)
        self.name = name

    @torch.no_grad()
    def _cautious(self, observations: np.ndarray) -> np.ndarray:
        members = self.network(torch.as_tensor(observations, dtype=torch.float32))
        return members.min(dim=0).values.numpy()

    def predict(self, observations: np.ndarray) -> np.ndarray:
        """The cautious gain of every action: the smallest prediction over the ensemble [B, A];
        zero (no gain: NCCL's pick stands) for a call outside the box of observations trained on."""
        return np.where(self.network.supports(observations)[:, None], self._cautious(observations), 0.0)

    def decide_batch(self, topology: Topology, collectives: np.ndarray, nbytes: np.ndarray,
                     contexts: list[tuple[str, str]]) -> np.ndarray:
        """Action ids, or -1 where the policy defers to NCCL, for calls on one system."""
        obs, _ = encode_batch(topology, decisions.nccl_model_for(topology), collectives, nbytes,
                              contexts)
        allowed = np.stack([valid_mask(topology, Collective(int(c)), deployable=True)
                            for c in collectives])
        return self.decide_observed(obs, allowed)

    def preferred(self, observations: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each encoded call's best allowed action by the cautious gain, or -1 outside the box
        trained on; that gain, 0 outside): what the policy ranks first, before ``min_gain`` decides
        whether it dares to pin it. Benchmarks score the ranking apart from the caution with it."""
        scores = np.where(allowed, self._cautious(observations), -np.inf)
        best = scores.argmax(axis=1)
        inside = self.network.supports(observations)
        return np.where(inside, best, -1), np.where(inside, scores[np.arange(len(best)), best], 0.0)

    def gate(self, best: np.ndarray, gain: np.ndarray) -> np.ndarray:
        """Action ids, or -1 to defer: ``preferred``'s actions where their gain exceeds ``min_gain``."""
        return np.where(gain > self.threshold, best, -1).astype(np.int64)

    def decide_observed(self, observations: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """Action ids, or -1 to defer, for encoded calls and their deployable masks ([B, A])."""
        return self.gate(*self.preferred(observations, allowed))

    def decide(self, scenario: Scenario) -> int:
        """One call's action id, or -1 to defer (the runtime's agreed context, from the scenario)."""
        return int(self.decide_batch(scenario.topology, np.array([int(scenario.collective)]),
                                     np.array([scenario.nbytes]), [scenario_context(scenario)])[0])

    def force(self, scenario: Scenario) -> KnobConstraints:
        action = self.decide(scenario)
        if action < 0:
            return KnobConstraints()
        c = ACTIONS[action]
        return KnobConstraints(algorithm=c.algorithm, protocol=c.protocol, channels=c.channels)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        """An action id, for callers that need one: NCCL's pick as its nearest table entry where
        the policy defers."""
        scenario = require_scenario(self.name, scenario)
        mask = allowed_actions(scenario, action_mask, deployable=True)
        action = self.decide(scenario)
        if action >= 0 and mask[action]:
            return action
        return nearest_valid_action(decisions.nccl_default(scenario).config, mask)


def load_learner(path: str | Path) -> FullInfoLearner:
    """The learner saved in ``path``; a file that holds none is one :class:`ConfigError`."""
    with read_as(path, "a full-information learner saved by `dynamiccl train agent=full_info` (or "
                 "bench_learning.py --save)", CHECKPOINT_FIX):
        return FullInfoLearner.load(path)


def checkpoint_in(path: str | Path) -> Path | None:
    """The learner file ``path`` names: a ``.pt`` file, or a run folder's ``model.pt`` (else its
    ``checkpoints/last.pt``); None when it names none."""
    path = Path(path)
    if path.is_dir():
        return next((c for c in (path / "model.pt", path / "checkpoints" / "last.pt") if c.is_file()),
                    None)
    return path if path.suffix == ".pt" and path.is_file() else None


def load_policy(path: str | Path) -> FullInfoPolicy:
    """The trained policy in ``path`` (see :func:`checkpoint_in`), named after its file (a run
    folder's after the learner)."""
    found = checkpoint_in(path)
    if found is None:
        raise FileNotFoundError(f"{path} holds no model.pt or checkpoints/last.pt; train first")
    learner = load_learner(found)
    return learner.policy(name=Path(path).stem) if Path(path).is_file() else learner.policy()
