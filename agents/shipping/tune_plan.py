"""The next measurements ``dynamiccl tune --plan`` asks for: those whose outcome could change a decision.

A measurement is a launch of one choice at one size, with NCCL's default launched beside it (a
choice decides only next to its default, and launch after launch, interleaved: default, choice,
default, choice...). What a measurement is worth is the expected value of what it could reveal
(:func:`launch_value`): the tuner's estimate of the choice's log gain over NCCL's default is
Gaussian; the launch would shrink its uncertainty, and the estimate after it may cross the gate's
threshold either way, unlocking a gain a deferred rule leaves or withdrawing an override that would
lose. Both a first measurement of an unmeasured choice and more launches of a measured one are
weighed so, one to :data:`LOOKAHEAD` launches at once (a second launch alone rarely settles a
gain of a few percent that a third does); the plan takes the most valuable per measurement spent,
greedily, each pick lowering the uncertainty the next ones see.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dynamiccl import decisions
from dynamiccl.agents.shipping.gate import log_threshold
from dynamiccl.agents.shipping.tune import CallDecision, Tuner
from dynamiccl.agents.shipping.tune_measurements import DEFAULT, Choice
from dynamiccl.system.knobs import NCCL_KNOBS, Collective
from dynamiccl.system.scenario import Scenario

#: How many launches of one choice at one call the plan weighs at once: one launch alone rarely
#: settles a gain of a few percent (it may be a stray launch: its uncertainty is the size band's
#: tail), from three the median ignores a stray launch, so the value of a second and a third launch
#: shows only when they are weighed together.
LOOKAHEAD = 3
#: A launch expected to be worth less than this (log gain per measurement: a thousandth of a
#: percent of a call's time) is not worth making.
MIN_VALUE = 1e-5


@dataclass(frozen=True)
class PlannedMeasurement:
    collective: Collective
    nranks: int
    choice: Choice
    nbytes: int
    #: Expected log-gain the launch it belongs to could unlock or regression it could prevent,
    #: per measurement spent.
    value: float
    reason: str
    #: Which launch of this choice at this size it is (1: the first; 2: the first repeat...).
    launch: int = 1
    #: The nodes the communicator spans (0: not said; its ranks fill whole nodes). A job's
    #: communicator may spread few ranks over many nodes (one rank per node: 16 ranks on 16 nodes).
    nodes: int = 0


#: How many launches of a choice at a call can be made at most: one number for every call and
#: choice, or per (call, choice) (a replayed log has only the launches it recorded); None: no cap.
LaunchCap = int | Callable[[Scenario, Choice], int] | None


def _psi(z: float) -> float:
    """E[max(0, Z - z)] for a standard normal Z: the unit loss function."""
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) - z * 0.5 * math.erfc(z / math.sqrt(2))


def launch_value(log_gain: float, sigma_now: float, sigma_after: float, threshold: float,
                 anchored: bool = True) -> float:
    """Expected value of one more launch for a decision "override where the log gain clears
    ``threshold``": the estimate moves by a Gaussian of sigma sqrt(sigma_now^2 - sigma_after^2),
    and its value is the expected gain of acting on where it lands (the classic expected value of
    sample information for a two-action decision with linear payoff). An estimate no measurement
    anchors (``anchored`` False) cannot override whatever it says, so the launch is worth the gain
    it could unlock, also where the estimate already clears the threshold."""
    spread = math.sqrt(max(sigma_now * sigma_now - sigma_after * sigma_after, 0.0))
    if not anchored:
        if spread <= 0:
            return max(log_gain - threshold, 0.0)
        return spread * _psi((threshold - log_gain) / spread)
    if spread <= 0:
        return 0.0
    return spread * _psi(abs(log_gain - threshold) / spread)


def refined_candidates(tuner: Tuner, scenario: Scenario, decision: CallDecision) -> list[Choice]:
    """Choices with a knob tune takes only from measurements and the joint action table leaves to
    NCCL (the chunk size, ``Knob.in_action_table``) for the plan to propose measuring: NCCL's own
    pair and the decided one, each with the level the model finds fastest for it
    (:func:`dynamiccl.decisions.refined`) where that beats the pair as NCCL runs it by more than
    the margin. Once measured they are tune's candidates like any measured choice."""
    out = []
    try:
        own = decisions.nccl_default(scenario).config
    except ValueError:  # NCCL's model has nothing usable here
        return out
    for pair in dict.fromkeys(c.pair for c in (Choice(own.algorithm, own.protocol), decision.chosen)
                              if c.exportable):
        try:
            run = decisions.nccl_default(scenario, pair.constraints)
        except ValueError:
            continue
        best = decisions.refined(scenario, run.config)
        more = {k.name: getattr(best.config, k.name) for k in NCCL_KNOBS if not k.in_action_table}
        if any(v is not None for v in more.values()) and \
                math.log(run.time_us / best.time_us) > tuner.margin:
            out.append(replace(pair, **more))
    return out


class _Planner:
    """The greedy plan's bookkeeping: launches made or planned per (call, choice), and what one
    more launch of each candidate is worth now."""

    def __init__(self, tuner: Tuner, scenarios: Sequence[Scenario], max_launches: LaunchCap,
                 weight: Callable[[Scenario], float] | None = None) -> None:
        self.tuner = tuner
        self.max_launches = max_launches
        self.weight = weight
        self.decisions: dict[Scenario, CallDecision] = {s: tuner.decide(s) for s in scenarios}
        #: Per call, every candidate's estimate: tune's, and the knobs it decides only from
        #: measurements (a chunk size) where the model says they pay (:func:`refined_candidates`).
        self.estimates = {s: {**d.estimates, **{c: tuner.ratio(s, c) for c in
                                                refined_candidates(tuner, s, d) if c not in d.estimates}}
                          for s, d in self.decisions.items()}
        self.launches: dict[tuple[Scenario, Choice], int] = {}
        self.sigma: dict[tuple[Scenario, Choice], float] = {}
        for s, estimates in self.estimates.items():
            for choice in (DEFAULT, *estimates):
                sample = tuner.sample(s, choice)
                self.launches[(s, choice)] = 0 if sample is None else sample.launches
            for choice, est in estimates.items():
                self.sigma[(s, choice)] = est.sigma

    def action(self, s: Scenario, choice: Choice) -> tuple[float, int, int] | None:
        """(value per measurement, measurements, launches of ``choice``) of the most valuable of
        launching ``choice`` (and NCCL's default where it would fall behind) 1 to
        :data:`LOOKAHEAD` more times at ``s``; None where no more launches can be made."""
        best = None
        est = self.estimates[s][choice]
        for k in range(1, LOOKAHEAD + 1):
            n_choice = self.launches[(s, choice)] + k
            n_default = max(self.launches[(s, DEFAULT)], n_choice)
            if n_choice > self._cap(s, choice) or n_default > self._cap(s, DEFAULT):
                break
            cost = k + n_default - self.launches[(s, DEFAULT)]
            after = self._sigma_after(s, choice, n_choice, n_default)
            threshold = log_threshold(after, self.tuner.margin)
            # once launched (or planned), a choice's measurement anchors it
            anchored = est.anchored or self.launches[(s, choice)] > 0
            value = launch_value(-est.log_ratio, self.sigma[(s, choice)], after, threshold,
                                 anchored) / cost
            if self.weight is not None:
                value *= self.weight(s)
            if best is None or value > best[0]:
                best = (value, cost, k)
        return best

    def _cap(self, s: Scenario, choice: Choice) -> float:
        if self.max_launches is None:
            return math.inf
        return self.max_launches(s, choice) if callable(self.max_launches) else self.max_launches

    def proposed(self, s: Scenario, choice: Choice, value: float, k: int = 1
                 ) -> list[PlannedMeasurement]:
        """The measurements :meth:`take` would plan, without planning them."""
        n_choice = self.launches[(s, choice)] + k
        n_default = max(self.launches[(s, DEFAULT)], n_choice)
        reason = self._reason(s, choice)
        shape = (s.collective, s.topology.nranks)
        out = [PlannedMeasurement(*shape, DEFAULT, s.nbytes, value, reason, n, s.topology.nodes)
               for n in range(self.launches[(s, DEFAULT)] + 1, n_default + 1)]
        return out + [PlannedMeasurement(*shape, choice, s.nbytes, value, reason, n, s.topology.nodes)
                      for n in range(self.launches[(s, choice)] + 1, n_choice + 1)]

    def take(self, s: Scenario, choice: Choice, value: float, k: int = 1) -> list[PlannedMeasurement]:
        """Plans ``k`` more launches of ``choice`` at ``s``, NCCL's default's brought level."""
        out = self.proposed(s, choice, value, k)
        n_choice = self.launches[(s, choice)] + k
        n_default = max(self.launches[(s, DEFAULT)], n_choice)
        self.sigma[(s, choice)] = self._sigma_after(s, choice, n_choice, n_default)
        self.launches[(s, choice)], self.launches[(s, DEFAULT)] = n_choice, n_default
        return out

    def _sigma_after(self, s: Scenario, choice: Choice, n_choice: int, n_default: int) -> float:
        noise = self.tuner.noise
        return math.hypot(noise.of_mean(s.topology, choice, n_choice, s.nbytes),
                          noise.of_mean(s.topology, DEFAULT, n_default, s.nbytes))

    def _reason(self, s: Scenario, choice: Choice) -> str:
        d = self.decisions[s]
        if self.launches[(s, choice)]:
            return "another launch: the noise leaves this decision open"
        if d.chosen == choice:
            return f"the override rests on the {d.estimates[choice].evidence}: check it"
        return "could beat NCCL's default if measured"


def plan(tuner: Tuner, scenarios: Sequence[Scenario], budget: int | None, *,
         max_launches: LaunchCap = None,
         weight: Callable[[Scenario], float] | None = None,
         fits: Callable[[list[PlannedMeasurement]], bool] | None = None) -> list[PlannedMeasurement]:
    """At most ``budget`` measurements (NCCL's default counted), the most valuable per measurement
    first, each a launch of one choice at one size (:class:`PlannedMeasurement`).
    ``max_launches`` caps the launches of one choice at one size, NCCL's default's included (1 where
    a measurement cannot be repeated; per call and choice where each has its own, e.g. a replay).
    ``weight`` scales what a launch at a call is worth (a job's share of time there,
    :mod:`~dynamiccl.agents.shipping.tune_workload`): a call weighted 0 is never planned.
    ``fits`` bounds the plan otherwise (e.g. its node-hours, :mod:`~dynamiccl.agents.shipping.
    launchers`): a pick is taken only while the plan with it still fits; ``budget`` None: no count."""
    planner = _Planner(tuner, scenarios, max_launches, weight)
    heap: list[tuple[float, int, Scenario, Choice]] = []
    order = 0

    def push(s: Scenario) -> None:
        nonlocal order
        for choice in planner.estimates[s]:
            found = planner.action(s, choice)
            if found is not None and found[0] > MIN_VALUE:
                order += 1
                heapq.heappush(heap, (-found[0], order, s, choice))

    for s in planner.decisions:
        push(s)
    planned: list[PlannedMeasurement] = []
    left = math.inf if budget is None else max(budget, 0)
    while heap and left > 0:
        neg_value, _, s, choice = heapq.heappop(heap)
        found = planner.action(s, choice)
        if found is None or found[0] <= MIN_VALUE:
            continue
        if abs(found[0] + neg_value) > 1e-12 * found[0]:  # taking another changed it: requeue
            order += 1
            heapq.heappush(heap, (-found[0], order, s, choice))
            continue
        if found[1] > left or (fits is not None and not fits(
                planned + planner.proposed(s, choice, found[0], found[2]))):
            continue
        planned += planner.take(s, choice, found[0], found[2])
        left -= found[1]
        push(s)  # its default's launches changed what every candidate here is worth
    return planned


def launch_order(planned: Sequence[PlannedMeasurement]) -> list[list[PlannedMeasurement]]:
    """The plan as rounds of launches, to run in order: round k holds every k-th launch, NCCL's
    default first, so each choice's launches alternate with its default's."""
    rounds: dict[int, list[PlannedMeasurement]] = defaultdict(list)
    for m in planned:
        rounds[m.launch].append(m)
    return [sorted(rounds[k], key=lambda m: (m.collective, m.nranks, not m.choice.is_default,
                                             m.choice.label(), m.nbytes))
            for k in sorted(rounds)]
