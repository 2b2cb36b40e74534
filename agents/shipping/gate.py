"""The safety gate: a rule overrides NCCL only where the evidence says it wins.

A model is never exact (against public forced-algorithm nccl-tests runs on an 8xH100 node, picking
what the simulator predicts fastest was slower than NCCL's default in 5 of 45 decisions, by 6-16 %).
So export asks, for every call it writes a rule for: is the predicted gain over NCCL's own choice
larger than a margin (default 3 %, what a bandit tuner's "zero regressions" gate uses in spirit),
*and* larger than the model's uncertainty at that point? If not, the rule defers to NCCL.

The uncertainty is the relative 1-sigma of a predicted time (:func:`uncertainty`). The gain compares
two predictions, so its sigma combines both (``sqrt(s_ours^2 + s_nccl^2)``, log-space, independent
errors: conservative when the errors are correlated). A measured pair replaces the model: where both
choices were measured, the measurement decides and its own noise is the uncertainty.

The sigma of each time comes from one function, :func:`dynamiccl.system.calibration.uncertainty`:
the fit's held-out error where the topology carries a ``calibration:`` section, else the datasheet
model's measured error per size band (issue 10's validation against public nccl-tests runs). A gain
is a ratio, though, and where a side was never measured on the system (no calibration, or a pair
the calibration did not fit) only the model speaks for it: its ratio is then as uncertain as the
model's ratios measured on real systems, :data:`~dynamiccl.system.calibration.MODEL_RATIO_ERROR`
(24 % of log time over RDMA, 75 % over TCP), whatever its per-time sigma says (the ±21.5 % of two
bandwidth-bound times let it pin broadcast on a 16-node H100 system at a predicted +23.9 %, and
tree/LL128 for 32-128 MiB all-reduce on H100 EFA systems, measured there 0.966-0.995x NCCL's time).
And that error is no bound: the model predicts gains of x2-x4 where nothing measured it (broadcast
on 128 DGX H100 nodes, all-gather in a GB200 rack), beyond any sigma it was ever checked to. So by
default a rule the model alone speaks for overrides nothing; measurements (``dynamiccl tune``) are
how a rule earns an override. ``Gate(model_only=True)`` (``export --allow-model-only``) lets such a
rule override where its gain clears that measured error, and labels its evidence
:data:`MODEL_ONLY`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynamiccl.system.calibration import MODEL_RATIO_ERROR, uncertainty
from dynamiccl.system.knobs import Config
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.transports import system_kind

#: The gate's margin unless a caller gives one (``export --margin``, ``tune --margin``, a training
#: config's ``deploy.margin``).
DEFAULT_MARGIN = 0.03
#: What a verdict rests on, weakest first: the model; the model corrected by each choice's own
#: measurements where the system's fit failed or was skipped; the model fitted to measurements; a
#: learned prior's prediction; a ratio interpolated between measured sizes; a measurement of one
#: launch on a side; a measurement of repeated launches on both sides. NEIGHBOURS (a suffix): the
#: measured sizes on both sides turned what this size's measurement alone says (NOT_ITS_PICK, another
#: suffix, below); BRIDGED: no source
#: is certain here alone, but it points the way of the overrides on both sides, which it joins.
#: LEARNED_PRIOR_UNCALIBRATED: the learned prior's prediction on a model the measurements could not
#: be fitted to, which never overrides NCCL.
#: NOT_MEASURED: nothing of the collective was measured on the system, so ``tune`` leaves it to NCCL.
MODEL, CORRECTED, CALIBRATED, MEASURED = "model", "corrected model", "calibrated model", "measured"
LEARNED_PRIOR, INTERPOLATED, MEASURED_ONCE = "learned prior", "interpolated", "measured once"
#: EXTRAPOLATED: a ratio measured at the nearest two sizes, carried one octave past them.
EXTRAPOLATED = "extrapolated"
NEIGHBOURS, BRIDGED = " + neighbours", "between overrides"
#: A suffix: the choice is what NCCL's model says NCCL runs by default, measured faster than NCCL's
#: default there (the model misjudges NCCL's own pick).
NOT_ITS_PICK = " (NCCL's default measured slower than its modelled pick)"
LEARNED_PRIOR_UNCALIBRATED = "learned prior (uncalibrated model)"
NOT_MEASURED = "not measured"
#: A suffix: a side of the verdict rests on the model alone, allowed to override where its gain
#: clears the model's measured error (``export --allow-model-only``).
MODEL_ONLY = " alone (allowed by --allow-model-only)"


@dataclass(frozen=True)
class Verdict:
    """What the gate concluded at one call."""

    nccl: Config
    proposed: Config
    #: Predicted (or measured) t_nccl / t_proposed - 1.
    gain: float
    #: Relative 1-sigma of that gain.
    sigma: float
    evidence: str
    override: bool

    def to_json(self) -> dict[str, object]:
        return {"nccl": self.nccl.label(), "proposed": self.proposed.label(),
                "gain": round(self.gain, 6), "uncertainty": round(self.sigma, 6),
                "evidence": self.evidence, "override": self.override}


def check_margin(margin: float) -> float:
    """``margin`` if it is a fraction in [0, 1) (NaN is not), else ValueError: the one range check
    of the gate's margin, whoever sets it."""
    if not 0 <= margin < 1:
        raise ValueError(f"the gate's margin is a fraction in [0, 1), e.g. {DEFAULT_MARGIN}; got {margin}")
    return margin


def passes(gain: float, sigma: float, margin: float) -> bool:
    """Override only when the gain clears both the margin and the uncertainty: its log clears
    :func:`log_threshold`."""
    return gain > margin and clearance(gain, sigma) > 0


def log_threshold(sigma: float, margin: float) -> float:
    """The log gain :func:`passes` asks for: the margin's (log1p) or the uncertainty, whichever is
    larger. What a planned measurement could move an estimate across (``tune_plan``)."""
    return max(math.log1p(margin), sigma)


def clearance(gain: float, sigma: float) -> float:
    """How far the log gain clears its uncertainty: what makes an override more or less
    convincing. A range of calls is shown by one call, the least convincing of an override or the
    most tempting of a defer, with that call's own gain, uncertainty and evidence."""
    return math.log1p(gain) - sigma if gain > -1 else -math.inf


def combined_sigma(a: float, b: float) -> float:
    return math.hypot(a, b)


def model_ratio_sigma(scenario: Scenario, *configs: Config) -> float | None:
    """The model's measured error on a ratio (:data:`MODEL_RATIO_ERROR` of the system's kind) where
    a side of it was never measured on the system: the topology has no calibration, or the
    calibration did not fit one of ``configs``' algorithm/protocol pairs. None where every side was
    fitted: the calibration's held-out error, the model's error on the sizes it did not see, is the
    sigma then."""
    calibration = scenario.topology.calibration
    if calibration is not None and all(calibration.algo_proto(c.algorithm, c.protocol) is not None
                                       for c in configs):
        return None
    return MODEL_RATIO_ERROR[system_kind(scenario.topology)]


class Gate:
    """Judges a proposed configuration against NCCL's default on the model of ``scenario``'s system.

    ``evidence`` names the model (``model`` or ``calibrated model``); ``sigma`` is the uncertainty
    function (default :func:`uncertainty`). A ratio one of whose sides only the model speaks for is
    at least as uncertain as the model's measured ratios (:func:`model_ratio_sigma`) and overrides
    nothing, unless ``model_only`` (then it may, and its evidence says so: :data:`MODEL_ONLY`).
    """

    def __init__(self, margin: float = DEFAULT_MARGIN, evidence: str = MODEL,
                 sigma: object = uncertainty, model_only: bool = False) -> None:
        self.margin = check_margin(margin)
        self.evidence = evidence
        self.sigma = sigma
        self.model_only = model_only

    def judge(self, scenario: Scenario, proposed: Config) -> Verdict:
        # imported here, not at the top, so the CLI reads DEFAULT_MARGIN without loading the models
        from dynamiccl import decisions
        from dynamiccl.simulator import evaluate

        default = decisions.nccl_default(scenario)
        t_ours = evaluate(scenario, proposed).time_us
        gain = default.time_us / t_ours - 1.0
        if proposed == default.config:
            return Verdict(default.config, proposed, 0.0, 0.0, self.evidence, False)
        args = (scenario.topology.calibration, scenario.collective, scenario.nbytes)
        sigma = combined_sigma(self.sigma(*args, proposed.algorithm, proposed.protocol),
                               self.sigma(*args, default.config.algorithm, default.config.protocol))
        evidence, override = self.evidence, True
        unmeasured = model_ratio_sigma(scenario, proposed, default.config)
        if unmeasured is not None:
            sigma = max(sigma, unmeasured)
            override = self.model_only
            evidence += MODEL_ONLY if self.model_only else ""
        return Verdict(default.config, proposed, gain, sigma, evidence,
                       override and passes(gain, sigma, self.margin))
