"""Scoring policies on a scenario suite against NCCL's default and the oracle.

Every policy walks the suite's workloads call by call, as it would inside a job: it sees the
observation the environment would show (including the last time it caused, relative to NCCL's
default) and the valid-action mask, and its pick is timed on the simulator. Per policy we report

* ``geomean_speedup`` – geometric mean over calls of t_nccl_default / t_policy;
* ``oracle_share`` – Σ log(t_def/t_policy) / Σ log(t_def/t_oracle): the share of the achievable
  log-speedup the policy captured (1 = the oracle, 0 = no better than NCCL, < 0 = worse). When the
  oracle itself gains (almost) nothing on the suite there is nothing to capture and the share is
  undefined: it is reported as NaN (``null`` in JSON) rather than as a flattering 1 or a harsh 0;
* ``worst_speedup`` and the call it happened on;
* for online tuners, ``calls_to_5pct``: the median number of measured calls a tuner needed, per
  context (system, collective, size bin), until one of its picks ran within 5 % of the oracle's
  time (``reached_5pct`` says for what share of contexts that happened within the budget at all).

Online tuners first tune on every distinct call of the suite (their budget of measurements per
context), then are scored like any other policy on what they settled on.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.policy import Choice, DirectChooser, OnlinePolicy, Policy, scenario_mask
from dynamiccl.knobs import ACTIONS, Config
from dynamiccl.nccl import Algorithm
from dynamiccl.units import format_size

if TYPE_CHECKING:
    from dynamiccl.scenario import Scenario

#: Below this total log-speedup (natural log, summed over calls) the oracle "gains nothing".
NO_HEADROOM = 1e-6
WITHIN = 1.05


@dataclass(frozen=True)
class CallResult:
    """One call of the suite as one policy handled it."""

    workload: str
    scenario: Scenario
    t_default: float
    t_oracle: float
    t_policy: float
    config: str
    algorithm: str
    protocol: str

    @property
    def speedup(self) -> float:
        return self.t_default / self.t_policy


@dataclass
class PolicyReport:
    policy: str
    geomean_speedup: float
    oracle_share: float
    worst_speedup: float
    worst_call: str
    scenarios: int
    calls_to_5pct: float | None = None
    reached_5pct: float | None = None
    calls: list[CallResult] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        """The scalar columns (what the table, CSV and JSON hold)."""
        out = {k: v for k, v in asdict(self).items() if k != "calls"}
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def oracle_share(log_policy: float, log_oracle: float) -> float:
    """Share of the oracle's total log-speedup captured; NaN when the oracle has none to offer."""
    if log_oracle < NO_HEADROOM:
        return math.nan
    return log_policy / log_oracle


def oracle_time(scenario: Scenario, deployable: bool) -> float:
    """The fastest allowed action's time, from the same table the policies' picks are timed on."""
    times = decisions.action_times(scenario)
    return float(np.min(np.where(scenario_mask(scenario, deployable=deployable), times, np.inf)))


def describe_call(s: Scenario) -> str:
    straggler = f", straggler r{s.straggler_rank}" if s.has_straggler else ""
    return (f"{s.collective.name.lower()} {format_size(s.nbytes)} on {s.topology.name} "
            f"({s.topology.nranks} ranks{straggler})")


def _algorithm_label(config: Config) -> str:
    """The algorithm, with ring-over-ring told apart from NCCL's flat ring."""
    name = config.algorithm.name.lower()
    return f"{name}-hier" if config.algorithm == Algorithm.RING and config.hierarchy else name


def _pick(policy: Policy, scenario: Scenario, observation: np.ndarray, deployable: bool) -> Choice:
    if isinstance(policy, DirectChooser):
        return policy.choose(scenario, deployable=deployable)
    mask = scenario_mask(scenario, deployable=deployable)
    action = int(policy.act(observation, scenario=scenario, action_mask=mask))
    if not mask[action]:
        raise RuntimeError(f"policy {policy.name} chose invalid action {ACTIONS[action].label()} "
                           f"for {describe_call(scenario)}")
    return Choice(ACTIONS[action], float(decisions.action_times(scenario)[action]))


def tune_online(policy: OnlinePolicy, scenarios: Sequence[Scenario], *,
                deployable: bool) -> list[int | None]:
    """Lets an online tuner measure each distinct call up to its budget, in suite order.

    Returns, per context (system, collective, size bin: what the tuner keys on), how many calls
    in that context it took until one ran within 5 % of that call's oracle (None: never).
    """
    from dynamiccl.agents.online import context_key
    from dynamiccl.envs.observation import encode

    policy.reset()
    budget = int(getattr(policy, "budget", 64))
    calls: dict[tuple, int] = {}
    hits: dict[tuple, int | None] = {}
    for scenario in dict.fromkeys(scenarios):
        key = context_key(scenario)
        hits.setdefault(key, None)
        times = decisions.action_times(scenario)
        target = WITHIN * oracle_time(scenario, deployable)
        mask = scenario_mask(scenario, deployable=deployable)
        t_def = decisions.nccl_default(scenario).time_us
        ratio = 1.0
        for _ in range(budget):
            action = policy.act(encode(scenario, ratio), scenario=scenario, action_mask=mask)
            t = float(times[action])
            policy.update(scenario, action, t)
            ratio = t / t_def
            calls[key] = calls.get(key, 0) + 1
            if hits[key] is None and t <= target:
                hits[key] = calls[key]
    return list(hits.values())


def evaluate_policy(policy: Policy, suite: Sequence[Any], *, deployable: bool = False) -> PolicyReport:
    """Scores ``policy`` on ``suite`` (a list of ``SuiteEntry(name, scenarios)``)."""
    from dynamiccl.envs.observation import encode

    calls_needed = None
    if isinstance(policy, OnlinePolicy):
        calls_needed = tune_online(policy, [s for e in suite for s in e.scenarios],
                                   deployable=deployable)
    results: list[CallResult] = []
    for entry in suite:
        # The observation the environment would show: the previous call's time relative to NCCL's
        # and the straggler seen on it (nothing before the first call), as the sim backend reports.
        ratio, seen = 1.0, (None, 0.0)
        for scenario in entry.scenarios:
            t_def = decisions.nccl_default(scenario).time_us
            t_orc = oracle_time(scenario, deployable)
            obs = encode(scenario, ratio, observed_straggler=seen)
            choice = _pick(policy, scenario, obs, deployable)
            ratio = choice.time_us / t_def
            seen = ((scenario.straggler_rank, scenario.straggler_delay_us) if scenario.has_straggler
                    else (None, 0.0))
            results.append(CallResult(entry.name, scenario, t_def, t_orc, choice.time_us,
                                      choice.config.label(), _algorithm_label(choice.config),
                                      choice.config.protocol.name.lower()))
    return summarize(policy.name, results, calls_needed)


def summarize(name: str, results: list[CallResult],
              calls_needed: list[int | None] | None = None) -> PolicyReport:
    if not results:
        raise ValueError("the suite has no calls to evaluate")
    log_pol = np.array([math.log(r.t_default / r.t_policy) for r in results])
    log_orc = np.array([math.log(r.t_default / r.t_oracle) for r in results])
    worst = int(np.argmin(log_pol))
    report = PolicyReport(
        policy=name,
        geomean_speedup=float(np.exp(log_pol.mean())),
        oracle_share=oracle_share(float(log_pol.sum()), float(log_orc.sum())),
        worst_speedup=float(np.exp(log_pol[worst])),
        worst_call=describe_call(results[worst].scenario),
        scenarios=len(results),
        calls=results,
    )
    if calls_needed is not None:
        hits = [c for c in calls_needed if c is not None]
        report.calls_to_5pct = float(np.median(hits)) if hits else math.nan
        report.reached_5pct = len(hits) / max(len(calls_needed), 1)
    return report


def evaluate_policies(policies: Mapping[str, Policy] | Sequence[Policy], suite: Sequence[Any], *,
                      deployable: bool = False) -> list[PolicyReport]:
    items = policies.values() if isinstance(policies, Mapping) else policies
    return [evaluate_policy(p, suite, deployable=deployable) for p in items]


def print_table(reports: Sequence[PolicyReport], title: str = "evaluation", console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("policy", "geomean speedup", "oracle share", "worst speedup", "worst call",
                "calls to 5%", "calls"):
        table.add_column(col, justify="left" if col in ("policy", "worst call") else "right")
    for r in reports:
        share = "n/a" if math.isnan(r.oracle_share) else f"{r.oracle_share:.3f}"
        calls = "" if r.calls_to_5pct is None else (
            "never" if math.isnan(r.calls_to_5pct) else
            f"{r.calls_to_5pct:g} ({100 * (r.reached_5pct or 0):.0f}%)")
        table.add_row(r.policy, f"{r.geomean_speedup:.3f}x", share, f"{r.worst_speedup:.3f}x",
                      r.worst_call, calls, str(r.scenarios))
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
    console.print(table)


def save_reports(reports: Sequence[PolicyReport], out_dir: str | Path) -> dict[str, Path]:
    """``summary.csv``, ``summary.json`` and ``calls.csv`` (every call of every policy)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r.summary() for r in reports]
    paths = {"csv": out / "summary.csv", "json": out / "summary.json", "calls": out / "calls.csv"}
    with paths["csv"].open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    paths["json"].write_text(json.dumps(rows, indent=2))
    with paths["calls"].open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["policy", "workload", "call", "t_default_us", "t_oracle_us", "t_policy_us",
                         "speedup", "config"])
        for r in reports:
            for c in r.calls:
                writer.writerow([r.policy, c.workload, describe_call(c.scenario), f"{c.t_default:.3f}",
                                 f"{c.t_oracle:.3f}", f"{c.t_policy:.3f}", f"{c.speedup:.4f}",
                                 c.config])
    return paths
