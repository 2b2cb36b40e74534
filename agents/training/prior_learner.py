"""Training the learned prior (:mod:`dynamiccl.agents.shipping.prior`) on simulated systems whose reality
is not their model.

Each round draws fresh random systems (:mod:`dynamiccl.envs.system_sampler`, each network on one of
the transport kinds of :mod:`dynamiccl.system.transports`), gives each a hidden miscalibration of the
``perturbed`` backend (:mod:`dynamiccl.envs.backends.perturbed`: per algorithm/protocol bandwidth
within ±40 %, latency floors within 3x, and the system's own error, ``system=True``: its
network's latency and bandwidth and its node's bandwidth off by factors spanning what the
datasheet model shows on published runs the prior is not scored on), and times every NCCL
algorithm/protocol pair and NCCL's default at nccl-tests' sizes (8 B - 16 GiB), both on the model
(what NCCL runs when told the pair, on the nominal system) and in the reality. Then, per series
(one collective on the system), it draws measurement budgets as ``tune`` meets them -- every other
size of a sweep, a random half or fewer of the (pair, size) points, only some pairs, a few points,
only the small or the large sizes, nothing -- measures those points with noise (one timing of the
pair and one of NCCL's default per size, each log-normal with a per-series noise from 0.5 % to 20 %:
wider than the backend's 1-5 %, since real launches differ more), and learns, at the points not
measured, the true residual (true minus model log-ratio) with a Gaussian negative log-likelihood,
so the predicted sigma is calibrated. The size window of each budget is a random stretch of the
sweep, so the prior answers any grid of sizes.

Those are the ``system`` realities (``PriorConfig.realities``, the default). ``datasheet`` draws what
the prior trained against before (runs recorded before the setting existed, which resume with it):
the systems on the sampler's networks and only the per-pair miscalibration, the same stream bit for
bit.

Reality seeds: training draws from ``[0, VALIDATION_SEED_START)``, validation (the sweep's metric,
the curve) uses ``[VALIDATION_SEED_START, HELDOUT_SEED_START)`` on its own fixed systems; seeds from
``HELDOUT_SEED_START`` on are never touched here (``experiments/bench_prior.py`` scores on them).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dynamiccl import decisions
from dynamiccl.agents.policies.baselines import NCCL_PAIRS, pair_constraints
from dynamiccl.agents.shipping.prior import (
    FEATURES,
    FORMAT_VERSION,
    NOISE_RANGE,
    SIGMA_FLOOR,
    LearnedPrior,
    series_features,
)
from dynamiccl.agents.training.prior_corpus import check_split, corpus
from dynamiccl.agents.training.prior_series import Series
from dynamiccl.config_loader import CHECKPOINT_FIX, read_as
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.perturbed import (
    BANDWIDTH_RANGE,
    HELDOUT_SEED_START,
    LATENCY_RANGE,
    NETWORK_BANDWIDTH_LOG_RANGE,
    NETWORK_LATENCY_LOG_RANGE,
    NODE_BANDWIDTH_LOG_RANGE,
    PerturbedBackend,
)
from dynamiccl.envs.system_sampler import random_topology
from dynamiccl.files import replace_atomically
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, default_nic_path
from dynamiccl.system.transports import DEFAULT_TRANSPORT, TRANSPORTS

#: nccl-tests' sweep, -b 8 -e 16G -f 2: the sizes a series is timed at.
SIZES: tuple[int, ...] = tuple(1 << k for k in range(3, 35))
#: Training reality seeds lie below this; validation seeds from it up to HELDOUT_SEED_START.
VALIDATION_SEED_START = 900
#: The validation systems' generator (fixed: every run is scored on the same systems).
VALIDATION_SYSTEMS_SEED = 4242
#: Residual targets are learned within this (log space).
TARGET_CLIP = 3.0
#: The fewest sizes a budget's window spans.
MIN_WINDOW = 8
#: What the prior can train against (``PriorConfig.realities``), each as its file records it (the
#: code that draws it is the commit's): ``system``, every pair and the system's own tiers off, every
#: transport kind; ``datasheet``, only every pair off, on the sampler's networks.
REALITIES = {
    "system": {"backend": "perturbed, system=True", "pair_bandwidth": list(BANDWIDTH_RANGE),
               "pair_latency": list(LATENCY_RANGE),
               "system_log": {"network_latency": list(NETWORK_LATENCY_LOG_RANGE),
                              "network_bandwidth": list(NETWORK_BANDWIDTH_LOG_RANGE),
                              "node_bandwidth": list(NODE_BANDWIDTH_LOG_RANGE)},
               "transports": sorted(TRANSPORTS), "timing_noise": list(NOISE_RANGE)},
    "datasheet": {"backend": "perturbed", "pair_bandwidth": list(BANDWIDTH_RANGE),
                  "pair_latency": list(LATENCY_RANGE), "transports": [DEFAULT_TRANSPORT],
                  "timing_noise": list(NOISE_RANGE)},
}
#: What a run trained against before ``realities`` was a setting (its checkpoint and its
#: ``config.yaml`` lack the key; ``run_folder.ADDED_KEYS`` reads them so).
UNRECORDED_REALITIES = "datasheet"


@dataclass
class PriorConfig:
    """Hyper-parameters (every field is a Hydra override under ``agent.``)."""

    #: Hidden units per layer and hidden layers of each member MLP.
    hidden: int = 48
    layers: int = 2
    #: Independently initialised members; their disagreement adds to the predicted sigma.
    ensemble: int = 4
    learning_rate: float = 2e-3
    #: The learning rate shrinks by this factor every round, down to a tenth of the first.
    learning_rate_decay: float = 0.98
    batch_size: int = 512
    #: Fresh random systems per round, collectives (series) timed on each.
    systems_per_round: int = 16
    series_per_system: int = 2
    #: Measurement budgets drawn per series, and the unmeasured points learned from per budget.
    budgets_per_series: int = 32
    queries_per_budget: int = 64
    #: Gradient passes over a round's examples before new systems are drawn.
    epochs_per_round: int = 2
    #: Validation systems of the final evaluation (a periodic one uses a third of them).
    validation_systems: int = 24
    #: What it trains and validates against (:data:`REALITIES`): ``system`` or ``datasheet``.
    realities: str = "system"
    #: Real systems it learns from beside the simulated ones (folders of
    #: :mod:`~dynamiccl.agents.training.prior_corpus`), and real systems it is validated on and never
    #: learns from: its sigma's calibration and where it may pin (:mod:`.prior_real_validation`).
    real_train: list[str] = field(default_factory=list)
    real_validation: list[str] = field(default_factory=list)
    #: Real series (drawn from ``real_train``'s, with replacement) per round, each under
    #: ``budgets_per_series`` budgets like a simulated one.
    real_series_per_round: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.realities not in REALITIES:
            raise ValueError(f"realities is {self.realities!r}; give one of {', '.join(REALITIES)}")
        self.real_train = [str(f) for f in self.real_train]  # Hydra gives a ListConfig
        self.real_validation = [str(f) for f in self.real_validation]
        check_split(self.real_train, self.real_validation)


def time_series(topology: Topology, collective: Collective, reality: PerturbedBackend,
                sizes: tuple[int, ...] = SIZES) -> Series | None:
    """Every NCCL pair and NCCL's default of ``collective`` on ``topology``, on the model and in
    ``reality`` (noise-free); None where NCCL cannot run the collective there."""
    scenarios = [Scenario(topology, collective, n) for n in sizes]
    pairs = [p for p in NCCL_PAIRS if pair_constraints(scenarios[0], p).given()]
    pinned = [KnobConstraints(algorithm=a, protocol=p) for a, p in pairs]
    decisions.prefetch([(s, c) for s in scenarios for c in (KnobConstraints(), *pinned)])
    model = np.full((len(pairs), len(sizes)), np.nan)
    default_model = np.full(len(sizes), np.nan)
    truth = np.full_like(model, np.nan)
    for j, s in enumerate(scenarios):
        try:
            default = decisions.nccl_default(s)
        except ValueError:
            return None
        default_model[j] = math.log(default.time_us)
        true_default = reality.true_time(s, default.config)
        for i, constraints in enumerate(pinned):
            try:
                run = decisions.nccl_default(s, constraints)
            except ValueError:  # NCCL cannot run the pair at this size
                continue
            if math.isfinite(run.time_us) and run.time_us > 0:
                model[i, j] = math.log(run.time_us)
                truth[i, j] = math.log(reality.true_time(s, run.config) / true_default)
    if not np.isfinite(model).any() or not np.isfinite(default_model).all():
        return None
    return Series(collective, topology.nranks, pairs, np.log2(np.array(sizes, dtype=float)), model,
                  default_model, truth)


def draw_budget(rng: np.random.Generator, runs: np.ndarray) -> np.ndarray:
    """Which (pair, size) points are measured ([P, S] bool within ``runs``), as tune meets them."""
    n_pairs, n_sizes = runs.shape
    kind = rng.choice(6, p=[0.25, 0.25, 0.2, 0.15, 0.1, 0.05])
    measured = np.zeros_like(runs)
    if kind == 0:  # a sweep of every k-th size (every pair)
        every = int(rng.choice([2, 2, 3, 4]))
        measured[:, int(rng.integers(every))::every] = True
    elif kind == 1:  # a random share of the points
        measured = rng.random(runs.shape) < rng.uniform(0.1, 0.7)
    elif kind == 2:  # only some pairs, at every size or every other
        pairs = rng.random(n_pairs) < rng.uniform(0.2, 0.8)
        every = int(rng.choice([1, 2]))
        measured[np.ix_(pairs, np.arange(int(rng.integers(every)), n_sizes, every))] = True
    elif kind == 3:  # a few points
        flat = np.flatnonzero(runs)
        if len(flat):
            picked = rng.choice(flat, size=min(len(flat), int(rng.integers(1, 9))), replace=False)
            measured.flat[picked] = True
    elif kind == 4:  # only the small or only the large sizes
        cut = int(rng.integers(2, max(3, n_sizes // 2 + 1)))
        measured[:, :cut] = True
        if rng.random() < 0.5:
            measured = measured[:, ::-1]
        measured &= rng.random(runs.shape) < rng.uniform(0.5, 1.0)
    return measured & runs


def measure(rng: np.random.Generator, series: Series, measured: np.ndarray) -> tuple[np.ndarray, float]:
    """Noisy measured log-ratios ([P, S], NaN where not measured) and the 1-sigma of one: a timing
    of the pair and one of NCCL's default per size, each with the series' log-normal noise. A real
    series was measured once: its ratios as they are, with their noise."""
    if series.noise is not None:
        return np.where(measured, series.truth, np.nan), series.noise
    noise = float(math.exp(rng.uniform(math.log(NOISE_RANGE[0]), math.log(NOISE_RANGE[1]))))
    timing = rng.normal(0.0, noise, size=series.truth.shape)
    default = rng.normal(0.0, noise, size=series.truth.shape[1])
    values = series.truth + timing - default[None, :]
    return np.where(measured, values, np.nan), noise * math.sqrt(2)


def examples(rng: np.random.Generator, series: Series, budgets: int, queries: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """(features, true residual) of unmeasured points under ``budgets`` random budgets, each on a
    random window of the series' sizes."""
    feats, targets = [], []
    n_sizes = len(series.log2_sizes)
    for _ in range(budgets):
        start = int(rng.integers(0, n_sizes - MIN_WINDOW + 1))
        stop = int(rng.integers(start + MIN_WINDOW, n_sizes + 1))
        part = series.window(start, stop)
        measured = draw_budget(rng, part.known)
        values, noise = measure(rng, part, measured)
        query = part.asked & ~measured
        at = np.flatnonzero(query)
        if not len(at):
            continue
        at = rng.choice(at, size=min(queries, len(at)), replace=False)
        x = series_features(part, values, noise)
        feats.append(x.reshape(-1, len(FEATURES))[at])
        targets.append(np.clip((part.truth - part.model).reshape(-1)[at], -TARGET_CLIP, TARGET_CLIP))
    if not feats:
        return np.zeros((0, len(FEATURES))), np.zeros(0)
    return np.concatenate(feats), np.concatenate(targets)


def with_transport(topology: Topology, transport: str) -> Topology:
    """``topology`` with its network tiers on ``transport`` (and its NIC path: through the CPU
    where the transport has no GPUDirect RDMA)."""
    tiers = tuple(replace(t, transport=transport, nic_path=default_nic_path(transport))
                  if t.link == "net" else t for t in topology.tiers)
    return replace(topology, tiers=tiers)


def random_series(rng: np.random.Generator, index: int, count: int, seed_range: tuple[int, int],
                  realities: str = PriorConfig.realities) -> list[Series]:
    """``count`` series (random collectives) on one fresh random system in one reality drawn from
    ``seed_range``, of the kind ``realities`` names (:data:`REALITIES`)."""
    topology = random_topology(rng, index)
    system = realities == "system"
    if system:
        kinds = sorted(TRANSPORTS)
        topology = with_transport(topology, kinds[int(rng.integers(len(kinds)))])
    if seed_range[1] > HELDOUT_SEED_START:
        raise ValueError(f"reality seeds from {HELDOUT_SEED_START} on are held out for evaluation")
    seed = int(rng.integers(*seed_range))
    reality = PerturbedBackend(seed, noisy=False, system=system)
    collectives = rng.choice(len(Collective), size=min(count, len(Collective)), replace=False)
    found = [time_series(topology, Collective(int(c)), reality) for c in collectives]
    return [s for s in found if s is not None]


class PriorNetwork(nn.Module):
    """``ensemble`` MLPs evaluated as one batched network: features [B, F] -> each member's
    residual and 1-sigma, [K, B] each."""

    def __init__(self, hidden: int, layers: int, ensemble: int) -> None:
        super().__init__()
        dims = [len(FEATURES)] + [hidden] * layers + [2]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
            bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default initialisation
            self.weights.append(nn.Parameter(torch.empty(ensemble, d_in, d_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(ensemble, d_out).uniform_(-bound, bound)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.unsqueeze(0).expand(len(self.weights[0]), -1, -1)
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b.unsqueeze(1), h, w)
            if i < len(self.weights) - 1:
                h = torch.relu(h)
        return h[..., 0], nn.functional.softplus(h[..., 1]) + SIGMA_FLOOR


def nll(mean: torch.Tensor, sigma: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Gaussian negative log-likelihood per member and example, averaged (constant dropped)."""
    return (torch.log(sigma) + 0.5 * ((target - mean) / sigma) ** 2).mean()


class PriorLearner:
    """Trains :class:`PriorNetwork` on fresh random systems and realities, round after round."""

    def __init__(self, config: PriorConfig | None = None) -> None:
        self.config = config or PriorConfig()
        torch.manual_seed(self.config.seed)
        self.rng = np.random.default_rng(self.config.seed)
        self.network = PriorNetwork(self.config.hidden, self.config.layers, self.config.ensemble)
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=self.config.learning_rate)
        self.samples_seen = 0
        self.rounds = 0

    def draw_round(self) -> tuple[np.ndarray, np.ndarray]:
        """One round's (features, residual targets): ``systems_per_round`` fresh systems."""
        cfg = self.config
        feats, targets = [], []
        for i in range(cfg.systems_per_round):
            for series in random_series(self.rng, self.rounds * cfg.systems_per_round + i,
                                        cfg.series_per_system, (0, VALIDATION_SEED_START), cfg.realities):
                x, y = examples(self.rng, series, cfg.budgets_per_series, cfg.queries_per_budget)
                feats.append(x)
                targets.append(y)
        measured = corpus(cfg.real_train)
        for _ in range(cfg.real_series_per_round if measured else 0):
            series = measured[int(self.rng.integers(len(measured)))]
            x, y = examples(self.rng, series, cfg.budgets_per_series, cfg.queries_per_budget)
            feats.append(x)
            targets.append(y)
        return np.concatenate(feats).astype(np.float32), np.concatenate(targets).astype(np.float32)

    def loss(self, data: tuple[np.ndarray, np.ndarray]) -> float:
        """The loss on ``data`` without learning from it."""
        with torch.no_grad():
            return float(nll(*self.network(torch.as_tensor(data[0])), torch.as_tensor(data[1])))

    def train_round(self, data: tuple[np.ndarray, np.ndarray]) -> float:
        """Gradient passes over ``data``; returns the mean loss of the last pass."""
        cfg = self.config
        x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1])
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.learning_rate * max(cfg.learning_rate_decay ** self.rounds, 0.1)
        gen = torch.Generator().manual_seed(cfg.seed + self.rounds)
        last = math.nan
        for _ in range(cfg.epochs_per_round):
            order = torch.randperm(len(x), generator=gen)
            losses = []
            for start in range(0, len(x), cfg.batch_size):
                idx = order[start:start + cfg.batch_size]
                loss = nll(*self.network(x[idx]), y[idx])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(float(loss.detach()))
            last = float(np.mean(losses))
        self.samples_seen += len(x)
        self.rounds += 1
        return last

    def prior(self, meta: dict[str, Any] | None = None) -> LearnedPrior:
        """The network as a :class:`LearnedPrior`, its weights rounded to the file's float16, so
        what is scored here is what ships."""
        def rounded(params: nn.ParameterList) -> tuple[np.ndarray, ...]:
            return tuple(p.detach().numpy().astype(np.float16).astype(np.float64) for p in params)

        info = {"format": FORMAT_VERSION, "features": list(FEATURES), "layers": self.config.layers,
                "config": asdict(self.config), "samples_seen": self.samples_seen,
                "realities": REALITIES[self.config.realities], **(meta or {})}
        return LearnedPrior(rounded(self.network.weights), rounded(self.network.biases), info)

    def save(self, path: str | Path) -> Path:
        blob = {"config": asdict(self.config), "state": self.network.state_dict(),
                "samples_seen": self.samples_seen, "rounds": self.rounds}
        return replace_atomically(path, lambda tmp: torch.save(blob, tmp))

    @classmethod
    def load(cls, path: str | Path) -> PriorLearner:
        with read_as(path, "a learned-prior checkpoint saved by `dynamiccl train agent=learned_prior`",
                     CHECKPOINT_FIX):
            blob = torch.load(Path(path), map_location="cpu", weights_only=True)
            learner = cls(PriorConfig(**{"realities": UNRECORDED_REALITIES, **blob["config"]}))
            learner.network.load_state_dict(blob["state"])
            learner.samples_seen, learner.rounds = int(blob["samples_seen"]), int(blob["rounds"])
        return learner


# ---------------------------------------------------------------------------------------------
# Validation: fixed systems in validation realities, scored as the prior is used
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidationCase:
    """One series under one measurement budget, measured."""

    series: Series
    measured: np.ndarray
    values: np.ndarray
    noise: float


def validation_cases(systems: int, budgets: int = 3, realities: str = PriorConfig.realities
                     ) -> list[ValidationCase]:
    """The same cases for every run: ``systems`` systems from a fixed generator in validation
    realities of the kind ``realities`` names, two collectives each, ``budgets`` budgets per series."""
    rng = np.random.default_rng(VALIDATION_SYSTEMS_SEED)
    cases = []
    for i in range(systems):
        for series in random_series(rng, i, 2, (VALIDATION_SEED_START, HELDOUT_SEED_START), realities):
            for _ in range(budgets):
                measured = draw_budget(rng, np.isfinite(series.model))
                values, noise = measure(rng, series, measured)
                cases.append(ValidationCase(series, measured, values, noise))
    return cases


def score(prior: LearnedPrior, cases: list[ValidationCase]) -> dict[str, float]:
    """Mean Gaussian NLL (with the 0.5 log 2 pi constant), RMS error and the share of true
    log-ratios within 1 and 2 sigma, over every unmeasured point that is not NCCL's pick and whose
    truth is known (a real series': measured)."""
    errors, sigmas = [], []
    for case in cases:
        s = case.series
        mu, sigma = prior.predict_series(s, case.values, case.noise)
        query = s.asked & ~case.measured
        errors.append((s.truth - mu)[query])
        sigmas.append(sigma[query])
    err, sig = np.concatenate(errors), np.concatenate(sigmas)
    z = np.abs(err) / sig
    return {"val_nll": float(np.mean(np.log(sig) + 0.5 * z ** 2) + 0.5 * math.log(2 * math.pi)),
            "val_rmse": float(np.sqrt(np.mean(err ** 2))),
            "val_cover_1sigma": float(np.mean(z <= 1.0)), "val_cover_2sigma": float(np.mean(z <= 2.0)),
            "val_points": int(len(err))}


def gate_sigmas(prior: LearnedPrior, cases: list[ValidationCase], margin: float,
                quantile: float = 0.995) -> float:
    """How many of the prior's sigmas a predicted gain must clear for an override to be wrong no
    more often than ``1 - quantile``: the ``quantile`` of (truth - prediction) / sigma over the
    unmeasured points of ``cases`` where the prior predicts a gain above ``margin`` (one-sided:
    only a prediction too optimistic makes a call slower). ``dynamiccl tune`` gates the prior at
    this (``agents.tune.PRIOR_SIGMAS``)."""
    z = []
    for case in cases:
        s = case.series
        mu, sigma = prior.predict_series(s, case.values, case.noise)
        query = s.asked & ~case.measured & (-mu > math.log1p(margin))
        z.append((s.truth[query] - mu[query]) / sigma[query])
    found = np.concatenate(z) if z else np.zeros(0)
    return float(np.quantile(found, quantile)) if len(found) else math.nan

