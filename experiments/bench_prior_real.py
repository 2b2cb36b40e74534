"""The learned prior where it is used, on real measurements: ``python experiments/bench_prior_real.py``.

``dynamiccl tune`` with the shipped learned prior (``--prior``) and without it (the default) on every
real dataset in the fixtures that has decisions to score:

* the replay tables (``tests/fixtures/real/replay/``): the 8xH100 node's repeated launches, A3 Mega
  over TCPXO, the RTX 5090 socket pair, DGX B200's summary table (one size per series: nothing
  between sizes to hold out, listed and not scored);
* every fixture folder of the project's runner records (``runner/*/``: ``*.jsonl`` beside a
  ``topology.yaml``): the 4-emulated-host H200 sweep.

What tune sees (``bench_tuning.HeldOutSizes``): per (collective, ranks) series, every other size,
or a seeded random half of the sizes (``--draws`` draws), every launch of every choice there
except each launch split's held-out launch. It calibrates the model to them as ``dynamiccl tune``
does and decides the sizes it did not see, scored there (``bench_tuning.Score``) on the split's
held-out launch where every choice was launched twice or more (the H100 node's allreduce from
1 MiB), else on the out-of-place timing of the size nobody saw. Shares are pooled over launch
splits (and draws): sum of log(t_default / t_pick) over the headroom's sum.

Tuners: ``tune`` (the shipped prior; it overrides NCCL only on a calibrated model), ``no_prior``
(the default), and ``ungated`` (the prior also on a model whose calibration failed: tune before
that rule); beside them the rules a user writes by hand from the same measurements
(``bench_tuning.SIMPLE_RULES``: the sweep with a 3 % noise gate, held up to the next measured size;
between two measured sizes, the choice that beat NCCL's default by 3 % at both).

Datasets also include NVIDIA's forced-choice timings (``tests/fixtures/real/nvidia/*/data``, each
file one launch: every held-out size is scored on the timing nobody saw).

Printed, per dataset and budget:

* tune beside the simple rules: the share of the headroom and the share of the headroom beyond
  noise (at decisions whose fastest choice beats NCCL's default by 5 % or more), decisions more than
  2 % / 3 % slower than NCCL, the worst;
* the headroom per decision, the share of it each tuner takes and what the prior adds, the share at
  decisions ``no_prior`` leaves to NCCL (the most the prior can add), decisions more than 3 % slower
  than NCCL's default, the worst decision, at how many decisions the prior was the evidence and how
  many it pinned, how many realities left the model uncalibrated;
* what the prior's answers alone would pin where ``no_prior`` leaves NCCL, gated at 0, 1 and tune's
  sigmas (share of the headroom, pins, pins slower than NCCL): whether any gate makes them pay;
* every decision a tuner overrides NCCL at (size, choice, evidence, predicted gain against the gain
  realised on the scoring timing, how many splits/draws made it);
* the prior's calibration on real residuals: at every held-out (pair, size) it answers, the share
  of measured log-ratios within 1 and 2 of its sigmas (its sigma alone, and with the scoring
  timing's launch noise added), next to the simulated coverage recorded in the prior file (its
  validation realities).

Nothing here is fitted: the prior file and tune are used as shipped, and the prior's training
realities take nothing from these datasets (``experiments/prior_residuals.py`` fits on the other
fixtures). ``--prior FILE`` scores another prior file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_tuning import (
    BEYOND_NOISE,
    REPLAY_DIR,
    SIMPLE_RULES,
    SLOWER_HELD_OUT,
    HeldOutSizes,
    ReplaySystem,
    Score,
    Unmeasured,
    _shown,
    every_other_size,
    kept_records,
    random_half_of_sizes,
    replay_systems,
    tuner_for,
)

from dynamiccl.agents.shipping.gate import LEARNED_PRIOR, LEARNED_PRIOR_UNCALIBRATED
from dynamiccl.agents.shipping.prior import LearnedPrior
from dynamiccl.agents.shipping.tune import (
    DEFAULT,
    PRIOR_SIGMAS,
    Choice,
    Tuner,
    calibrated_topology,
)
from dynamiccl.agents.shipping.tune_prior import LearnedPriorSource
from dynamiccl.envs.backends.replay import LaunchSplit, ReplayTable
from dynamiccl.profiler.formats.measurement_paths import load_paths
from dynamiccl.profiler.formats.nccl_topo_timings import read_tree
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology
from dynamiccl.system.units import format_size

FIXTURES = REPLAY_DIR.parent
TUNERS = ("tune", "no_prior", "ungated")
#: The simple rules scored beside them (``bench_tuning.SIMPLE_RULES``).
RULES = tuple(SIMPLE_RULES)
EVERY_OTHER = "every other size"
RANDOM_HALF = "random half of sizes"
#: The prior's sigma multiples whose coverage is reported.
COVERAGE_SIGMAS = (1.0, 2.0)
#: Gates (sigmas of the prior's own a predicted gain must clear) its answers alone are tried at:
#: none, one, and tune's.
GATE_SIGMAS = (0.0, 1.0, PRIOR_SIGMAS)


def record_systems(root: Path) -> list[ReplaySystem]:
    """Every fixture folder of runner records (``*.jsonl`` beside a ``topology.yaml``) as a
    replay system."""
    out = []
    for folder in sorted(p for p in root.iterdir() if (p / "topology.yaml").is_file()):
        paths = sorted(folder.glob("*.jsonl"))
        if not paths:
            continue
        records = load_paths(paths).records
        out.append(ReplaySystem(folder.name, records, load_topology(folder / "topology.yaml"),
                                LaunchSplit.count(ReplayTable(records))))
    return out


def nvidia_systems(root: Path) -> list[ReplaySystem]:
    """Every fixture folder of NVIDIA's cost-model test timings (``data/`` beside a
    ``topology.yaml``, :mod:`dynamiccl.profiler.formats.nccl_topo_timings`) as a replay system:
    each file one launch, so every held-out size is scored on the timing nobody saw."""
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if (p / "topology.yaml").is_file()
                         and (p / "data").is_dir()):
        records = read_tree(folder / "data")
        out.append(ReplaySystem(folder.name, records, load_topology(folder / "topology.yaml"),
                                LaunchSplit.count(ReplayTable(records))))
    return out


def datasets(root: Path = FIXTURES) -> list[ReplaySystem]:
    return [*replay_systems(root / "replay"), *record_systems(root / "runner"),
            *nvidia_systems(root / "nvidia")]


def scored_datasets(root: Path = FIXTURES) -> list[str]:
    """The datasets with a held-out decision: what this benchmark scores on, so nothing the
    prior is trained against may be fitted to them (``experiments/prior_residuals.py``)."""
    return [system.name for system in datasets(root)
            if any(map((held := HeldOutSizes(system.reality(0))).scored, held.scenarios))]


@dataclass
class Tally:
    """One dataset and budget: each tuner's score per unit (a launch split, or a draw pooled over
    its splits), the decisions worth listing, the prior's errors in sigmas, calibration notes."""

    scores: dict[str, list[Score]] = field(default_factory=lambda: defaultdict(list))
    decisions: list[dict] = field(default_factory=list)
    #: (measured - predicted log ratio, the prior's sigma, the scoring timing's noise)
    residuals: list[tuple[float, float, float]] = field(default_factory=list)
    #: Held-out decisions where the prior was a tuner's evidence (overriding or not).
    prior_spoke: int = 0
    #: Sum of log(t_default / t_best) over the held-out decisions, and over those ``no_prior``
    #: leaves to NCCL: the most the prior can add.
    headroom: float = 0.0
    open_headroom: float = 0.0
    decided: int = 0
    #: Per gate (sigmas of the prior's own), what its answers alone would pin at the decisions
    #: ``no_prior`` leaves to NCCL: [pins, pins > 3 % slower than NCCL, sum of log gains].
    alone: dict[float, list[float]] = field(
        default_factory=lambda: {k: [0, 0, 0.0] for k in GATE_SIGMAS})
    uncalibrated: int = 0
    realities: int = 0

    def unit(self) -> dict[str, Score]:
        """A fresh score per tuner for the next unit."""
        fresh = {name: Score(SLOWER_HELD_OUT) for name in (*TUNERS, *RULES)}
        for name, score in fresh.items():
            self.scores[name].append(score)
        return fresh


def _truth(reality: HeldOutSizes, s: Scenario, choice: Choice) -> float | None:
    try:
        return reality.truth(s, choice)
    except Unmeasured:
        return None


def _tuners(reality: HeldOutSizes, prior: LearnedPriorSource) -> tuple[dict[str, Tuner], str]:
    """The three tuners on what ``reality`` shows, and the calibration's note."""
    records = kept_records(reality)
    model, note = calibrated_topology(records, reality.model)
    tuners = {"tune": tuner_for(reality, records, model, prior),
              "no_prior": tuner_for(reality, records, model, None),
              "ungated": tuner_for(reality, records, model, prior)}
    tuners["ungated"].calibrated = True  # tune before the rule: the prior on any model
    return tuners, note


def score_reality(reality: HeldOutSizes, prior: LearnedPriorSource, tally: Tally,
                  scores: dict[str, Score], where: str) -> None:
    """Every tuner's decisions at the held-out sizes of one reality, scored, listed and the prior's
    answers there checked against the scoring timings."""
    tuners, note = _tuners(reality, prior)
    rules = {name: rule(reality)[0] for name, rule in SIMPLE_RULES.items()}
    tally.realities += 1
    tally.uncalibrated += not tuners["tune"].calibrated
    for s in filter(reality.scored, reality.scenarios):
        t_default, t_best = reality.truth(s, DEFAULT), reality.best(s)
        decided = {name: tuner.decide(s) for name, tuner in tuners.items()}
        tally.headroom += math.log(t_default / t_best)
        tally.decided += 1
        if decided["no_prior"].chosen == DEFAULT:
            tally.open_headroom += math.log(t_default / t_best)
        for name, d in decided.items():
            scores[name].add(f"{where} {reality.describe(s)}", t_default, t_best,
                             _truth(reality, s, d.chosen))
        for name, picks in rules.items():
            scores[name].add(f"{where} {reality.describe(s)}", t_default, t_best,
                             _truth(reality, s, picks[s]))
        tally.prior_spoke += any(d.verdict.evidence in (LEARNED_PRIOR, LEARNED_PRIOR_UNCALIBRATED)
                                 for d in decided.values())
        if any(d.verdict.override for d in decided.values()):
            for name, d in decided.items():
                t_alt = _truth(reality, s, d.alternative)
                tally.decisions.append({
                    "collective": s.collective.name.lower(), "ranks": s.topology.nranks,
                    "nbytes": s.nbytes, "tuner": name, "chosen": d.chosen.label(),
                    "alternative": d.alternative.label(), "evidence": d.verdict.evidence,
                    "predicted_gain": round(d.verdict.gain, 4),
                    "sigma": round(d.verdict.sigma, 4),
                    "realised_gain": None if t_alt is None else round(t_default / t_alt - 1, 4),
                    "override": d.verdict.override, "model": note.split(" (")[0]})
        tune = tuners["tune"]
        answered = []
        for choice in reality.menu(s):
            answer = None if choice.is_default else tune.prior_answer(s, choice)
            t_choice = _truth(reality, s, choice)
            if answer is None or t_choice is None:
                continue
            noise = math.hypot(tune.noise.of_mean(s.topology, choice, 1, s.nbytes),
                               tune.noise.of_mean(s.topology, DEFAULT, 1, s.nbytes))
            tally.residuals.append((math.log(t_choice / t_default) - answer[0], answer[1], noise))
            answered.append((answer, t_choice))
        if decided["no_prior"].chosen == DEFAULT:
            _alone(tally, answered, t_default, tune.margin)


def _alone(tally: Tally, answered: list[tuple[tuple[float, float], float]], t_default: float,
           margin: float) -> None:
    """What the prior's answers alone pin at one decision, per gate: its fastest predicted pair
    among those whose predicted log gain clears log(1 + margin) + k sigmas."""
    for k, tallied in tally.alone.items():
        passing = [(mu, t) for (mu, sigma), t in answered if -mu > math.log1p(margin) + k * sigma]
        if passing:
            t_pick = min(passing)[1]
            tallied[0] += 1
            tallied[1] += t_pick > SLOWER_HELD_OUT * t_default
            tallied[2] += math.log(t_default / t_pick)


#: A decision whose realised gains under tune and a rule differ by less than this (log) is no
#: difference worth a row of ``--explain``.
EXPLAIN_TOLERANCE = 0.005


def _rule_saw(shown: dict[int, dict[Choice, float]], nbytes: int, rule: str, choice: Choice) -> str:
    """What a rule read for ``choice`` at a held-out size: the measured gain over NCCL's default at
    the measured size below (the sweep) or at both measured neighbours (the neighbour rule)."""
    below = [n for n in shown if n < nbytes][-1:]
    above = [n for n in shown if n > nbytes][:1] if rule == "neighbour_rule" else []
    seen = [f"{100 * shown[n][choice]:+.1f}% at {format_size(n)}" for n in (*below, *above)
            if choice in shown[n]]
    return ", ".join(seen) or "-"


def _verdict_text(est) -> str:
    return "not weighed (the model cannot run it)" if est is None else \
        f"{100 * est.gain:+.1f}% ±{100 * est.sigma:.1f}% {est.evidence}"


def explain_reality(reality: HeldOutSizes, where: str) -> tuple[list[dict], float, float]:
    """Every held-out decision of one reality where ``tune`` (the default, no prior) and a simple
    rule realise gains that differ: the call, the headroom, what the rule pinned and read, what tune
    pinned and how it judged the rule's choice, both realised gains on the scoring timing. Also the
    reality's headroom in log, all of it and beyond noise (the shares' denominators)."""
    records = kept_records(reality)
    model, _ = calibrated_topology(records, reality.model)
    tuner = tuner_for(reality, records, model, None)
    rules = {name: rule(reality)[0] for name, rule in SIMPLE_RULES.items()}
    shown = {series: dict(sorted(sizes.items())) for series, sizes in _shown(reality).items()}
    rows, headroom, beyond = [], 0.0, 0.0
    for s in filter(reality.scored, reality.scenarios):
        t_default, t_best = reality.truth(s, DEFAULT), reality.best(s)
        headroom += math.log(t_default / t_best)
        beyond += math.log(t_default / t_best) if t_default >= BEYOND_NOISE * t_best else 0.0
        d = tuner.decide(s)
        t_tune = _truth(reality, s, d.chosen)
        for name, picks in rules.items():
            t_rule = _truth(reality, s, picks[s])
            if t_tune is None or t_rule is None or \
                    abs(math.log(t_tune / t_rule)) < EXPLAIN_TOLERANCE:
                continue
            series = shown.get((s.collective, s.topology.nranks), {})
            judged = picks[s] if not picks[s].is_default else d.alternative
            rows.append({
                "unit": where, "collective": s.collective.name.lower(), "ranks": s.topology.nranks,
                "nbytes": s.nbytes, "headroom": round(t_default / t_best - 1, 4),
                "beyond_noise": t_default >= BEYOND_NOISE * t_best, "rule": name,
                "rule_chose": picks[s].label(), "rule_gain": round(t_default / t_rule - 1, 4),
                "rule_saw": _rule_saw(series, s.nbytes, name, judged),
                "tune_chose": d.chosen.label(), "tune_gain": round(t_default / t_tune - 1, 4),
                "tune_judged": judged.label(),
                "tune_saw": _verdict_text(d.estimates.get(judged)),
                "tune_verdict": f"{d.alternative.label()}: {_verdict_text(d.verdict)}",
                "log_difference": math.log(t_tune / t_rule)})
    return rows, headroom, beyond


def _budgets(draws: int) -> dict[str, list[Callable]]:
    """What each budget keeps of the sizes: every other one, or ``draws`` seeded random halves."""
    return {EVERY_OTHER: [every_other_size],
            RANDOM_HALF: [random_half_of_sizes(d) for d in range(draws)]}


def _where(budget: str, split: int, draw: int) -> str:
    """A held-out reality's name in the tables: its launch split, and its draw of random halves."""
    return f"split {split}" + (f" draw {draw}" if budget == RANDOM_HALF else "")


def explain(system: ReplaySystem, draws: int) -> dict:
    """Per budget, the decisions that make the difference between ``tune`` and each simple rule
    (:func:`explain_reality`), each with its share of the headroom (beyond noise where its
    headroom is): summed, they are the rule's share minus tune's."""
    out: dict = {}
    for budget, keeps in _budgets(draws).items():
        rows, headroom, beyond = [], 0.0, 0.0
        for d, keep in enumerate(keeps):
            for k in range(system.splits):
                found, h, b = explain_reality(HeldOutSizes(system.reality(k), keep),
                                              _where(budget, k, d))
                rows += found
                headroom += h
                beyond += b
        for row in rows:
            diff = row.pop("log_difference")
            row["share_points"] = round(diff / headroom, 4) if headroom > 1e-9 else None
            row["beyond_noise_points"] = round(diff / beyond, 4) \
                if row["beyond_noise"] and beyond > 1e-9 else 0.0
        rows.sort(key=lambda r: (r["rule"], -r["beyond_noise_points"], -(r["share_points"] or 0)))
        out[budget] = {"decisions": rows, "gap": {
            rule: {"share_points": round(sum(r["share_points"] or 0 for r in rows if r["rule"] == rule), 4),
                   "beyond_noise_points": round(sum(r["beyond_noise_points"] for r in rows
                                                    if r["rule"] == rule), 4)}
            for rule in RULES}}
    return out


def _print_explain(name: str, doc: dict) -> None:
    print(f"{name}: where tune (the default, no prior) and a simple rule realise different gains at "
          "a held-out size; points: the rule's gain minus tune's as a share of the headroom "
          "(beyond noise: of the headroom beyond noise, at those decisions only)")
    for budget, r in doc.items():
        for rule in RULES:
            gap = r["gap"][rule]
            rows = [d for d in r["decisions"] if d["rule"] == rule]
            print(f"\n  {budget}, {rule}: the rule takes {gap['share_points']:+.3f} of the headroom "
                  f"and {gap['beyond_noise_points']:+.3f} of the headroom beyond noise more than tune"
                  f" ({len(rows)} decisions)")
            if not rows:
                continue
            print(f"    {'unit':16} {'call':24} {'best':>7} {'rule: chose':>20} {'real':>7}  "
                  f"{'it read':32} {'tune: chose':>16} {'real':>7}  {'tune on the choice':44} "
                  f"{'points':>14}")
            for d in rows:
                call = f"{d['collective']} {format_size(d['nbytes'])} {d['ranks']}r"
                points = f"{d['share_points']:+.3f}" + (f"/{d['beyond_noise_points']:+.3f}"
                                                       if d["beyond_noise"] else "")
                print(f"    {d['unit']:16} {call:24} {100 * d['headroom']:+6.1f}% "
                      f"{d['rule_chose']:>20} {100 * d['rule_gain']:+6.1f}%  {d['rule_saw']:32} "
                      f"{d['tune_chose']:>16} {100 * d['tune_gain']:+6.1f}%  "
                      f"{d['tune_judged'] + ' ' + d['tune_saw']:44} {points:>14}")
                if d["tune_judged"] != d["tune_verdict"].split(":")[0]:
                    print(f"    {'':16} tune's verdict: {d['tune_verdict']}")


def run(systems: list[ReplaySystem], prior: LearnedPriorSource, draws: int,
        progress: Callable[[str], None] | None = None) -> dict[str, dict[str, Tally]]:
    """Per dataset and budget, the tally over launch splits (and draws)."""
    out: dict[str, dict[str, Tally]] = {}
    for system in systems:
        out[system.name] = {}
        for budget, keeps in _budgets(draws).items():
            tally = Tally()
            for d, keep in enumerate(keeps):
                scores = tally.unit() if budget == RANDOM_HALF else None
                for k in range(system.splits):
                    reality = HeldOutSizes(system.reality(k), keep)
                    score_reality(reality, prior, tally, scores or tally.unit(), _where(budget, k, d))
            out[system.name][budget] = tally
            if progress:
                progress(f"{system.name}, {budget}: {tally.realities} realities")
    return out


def pooled(scores: list[Score]) -> dict:
    """One tuner's units pooled: gains over headroom, slower decisions, the worst decision, and the
    range of the units' shares."""
    summaries = [s.summary() for s in scores]
    headroom = sum(r["log_headroom"] for r in summaries)
    shares = [r["headroom_share"] for r in summaries if r["headroom_share"] is not None]
    worst = min((r for r in summaries if r["worst_speedup"] is not None),
                key=lambda r: r["worst_speedup"], default=None)
    slower = next(k for k in summaries[0] if k.startswith("slower_"))
    beyond = sum(r["log_headroom_beyond_noise"] for r in summaries)
    return {"share": round(sum(r["log_gain"] for r in summaries) / headroom, 4)
            if headroom > 1e-9 else None,
            "beyond_noise_share": round(sum(r["log_gain_beyond_noise"] for r in summaries) / beyond, 4)
            if beyond > 1e-9 else None,
            "beyond_noise_decisions": sum(r["beyond_noise_decisions"] for r in summaries),
            "slower_2pct": sum(r["slower_than_nccl_2pct"] for r in summaries),
            "share_range": [round(min(shares), 4), round(max(shares), 4)] if shares else None,
            "decisions": sum(r["decisions"] for r in summaries),
            slower: sum(r[slower] for r in summaries),
            "worst_speedup": None if worst is None else worst["worst_speedup"],
            "worst_decision": None if worst is None else worst["worst_decision"],
            "unavailable": sum(r.get("unavailable", 0) for r in summaries)}


def coverage(residuals: list[tuple[float, float, float]]) -> dict:
    """The share of measured log ratios within k of the prior's sigmas (alone, and with the scoring
    timing's noise added), and the median |error| / sigma."""
    if not residuals:
        return {"points": 0}
    err, sigma, noise = (np.array(v) for v in zip(*residuals, strict=True))
    z = np.abs(err) / sigma
    z_noisy = np.abs(err) / np.hypot(sigma, noise)
    out: dict = {"points": len(err), "median_abs_error": round(float(np.median(np.abs(err))), 4),
                 "median_sigma": round(float(np.median(sigma)), 4),
                 "median_z": round(float(np.median(z)), 3)}
    for k in COVERAGE_SIGMAS:
        out[f"cover_{k:g}sigma"] = round(float(np.mean(z <= k)), 3)
        out[f"cover_{k:g}sigma_with_noise"] = round(float(np.mean(z_noisy <= k)), 3)
    return out


def _group_decisions(decisions: list[dict]) -> list[dict]:
    """Identical decisions over splits and draws as one row, with how many made it and the median
    predicted and realised gains."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    keys = ("collective", "ranks", "nbytes", "tuner", "chosen", "alternative", "evidence")
    for d in decisions:
        groups[tuple(d[k] for k in keys)].append(d)
    rows = []
    for key, group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                             TUNERS.index(kv[0][3]))):
        realised = [d["realised_gain"] for d in group if d["realised_gain"] is not None]
        rows.append({**dict(zip(keys, key, strict=True)), "times": len(group),
                     "predicted_gain": round(float(np.median([d["predicted_gain"] for d in group])), 4),
                     "sigma": round(float(np.median([d["sigma"] for d in group])), 4),
                     "realised_gain": round(float(np.median(realised)), 4) if realised else None})
    return rows


def summarise(results: dict[str, dict[str, Tally]]) -> dict:
    doc: dict = {}
    for system, per in results.items():
        doc[system] = {}
        for budget, tally in per.items():
            tuners = {name: pooled(tally.scores[name]) for name in (*TUNERS, *RULES)} \
                if tally.scores else {}
            with_prior, without = (tuners.get(n, {}).get("share") for n in ("tune", "no_prior"))
            doc[system][budget] = {
                "realities": tally.realities, "uncalibrated": tally.uncalibrated,
                "prior_spoke": tally.prior_spoke,
                "open_to_prior": round(tally.open_headroom / tally.headroom, 4)
                if tally.headroom > 1e-9 else None,
                "headroom_per_decision": round(math.expm1(tally.headroom / max(tally.decided, 1)), 4),
                "prior_alone": {f"{k:g} sigma": {
                    "pins": int(pins), "slower_3pct": int(slower),
                    "share": round(gain / tally.headroom, 4) if tally.headroom > 1e-9 else None}
                    for k, (pins, slower, gain) in tally.alone.items()},
                "tuners": tuners,
                "prior_adds": None if with_prior is None or without is None
                else round(with_prior - without, 4),
                "prior_overrides": sum(1 for d in tally.decisions if d["tuner"] == "tune"
                                       and d["override"] and d["evidence"] == LEARNED_PRIOR),
                "decisions": _group_decisions(tally.decisions),
                "coverage": coverage(tally.residuals)}
    return doc


def overall_coverage(results: dict[str, dict[str, Tally]]) -> dict:
    return coverage([r for per in results.values() for t in per.values() for r in t.residuals])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _print(doc: dict) -> None:
    print(f"{'dataset':24} {'budget':21} {'decisions':>9} {'headroom':>8} {'tune':>6} {'no prior':>8} "
          f"{'adds':>6} {'ungated':>7} {'open':>6} {'>3% slower':>10} {'worst':>7} "
          f"{'prior spoke/pinned':>18} {'uncalibrated':>12}")
    for system, per in doc["datasets"].items():
        for budget, r in per.items():
            t = r["tuners"]
            if not t or not t["tune"]["decisions"]:
                print(f"{system:24} {budget:21} {0:>9}  (no held-out size: one size per series)")
                continue
            slower = "/".join(str(t[n]["slower_3pct"]) for n in TUNERS)
            worst = min(t[n]["worst_speedup"] for n in TUNERS)
            spoke = f"{r['prior_spoke']}/{r['prior_overrides']}"
            print(f"{system:24} {budget:21} {t['tune']['decisions']:>9} "
                  f"{100 * r['headroom_per_decision']:>+7.1f}% {_pct(t['tune']['share']):>6} "
                  f"{_pct(t['no_prior']['share']):>8} {_pct(r['prior_adds']):>6} "
                  f"{_pct(t['ungated']['share']):>7} {_pct(r['open_to_prior']):>6} {slower:>10} "
                  f"{worst:>6.3f}x {spoke:>18} {r['uncalibrated']:>7}/{r['realities']}")
    print("(headroom: the fastest choice's gain over NCCL's default per decision, geometric mean; "
          "shares of it pooled over launch splits and draws; open: the share at decisions tune "
          "without the prior leaves to NCCL, the most the prior can add; slower: tune/no prior/"
          "ungated, decisions > "
          f"{SLOWER_HELD_OUT - 1:.0%} slower than NCCL's default; worst: of the three)")
    print()
    _print_rules(doc)
    print()
    print("the prior's answers alone where tune without it leaves NCCL (its fastest predicted pair whose "
          "predicted gain clears the 3 % margin plus k of its sigmas): share of the headroom, pins, "
          "pins > 3 % slower")
    gates = list(next(iter(next(iter(doc["datasets"].values())).values()))["prior_alone"])
    print(f"  {'dataset':22} {'budget':21} " + " ".join(f"{'k = ' + g:>24}" for g in gates))
    for system, per in doc["datasets"].items():
        for budget, r in per.items():
            if r["tuners"] and r["tuners"]["tune"]["decisions"]:
                cells = [f"{_pct(a['share'])} ({a['pins']}, {a['slower_3pct']} slower)"
                         for a in r["prior_alone"].values()]
                print(f"  {system:22} {budget:21} " + " ".join(f"{c:>24}" for c in cells))
    print()
    print("decisions where a tuner overrides NCCL (median over the splits/draws that made them):")
    print(f"  {'dataset':22} {'budget':21} {'call':26} {'tuner':9} {'ours':14} {'alternative':14} "
          f"{'predicted':>16} {'realised':>9} {'times':>5}  evidence")
    for system, per in doc["datasets"].items():
        for budget, r in per.items():
            for d in r["decisions"]:
                call = f"{d['collective']} {format_size(d['nbytes'])} {d['ranks']}r"
                realised = "n/a" if d["realised_gain"] is None else f"{100 * d['realised_gain']:+.1f}%"
                print(f"  {system:22} {budget:21} {call:26} {d['tuner']:9} {d['chosen']:14} "
                      f"{d['alternative']:14} {100 * d['predicted_gain']:+7.1f}% ±{100 * d['sigma']:5.1f}% "
                      f"{realised:>9} {d['times']:>5}  {d['evidence']}")
    print()
    sim = doc["simulated_coverage"]
    print("the prior's sigma on real residuals (measured log ratio at held-out sizes vs its "
          "prediction): within 1 / 2 sigma, its sigma alone | with the scoring timing's noise; "
          f"simulated (its validation realities): {_pct(sim.get('val_cover_1sigma'))} / "
          f"{_pct(sim.get('val_cover_2sigma'))}")
    rows = [(f"{s} {b}", r["coverage"]) for s, per in doc["datasets"].items() for b, r in per.items()]
    for label, c in [*rows, ("all datasets, both budgets", doc["coverage"])]:
        if not c["points"]:
            continue
        print(f"  {label:48} {c['points']:>5} points  {c['cover_1sigma']:.3f} / {c['cover_2sigma']:.3f}"
              f" | {c['cover_1sigma_with_noise']:.3f} / {c['cover_2sigma_with_noise']:.3f}  median "
              f"|error| {c['median_abs_error']:.3f}, sigma {c['median_sigma']:.3f}")


def _print_rules(doc: dict) -> None:
    """tune beside the simple rules: per dataset and budget, each one's share of the headroom, its
    share where the headroom is beyond noise, its slower decisions and its worst."""
    names = (*TUNERS[:2], *RULES)
    print(f"tune beside the simple rules: share of the headroom / of the headroom beyond noise "
          f"(fastest >= {BEYOND_NOISE - 1:.0%} faster than NCCL's default; decisions there), "
          f"decisions > 2 % / > {SLOWER_HELD_OUT - 1:.0%} slower, worst")
    print(f"  {'dataset':22} {'budget':21} {'beyond':>6} " + " ".join(f"{n:>30}" for n in names))
    for system, per in doc["datasets"].items():
        for budget, r in per.items():
            t = r["tuners"]
            if not t or not t["tune"]["decisions"]:
                continue
            cells = [f"{_pct(t[n]['share'])}/{_pct(t[n]['beyond_noise_share'])} "
                     f"{t[n]['slower_2pct']}/{t[n]['slower_3pct']}sl {t[n]['worst_speedup']:.3f}x"
                     for n in names]
            print(f"  {system:22} {budget:21} {t['tune']['beyond_noise_decisions']:>6} "
                  + " ".join(f"{c:>30}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=5,
                        help="seeded random halves of the sizes (default 5)")
    parser.add_argument("--prior", metavar="FILE", help="a learned-prior file (default: the shipped one)")
    parser.add_argument("--dataset", action="append", default=[], metavar="NAME",
                        help="score only this dataset (repeatable; default: every one)")
    parser.add_argument("--explain", metavar="NAME",
                        help="instead: the decisions that make the difference between tune and the "
                             "simple rules on this dataset (per held-out size: what each saw, chose "
                             "and realised)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    if not 1 <= args.draws <= 50:
        parser.error("--draws takes 1..50")
    try:
        prior = LearnedPriorSource(LearnedPrior.load(args.prior))
    except ValueError as exc:
        parser.error(str(exc))
    systems = datasets()
    unknown = sorted(set(args.dataset) - {s.name for s in systems})
    if unknown:
        parser.error(f"--dataset {unknown[0]}: no such dataset; choose from "
                     f"{', '.join(s.name for s in systems)}")
    if args.explain is not None:
        found = [s for s in systems if s.name == args.explain]
        if not found:
            parser.error(f"--explain {args.explain}: no such dataset; choose from "
                         f"{', '.join(s.name for s in systems)}")
        doc = explain(found[0], args.draws)
        if args.json:
            print(json.dumps({"dataset": args.explain, "draws": args.draws, **doc}, indent=1))
        else:
            _print_explain(args.explain, doc)
        return 0
    systems = [s for s in systems if not args.dataset or s.name in args.dataset]
    began = time.perf_counter()
    results = run(systems, prior, args.draws, progress=None if args.json else
                  (lambda line: print(line, file=sys.stderr, flush=True)))
    doc = {"action_set": "deployable (NCCL_ALGO/NCCL_PROTO as measured)",
           "prior": prior.learned.meta.get("command", args.prior or "shipped"),
           "decided_on": "every launch of every choice at the kept sizes but the split's held-out "
                         "launch; the model calibrated to them",
           "scored_on": "held-out sizes: the split's held-out launch (every choice launched 2+ "
                        "times), else the out-of-place timing nobody saw",
           "draws": args.draws, "datasets": summarise(results), "coverage": overall_coverage(results),
           "simulated_coverage": prior.learned.meta.get("validation", {}),
           "seconds": round(time.perf_counter() - began, 1)}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        _print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
