"""The learned prior against simpler guesses, where ``tune`` needs it: ``python experiments/bench_prior.py``.

Realities: held-out systems (named presets no training system is: DGX H100 at 1, 2 and 8 nodes,
DGX A100 at 2, the PCIe cluster at 4, the 48:1 rings at 8, 8 x L40S PCIe, AWS p4d on EFA at 2)
with the hidden miscalibration of held-out perturbed seeds (from ``HELDOUT_SEED_START`` on: per
algorithm/protocol bandwidth within ±40 %, latency floors within 3x, 1-5 % noise). Per system,
collective (allreduce, allgather, reducescatter) and size (1 KiB - 1 GiB, powers of two), every
NCCL_ALGO/NCCL_PROTO pair the model can run is compared with NCCL's default.

Budgets, per series (one collective on one system), never more than half a sweep: every other
size (every pair there), a random half of the (pair, size) points, every fourth size, a random
quarter, a random eighth. A measured point is one noisy timing of the pair in the reality, next to
the median of the default's timings at that size.

Predictors of log(t_pair / t_default) at the points not measured (NCCL's own pick excluded):

* ``model``: the uncalibrated model's ratio, with the export gate's datasheet uncertainty
  (:func:`dynamiccl.system.calibration.uncertainty` of both times);
* ``nearest``: the same pair's measured ratio, interpolated in log size between the nearest
  measured sizes (held beyond them; the model where the pair was never measured), with a sigma of
  the noise plus 0.04 per octave to the nearest measurement plus half the neighbours' disagreement;
* ``residual``: the model's ratio plus the same pair's measured residual (measured minus model),
  interpolated the same way (the model gives the shape, the measurements the level);
* ``prior``: the learned prior (:mod:`dynamiccl.agents.shipping.prior`; the shipped file unless ``--prior``).

Scores: mean and median absolute error, mean Gaussian NLL, the share of true values within 1 and 2
sigma. Then decisions at every size: each predictor (a measured point counts as measured for all
but ``model``) overrides NCCL with its best pair only where the predicted log-gain exceeds
log(1 + margin) + k sigma; ``tune`` (:class:`dynamiccl.agents.shipping.tune.Tuner` with this prior, as
``dynamiccl tune`` runs) and ``tune_no_prior`` (``--no-prior``) decide from the same measurements as
records, on the model fitted to them with ``--calibrate`` (one fit per case: slow), else on the model
as given, where tune's prior pins nothing (it overrides NCCL only on a calibrated model). Scored on
the truth with ``bench_tuning``'s scoring (:class:`bench_tuning.Score`): the
share of the headroom (the best pair's gain over NCCL's default, summed) captured, decisions > 2 %
slower than NCCL, the worst decision.

This bench holds the budget fixed to see the predictor; ``experiments/bench_tuning.py`` scores
``tune`` end to end (planning its own measurements, with and without the prior) next to the sweep,
coordinate descent and the gated bandit at the same budgets, on perturbed and real (replayed)
systems.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from bench_tuning import Score

from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN
from dynamiccl.agents.shipping.prior import PICK_TOLERANCE, LearnedPrior
from dynamiccl.agents.shipping.tune import (
    DEFAULT,
    Choice,
    Measurements,
    Prior,
    Tuner,
    calibrated_topology,
)
from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource
from dynamiccl.agents.training.prior_learner import time_series
from dynamiccl.agents.training.prior_series import Series
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.perturbed import HELDOUT_SEED_START, PerturbedBackend
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths
from dynamiccl.system.calibration import uncertainty
from dynamiccl.system.knobs import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology, load_topology

SYSTEMS = (("dgx_h100", 1), ("dgx_h100", 2), ("dgx_h100", 8), ("dgx_a100", 2), ("pcie_cluster", 4),
           ("ring_ring_48to1", 8), ("l40s_pcie_2socket", 1), ("p4d_a100_efa", 2))
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)
SIZES = tuple(1 << k for k in range(10, 31))
#: Budget name -> which points of a [P, S] series it measures (rng for the random ones).
BUDGETS: dict[str, Callable[[np.random.Generator, tuple[int, int]], np.ndarray]] = {
    "every other size": lambda rng, shape: np.broadcast_to(np.arange(shape[1]) % 2 == 0, shape),
    "random half": lambda rng, shape: rng.random(shape) < 0.5,
    "every 4th size": lambda rng, shape: np.broadcast_to(np.arange(shape[1]) % 4 == 0, shape),
    "random quarter": lambda rng, shape: rng.random(shape) < 0.25,
    "random eighth": lambda rng, shape: rng.random(shape) < 0.125,
}
PREDICTORS = ("model", "nearest", "residual", "prior")
#: Decisions that are no predictor's: ``dynamiccl tune`` with the prior, and without.
TUNERS = ("tune", "tune_no_prior")
#: Sigma growth of the interpolation baselines per octave to the nearest measurement (tune's).
SIGMA_PER_OCTAVE = 0.04


@dataclass
class Case:
    """One series of one reality under one budget, measured."""

    topology: Topology
    series: Series
    measured: np.ndarray
    values: np.ndarray
    default_us: np.ndarray
    pair_us: np.ndarray
    noise: float


def measure_case(topology: Topology, series: Series, reality: PerturbedBackend, measured: np.ndarray
                 ) -> Case:
    """Times the budget's points in the reality: one noisy timing per measured pair, the default's
    median at each measured size."""
    sizes = [1 << int(round(x)) for x in series.log2_sizes]
    pair_us = np.full(series.truth.shape, np.nan)
    default_us = np.full(len(sizes), np.nan)
    for j, n in enumerate(sizes):
        defaults = []
        scenario = Scenario(topology, series.collective, n)
        for i in np.flatnonzero(measured[:, j]):
            a, p = series.pairs[i]
            m = reality.measure_forced(scenario, KnobConstraints(algorithm=a, protocol=p))
            pair_us[i, j] = m.time_us
            defaults.append(m.default_time_us)
        if defaults:
            default_us[j] = float(np.median(defaults))
    values = np.where(measured, np.log(pair_us / default_us[None, :]), np.nan)
    return Case(topology, series, measured, values, default_us, pair_us,
                reality.truth.noise * math.sqrt(2))


def model_sigma(case: Case) -> np.ndarray:
    """The export gate's uncertainty of a model ratio: both times' datasheet error, in log."""
    s = case.series
    sizes = 2.0 ** s.log2_sizes
    out = np.zeros(s.truth.shape)
    for i, (a, p) in enumerate(s.pairs):
        for j, n in enumerate(sizes):
            rel = uncertainty(case.topology.calibration, int(s.collective), n, int(a), int(p))
            out[i, j] = math.hypot(math.log1p(rel), math.log1p(rel))
    return out


def interpolated(case: Case, level: np.ndarray, fallback: np.ndarray, fallback_sigma: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``level`` (measured values, [P, S] NaN where not measured) interpolated per pair in log size
    and held beyond the measured sizes; the sigma grows with the distance to the nearest one and
    with the disagreement of the two neighbours. A pair never measured keeps the fallback."""
    x = case.series.log2_sizes
    mu, sigma = fallback.copy(), fallback_sigma.copy()
    for i in range(len(level)):
        at = np.flatnonzero(np.isfinite(level[i]))
        if not len(at):
            continue
        mu[i] = np.interp(x, x[at], level[i, at])
        below = np.searchsorted(x[at], x, side="right") - 1
        above = np.minimum(below + 1, len(at) - 1)
        below = np.maximum(below, 0)
        spread = np.abs(level[i, at[below]] - level[i, at[above]]) / 2
        octaves = np.min(np.abs(x[:, None] - x[at][None, :]), axis=1)
        sigma[i] = case.noise + SIGMA_PER_OCTAVE * octaves + spread
    return mu, sigma


def predictions(case: Case, prior: LearnedPrior) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    s = case.series
    model, band = s.model, model_sigma(case)
    return {
        "model": (model, band),
        "nearest": interpolated(case, case.values, model, band),
        "residual": (lambda mu, sg: (model + mu, sg))(*interpolated(
            case, case.values - model, np.zeros_like(model), band)),
        "prior": prior.predict_series(s, case.values, case.noise),
    }


@dataclass
class Tally:
    """One predictor's (or tuner's) errors over many cases, and its decisions
    (:class:`bench_tuning.Score`, log-ratios as times relative to NCCL's default)."""

    errors: list[np.ndarray]
    z: list[np.ndarray]
    nll: list[np.ndarray]
    decisions: Score
    overrides: int = 0

    @classmethod
    def empty(cls) -> Tally:
        return cls([], [], [], Score())

    def predicted(self, error: np.ndarray, sigma: np.ndarray) -> None:
        self.errors.append(error)
        self.z.append(np.abs(error) / sigma)
        self.nll.append(np.log(sigma) + 0.5 * (error / sigma) ** 2 + 0.5 * math.log(2 * math.pi))

    def decided(self, truth: float, best: float, where: str, overridden: bool) -> None:
        """``truth``: the true log(t_pick / t_default) of the decision, ``best``: the best pair's."""
        self.decisions.add(where, 1.0, math.exp(best), math.exp(truth))
        self.overrides += int(overridden)

    def summary(self) -> dict:
        out: dict = {}
        if self.errors:
            err, z, nll = (np.concatenate(v) for v in (self.errors, self.z, self.nll))
            out.update(mae=round(float(np.mean(np.abs(err))), 4),
                       median_abs_error=round(float(np.median(np.abs(err))), 4),
                       nll=round(float(np.mean(nll)), 3), cover_1sigma=round(float(np.mean(z <= 1)), 3),
                       cover_2sigma=round(float(np.mean(z <= 2)), 3), points=int(len(err)))
        decided = self.decisions.summary()
        out.update({k: decided[k] for k in ("headroom_share", "slower_2pct", "decisions",
                                             "worst_speedup", "worst_decision")},
                   overrides=self.overrides)
        return out


def decide(mu: np.ndarray, sigma: np.ndarray, margin: float, k: float) -> np.ndarray:
    """Per size, the pair to pin (its row) or -1: the best predicted log-gain among those that
    clear log(1 + margin) + k sigma."""
    gain = np.where(np.isfinite(mu), -mu, -np.inf)
    clears = gain > math.log1p(margin) + k * np.nan_to_num(sigma, nan=np.inf)
    best = np.where(clears, gain, -np.inf).argmax(axis=0)
    return np.where(clears.any(axis=0), best, -1)


def _record(case: Case, i: int | None, j: int, time_us: float) -> MeasurementRecord:
    s, n = case.series, 1 << int(round(case.series.log2_sizes[j]))
    algbw, busbw = bandwidths(s.collective, n, s.nranks, time_us)
    a, p = (None, None) if i is None else s.pairs[i]
    return MeasurementRecord(s.collective.name.lower(), n, s.nranks, float(time_us), algbw, busbw,
                             algorithm=None if a is None else a.name.lower(),
                             protocol=None if p is None else p.name.lower(),
                             nnodes=case.topology.nodes, source="bench_prior")


def tune_picks(case: Case, priors: dict[str, Prior | None], calibrate: bool) -> dict[str, np.ndarray]:
    """``tune``'s pinned pair per size (row, or -1) with each of ``priors`` (or none), from the
    case's measurements as records; on the model fitted to them as ``dynamiccl tune`` does where
    ``calibrate`` (the learned prior pins nothing on a model that was not), else on the model as
    given."""
    s = case.series
    records = [_record(case, None, j, t) for j, t in enumerate(case.default_us) if np.isfinite(t)]
    records += [_record(case, i, j, case.pair_us[i, j]) for i, j in np.argwhere(case.measured)]
    rows = {Choice(a, p): i for i, (a, p) in enumerate(s.pairs)}
    column = {1 << int(round(x)): j for j, x in enumerate(s.log2_sizes)}

    def nearest_column(nbytes: int) -> int:
        """The series' column of ``nbytes``, or of its nearest size in log2 (tune also judges the
        sizes an octave around a decided one)."""
        return column.get(nbytes) if nbytes in column else \
            column[min(column, key=lambda n: abs(n.bit_length() - nbytes.bit_length()))]

    model = calibrated_topology(records, case.topology)[0] if calibrate else case.topology
    out = {}
    for name, prior in priors.items():
        tuner = Tuner(model, Measurements(records), prior=prior, calibrated=model is not case.topology,
                      candidates=lambda scn: [c for c, i in rows.items()
                                              if np.isfinite(s.model[i, nearest_column(scn.nbytes)])])
        picks = []
        for x in s.log2_sizes:
            chosen = tuner.decide(Scenario(case.topology, s.collective, 1 << int(round(x)))).chosen
            picks.append(-1 if chosen == DEFAULT else rows[chosen.pair])
        out[name] = np.array(picks)
    return out


def score_case(case: Case, prior: LearnedPrior, tallies: dict[str, Tally], margin: float, k: float,
               where: str, calibrate: bool = False) -> None:
    s = case.series
    query = np.isfinite(s.model) & ~case.measured & (np.abs(s.model) >= PICK_TOLERANCE)
    best = np.minimum(np.nanmin(np.where(np.isfinite(s.model), s.truth, np.nan), axis=0), 0.0)
    picks = {}
    for name, (mu, sigma) in predictions(case, prior).items():
        tallies[name].predicted((s.truth - mu)[query], sigma[query])
        if name != "model":  # what was measured is known
            mu = np.where(case.measured, case.values, mu)
            sigma = np.where(case.measured, case.noise, sigma)
        picks[name] = decide(mu, sigma, margin, k)
    picks.update(tune_picks(case, {"tune": LearnedPriorSource(prior), "tune_no_prior": None}, calibrate))
    for name, rows in picks.items():
        for j, row in enumerate(rows):
            truth = 0.0 if row < 0 else float(s.truth[row, j])
            label = "" if row < 0 else f"{s.pairs[row][0].name.lower()}/{s.pairs[row][1].name.lower()}"
            size = 1 << int(round(s.log2_sizes[j]))
            tallies[name].decided(truth, float(best[j]), f"{where} {s.collective.name.lower()} "
                                  f"{size} B {label or 'default'}", row >= 0)


def run(seeds: list[int], systems, prior: LearnedPrior, margin: float, k: float,
        progress: bool, calibrate: bool = False) -> dict[str, dict[str, dict]]:
    tallies = {b: {name: Tally.empty() for name in (*PREDICTORS, *TUNERS)} for b in BUDGETS}
    for seed in seeds:
        truth = PerturbedBackend(seed, noisy=False)
        for system in systems:
            topology = load_topology(system[0], nodes=system[1])
            where = f"seed {seed} {system[0]}x{system[1]}"
            for c, collective in enumerate(COLLECTIVES):
                series = time_series(topology, collective, truth, SIZES)
                if series is None:
                    continue
                for b, (budget, draw) in enumerate(BUDGETS.items()):
                    rng = np.random.default_rng([seed, SYSTEMS.index(system), c, b])
                    measured = draw(rng, series.model.shape) & np.isfinite(series.model)
                    noisy = PerturbedBackend(seed, noisy=True)
                    case = measure_case(topology, series, noisy, measured)
                    score_case(case, prior, tallies[budget], margin, k, where, calibrate)
            if progress:
                print(f"{where} done", file=sys.stderr, flush=True)
    return {b: {name: t.summary() for name, t in per.items()} for b, per in tallies.items()}


def _print(results: dict[str, dict[str, dict]]) -> None:
    width = max([len("predictor")] + [len(name) for per in results.values() for name in per])
    print(f"{'budget':17} {'predictor':{width}} {'MAE':>6} {'median':>7} {'NLL':>6} {'±1σ':>5} {'±2σ':>5} "
          f"{'share':>6} {'>2% slower':>10} {'overrides':>9} {'worst':>7}")
    for budget, per in results.items():
        for name, r in per.items():
            pred = (f"{r['mae']:6.3f} {r['median_abs_error']:7.3f} {r['nll']:6.2f} "
                    f"{r['cover_1sigma']:5.2f} {r['cover_2sigma']:5.2f}" if "mae" in r
                    else f"{'':6} {'':7} {'':6} {'':5} {'':5}")
            share = "n/a" if r["headroom_share"] is None else f"{r['headroom_share']:.3f}"
            print(f"{budget:17} {name:{width}} {pred} {share:>6} {r['slower_2pct']:>10} "
                  f"{r['overrides']:>9} {r['worst_speedup']:>6.3f}x")
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="held-out realities per system (default 4)")
    parser.add_argument("--prior", metavar="FILE", help="a learned-prior file (default: the shipped one)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help=f"decisions: the gain an override must clear (default {DEFAULT_MARGIN})")
    parser.add_argument("--k", type=float, default=2.0,
                        help="decisions: sigmas the gain must clear on top of the margin (default 2)")
    parser.add_argument("--calibrate", action="store_true",
                        help="tune's rows fit the model to each case's measurements first, as "
                             "`dynamiccl tune` does (slow: a fit per case); without it they decide on "
                             "the model as given, where tune's learned prior pins nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.seeds <= 50:
        parser.error("--seeds takes 1..50")
    if not 0 <= args.margin < 1 or args.k < 0:
        parser.error("--margin takes a fraction in [0, 1) and --k a number >= 0")
    try:
        prior = LearnedPrior.load(args.prior)
    except ValueError as exc:
        parser.error(str(exc))
    began = time.perf_counter()
    seeds = list(range(HELDOUT_SEED_START, HELDOUT_SEED_START + args.seeds))
    results = run(seeds, SYSTEMS, prior, args.margin, args.k, progress=not args.json,
                  calibrate=args.calibrate)
    doc = {"reality": f"perturbed, held-out seeds {seeds[0]}..{seeds[-1]}",
           "systems": [f"{t}x{n}" for t, n in SYSTEMS], "sizes": "1KiB..1GiB (powers of two)",
           "collectives": [c.name.lower() for c in COLLECTIVES], "margin": args.margin, "k": args.k,
           "tune_calibrates": args.calibrate,
           "prior": prior.meta.get("command", args.prior or "shipped"), "budgets": results,
           "seconds": round(time.perf_counter() - began, 1)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{doc['reality']}; {', '.join(doc['systems'])}; {doc['sizes']}; "
          f"override where gain > {args.margin:.0%} + {args.k:g} sigma")
    _print(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
