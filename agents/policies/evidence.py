"""The evidence tuner: an online tuner that learns from every call it has run on the system.

A fixed ordering (:func:`~dynamiccl.agents.policies.adaptive.prior_sweep`) tries every candidate
the model proposes, once, in the model's order, whatever the calls before it showed. This tuner
keeps a belief about the system's model error (:class:`~dynamiccl.agents.policies.pair_belief.
SystemBelief`), fed by every measurement of every call of the system, and decides each call from
it:

* **what was measured** (input ``shared``): a choice that ran slow at one size predicts its series
  at the neighbouring sizes, and NCCL's own time at every size says how far the whole system is
  off. A candidate is worth a trial only while its expected gain over the calls left pays for the
  trial's expected cost (``stop``): where the belief says no candidate can win, exploration ends;
* **the price of a bad trial** (``price``): a candidate is never tried while the belief gives it
  more than ``risk`` chance of running more than :data:`~dynamiccl.envs.online_tuning.
  MAX_PREDICTED_SLOWDOWN` times NCCL's measured time;
* **the noise** (``noise``): a measured candidate is held, dropped or re-run (alternating with
  NCCL's default, the side with fewer tries first) by the rule every online path applies,
  :func:`~dynamiccl.system.launch_noise.held_verdict`: held once it beats NCCL's default by the
  gate beyond ``gate_z`` standard errors of the two medians, from two trials each; dropped once it
  falls short by as much or once even ``max_repeats`` trials could not clear the noise at the
  advantage measured. The noise is the system's launch noise per size band
  (:mod:`dynamiccl.system.launch_noise`), raised where the system's repeats or this choice's own
  show more, never lowered: repeats inside one job (or, on a replay, a launch shown again) cannot
  show that another launch will agree. The same noise prices a trial: a candidate's gain counts
  only beyond what the gate could hold (where the noise exceeds what the belief predicts a
  candidate gains, exploration stops).

Switching an input off (:class:`Inputs`) gives the ablations of ``experiments/bench_online.py``:
without ``shared`` each call believes only its own measurements; without ``price`` a trial needs
only the model's prediction within 2x NCCL's (the prior sweep's rule); without ``stop`` every
allowed candidate is tried once, in the model's order; without ``noise`` re-runs follow the fixed
gate of :func:`~dynamiccl.agents.policies.adaptive.gated_slot` (a 2 % noise floor, three tries,
repeats believed) and a trial's gain counts from the gate alone.

What it is told per call and what it answers are the candidate tuners' (:class:`~dynamiccl.agents.
policies.adaptive.CandidateTuner`): ``force(scenario)`` -> the knobs to pin (nothing: NCCL's own
pick), ``record(scenario, time_us)`` the time measured (agreed over ranks); or ``act``/``update``
with action ids. Its settings (the belief's spreads per kind of system, learned by
``dynamiccl train agent=evidence_tuner``, and the decision rule's) ship in
``agents/policies/evidence_tuner.json`` (:meth:`Settings.load`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policies.adaptive import CandidateTuner, Menu, _Context, gated_slot
from dynamiccl.agents.policies.online import context_key
from dynamiccl.agents.policies.pair_belief import Prediction, Series, Spreads, SystemBelief
from dynamiccl.envs.backends.perturbed import system_kind
from dynamiccl.envs.online_tuning import MAX_PREDICTED_SLOWDOWN, N_CALLS, affordable
from dynamiccl.files import write_text_atomic
from dynamiccl.system.launch_noise import (
    DROP,
    HOLD,
    HOLD_MARGIN,
    HOLD_Z,
    BandNoise,
    default_launch_noise,
    held_verdict,
    noise_band,
    trial_spread,
    updated_core,
)

if TYPE_CHECKING:
    from dynamiccl.system.scenario import Scenario

#: The settings file's layout; another is refused, naming the fix.
FORMAT_VERSION = 1
SHIPPED_NAME = "evidence_tuner.json"
#: The belief's spreads before any training (``Settings()``): wide, so that nothing is believed
#: the data did not show.
UNTRAINED = Spreads(pair_latency=0.5, pair_bandwidth=0.5, common_latency=0.5, common_bandwidth=0.5,
                    misfit=0.05)


@dataclass(frozen=True)
class Inputs:
    """What the tuner learns from (module docstring); each can be switched off."""

    shared: bool = True
    noise: bool = True
    price: bool = True
    stop: bool = True

    def label(self) -> str:
        off = [name for name, on in asdict(self).items() if not on]
        return "all" if not off else "without " + ", ".join(off)


@dataclass(frozen=True)
class Settings:
    """The belief's spreads per kind of system (``rdma``, ``tcp``:
    :func:`~dynamiccl.envs.backends.perturbed.system_kind`) and the decision rule's knobs."""

    spreads: dict[str, Spreads] = field(default_factory=lambda: {"rdma": UNTRAINED, "tcp": UNTRAINED})
    #: The largest chance a trial may have of running > MAX_PREDICTED_SLOWDOWN x NCCL's time.
    risk: float = 0.02
    #: The gain over NCCL's default a held choice must show, and the standard errors it must clear.
    gate: float = HOLD_MARGIN
    gate_z: float = HOLD_Z
    #: The most tries of a measured candidate while its decision is open (then NCCL's default).
    max_repeats: int = 6
    #: Where these settings came from (the training command, its validation scores).
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, "spreads": {k: asdict(v) for k, v in self.spreads.items()},
                "risk": self.risk, "gate": self.gate, "gate_z": self.gate_z,
                "max_repeats": self.max_repeats, "meta": self.meta}

    def save(self, path: str | Path) -> Path:
        return write_text_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path | None = None) -> Settings:
        """The settings in ``path`` (written by ``dynamiccl train agent=evidence_tuner``); None:
        the shipped ones. A file that is not one is a one-line ValueError naming the fix."""
        fix = "retrain with `dynamiccl train agent=evidence_tuner` or use the shipped settings"
        try:
            if path is None:
                text = (resources.files("dynamiccl.agents.policies") / SHIPPED_NAME).read_text()
            else:
                text = Path(path).read_text()
            doc = json.loads(text)
            if doc.get("format") != FORMAT_VERSION:
                raise ValueError(f"{path or SHIPPED_NAME} holds evidence-tuner settings of format "
                                 f"{doc.get('format')}, this code reads {FORMAT_VERSION}; {fix}")
            return cls({k: Spreads(**v) for k, v in doc["spreads"].items()}, float(doc["risk"]),
                       float(doc["gate"]), float(doc["gate_z"]), int(doc["max_repeats"]),
                       dict(doc.get("meta", {})))
        except FileNotFoundError:
            raise ValueError(f"{path}: no such evidence-tuner settings file; {fix}") from None
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            raise ValueError(f"{path or SHIPPED_NAME} is not an evidence-tuner settings file; "
                             f"{fix}") from None


@dataclass
class _System:
    """One system's belief and the noise its repeated measurements showed (per size band: sum of
    squared deviations from their call's mean, degrees of freedom)."""

    belief: SystemBelief
    repeats: dict[int, tuple[float, int]] = field(default_factory=dict)


class EvidenceTuner(CandidateTuner):
    """The online tuner of the module docstring."""

    def __init__(self, settings: Settings | None = None, n_calls: int = N_CALLS,
                 inputs: Inputs = Inputs(), menu: Menu | None = None, name: str = "evidence") -> None:
        super().__init__(None, name, n_calls, menu)
        self.settings = settings if settings is not None else Settings()
        self.inputs = inputs
        self._systems: dict[Any, _System] = {}
        self._times: dict[tuple, list[list[float]]] = {}
        self._splits: dict[tuple, list[tuple[Series, float, float]]] = {}

    def reset(self) -> None:
        super().reset()
        self._systems.clear()
        self._times.clear()
        self._splits.clear()

    # --- what it knows -------------------------------------------------------------------------
    def _system(self, scenario: Scenario) -> _System:
        """The belief this call shares: the system's (``shared``), or the call's own."""
        key = context_key(scenario)[0] if self.inputs.shared else context_key(scenario)
        if key not in self._systems:
            spreads = self.settings.spreads[system_kind(scenario.topology)]
            self._systems[key] = _System(SystemBelief(spreads))
        return self._systems[key]

    def _split(self, scenario: Scenario, ctx: _Context) -> list[tuple[Series, float, float]]:
        key = context_key(scenario)
        if key not in self._splits:
            self._splits[key] = [((scenario.collective, c.algorithm, c.protocol),
                                  *decisions.latency_split(scenario, c)) for c in ctx.configs]
        return self._splits[key]

    def _band(self, scenario: Scenario) -> tuple[BandNoise, float]:
        """The size band's launch noise and the core noise believed there (``noise``: raised by the
        system's repeated measurements in that band, never lowered: a job's repeats fall in one
        launch, or on a replay re-show a launch already shown, and launches disagree more than the
        timings within one do, so repeats that agree cannot show that another launch will)."""
        band = noise_band(scenario.nbytes)
        noise = default_launch_noise(scenario.topology)[band]
        if not self.inputs.noise:
            return noise, noise.core
        ss, dof = self._system(scenario).repeats.get(band, (0.0, 0))
        return noise, max(noise.core, updated_core(noise.core, math.sqrt(ss / dof) if dof else 0.0, dof))

    def measured_times(self, scenario: Scenario) -> list[list[float]] | None:
        """Every time measured per slot in ``scenario``'s context (None before its first call)."""
        return self._times.get(context_key(scenario))

    def _observe(self, scenario: Scenario, ctx: _Context, slot: int, time_us: float) -> None:
        super()._observe(scenario, ctx, slot, time_us)
        times = self._times.setdefault(context_key(scenario), [[] for _ in ctx.configs])
        times[slot].append(float(time_us))
        system = self._system(scenario)
        if len(times[slot]) > 1:  # the noise repeats show, pooled per size band
            band = noise_band(scenario.nbytes)
            ss, dof = system.repeats.get(band, (0.0, 0))
            logs = np.log(times[slot])
            before = np.log(times[slot][:-1])
            ss += float(((logs - logs.mean()) ** 2).sum() - ((before - before.mean()) ** 2).sum())
            system.repeats[band] = (ss, dof + 1)
        series, floor, rest = self._split(scenario, ctx)[slot]
        noise, core = self._band(scenario)
        system.belief.observe((context_key(scenario), slot), series, floor, rest, times[slot], noise, core)

    # --- what it does ----------------------------------------------------------------------------
    def predict(self, scenario: Scenario, slot: int) -> Prediction:
        """The belief about log(t_slot / t_NCCL) at this call (its context must exist)."""
        ctx = self._context(scenario, self._mask(scenario))
        split = self._split(scenario, ctx)
        return self._system(scenario).belief.relative(*split[slot], *split[0])

    def _pick(self, scenario: Scenario, ctx: _Context) -> int:
        times = self._times.get(context_key(scenario))
        if times is None or not times[0]:
            return 0  # NCCL's own pick first: the reference every trial is judged against
        medians = [float(np.median(np.log(t))) if t else math.nan for t in times]
        relative = np.array(medians) - medians[0]  # measured log(t / t_NCCL), NaN where untried
        tried = np.isfinite(relative)
        best = int(np.nanargmin(relative))
        incumbent = min(0.0, float(relative[best]))
        calls_left = max(self.budget - ctx.log.calls, 1)
        trial = self._trial(scenario, ctx, incumbent, calls_left, tried)
        if trial is not None:
            return trial
        return self._gate(scenario, ctx, relative, best, calls_left)

    def _trial(self, scenario: Scenario, ctx: _Context, incumbent: float, calls_left: int,
               tried: np.ndarray) -> int | None:
        """The untried candidate worth a trial now, if any (module docstring)."""
        allowed = ctx.allowed.copy()
        if not self.inputs.price:
            allowed &= affordable(ctx.candidates, ctx.log)
        bound = math.log(MAX_PREDICTED_SLOWDOWN)
        # a candidate pays only where it would be held: beating NCCL's default by the gain the
        # gate asks for at the most trials it allows, and the incumbent
        threshold = min(incumbent, -self._gain_needed(scenario, ctx))
        best, best_value = None, 0.0
        for slot in range(1, len(ctx.configs)):
            if tried[slot] or not allowed[slot]:
                continue
            relative = self.predict(scenario, slot)
            if self.inputs.price and relative.chance_above(bound) > self.settings.risk:
                continue
            if not self.inputs.stop:
                return slot  # every allowed candidate once, in the model's order
            gain = (relative.expected_shortfall(threshold)
                    + (incumbent - threshold) * (1.0 - relative.chance_above(threshold)))
            value = (calls_left - 1) * gain - (relative.mean() - incumbent)
            if value > best_value:
                best, best_value = slot, value
        return best

    def _gain_needed(self, scenario: Scenario, ctx: _Context) -> float:
        """The smallest advantage over NCCL's default (log time) the gate could hold a candidate
        at: its margin, and (``noise``) the noise of ``max_repeats`` trials of the candidate and
        NCCL's default's tries. Where the noise exceeds what the belief predicts a candidate
        gains, exploring cannot pay."""
        margin = math.log1p(self.settings.gate)
        if not self.inputs.noise:
            return margin
        noise, core = self._band(scenario)
        repeats = self.settings.max_repeats
        se = math.hypot(noise.of_median(core, repeats),
                        noise.of_median(core, max(int(ctx.log.tries[0]), repeats)))
        return margin + self.settings.gate_z * se

    def _gate(self, scenario: Scenario, ctx: _Context, relative: np.ndarray, best: int,
              calls_left: int) -> int:
        """NCCL's default or the best measured candidate, re-running while the noise leaves open
        which (module docstring)."""
        if best == 0 or not relative[best] < 0:
            return 0
        if not self.inputs.noise:
            return gated_slot(ctx.log, best)
        tries = ctx.log.tries
        noise, core = self._band(scenario)
        times = self._times[context_key(scenario)]
        measured, _ = trial_spread(times[best], times[0])  # what this choice's own repeats showed
        verdict = held_verdict(-float(relative[best]), int(tries[best]), int(tries[0]), noise,
                               max(core, measured), max_tries=self.settings.max_repeats,
                               margin=self.settings.gate, z=self.settings.gate_z)
        if verdict == HOLD:
            return best
        if verdict == DROP or calls_left < 2:
            return 0
        return best if tries[best] <= tries[0] else 0


def load_evidence(path: str | Path | None = None, n_calls: int = N_CALLS, inputs: Inputs = Inputs(),
                  menu: Menu | None = None) -> EvidenceTuner:
    """The evidence tuner with the settings in ``path`` (None: the shipped ones)."""
    return EvidenceTuner(Settings.load(path), n_calls, inputs, menu)
