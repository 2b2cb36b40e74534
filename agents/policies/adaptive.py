"""Online tuners over the model's candidate set: the trained adaptive policy and its hand-written twin.

Both keep, per context (system, collective, size bin: what a tuner inside a job keys on), the
candidates the simulator proposes (:class:`dynamiccl.envs.online_tuning.Candidates`) and the log of
what they measured (:class:`~dynamiccl.envs.online_tuning.CallLog`), and speak the interface of
:mod:`dynamiccl.agents.policies.online` (``act`` / ``update`` / ``reset``), so the evaluation and the runtime
drive them exactly like coordinate descent and the bandit. They differ only in who picks the slot:

* :class:`AdaptiveTuner` – a MaskablePPO policy trained on ``dynamiccl/OnlineTuning-v0``
  (:func:`train_adaptive`) with the simulator as prior, on training realities only;
* :func:`prior_sweep` – the non-learned reference: run every candidate once, fastest predicted
  first, then keep the fastest measured. What the learned policy adds is what it beats this by.

``act`` answers with an action id, NCCL's own pick (slot 0) as its nearest table entry
(:func:`nccl_action`), as the other online tuners do; ``force`` answers with the knobs to pin
(:class:`~dynamiccl.agents.policies.policy.ForcingPolicy`), NCCL's pick as nothing pinned, which is what
the policy was trained on and what a runtime inside a job does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policies.baselines import nccl_action
from dynamiccl.agents.policies.online import context_key
from dynamiccl.agents.policies.policy import allowed_actions, require_scenario
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.online_tuning import (
    N_CALLS,
    CallLog,
    Candidates,
    OnlineTuningEnv,
    affordable,
    encode,
)
from dynamiccl.system.knobs import ACTIONS, Config

if TYPE_CHECKING:
    from sb3_contrib import MaskablePPO

    from dynamiccl.system.scenario import Scenario

#: Picks a slot from (observation, slot mask, candidates, log).
SlotChooser = Callable[[np.ndarray, np.ndarray, Candidates, CallLog], int]

#: The gate on re-running a measured choice (:func:`gated_slot`): the relative gain over NCCL's
#: pick it must show (as the bandit's ``safety_gate``, of the same meaning, in
#: :mod:`~dynamiccl.agents.policies.online`) and the standard errors of that advantage it must
#: clear, the tries taken to confirm a choice that merely looks faster, and the smallest noise
#: assumed (nccl-tests' run-to-run spread is 1-5 %).
SAFETY_GATE = 0.02
GATE_Z = 2.0
CONFIRM_TRIES = 3
NOISE_FLOOR = 0.02

#: MaskablePPO settings for the online environment: 50-call episodes, undiscounted enough that the
#: cost of exploring now is weighed against the calls left; large batches and small steps, since
#: PPO refines a warm-started policy (a uniform start settles on "always the model's favourite").
HPARAMS: dict[str, Any] = {
    "n_steps": 1000, "batch_size": 1000, "n_epochs": 4, "gamma": 0.995, "gae_lambda": 0.95,
    "learning_rate": 3e-5, "clip_range": 0.1, "ent_coef": 0.0,
    "policy_kwargs": {"net_arch": [128, 128]},
}


@dataclass
class _Context:
    candidates: Candidates
    #: The action id each slot is run as (slot 0: NCCL's pick as a table entry); None for a menu.
    action_ids: tuple[int, ...] | None
    #: The knobs each slot pins (slot 0: nothing, NCCL's own pick) and what NCCL runs then on the
    #: model.
    pinned: tuple[KnobConstraints, ...]
    configs: tuple[Config, ...]
    allowed: np.ndarray
    log: CallLog = field(default_factory=CallLog)
    last_slot: int = 0


#: The choices a tuner weighs at a call, as the knobs each pins (NCCL's default first).
Menu = Callable[["Scenario"], Sequence[KnobConstraints]]


class CandidateTuner:
    """An online tuner that runs one of the model's candidates per call, chosen by ``chooser``.

    ``menu`` replaces the model's candidates by given choices (NCCL's default first; e.g. the
    ``NCCL_ALGO``/``NCCL_PROTO`` runs a replay table measured): such a tuner only pins knobs
    (:meth:`force` / :meth:`record`), since its choices need not be table actions. Subclasses
    choose by overriding :meth:`_pick` and learn by overriding :meth:`_observe`."""

    #: Every candidate is a deployable action (what the runtime's adapter requires).
    deployable = True

    def __init__(self, chooser: SlotChooser | None, name: str, n_calls: int = N_CALLS,
                 menu: Menu | None = None) -> None:
        self.chooser = chooser
        self.name = name
        #: The horizon the chooser plans over; after it, ``progress`` stays at 1 (keep the best).
        self.budget = n_calls
        self.menu = menu
        self._contexts: dict[tuple, _Context] = {}

    def reset(self) -> None:
        self._contexts.clear()

    def _context(self, scenario: Scenario, mask: np.ndarray) -> _Context:
        key = context_key(scenario)
        if key not in self._contexts:
            self._contexts[key] = self._new_context(scenario, mask)
        return self._contexts[key]

    def _new_context(self, scenario: Scenario, mask: np.ndarray) -> _Context:
        if self.menu is not None:
            pinned = tuple(self.menu(scenario))
            if not pinned or pinned[0] != KnobConstraints():
                raise ValueError("a menu lists NCCL's default (nothing pinned) first")
            runs = [decisions.nccl_default(scenario, p) for p in pinned]
            candidates = Candidates((-1,) * len(pinned), tuple(r.time_us for r in runs))
            return _Context(candidates, None, pinned, tuple(r.config for r in runs), candidates.mask())
        candidates = Candidates.of(scenario)
        ids = (nccl_action(scenario, mask), *candidates.actions[1:])
        allowed = candidates.mask()
        allowed[: len(ids)] &= np.array([mask[a] for a in ids])
        allowed[0] = True
        configs = (decisions.nccl_default(scenario).config, *(ACTIONS[a] for a in candidates.actions[1:]))
        pinned = (KnobConstraints(), *(KnobConstraints(algorithm=c.algorithm, protocol=c.protocol,
                                                       channels=c.channels) for c in configs[1:]))
        return _Context(candidates, ids, pinned, configs, allowed)

    def _choose(self, scenario: Scenario, mask: np.ndarray) -> _Context:
        ctx = self._context(scenario, mask)
        ctx.last_slot = self._pick(scenario, ctx)
        return ctx

    def _pick(self, scenario: Scenario, ctx: _Context) -> int:
        """The chooser's slot among the affordable ones, through the re-run gate."""
        assert self.chooser is not None
        obs = encode(scenario, ctx.candidates, ctx.log, self.budget)
        allowed = ctx.allowed & affordable(ctx.candidates, ctx.log)  # as in training
        slot = int(self.chooser(obs, allowed, ctx.candidates, ctx.log))
        slot = slot if allowed[slot] else 0
        return gated_slot(ctx.log, slot)

    def _observe(self, scenario: Scenario, ctx: _Context, slot: int, time_us: float) -> None:
        """Learns a measured time of ``slot`` in ``ctx``."""
        ctx.log.record(slot, time_us)

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        """The next call's choice as an action id (NCCL's pick as its nearest table entry)."""
        scenario = require_scenario(self.name, scenario)
        if self.menu is not None:
            raise ValueError(f"{self.name} tunes a menu of pinned knobs: drive it with force/record")
        ctx = self._choose(scenario, allowed_actions(scenario, action_mask, deployable=True))
        assert ctx.action_ids is not None
        return ctx.action_ids[ctx.last_slot]

    def force(self, scenario: Scenario) -> KnobConstraints:
        """The next call's choice as the knobs to pin: nothing for NCCL's pick (NCCL then runs
        its own channel count, as in training), algorithm, protocol and channels otherwise. Report
        the measured time with :meth:`record`."""
        ctx = self._choose(scenario, self._mask(scenario))
        return ctx.pinned[ctx.last_slot]

    def _mask(self, scenario: Scenario) -> np.ndarray:
        return allowed_actions(scenario, None, deployable=True) if self.menu is None else np.ones(0, bool)

    def record(self, scenario: Scenario, time_us: float) -> None:
        """The measured time of the call this tuner last chose in ``scenario``'s context."""
        ctx = self._context(scenario, self._mask(scenario))
        self._observe(scenario, ctx, ctx.last_slot, time_us)

    def measurements(self, scenario: Scenario) -> CallLog | None:
        """What this tuner has measured in ``scenario``'s context (None before its first call)."""
        ctx = self._contexts.get(context_key(scenario))
        return None if ctx is None else ctx.log

    def update(self, scenario: Scenario, action: int, time_us: float) -> None:
        ctx = self._context(scenario, self._mask(scenario))
        if ctx.action_ids is None:
            raise ValueError(f"{self.name} tunes a menu of pinned knobs: drive it with force/record")
        if ctx.action_ids[ctx.last_slot] == action:
            slot = ctx.last_slot
        elif action in ctx.action_ids:
            slot = ctx.action_ids.index(action)
        else:
            return  # a call this tuner did not choose tells it nothing about its candidates
        self._observe(scenario, ctx, slot, time_us)


def gated_slot(log: CallLog, slot: int) -> int:
    """The safety gate on re-running a choice, so that a held choice is never one that only
    looked faster on lucky calls (timings are noisy: the fastest of a few single measurements is
    often a slower choice). NCCL's pick (slot 0) and a first try pass as they are (exploration,
    which the chooser is charged for). A measured choice is run again when its mean beats NCCL's
    by more than :data:`SAFETY_GATE` and :data:`GATE_Z` standard errors of the difference; while
    it merely looks faster, up to :data:`CONFIRM_TRIES` tries of it and of NCCL's pick are taken
    alternately (the one with fewer tries runs); otherwise NCCL's pick runs. The noise is the
    log's pooled estimate, never below :data:`NOISE_FLOOR`."""
    if slot == 0 or log.tries[slot] == 0:
        return slot
    if log.tries[0] == 0:
        return 0
    means = log.mean_log()
    sigma = max(log.noise(), NOISE_FLOOR)
    stderr = sigma * math.sqrt(1.0 / log.tries[slot] + 1.0 / log.tries[0])
    advantage = means[0] - means[slot]
    if advantage > max(math.log1p(SAFETY_GATE), GATE_Z * stderr):
        return slot
    if advantage > 0 and log.tries[slot] < CONFIRM_TRIES:
        return slot if log.tries[slot] < log.tries[0] else 0
    return 0


def prior_sweep(obs: np.ndarray, allowed: np.ndarray, candidates: Candidates, log: CallLog) -> int:
    """Every allowed candidate once, NCCL's pick first and then fastest predicted first; after that
    the fastest measured (geometric mean)."""
    untried = np.flatnonzero(allowed[: len(candidates)] & (log.tries[: len(candidates)] == 0))
    if untried.size:
        return int(untried[0])
    means = np.where(allowed[: len(candidates)], log.mean_log()[: len(candidates)], np.inf)
    return int(np.argmin(means))


def model_chooser(model: MaskablePPO) -> SlotChooser:
    """The trained policy's greedy slot among the allowed ones."""
    def choose(obs: np.ndarray, allowed: np.ndarray, candidates: Candidates, log: CallLog) -> int:
        action, _ = model.predict(obs, action_masks=allowed, deterministic=True)
        return int(action)
    return choose


def adaptive_tuner(model: MaskablePPO, n_calls: int = N_CALLS) -> CandidateTuner:
    return CandidateTuner(model_chooser(model), "adaptive", n_calls)


def prior_sweep_tuner(n_calls: int = N_CALLS, menu: Menu | None = None) -> CandidateTuner:
    return CandidateTuner(prior_sweep, "prior_sweep", n_calls, menu)


def imitate(model: MaskablePPO, teacher: SlotChooser, episodes: int, seed: int = 0,
            epochs: int = 20, seeds: range | None = None) -> float:
    """Fits the policy to ``teacher``'s choices on training episodes (cross-entropy on its slots)
    and the value head to the teacher's discounted returns: a warm start, so PPO refines a sensible
    explorer instead of searching from a uniform policy, which settles on "always the model's
    favourite". Returns the final mean log-likelihood of the teacher's choices."""
    import torch

    env = OnlineTuningEnv(seeds=seeds)
    obs_list, masks, actions, returns = [], [], [], []
    env.reset(seed=seed)
    for _ in range(episodes):
        obs, info = env.reset()
        log, done, rewards = CallLog(), False, []
        while not done:
            mask = env.action_masks()
            slot = teacher(obs, mask, info["candidates"], log)
            obs_list.append(obs)
            masks.append(mask)
            actions.append(slot)
            obs, reward, done, _, step = env.step(slot)
            log.record(step["slot"], step["time_us"])
            rewards.append(reward)
        to_go = 0.0
        for r in reversed(rewards):
            to_go = r + model.gamma * to_go
            returns.append(to_go)
        returns[len(returns) - len(rewards):] = returns[len(returns) - len(rewards):][::-1]
    policy = model.policy
    x = torch.as_tensor(np.array(obs_list))
    a = torch.as_tensor(np.array(actions))
    g = torch.as_tensor(np.array(returns, dtype=np.float32))
    m = np.array(masks)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    mean_ll = 0.0
    for _ in range(epochs):
        for idx in torch.randperm(len(a), generator=generator).split(256):
            values, log_prob, _ = policy.evaluate_actions(x[idx], a[idx], action_masks=m[idx.numpy()])
            loss = -log_prob.mean() + 0.5 * torch.mean((values.flatten() - g[idx]) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mean_ll = float(log_prob.mean().detach())
    return mean_ll


def adaptive_agent(hparams: dict[str, Any] | None = None) -> Any:
    """The agent config (as ``configs/agent/*.yaml`` spell it) of the adaptive policy: MaskablePPO
    with :data:`HPARAMS`, ``hparams`` overriding single keys."""
    from omegaconf import OmegaConf

    model = {"_target_": "sb3_contrib.MaskablePPO", "policy": "MlpPolicy", **HPARAMS, **(hparams or {})}
    return OmegaConf.create({"name": "maskable_ppo", "model": model})


def train_adaptive(total_steps: int, seed: int = 0, hparams: dict[str, Any] | None = None,
                   n_envs: int = 8, seeds: range | None = None, warm_start_episodes: int = 0
                   ) -> MaskablePPO:
    """MaskablePPO on ``dynamiccl/OnlineTuning-v0`` over training realities only: the environments
    are built without ``heldout``, so they refuse any seed from ``HELDOUT_SEED_START`` on. With
    ``warm_start_episodes`` the policy first imitates :func:`prior_sweep` on that many episodes."""
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    from dynamiccl.agents.policies.sb3_agents import build_model

    torch.set_num_threads(1)
    envs = make_vec_env(OnlineTuningEnv, n_envs=n_envs, seed=seed, env_kwargs={"seeds": seeds})
    model = build_model(adaptive_agent(hparams), envs, seed=seed)
    if warm_start_episodes:
        imitate(model, prior_sweep, warm_start_episodes, seed=seed, seeds=seeds)
    model.learn(total_timesteps=total_steps)
    return model


def load_adaptive(path: str | Path, n_calls: int = N_CALLS) -> CandidateTuner:
    from sb3_contrib import MaskablePPO

    return adaptive_tuner(MaskablePPO.load(str(path), device="cpu"), n_calls)

