"""A learned prior for few measurements: how each NCCL_ALGO/NCCL_PROTO pair compares with NCCL's
default where it was not measured, with its uncertainty.

``dynamiccl tune`` decides per size whether pinning a pair beats NCCL. Where both were measured,
the measurement decides; elsewhere only the model speaks, and the model's ratio between two
algorithms can be off by far more than its error on one time. A system's measurements say *how*
its reality departs from the model, and that departure has a shape: a pair's bandwidth and latency
are off by their own factors, so its error varies smoothly with size, and NCCL's default shares
its error with every pair compared against it at one size. This prior learns that shape from
thousands of simulated systems with hidden miscalibrations (:mod:`dynamiccl.agents.training.prior_learner`)
and answers, for every (pair, size) of one system, the log-ratio log(t_pair / t_default) with a
calibrated 1-sigma.

Public API (the shipped file needs no training run)::

    prior = LearnedPrior.load()            # or LearnedPrior.load("runs/prior/learned_prior.npz")
    answers = prior.predict(model_us, measured, noise=0.07)
    answers[point].log_ratio, answers[point].sigma

    LearnedPrior.load(path: str | Path | None = None) -> LearnedPrior
    LearnedPrior.predict(model_us: Mapping[Point, float], measured: Mapping[Point, float], *,
                         noise: float = DEFAULT_RATIO_NOISE) -> dict[Point, Prediction]

* a *point* is ``(collective, nranks, choice, nbytes)``: ``collective`` a
  :class:`~dynamiccl.system.knobs.Collective`, ``nranks`` the communicator's ranks, ``choice`` an
  ``(Algorithm, Protocol)`` pair or anything with ``algorithm``/``protocol`` attributes and no
  pinned channel count (``agents.shipping.tune.Choice``), or NCCL's default (``None``, or a choice that
  pins nothing), ``nbytes`` the message size;
* ``model_us``: the model's time (µs) of every pair's point the caller wants answered, and of
  NCCL's default at each of their sizes (``agents.shipping.tune._model_time`` on the model's system: what
  NCCL runs when told the pair). Times, not only ratios: how a pair's and the default's times grow
  with size says where each is latency- or bandwidth-bound, and so how far a measured departure
  carries. ``inf`` marks a pair the model cannot run (answered NaN);
* ``measured``: the measured log(t_pair / t_default) at pairs' points of ``model_us`` (both timed
  at that size); ``noise``: the 1-sigma of one such measured log-ratio (repeated launches say it;
  :data:`DEFAULT_RATIO_NOISE` when nothing does);
* the answer (:class:`Prediction`: ``log_ratio``, ``sigma``) is given for every pair's point; a
  point where the model says the pair *is* NCCL's pick is answered (0, 0): forcing NCCL's own pick
  changes nothing. At a measured point it is the prior's prediction from the *other* measurements
  (a leave-one-out check), never the measurement itself: where a pair was measured, the caller
  decides from the measurement.
* a key of another kind (a pinned channel count, a measured point without a model time, a size
  without NCCL's default time, a time <= 0) is a one-line ValueError; so is loading a file that is
  no prior, a damaged one, or one of another format.

Points group into series of one collective on one communicator size; each series is answered
from its own measurements. Answers are deterministic: the file stores the weights, inference is
numpy in float64 (no clocks, ranks or thread counts enter it), so every rank computes the same.

Features (one vector per point, :data:`FEATURES`): the model's log-ratio, whether the pair is
NCCL's pick, and the log-log slopes of the pair's and the default's model times; the size,
collective, ranks, the pair's algorithm and protocol; the two nearest measured residuals (measured
minus model log-ratio) of the same pair below and above in log size, with their distances, how the
model changes towards them (its ratio, NCCL's pick, both slopes); the residuals of other pairs, of
the same algorithm and of the same protocol at the same size; how many points are measured and
their residuals' mean and spread, over the series and for this pair; the noise. The network
predicts the residual at the point; the answer is the model's log-ratio plus it, and its sigma the
ensemble's (the members' own plus their disagreement).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dynamiccl.files import write_bytes_atomic
from dynamiccl.system.knobs import NCCL_KNOBS, Algorithm, Collective, Protocol
from dynamiccl.system.nccl import NCCL_ALGORITHMS  # in index order: the one-hot of a point's algorithm

#: The file's layout; a file of another version is refused, naming the fix.
FORMAT_VERSION = 1
#: The prior that ships in the package (``LearnedPrior.load()``).
SHIPPED_NAME = "learned_prior.npz"
#: What trains a prior (a file records the seeded command that trained it, ``meta["command"]``).
RETRAIN = "dynamiccl train agent=learned_prior"
#: A model log-ratio this close to 0 means the pair is what NCCL runs there.
PICK_TOLERANCE = 1e-9
#: Features clip log-ratios here: a pair 20x off is as useless as one 200x off.
LOG_RATIO_CLIP = 3.0
#: Distances in octaves are divided by this (the span of nccl-tests' 8 B - 16 GiB sweep is 31).
OCTAVE_SCALE = 8.0
#: log2 of a size is divided by this (16 GiB = 2^34), of the ranks by LOG2_RANKS_SCALE (4096).
LOG2_SIZE_SCALE, LOG2_RANKS_SCALE = 34.0, 12.0
#: The smallest 1-sigma the network may claim (log space).
SIGMA_FLOOR = 2e-3
#: Noise of one measured log-ratio when the caller knows none: two timings of 5 % each.
DEFAULT_RATIO_NOISE = 0.05 * math.sqrt(2)
#: Per-timing noise of a training series, log-uniform in this range: the prior has seen measured
#: log-ratios with a 1-sigma from NOISE_RANGE[0] to NOISE_RANGE[1] times sqrt 2, and no other.
NOISE_RANGE = (0.005, 0.2)

_NEIGHBOUR = ("present", "residual", "octaves", "model_change", "same_pick", "was_pick",
              "pair_slope", "default_slope")
FEATURES: tuple[str, ...] = (
    "model_log_ratio", "is_pick", "log2_size", "log2_ranks", "log_noise", "pair_slope",
    "default_slope",
    *(f"algorithm_{a.name.lower()}" for a in NCCL_ALGORITHMS),
    *(f"protocol_{p.name.lower()}" for p in Protocol),
    *(f"collective_{c.name.lower()}" for c in Collective),
    *(f"{side}{k}_{f}" for side in ("below", "above") for k in (1, 2) for f in _NEIGHBOUR),
    "size_others_present", "size_others_residual", "size_others_share",
    "size_algorithm_present", "size_algorithm_residual",
    "size_protocol_present", "size_protocol_residual",
    "series_share", "series_count", "series_residual", "series_spread",
    "pair_count", "pair_residual", "pair_spread",
)


class Prediction(NamedTuple):
    """The prior's answer at one point: predicted log(t_pair / t_default) and its 1-sigma."""

    log_ratio: float
    sigma: float


@dataclass(frozen=True)
class ModelledSeries:
    """One collective on one communicator size as the model times it: what every series the prior
    reads is made of, in training (simulated and real systems) and in :meth:`LearnedPrior.predict`
    alike, so both give :func:`series_features` the same arrays. ``pairs`` are the rows (P),
    ``log2_sizes`` the columns (S, ascending); ``pair_log_time``: [P, S] log model times of the pairs
    (NaN where the model cannot run one); ``default_log_time``: [S] NCCL's default's."""

    collective: Collective
    nranks: int
    pairs: list[tuple[Algorithm, Protocol]]
    log2_sizes: np.ndarray
    pair_log_time: np.ndarray
    default_log_time: np.ndarray

    @property
    def model(self) -> np.ndarray:
        """The model's log(t_pair / t_default), [P, S]."""
        return self.pair_log_time - self.default_log_time[None, :]


def series_features(series: ModelledSeries, measured: np.ndarray, noise: float) -> np.ndarray:
    """The feature vector of every (pair, size) of one series, [P, S, len(FEATURES)].

    ``measured``: [P, S] measured log(t_pair / t_default), NaN where not measured; ``noise``: the
    1-sigma of one. Training and inference both call this.
    """
    model = series.model
    n_pairs, n_sizes = model.shape
    x = np.asarray(series.log2_sizes, dtype=np.float64)
    known = np.isfinite(measured) & np.isfinite(model)
    residual = np.where(known, measured - model, 0.0)
    pick = np.abs(model) < PICK_TOLERANCE
    picked = np.where(pick.any(axis=0), pick.argmax(axis=0), -1)  # which pair NCCL runs per size
    m = np.clip(np.nan_to_num(model, nan=0.0), -LOG_RATIO_CLIP, LOG_RATIO_CLIP)
    cols: list[np.ndarray] = [m, pick.astype(float),
                              np.broadcast_to(x / LOG2_SIZE_SCALE, (n_pairs, n_sizes)),
                              np.full((n_pairs, n_sizes),
                                      math.log2(max(series.nranks, 1)) / LOG2_RANKS_SCALE),
                              np.full((n_pairs, n_sizes), math.log(max(noise, 1e-4)) / 4.0),
                              _local_slope(series.pair_log_time, x),
                              np.broadcast_to(_local_slope(series.default_log_time[None, :], x),
                                              (n_pairs, n_sizes))]
    ones = np.ones((n_pairs, n_sizes))
    algos = np.array([NCCL_ALGORITHMS.index(a) for a, _ in series.pairs])
    protos = np.array([int(p) for _, p in series.pairs])
    cols += [ones * (algos == i)[:, None] for i in range(len(NCCL_ALGORITHMS))]
    cols += [ones * (protos == int(p))[:, None] for p in Protocol]
    cols += [ones * (int(series.collective) == int(c)) for c in Collective]
    cols += _neighbour_columns(x, m, residual, known, pick, picked, series.pair_log_time,
                               series.default_log_time)
    cols += _same_size_columns(residual, known, algos, protos)
    cols += _count_columns(residual, known)
    return np.stack(cols, axis=-1)


def _local_slope(log_time: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The log-log slope of model times at each size, towards the next size (the last size:
    from the one before), [P, S]."""
    n = log_time.shape[-1]
    if n < 2:
        return np.zeros_like(log_time)
    ahead = np.concatenate([np.arange(1, n), [n - 2]])
    with np.errstate(invalid="ignore"):
        slope = (log_time[:, ahead] - log_time) / ((x[ahead] - x) * math.log(2))
    return np.clip(np.nan_to_num(slope), -0.5, 1.5)


def _neighbour_columns(x: np.ndarray, m: np.ndarray, residual: np.ndarray, known: np.ndarray,
                       pick: np.ndarray, picked: np.ndarray, pair_log_time: np.ndarray,
                       default_log_time: np.ndarray) -> list[np.ndarray]:
    """The same pair's two nearest measured points on each side (the point itself excluded): their
    residual, distance, and how the model changes on the way (ratio, NCCL's pick, the pair's and
    the default's log-log slope: whether the point and the neighbour share a regime)."""
    n_pairs, n_sizes = m.shape
    out = {(side, k): np.zeros((n_pairs, n_sizes, len(_NEIGHBOUR))) for side in ("below", "above")
           for k in (1, 2)}
    sizes = np.arange(n_sizes)
    octaves = (x[:, None] - x[None, :]) * math.log(2)  # [query, neighbour]
    with np.errstate(invalid="ignore", divide="ignore"):
        default_slope = np.where(octaves != 0, (default_log_time[:, None] - default_log_time[None, :])
                                 / np.where(octaves != 0, octaves, 1.0), 0.0)
    for p in range(n_pairs):
        at = np.flatnonzero(known[p])
        if not len(at):
            continue
        left = np.searchsorted(at, sizes, side="left")
        right = np.searchsorted(at, sizes, side="right")
        for side, k, pos in (("below", 1, left - 1), ("below", 2, left - 2), ("above", 1, right),
                             ("above", 2, right + 1)):
            ok = (pos >= 0) & (pos < len(at))
            j = at[np.clip(pos, 0, len(at) - 1)]
            span = np.where(ok & (octaves[sizes, j] != 0), octaves[sizes, j], 1.0)
            block = out[(side, k)][p]
            block[:, 0] = ok
            block[:, 1] = np.where(ok, residual[p, j], 0.0)
            block[:, 2] = np.where(ok, np.abs(x - x[j]) / OCTAVE_SCALE, 0.0)
            block[:, 3] = np.where(ok, np.clip(m[p] - m[p, j], -2.0, 2.0), 0.0)
            block[:, 4] = np.where(ok, picked == picked[j], 0.0)
            block[:, 5] = np.where(ok, pick[p, j], 0.0)
            block[:, 6] = np.where(ok, np.clip(np.nan_to_num(
                (pair_log_time[p] - pair_log_time[p, j]) / span), -0.5, 1.5), 0.0)
            block[:, 7] = np.where(ok, np.clip(np.nan_to_num(default_slope[sizes, j]), -0.5, 1.5), 0.0)
    return [out[key][..., f] for key in out for f in range(len(_NEIGHBOUR))]


def _same_size_columns(residual: np.ndarray, known: np.ndarray, algos: np.ndarray,
                       protos: np.ndarray) -> list[np.ndarray]:
    """Other pairs measured at the same size: all of them, those of the same algorithm, and those
    of the same protocol (NCCL's default shares its error with every pair at one size)."""
    n_pairs = len(algos)
    k = known.astype(float)
    others = 1.0 - np.eye(n_pairs)
    cols = []
    for group in (others, others * (algos[:, None] == algos[None, :]),
                  others * (protos[:, None] == protos[None, :])):
        count = group @ k
        total = group @ (residual * k)
        present = count > 0
        cols += [present.astype(float), np.where(present, total / np.maximum(count, 1), 0.0)]
        if len(cols) == 2:
            cols.append(count / max(n_pairs - 1, 1))
    return cols


def _count_columns(residual: np.ndarray, known: np.ndarray) -> list[np.ndarray]:
    """How much is measured and how its residuals spread, over the series and for each pair."""
    shape = known.shape
    n = known.sum()
    series = residual[known]
    cols = [np.full(shape, n / known.size), np.full(shape, math.log1p(n) / 6.0),
            np.full(shape, series.mean() if n else 0.0), np.full(shape, series.std() if n > 1 else 0.0)]
    per_pair = known.sum(axis=1)
    mean = np.where(per_pair > 0, (residual * known).sum(axis=1) / np.maximum(per_pair, 1), 0.0)
    sq = np.where(per_pair > 1, ((residual - mean[:, None]) ** 2 * known).sum(axis=1)
                  / np.maximum(per_pair, 1), 0.0)
    cols += [np.broadcast_to((np.log1p(per_pair) / 4.0)[:, None], shape),
             np.broadcast_to(mean[:, None], shape), np.broadcast_to(np.sqrt(sq)[:, None], shape)]
    return cols


def mixture(mean: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ensemble members' Gaussians [K, ...] as one: their mean, and a variance that adds the
    members' disagreement to their own."""
    mu = mean.mean(axis=0)
    var = (sigma ** 2).mean(axis=0) + mean.var(axis=0)
    return mu, np.sqrt(var)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _pair(choice: Any) -> tuple[Algorithm, Protocol] | None:
    """A point's pair, or None for NCCL's default (None, or a choice that pins nothing)."""
    if choice is None:
        return None
    if isinstance(choice, tuple):
        algorithm, protocol = choice
    else:
        more = [k.title for k in NCCL_KNOBS if k.name not in ("algorithm", "protocol")
                and getattr(choice, k.name, None) is not None]
        if more:
            raise ValueError(f"the learned prior answers algorithm/protocol pairs; {choice} pins "
                             f"{more[0]} too: ask for its pair")
        algorithm, protocol = choice.algorithm, choice.protocol
    if algorithm is None and protocol is None:
        return None
    if algorithm is None or protocol is None or Algorithm(algorithm) not in NCCL_ALGORITHMS:
        raise ValueError(f"the learned prior answers NCCL algorithm/protocol pairs, got {choice}")
    return Algorithm(algorithm), Protocol(protocol)


Point = tuple[Collective, int, Any, int]


def _stale_features(path: Path, meta: Mapping[str, Any]) -> str:
    """One line for a prior of today's format whose features are not today's: its one-hot columns
    name NCCL's algorithms (and protocols, collectives) as they were when it was trained, so an
    algorithm added to (or removed from) the table makes every trained prior stale. It names what the
    file was trained for and the command that trains it again (the file's own, where it has one)."""
    features = [str(f) for f in meta.get("features") or []]
    command = meta.get("command")
    retrain = command if isinstance(command, str) and command.startswith(RETRAIN) else RETRAIN
    for kind in ("algorithm", "protocol", "collective"):
        old = [f.removeprefix(f"{kind}_") for f in features if f.startswith(f"{kind}_")]
        new = [f.removeprefix(f"{kind}_") for f in FEATURES if f.startswith(f"{kind}_")]
        if old != new:
            return (f"{path} was trained for {kind}s {', '.join(old) or 'none'}, not this code's "
                    f"{', '.join(new)}; retrain with `{retrain}`")
    missing = [f for f in FEATURES if f not in features]
    return (f"{path} was trained on other features (this code's {', '.join(missing[:3]) or 'order'} "
            f"missing); retrain with `{retrain}`")


@dataclass(frozen=True)
class LearnedPrior:
    """An ensemble of small MLPs (weights per layer, [K, in, out] and [K, out]) and the metadata
    of the run that trained it (its seeded command among them)."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    meta: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path | None = None) -> LearnedPrior:
        """The prior in ``path`` (a ``.npz`` written by ``dynamiccl train agent=learned_prior``);
        None: the one shipped in the package. A file that is not one, or of another version, is a
        one-line ValueError naming the fix."""
        if path is None:
            with resources.as_file(resources.files("dynamiccl.agents.shipping") / SHIPPED_NAME) as shipped:
                return cls._read(Path(shipped))
        return cls._read(Path(path))

    @classmethod
    def _read(cls, path: Path) -> LearnedPrior:
        fix = ("retrain it with `dynamiccl train agent=learned_prior` or use the shipped prior "
               "(LearnedPrior.load())")
        try:
            with np.load(path, allow_pickle=False) as blob:
                meta = json.loads(str(blob["meta"]))
                layers = int(meta["layers"])
                weights = tuple(blob[f"w{i}"].astype(np.float64) for i in range(layers + 1))
                biases = tuple(blob[f"b{i}"].astype(np.float64) for i in range(layers + 1))
        except FileNotFoundError:
            raise ValueError(f"{path}: no such learned-prior file; {fix}") from None
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, json.JSONDecodeError):
            raise ValueError(f"{path} is not a learned-prior file; {fix}") from None
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path} is a learned prior of another format (version "
                             f"{meta.get('format')}, this code reads {FORMAT_VERSION}); {fix}")
        if meta.get("features") != list(FEATURES):
            raise ValueError(_stale_features(path, meta))
        dims = [len(FEATURES)] + [w.shape[2] for w in weights]
        shapes_ok = dims[-1] == 2 and all(
            w.shape == (weights[0].shape[0], d_in, d_out) and b.shape == (weights[0].shape[0], d_out)
            for w, b, d_in, d_out in zip(weights, biases, dims[:-1], dims[1:], strict=True))
        if not shapes_ok or not all(np.isfinite(w).all() for w in (*weights, *biases)):
            raise ValueError(f"{path} is a damaged learned-prior file; {fix}")
        return cls(weights, biases, meta)

    def save(self, path: str | Path) -> Path:
        """Writes the prior atomically (float16 weights: a few tens of KB)."""
        arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(self.meta, sort_keys=True))}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            arrays[f"w{i}"], arrays[f"b{i}"] = w.astype(np.float16), b.astype(np.float16)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        return write_bytes_atomic(path, buffer.getvalue())

    def members(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every member's predicted residual and 1-sigma for feature rows [..., F] -> [K, ...]."""
        h = np.broadcast_to(features.reshape(-1, features.shape[-1]),
                            (self.weights[0].shape[0], *features.reshape(-1, features.shape[-1]).shape))
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = np.einsum("kbi,kio->kbo", h, w) + b[:, None, :]
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        shape = (h.shape[0], *features.shape[:-1])
        return h[..., 0].reshape(shape), (softplus(h[..., 1]) + SIGMA_FLOOR).reshape(shape)

    def predict_series(self, series: ModelledSeries, measured: np.ndarray,
                       noise: float = DEFAULT_RATIO_NOISE) -> tuple[np.ndarray, np.ndarray]:
        """(predicted log-ratio, 1-sigma), each [P, S], for one series given as arrays (see
        :func:`series_features`); NaN where the model cannot run the pair, (0, 0) at NCCL's pick."""
        residual, sigma = mixture(*self.members(series_features(series, measured, noise)))
        model = series.model
        pick = np.abs(model) < PICK_TOLERANCE
        runs = np.isfinite(model)
        return (np.where(runs, np.where(pick, 0.0, model + residual), np.nan),
                np.where(runs, np.where(pick, 0.0, sigma), np.nan))

    def predict(self, model_us: Mapping[Point, float], measured: Mapping[Point, float], *,
                noise: float = DEFAULT_RATIO_NOISE) -> dict[Point, Prediction]:
        """Every pair's point of ``model_us`` answered from the measurements of its series (module
        docstring); keys are returned as given."""
        out: dict[Point, Prediction] = {}
        for s in series_arrays(model_us, measured):
            mu, sigma = self.predict_series(s, s.measured, noise)
            for p, at in s.points.items():
                out[p] = Prediction(float(mu[at]), float(sigma[at]))
        return out


@dataclass(frozen=True)
class SeriesArrays(ModelledSeries):
    """One series of a :meth:`LearnedPrior.predict` call as the network reads it (see
    :func:`series_features`): its measured log(t_pair / t_default) ([P, S], NaN where not
    measured), and where each pair's point given lies in it."""

    measured: np.ndarray
    points: dict[Point, tuple[int, int]]


def series_arrays(model_us: Mapping[Point, float], measured: Mapping[Point, float]) -> list[SeriesArrays]:
    """The points of a :meth:`LearnedPrior.predict` call grouped into series of one collective on one
    communicator size, as arrays (pairs sorted, sizes ascending); the one-line ValueErrors of the
    module docstring for keys of another kind. The prior's training reads real systems' measurements
    through this too (``agents/training/prior_corpus.py``), so it learns what it is asked."""
    unknown = [p for p in measured if p not in model_us or _pair(p[2]) is None]
    if unknown:
        raise ValueError(f"measured point {unknown[0]} is no pair's point of model_us; give the "
                         "model's time of every measured pair too")
    series: dict[tuple[Collective, int], list[Point]] = defaultdict(list)
    for point in model_us:
        series[(Collective(point[0]), int(point[1]))].append(point)
    out = []
    for (collective, nranks), points in series.items():
        answered = [p for p in points if _pair(p[2]) is not None]
        pairs = sorted({_pair(p[2]) for p in answered})
        sizes = sorted({int(p[3]) for p in answered})
        row = {pair: i for i, pair in enumerate(pairs)}
        col = {n: j for j, n in enumerate(sizes)}
        pair_time = np.full((len(pairs), len(sizes)), np.nan)
        default_time = np.full(len(sizes), np.nan)
        y = np.full_like(pair_time, np.nan)
        where: dict[Point, tuple[int, int]] = {}
        for p in points:
            pair, size, time_us = _pair(p[2]), int(p[3]), float(model_us[p])
            if not time_us > 0:  # inf passes: a pair the model cannot run is answered NaN
                raise ValueError(f"model time of {p} is {time_us}; give a time in µs > 0")
            if pair is None:
                if size in col:
                    default_time[col[size]] = math.log(time_us)
                continue
            where[p] = at = (row[pair], col[size])
            pair_time[at] = math.log(time_us)
            if p in measured:
                y[at] = float(measured[p])
        missing = [n for n, t in zip(sizes, default_time, strict=True) if not np.isfinite(t)]
        if missing:
            raise ValueError(f"model_us has no time of NCCL's default for {collective.name.lower()}"
                             f" on {nranks} ranks at {missing[0]} bytes; give it with choice None")
        out.append(SeriesArrays(collective, nranks, pairs, np.log2(np.maximum(sizes, 1)), pair_time,
                                default_time, y, where))
    return out
