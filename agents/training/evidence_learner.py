"""Training the evidence tuner's belief (:mod:`dynamiccl.agents.policies.evidence`) on simulated jobs.

The belief (:class:`~dynamiccl.agents.policies.pair_belief.SystemBelief`) has five numbers per kind
of system (:func:`~dynamiccl.envs.backends.perturbed.system_kind`): the spreads of each series'
and of the system's common latency and bandwidth factors, and the model's misfit. They are learned
by maximum marginal likelihood: each round draws fresh jobs (a training system in a training
reality of the configured ``profile``; RDMA and TCP systems in turn), measures a random design of
their calls as a tuner inside a job would (NCCL's default one to three times at every call, each
model candidate with probability one half, once or twice; with the reality's noise), and moves the
log-spreads along the gradient of the mean log evidence per measurement (central finite
differences: five numbers per kind, and the belief is numpy), with Adam.

Reality seeds: training draws from ``[0, VALIDATION_SEED_START)``; validation (the curve, the
sweep's metric) plays fixed jobs on seeds from ``VALIDATION_SEED_START`` below
``HELDOUT_SEED_START``, which are never touched here (``experiments/bench_online.py`` scores on
them): the evidence tuner with the current settings and the prior sweep, both through
:mod:`dynamiccl.agents.shipping.online_jobs`, reporting the tuner's regret over the sweep's
(``val_regret_ratio``), its worst call and share, and ``val_objective``: issue 31's goals as one
number to minimise, the regret ratio where the worst call is at least 0.5 x NCCL's time and 10 more
where it is not (so every setting that keeps the bound ranks before any that breaks it). The
training curve's held-out loss is the negative log evidence per measurement of each round's new
jobs before learning from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dynamiccl import decisions
from dynamiccl.agents.policies.adaptive import prior_sweep_tuner
from dynamiccl.agents.policies.evidence import EvidenceTuner, Settings
from dynamiccl.agents.policies.pair_belief import Spreads, SystemBelief
from dynamiccl.agents.shipping import online_jobs
from dynamiccl.agents.training.prior_learner import VALIDATION_SEED_START
from dynamiccl.config_loader import CHECKPOINT_FIX, ConfigError, read_as
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PROFILES, PerturbedBackend, system_kind
from dynamiccl.envs.online_tuning import (
    LOG2_BYTES_RANGE,
    N_CALLS,
    TRAIN_COLLECTIVES,
    TRAIN_SYSTEMS,
    Candidates,
)
from dynamiccl.files import replace_atomically
from dynamiccl.system.knobs import ACTIONS, valid_mask
from dynamiccl.system.launch_noise import default_launch_noise, noise_band
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

KINDS = ("rdma", "tcp")
#: Training systems per kind: the online environment's (all RDMA or NVLink-only) and sockets.
SYSTEMS: dict[str, tuple[tuple[str, int], ...]] = {
    "rdma": TRAIN_SYSTEMS,
    "tcp": (("g4dn_t4_tcp", 2), ("g4dn_t4_tcp", 4), ("g4dn_t4_tcp", 8)),
}
#: The validation jobs: (system, nodes) played on seeds from VALIDATION_SEED_START.
VALIDATION_SYSTEMS = (("dgx_h100", 4), ("dgx_a100", 1), ("pcie_cluster", 4), ("g4dn_t4_tcp", 8))
VALIDATION_COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)
VALIDATION_SIZES = (64, 16 << 10, 1 << 20, 64 << 20)
#: What val_objective adds where the worst call is below GOAL_WORST x NCCL's time.
WORST_PENALTY, GOAL_WORST = 10.0, 0.5


@dataclass
class EvidenceConfig:
    """Hyper-parameters (every field is a Hydra override under ``agent.model.``)."""

    #: The perturbed realities learned from (envs.backends.perturbed.PROFILES).
    profile: str = "measured"
    learning_rate: float = 0.05
    #: Jobs per round (kinds in turn) and calls measured per job.
    jobs_per_round: int = 4
    calls_per_job: int = 12
    #: Finite-difference step of the log-spreads.
    step: float = 0.05
    #: Validation: jobs (a periodic evaluation plays the first half) and rounds per job.
    validation_jobs: int = 8
    validation_rounds: int = N_CALLS
    #: The decision rule's settings shipped with the belief (agents.policies.evidence.Settings).
    risk: float = 0.02
    gate_z: float = 2.0
    max_repeats: int = 6
    seed: int = 0


#: One measured configuration at one call: (key, series, floor, rest, times, band noise).
Observation = tuple


class EvidenceLearner:
    """The belief's log-spreads, learned round after round (module docstring)."""

    def __init__(self, config: EvidenceConfig | None = None) -> None:
        self.config = config or EvidenceConfig()
        if self.config.profile not in PROFILES:
            raise ConfigError(f"agent.model.profile {self.config.profile!r} is not one of "
                              f"{', '.join(PROFILES)}")
        self.rng = np.random.default_rng(self.config.seed)
        start = np.concatenate([Settings().spreads[k].as_vector() for k in KINDS])
        self.params = torch.nn.Parameter(torch.tensor(start, dtype=torch.float64))
        self.optimizer = torch.optim.Adam([self.params], lr=self.config.learning_rate)
        self.samples_seen = 0
        self.rounds = 0
        #: Every reality seed a job was drawn in (never a validation or held-out one).
        self.realities_seen: set[int] = set()

    def spreads(self, params: np.ndarray | None = None) -> dict[str, Spreads]:
        v = self.params.detach().numpy() if params is None else params
        return {k: Spreads.from_vector(v[5 * i: 5 * i + 5]) for i, k in enumerate(KINDS)}

    def settings(self, meta: dict[str, Any] | None = None) -> Settings:
        cfg = self.config
        return Settings(self.spreads(), risk=cfg.risk, gate_z=cfg.gate_z, max_repeats=cfg.max_repeats,
                        meta={"config": asdict(cfg), "samples_seen": self.samples_seen, **(meta or {})})

    # --- data ------------------------------------------------------------------------------------
    def draw_round(self) -> list[tuple[str, list[Observation]]]:
        """``jobs_per_round`` fresh jobs' measurements, each with its kind."""
        return [self._job(KINDS[(self.rounds * self.config.jobs_per_round + j) % len(KINDS)])
                for j in range(self.config.jobs_per_round)]

    def _job(self, kind: str) -> tuple[str, list[Observation]]:
        rng, cfg = self.rng, self.config
        seed = int(rng.integers(VALIDATION_SEED_START))
        self.realities_seen.add(seed)
        name, nodes = SYSTEMS[kind][int(rng.integers(len(SYSTEMS[kind])))]
        topology = load_topology(name, nodes=nodes)
        assert system_kind(topology) == kind
        exact = PerturbedBackend(seed, noisy=False, profile=cfg.profile)
        noisy = PerturbedBackend(seed, noisy=True, profile=cfg.profile, stream=int(rng.integers(1 << 30)))
        collectives = [c for c in TRAIN_COLLECTIVES if valid_mask(topology, c, deployable=True).any()]
        observations = []
        for call in range(cfg.calls_per_job):
            collective = collectives[int(rng.integers(len(collectives)))]
            s = Scenario(topology, collective, int(round(2.0 ** rng.uniform(*LOG2_BYTES_RANGE))))
            configs = [decisions.nccl_default(s).config,
                       *(ACTIONS[a] for a in Candidates.of(s).actions[1:])]
            runs = [int(rng.integers(1, 4))] + [int(rng.integers(1, 3)) * int(rng.random() < 0.5)
                                                for _ in configs[1:]]
            noise = default_launch_noise(topology)[noise_band(s.nbytes)]
            for slot, (config, n) in enumerate(zip(configs, runs, strict=True)):
                if n:
                    truth = exact.true_time(s, config)
                    times = [noisy.noisy_time(s, truth) for _ in range(n)]
                    observations.append(((call, slot), (collective, config.algorithm, config.protocol),
                                         *decisions.latency_split(s, config), times, noise))
        return kind, observations

    # --- learning -----------------------------------------------------------------------------
    @staticmethod
    def log_evidence(spreads: Spreads, observations: list[Observation]) -> float:
        belief = SystemBelief(spreads)
        for key, series, floor, rest, times, noise in observations:
            belief.observe(key, series, floor, rest, times, noise)
        return belief.log_evidence()

    def _objective(self, params: np.ndarray, data: list, kind: str) -> float:
        """Mean log evidence per measurement of ``kind``'s jobs."""
        spreads = self.spreads(params)[kind]
        jobs = [obs for k, obs in data if k == kind]
        count = sum(len(o[4]) for obs in jobs for o in obs)
        return sum(self.log_evidence(spreads, obs) for obs in jobs) / max(count, 1)

    def loss(self, data: list) -> float:
        """Negative log evidence per measurement on ``data`` (every kind's jobs, weighted by their
        measurements), without learning from it."""
        params = self.params.detach().numpy()
        count = {k: sum(len(o[4]) for kk, obs in data if kk == k for o in obs) for k in KINDS}
        total = sum(count.values())
        return -sum(self._objective(params, data, k) * count[k] for k in KINDS if count[k]) / max(total, 1)

    def train_round(self, data: list) -> float:
        """One Adam step along the finite-difference gradient; returns the loss after it."""
        params = self.params.detach().numpy().copy()
        grad = np.zeros_like(params)
        h = self.config.step
        for i, kind in enumerate(KINDS):
            if not any(k == kind for k, _ in data):
                continue
            for j in range(5 * i, 5 * i + 5):
                up, down = params.copy(), params.copy()
                up[j] += h
                down[j] -= h
                grad[j] = (self._objective(up, data, kind) - self._objective(down, data, kind)) / (2 * h)
        self.optimizer.zero_grad()
        self.params.grad = torch.as_tensor(-grad)
        self.optimizer.step()
        self.samples_seen += sum(len(o[4]) for _, obs in data for o in obs)
        self.rounds += 1
        return self.loss(data)

    def save(self, path: str | Path) -> Path:
        blob = {"config": asdict(self.config), "params": self.params.detach().clone(),
                "samples_seen": self.samples_seen, "rounds": self.rounds}
        return replace_atomically(path, lambda tmp: torch.save(blob, tmp))

    @classmethod
    def load(cls, path: str | Path) -> EvidenceLearner:
        with read_as(path, "an evidence-tuner checkpoint saved by `dynamiccl train "
                     "agent=evidence_tuner`", CHECKPOINT_FIX):
            blob = torch.load(Path(path), map_location="cpu", weights_only=True)
            learner = cls(EvidenceConfig(**blob["config"]))
            with torch.no_grad():
                learner.params.copy_(blob["params"])
            learner.samples_seen, learner.rounds = int(blob["samples_seen"]), int(blob["rounds"])
        return learner


# ---------------------------------------------------------------------------------------------
# Validation: fixed jobs in validation realities
# ---------------------------------------------------------------------------------------------


def validation_jobs(count: int, profile: str) -> list[online_jobs.PerturbedJob]:
    """The same jobs for every run: VALIDATION_SYSTEMS in turn on validation seeds."""
    assert VALIDATION_SEED_START + count <= HELDOUT_SEED_START
    systems = [VALIDATION_SYSTEMS[i % len(VALIDATION_SYSTEMS)] for i in range(count)]
    return [online_jobs.PerturbedJob(VALIDATION_SEED_START + i, load_topology(name, nodes=nodes),
                                     VALIDATION_COLLECTIVES, VALIDATION_SIZES, profile)
            for i, (name, nodes) in enumerate(systems)]


def validate(settings: Settings, jobs: list[online_jobs.PerturbedJob], rounds: int) -> dict[str, float]:
    """The tuner with ``settings`` and the prior sweep on ``jobs`` (module docstring)."""
    players = {"evidence": online_jobs.forced(lambda menu: EvidenceTuner(settings, n_calls=rounds)),
               "prior_sweep": online_jobs.forced(lambda menu: prior_sweep_tuner(rounds))}
    scores = {k: v.summary() for k, v in online_jobs.score(jobs, players, rounds).items()}
    mine, sweep = scores["evidence"], scores["prior_sweep"]
    ratio = mine["regret_50"] / max(sweep["regret_50"], 1e-9)
    return {"val_regret_ratio": round(ratio, 4), "val_regret": mine["regret_50"],
            "val_prior_sweep_regret": sweep["regret_50"], "val_worst_call": mine["worst_call"],
            "val_share": mine["final_headroom_share"] or 0.0,
            "val_slower_held": mine["slower_after_exploration"],
            "val_objective": round(ratio + (WORST_PENALTY if mine["worst_call"] < GOAL_WORST else 0.0), 4)}
