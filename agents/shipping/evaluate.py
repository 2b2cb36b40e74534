"""Scoring policies on a scenario suite against NCCL's default and the oracle, by stepping the
environment (as stable-baselines3's ``evaluate_policy`` does), so what a policy sees — the
observation with the last call's time relative to NCCL's and the straggler seen on it, the mask —
is defined once, by :class:`~dynamiccl.envs.collective_tuning.CollectiveTuningEnv`.

A learned policy names the observation set it was trained on in its ``observation`` attribute
(``research`` or ``deployable``) and is shown that one; baselines read the true scenario.
Policies that act through an action id step with ``env.step``; policies that pin NCCL knobs (NCCL's
default, a fixed ``NCCL_ALGO``/``NCCL_PROTO``, an exported policy file) with ``env.step_forced``.
The *reality* that times every call is the environment's backend: the simulator (``sim``), the
simulator with a hidden miscalibration (``perturbed``), or real measurements (``replay``). By
default only what the tuner plugin can make NCCL do counts (``deployable``); every report says which
action set and which reality it used. Per policy we report

* ``geomean_speedup`` – geometric mean over calls of t_nccl_default / t_policy;
* ``oracle_share`` – Σ log(t_def/t_policy) / Σ log(t_def/t_oracle): the share of the achievable
  log-speedup the policy captured (1 = the oracle, 0 = no better than NCCL, < 0 = worse). When the
  oracle itself gains (almost) nothing on the suite there is nothing to capture and the share is
  undefined: it is reported as NaN (``null`` in JSON) rather than as a flattering 1 or a harsh 0;
* ``slower_calls`` – calls more than :data:`SLOWER_MARGIN` slower than NCCL's default;
* ``worst_speedup`` and the call it happened on;
* for online tuners, ``calls_to_5pct``: the median number of measured calls a tuner needed, per
  context (system, collective, size bin), until one of its picks ran within 5 % of the oracle's
  time (``reached_5pct`` says for what share of contexts that happened within the budget at all),
  and what exploring cost: ``exploration_calls`` and their geometric-mean speedup over NCCL.

Online tuners first tune on every distinct call of the suite (their budget of measurements per
context, on a *noisy* copy of the reality where it has noise), then are scored like any other
policy on what they settled on.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl.agents.policies.policy import ForcingPolicy, OnlinePolicy, Policy
from dynamiccl.agents.shipping.progress import Advance, progress_bar
from dynamiccl.files import FileKind, OutputRefused, claim_output, read_head, starts_with
from dynamiccl.system.knobs import Config, Knobs
from dynamiccl.system.nccl import Algorithm
from dynamiccl.system.units import format_size

if TYPE_CHECKING:
    from dynamiccl.envs.collective_tuning import CollectiveTuningEnv
    from dynamiccl.system.scenario import Scenario

#: Below this total log-speedup (natural log, summed over calls) the oracle "gains nothing".
NO_HEADROOM = 1e-6
WITHIN = 1.05
#: A call counts as slower than NCCL when it takes more than 2 % longer (the bench's threshold).
SLOWER_MARGIN = 0.02


def action_set(deployable: bool) -> str:
    """The words every table, JSON and plot title uses for the action set."""
    return "deployable actions" if deployable else "all actions (incl. simulator-only)"


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
    action_set: str
    backend: str
    geomean_speedup: float
    oracle_share: float
    worst_speedup: float
    worst_call: str
    slower_calls: int
    scenarios: int
    calls_to_5pct: float | None = None
    reached_5pct: float | None = None
    exploration_calls: int | None = None
    exploration_speedup: float | None = None
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


def describe_call(s: Scenario) -> str:
    straggler = f", straggler r{s.straggler_rank}" if s.has_straggler else ""
    return (f"{s.collective.name.lower()} {format_size(s.nbytes)} on {s.topology.name} "
            f"({s.topology.nranks} ranks{straggler})")


def _algorithm_label(config: Config) -> str:
    """The algorithm, with ring-over-ring told apart from NCCL's flat ring."""
    name = config.algorithm.name.lower()
    return f"{name}-hier" if config.algorithm == Algorithm.RING and config.hierarchy else name


def make_env(backend: str | Any = "sim", *, deployable: bool = True, observation: str | None = None,
             **backend_kwargs: Any) -> CollectiveTuningEnv:
    """The environment a suite is scored in: no distribution of its own, episodes are given.
    ``observation`` names the observation set (None: the environment's default)."""
    from dynamiccl.envs.collective_tuning import CollectiveTuningEnv

    shown = {} if observation is None else {"observation": observation}
    return CollectiveTuningEnv(scenario=None, backend=backend, deployable=deployable, **shown,
                               **backend_kwargs)


def _step(env: CollectiveTuningEnv, policy: Policy, observation: np.ndarray
          ) -> tuple[np.ndarray, dict[str, Any]]:
    """One call: the policy decides from what the environment shows, the environment runs it."""
    scenario = env.current_scenario
    if isinstance(policy, ForcingPolicy):
        observation, _, _, _, info = env.step_forced(policy.force(scenario))
        return observation, info
    mask = env.action_masks()
    if not mask.any():  # a reality that answers only what was measured, and nothing was here
        raise _unmeasured(env, policy, scenario)
    action = int(policy.act(observation, scenario=scenario, action_mask=mask))
    if not 0 <= action < len(mask) or not mask[action]:
        raise RuntimeError(f"policy {policy.name} chose action {action}, which the mask forbids, "
                           f"for {describe_call(scenario)}")
    observation, _, _, _, info = env.step(action)
    return observation, info


def _unmeasured(env: CollectiveTuningEnv, policy: Policy, scenario: Scenario) -> Exception:
    """Why a reality that answers only measured choices can score no action here: nothing was
    measured, or what was is no action of the table (a log forced only NCCL_ALGO/NCCL_PROTO ran
    NCCL's own channel count, and every action pins one)."""
    from dynamiccl.envs.backends import UnmeasuredChoice
    from dynamiccl.profiler.formats.records import knob_label

    table = getattr(env.backend, "table", None)
    measured = list(table.choices(scenario)) if table is not None else []
    if not measured:
        return UnmeasuredChoice(f"no choice was measured for {describe_call(scenario)}")
    shown = ", ".join(knob_label(c) for c in measured[:4]) + (", ..." if len(measured) > 4 else "")
    return UnmeasuredChoice(
        f"none of the {len(measured)} choices measured for {describe_call(scenario)} ({shown}) is an "
        f"action {policy.name} can take (every action pins a channel count; 'auto-ch' ran NCCL's "
        "own): score nccl_default or a policy file on these logs, or measure channel counts too "
        "(NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS)")


def _chosen(info: dict[str, Any]) -> tuple[str, str, str]:
    """(configuration label, algorithm, protocol) of a step, as the reports print them."""
    if info.get("config") is not None:
        c = info["config"]
        return c.label(), _algorithm_label(c), c.protocol.name.lower()
    pinned = info["constraints"]
    parts = Knobs.of(pinned).parts(keep="nccl")  # algorithm, protocol, channels, ...: "nccl" if free
    label = "NCCL default" if not pinned.given() else "/".join(parts)
    return label, parts[0], parts[1]


def tuning_budget(policy: OnlinePolicy) -> int:
    """Measured calls an online tuner is given per distinct call of the suite."""
    return int(getattr(policy, "budget", 64))


def _steps(policy: Policy, suite: Sequence[Any]) -> int:
    """Environment steps scoring ``policy`` on ``suite`` takes (tuning first, for online tuners)."""
    scenarios = [s for e in suite for s in e.scenarios]
    tuning = len(dict.fromkeys(scenarios)) * tuning_budget(policy) \
        if isinstance(policy, OnlinePolicy) else 0
    return len(scenarios) + tuning


def tune_online(policy: OnlinePolicy, scenarios: Sequence[Scenario], env: CollectiveTuningEnv,
                advance: Advance | None = None) -> tuple[list[int | None], list[float]]:
    """Lets an online tuner measure each distinct call up to its budget, in suite order.

    Returns, per context (system, collective, size bin: what the tuner keys on), how many calls
    in that context it took until one ran within 5 % of that call's oracle (None: never), and the
    speedup over NCCL of every exploration call (what tuning cost the job).
    """
    from dynamiccl.agents.policies.online import context_key

    policy.reset()
    budget = tuning_budget(policy)
    calls: dict[tuple, int] = {}
    hits: dict[tuple, int | None] = {}
    speedups: list[float] = []
    for scenario in dict.fromkeys(scenarios):
        key = context_key(scenario)
        hits.setdefault(key, None)
        observation, _ = env.reset(options={"episode": [scenario] * budget})
        for _ in range(budget):
            observation, info = _step(env, policy, observation)
            policy.update(scenario, int(info["action"]), float(info["time_us"]))
            speedups.append(info["speedup"])
            calls[key] = calls.get(key, 0) + 1
            target = WITHIN * min(info["oracle_time_us"], info["default_time_us"])
            if hits[key] is None and info["time_us"] <= target:
                hits[key] = calls[key]
            if advance is not None:
                advance(1)
    return list(hits.values()), speedups


def evaluate_policy(policy: Policy, suite: Sequence[Any], *, deployable: bool = True,
                    backend: str | Any = "sim", backend_kwargs: Mapping[str, Any] | None = None,
                    advance: Advance | None = None) -> PolicyReport:
    """Scores ``policy`` on ``suite`` (a list of ``SuiteEntry``) in the reality ``backend``.

    ``backend_kwargs`` build the backend by name (e.g. ``{"seed": 1003}`` for ``perturbed``); the
    scoring copy is noise-free where the backend has noise, the tuning copy is not. ``advance(1)``
    is called after every step (a progress bar's).
    """
    kwargs = dict(backend_kwargs or {})
    noisy = dict(kwargs)
    if backend == "perturbed":
        kwargs["noisy"] = False
    # A learned policy is shown the observation set it was trained on (its ``observation``).
    shown = getattr(policy, "observation", None)
    env = make_env(backend, deployable=deployable, observation=shown, **kwargs)
    tuning = None
    if isinstance(policy, OnlinePolicy):
        tuning = tune_online(policy, [s for e in suite for s in e.scenarios],
                             make_env(backend, deployable=deployable, observation=shown, **noisy),
                             advance)
    results: list[CallResult] = []
    for entry in suite:
        observation, _ = env.reset(options={"episode": entry})
        for scenario in entry.scenarios:
            observation, info = _step(env, policy, observation)
            if advance is not None:
                advance(1)
            t_orc = min(info["oracle_time_us"], info["default_time_us"])
            results.append(CallResult(entry.name, scenario, info["default_time_us"], t_orc,
                                      info["time_us"], *_chosen(info)))
    env.close()
    name = backend if isinstance(backend, str) else getattr(backend, "name", "custom")
    if name == "perturbed":
        name = f"perturbed(seed={kwargs.get('seed', 'default')})"
    report = summarize(policy.name, results, action_set(deployable), name, tuning)
    return report


def summarize(name: str, results: list[CallResult], actions: str, backend: str,
              tuning: tuple[list[int | None], list[float]] | None = None) -> PolicyReport:
    if not results:
        raise ValueError("the suite has no calls to evaluate")
    log_pol = np.array([math.log(r.t_default / r.t_policy) for r in results])
    log_orc = np.array([math.log(r.t_default / r.t_oracle) for r in results])
    worst = int(np.argmin(log_pol))
    report = PolicyReport(
        policy=name,
        action_set=actions,
        backend=backend,
        geomean_speedup=float(np.exp(log_pol.mean())),
        oracle_share=oracle_share(float(log_pol.sum()), float(log_orc.sum())),
        worst_speedup=float(np.exp(log_pol[worst])),
        worst_call=describe_call(results[worst].scenario),
        slower_calls=int(np.sum(log_pol < -math.log1p(SLOWER_MARGIN))),
        scenarios=len(results),
        calls=results,
    )
    if tuning is not None:
        calls_needed, speedups = tuning
        hits = [c for c in calls_needed if c is not None]
        report.calls_to_5pct = float(np.median(hits)) if hits else math.nan
        report.reached_5pct = len(hits) / max(len(calls_needed), 1)
        report.exploration_calls = len(speedups)
        report.exploration_speedup = float(np.exp(np.mean(np.log(speedups)))) if speedups else None
    return report


def evaluate_policies(policies: Mapping[str, Policy] | Sequence[Policy], suite: Sequence[Any], *,
                      deployable: bool = True, backend: str | Any = "sim",
                      backend_kwargs: Mapping[str, Any] | None = None,
                      progress: bool = False) -> list[PolicyReport]:
    """Every policy's report; ``progress`` draws a bar on a terminal (nothing when piped)."""
    items = list(policies.values() if isinstance(policies, Mapping) else policies)
    if not progress:
        return [evaluate_policy(p, suite, deployable=deployable, backend=backend,
                                backend_kwargs=backend_kwargs) for p in items]
    total = sum(_steps(p, suite) for p in items)
    with progress_bar(f"evaluating {len(items)} polic{'y' if len(items) == 1 else 'ies'}",
                      total) as advance:
        return [evaluate_policy(p, suite, deployable=deployable, backend=backend,
                                backend_kwargs=backend_kwargs, advance=advance) for p in items]


def table_title(title: str, reports: Sequence[PolicyReport]) -> str:
    """``title``, then the action set and the reality the numbers come from."""
    if not reports:
        return title
    return f"{title}; {reports[0].action_set}; reality: {reports[0].backend}"


def print_table(reports: Sequence[PolicyReport], title: str = "evaluation", console: Any = None,
                unused: Collection[str] = ()) -> None:
    """One row per policy; a policy in ``unused`` (a file no rule of which applies to the suite)
    reads "no rule applies" where its speedup, NCCL's own, would be."""
    from rich.table import Table

    table = Table(title=table_title(title, reports))
    for col in ("policy", "geomean speedup", "oracle share", f">{100 * SLOWER_MARGIN:g}% slower",
                "worst speedup", "worst call", "calls to 5%", "exploration", "calls"):
        table.add_column(col, justify="left" if col in ("policy", "worst call") else "right")
    for r in reports:
        share = "n/a" if math.isnan(r.oracle_share) else f"{r.oracle_share:.3f}"
        calls = "" if r.calls_to_5pct is None else (
            "never" if math.isnan(r.calls_to_5pct) else
            f"{r.calls_to_5pct:g} ({100 * (r.reached_5pct or 0):.0f}%)")
        explore = "" if r.exploration_calls is None else (
            f"{r.exploration_calls} at {r.exploration_speedup or math.nan:.3f}x")
        speedup = "no rule applies" if r.policy in unused else f"{r.geomean_speedup:.3f}x"
        table.add_row(r.policy, speedup, share, str(r.slower_calls),
                      f"{r.worst_speedup:.3f}x", r.worst_call, calls, explore, str(r.scenarios))
    if console is None:
        from dynamiccl.console import console as table_console

        console = table_console()
    console.print(table)


def _is_summary_json(path: Path) -> bool:
    head = read_head(path, 256)
    return head.startswith(b"[") and b'"policy"' in head


#: The files ``save_reports`` writes into a folder, each recognisable by its first bytes, so
#: ``--force`` replaces earlier results and never a user's own file of the same name.
RESULT_FILES = {
    "summary.csv": FileKind("a summary written by `dynamiccl evaluate`", starts_with(b"policy,")),
    "summary.json": FileKind("a summary written by `dynamiccl evaluate`", _is_summary_json),
    "calls.csv": FileKind("a call table written by `dynamiccl evaluate`",
                          starts_with(b"policy,action_set,backend,workload,call,")),
}


def claim_results(out_dir: str | Path, *, force: bool, inputs: Sequence[str | Path] = (),
                  figures: Sequence[str] = ()) -> None:
    """Checks before any work that ``out_dir`` may take the results (and the named ``figures``):
    a folder (or one to create), and every file in it this would replace one written by
    ``evaluate`` (with ``force``), none of the command's ``inputs``."""
    from dynamiccl.plots import FIGURE

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputRefused(f"{out} is a file; --out takes a folder (it writes "
                            f"{', '.join(RESULT_FILES)} into it)")
    if not out.exists():
        return
    for name, kind in [*RESULT_FILES.items(), *((f, FIGURE) for f in figures)]:
        claim_output(out / name, kind, inputs=inputs, force=force, flag="--out")


def save_reports(reports: Sequence[PolicyReport], out_dir: str | Path, *,
                 overwrite: bool = True) -> dict[str, Path]:
    """``summary.csv``, ``summary.json`` and ``calls.csv`` (every call of every policy), each written
    atomically; with ``overwrite=False`` existing files are refused before anything is written."""
    from dynamiccl.files import write_text_atomic

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file; --out takes a folder to write the results into")
    paths = {"csv": out / "summary.csv", "json": out / "summary.json", "calls": out / "calls.csv"}
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not overwrite:
        raise ValueError(f"{existing[0]} already exists; pass --force to replace the results in "
                         f"{out} or pick another --out folder")
    out.mkdir(parents=True, exist_ok=True)
    rows = [r.summary() for r in reports]
    write_text_atomic(paths["csv"], _csv_text([list(rows[0]), *[list(r.values()) for r in rows]]))
    write_text_atomic(paths["json"], json.dumps(rows, indent=2))
    lines = [["policy", "action_set", "backend", "workload", "call", "t_default_us", "t_oracle_us",
              "t_policy_us", "speedup", "config"]]
    for r in reports:
        lines += [[r.policy, r.action_set, r.backend, c.workload, describe_call(c.scenario),
                   f"{c.t_default:.3f}", f"{c.t_oracle:.3f}", f"{c.t_policy:.3f}", f"{c.speedup:.4f}",
                   c.config] for c in r.calls]
    write_text_atomic(paths["calls"], _csv_text(lines))
    return paths


def _csv_text(rows: list[list[Any]]) -> str:
    import io

    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()
