"""The ``measured`` perturbed realities fitted to what real systems showed (``experiments/fit_realities.py``).

A tuner sees a system through its model (the datasheet topology) and NCCL's default, which it can
time: what it must guess is how far each alternative's time *relative to NCCL's default* is off the
model's, and how far NCCL's own time is off. The replay tables of published runs
(``tests/fixtures/real/replay``) answer both wherever NCCL's default and a forced choice were
timed on the same call: per such call and choice (:func:`residual_points`)

* ``ratio residual``: log(t_choice / t_default) measured minus modelled, counted where the model
  tells the choice apart from NCCL's own pick (where it does not, the perturbed realities time the
  very same configuration and have no residual to match);
* ``default residual``: log(t_default measured / modelled), once per call.

:func:`fit` finds, per kind of system (:func:`~dynamiccl.envs.backends.perturbed.system_kind`),
the ``measured`` profile's spreads whose realities give the same mean |residual| on the same calls
(the mean, not the median, so the tails count: on the RDMA systems half the calls are off by less
than 0.13 and one in ten by more than 0.55): the pair spread from the ratio residuals (the
system-wide factors cancel in a ratio), then the common spread from NCCL's default's. Both means
grow with their spread, so each is a bisection over a fixed set of drawn realities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamiccl import decisions
from dynamiccl.decisions import KnobConstraints
from dynamiccl.envs.backends.perturbed import (
    HELDOUT_SEED_START,
    Miscalibration,
    ModelError,
    system_kind,
)
from dynamiccl.envs.backends.replay import DEFAULT_CHOICE, ReplayTable
from dynamiccl.system.knobs import Config
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

#: Realities each statistic is simulated over (seeds below the held-out ones).
FIT_DRAWS = 400


@dataclass(frozen=True)
class ResidualPoint:
    """One measured call and forced choice next to NCCL's default on the same call."""

    system: str
    kind: str
    scenario: Scenario
    #: What NCCL runs on the model when told the choice, and by default.
    choice: Config
    default: Config
    model_log_ratio: float
    measured_log_ratio: float
    #: log(t_default measured / modelled).
    default_residual: float

    @property
    def told_apart(self) -> bool:
        """The model runs another configuration for the choice than NCCL's own pick."""
        return self.choice != self.default


def residual_points(folder: str | Path) -> list[ResidualPoint]:
    """Every call of the replay tables in ``folder`` timed with NCCL's default and a forced choice
    the model can run, on the system's datasheet topology (``<folder>/../<system>/topology.yaml``)."""
    from dynamiccl.profiler.formats.measurement_paths import load_paths

    folder = Path(folder)
    out: list[ResidualPoint] = []
    for csv in sorted(folder.glob("*.csv")):
        topology_file = folder.parent / csv.stem / "topology.yaml"
        if not topology_file.is_file():
            continue
        records = load_paths([csv]).records
        model = load_topology(topology_file)
        nodes = {(r.coll, r.nbytes, r.nranks): r.nnodes or 1 for r in records}
        table = ReplayTable(records)
        for (coll, nbytes, nranks), measured in sorted(table.calls.items()):
            if DEFAULT_CHOICE not in measured or len(measured) < 2:
                continue
            n = nodes[(coll, nbytes, nranks)]
            s = Scenario(model.resized(nodes=n, gpus_per_node=nranks // n), coll, nbytes)
            try:
                default = decisions.nccl_default(s)
            except ValueError:
                continue
            for choice, time_us in measured.items():
                if choice == DEFAULT_CHOICE:
                    continue
                try:
                    run = decisions.nccl_default(s, KnobConstraints(**choice.given()))
                except ValueError:  # the model cannot run it here
                    continue
                out.append(ResidualPoint(csv.stem, system_kind(s.topology), s, run.config,
                                         default.config, math.log(run.time_us / default.time_us),
                                         math.log(time_us / measured[DEFAULT_CHOICE]),
                                         math.log(measured[DEFAULT_CHOICE] / default.time_us)))
    return out


def real_statistics(points: list[ResidualPoint]) -> dict[str, dict[str, float]]:
    """Per kind: means, medians and 90 % quantiles of |ratio residual| (told-apart choices) and of
    |default residual| (one per call), with their counts."""
    out = {}
    for kind in sorted({p.kind for p in points}):
        mine = [p for p in points if p.kind == kind]
        ratio = np.abs([p.measured_log_ratio - p.model_log_ratio for p in mine if p.told_apart])
        default = np.abs(list({(p.system, p.scenario): p.default_residual for p in mine}.values()))
        out[kind] = _summary(ratio, default)
    return out


def _summary(ratio: np.ndarray, default: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, x in (("ratio", ratio), ("default", default)):
        out |= {f"{name}_points": int(x.size), f"{name}_mean": float(np.mean(x)),
                f"{name}_median": float(np.median(x)), f"{name}_q90": float(np.quantile(x, 0.9))}
    return out


class _Simulated:
    """The residuals of one kind's points over :data:`FIT_DRAWS` drawn ``measured`` realities.

    A reality's log factors are linear in the spreads (:meth:`Miscalibration.factors`), so each
    configuration's unit-spread log factors are drawn once and any spreads are a product away."""

    def __init__(self, points: list[ResidualPoint]) -> None:
        told_apart = [p for p in points if p.told_apart]
        calls = list({(p.system, p.scenario): p for p in points}.values())
        truths = [Miscalibration.draw(seed, "measured") for seed in range(FIT_DRAWS)]
        self.ratio = [self._config(truths, p.scenario, c) for p in told_apart for c in (p.choice, p.default)]
        self.default = [self._config(truths, p.scenario, p.default) for p in calls]

    @staticmethod
    def _config(truths: list[Miscalibration], s: Scenario, config: Config) -> tuple[np.ndarray, ...]:
        """(floor, rest, model time, unit pair log factors [2, D], unit common log factors [2, D])."""
        floor, rest = decisions.latency_split(s, config)
        at = (int(config.algorithm), int(config.protocol))
        unit = {}
        for name, error in (("pair", ModelError(1.0, 0.0)), ("common", ModelError(0.0, 1.0))):
            unit[name] = np.log([[f[at] for f in truth.factors(s.collective, s.topology, error)]
                                 for truth in truths]).T
        return np.array(floor), np.array(rest), np.array(floor + rest), unit["pair"], unit["common"]

    @staticmethod
    def _log_error(config: tuple[np.ndarray, ...], error: ModelError) -> np.ndarray:
        """log(t_true / t_model) over the drawn realities [D]."""
        floor, rest, model, pair, common = config
        lat, bw = np.exp(error.pair * pair + error.common * common)
        return np.log(lat * floor + rest / bw) - np.log(model)

    def statistics(self, error: ModelError) -> dict[str, float]:
        ratio = [self._log_error(c, error) - self._log_error(d, error)
                 for c, d in zip(self.ratio[::2], self.ratio[1::2], strict=True)]
        default = [self._log_error(d, error) for d in self.default]
        return _summary(np.abs(np.concatenate(ratio)), np.abs(np.concatenate(default)))


def simulated_statistics(points: list[ResidualPoint], errors: dict[str, ModelError]
                         ) -> dict[str, dict[str, float]]:
    """:func:`real_statistics` of the same calls in drawn ``measured`` realities with ``errors``."""
    return {kind: _Simulated([p for p in points if p.kind == kind]).statistics(error)
            for kind, error in errors.items() if any(p.kind == kind for p in points)}


def _bisect(target: float, measure, low: float = 0.0, high: float = 3.0, steps: int = 24) -> float:
    for _ in range(steps):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if measure(mid) < target else (low, mid)
    return round(0.5 * (low + high), 3)


def fit(points: list[ResidualPoint]) -> dict[str, ModelError]:
    """Per kind, the spreads whose realities match the real mean |residual|s (module docstring)."""
    assert max(range(FIT_DRAWS)) < HELDOUT_SEED_START
    real = real_statistics(points)
    out = {}
    for kind, stats in real.items():
        sim = _Simulated([p for p in points if p.kind == kind])
        pair = _bisect(stats["ratio_mean"],
                       lambda x, sim=sim: sim.statistics(ModelError(x, 0.0))["ratio_mean"])
        common = _bisect(stats["default_mean"],
                         lambda x, sim=sim, pair=pair: sim.statistics(ModelError(pair, x))["default_mean"])
        out[kind] = ModelError(pair, common)
    return out
