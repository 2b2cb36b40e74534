"""What ``bench_real.py`` measured, judged: medians, launch-to-launch spread, verdicts, goals.

Everything here reads the benchmark's recorded JSON only (no GPU, no NCCL), so the judgement is
tested on CPU and ``bench_real.py --analyse FILE.json`` re-prints a run measured elsewhere.

* Interleaved A/B, per size: the median over launches of NCCL's default and of the tuned policy,
  the launch-to-launch spread ((max - min) / median over the launches of either arm, the larger),
  and the verdict: ``faster`` when the tuned median beats the default's by more than the spread,
  ``slower`` when it loses by more than the spread (a failure), ``within spread`` otherwise.
* DDP: each launch's median step time (after its warmup steps), the median over launches per arm,
  and whether every step's loss with the policy equals the plain job's to float tolerance.
* Online tuning: per step the configuration the tuner had pinned (per size bin) and the step time;
  a configuration's step time is the median of its steps. Steps until within 5 % of the best
  measured configuration (from that step on every step runs a configuration within 5 % of it),
  steps after exploration slower than NCCL's default by more than 5 %, and the worst trial:
  the largest agreed bucket all-reduce time of a candidate over NCCL's own in its bin.
"""

from __future__ import annotations

import statistics
from typing import Any

from dynamiccl.system.units import format_size

#: Goals of issue "Real GPUs, real NCCL" (one H100, 4 emulated hosts; 8 for the online tuner).
GOAL_DDP_SPEEDUP = 1.25
GOAL_AB_SIZE, GOAL_AB_SPEEDUP = 64 << 10, 1.4
GOAL_ONLINE_STEPS, GOAL_ONLINE_WORST = 50, 2.0
#: Losses with and without the policy agree to this relative difference (summation order differs
#: between algorithms, so bits need not).
LOSS_RTOL = 1e-3
#: A step or configuration within this of the best counts as "there"; slower than NCCL's default by
#: more than this counts as slower.
WITHIN = 0.05


def spread(values: list[float]) -> float:
    """(max - min) / median: how far launches of the same thing fall apart."""
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def verdict(default_us: float, tuned_us: float, noise: float) -> str:
    if tuned_us * (1 + noise) < default_us:
        return "faster"
    if tuned_us > default_us * (1 + noise):
        return "slower"
    return "within spread"


def decision_at(rows: list[dict], nbytes: int, nranks: int) -> dict:
    """tune's decision row for an all-reduce of ``nbytes`` on ``nranks`` ranks (its ``ours`` and
    evidence); NCCL's default where no row covers it."""
    for row in rows:
        if row["collective"] == "allreduce" and row["ranks"] == nranks and \
                row["from"] <= nbytes <= row["to"]:
            return row
    return {"ours": "NCCL default", "evidence": "no decision", "gain": 0.0}


def ab_rows(doc: dict) -> list[dict]:
    """Per size of the interleaved launches: medians, spread, decision, evidence, verdict."""
    launches = doc["ab"]["launches"]
    rows = []
    for size in sorted({int(s) for launch in launches for s in launch["times_us"]}):
        times = {arm: [launch["times_us"][str(size)] for launch in launches
                       if launch["arm"] == arm and str(size) in launch["times_us"]]
                 for arm in ("default", "tuned")}
        if not (times["default"] and times["tuned"]):
            continue
        default_us, tuned_us = (statistics.median(times[a]) for a in ("default", "tuned"))
        noise = max(spread(times["default"]), spread(times["tuned"]))
        decision = decision_at(doc["tune"]["rows"], size, doc["settings"]["nprocs"])
        rows.append({"size": size, "default_us": default_us, "tuned_us": tuned_us,
                     "speedup": default_us / tuned_us, "spread": noise,
                     "launches": len(times["default"]), "decision": decision["ours"],
                     "evidence": decision["evidence"], "predicted_gain": decision.get("gain", 0.0),
                     "verdict": verdict(default_us, tuned_us, noise)})
    return rows


def ddp_summary(doc: dict) -> dict:
    """Median step time per arm over launches (each launch's median after warmup), the spread,
    and whether the losses of every tuned launch match its pair's plain launch."""
    launches, warmup = doc["ddp"]["launches"], doc["settings"]["ddp_warmup"]
    per_arm: dict[str, list[float]] = {"plain": [], "tuned": []}
    for launch in launches:
        per_arm[launch["arm"]].append(statistics.median(launch["step_ms"][warmup:]))
    worst = 0.0
    for tuned in (x for x in launches if x["arm"] == "tuned"):
        plain = next(x for x in launches if x["arm"] == "plain" and x["pair"] == tuned["pair"])
        for a, b in zip(plain["losses"], tuned["losses"], strict=True):
            worst = max(worst, abs(a - b) / max(abs(a), 1e-12))
    plain_ms, tuned_ms = (statistics.median(per_arm[a]) for a in ("plain", "tuned"))
    return {"plain_step_ms": plain_ms, "tuned_step_ms": tuned_ms, "speedup": plain_ms / tuned_ms,
            "spread": max(spread(per_arm["plain"]), spread(per_arm["tuned"])),
            "launch_medians_ms": per_arm, "max_loss_rel_diff": worst, "losses_match": worst <= LOSS_RTOL}


def online_summary(online: dict) -> dict:
    """The in-job tuner's path: see the module docstring."""
    # a step's state: the (bin, pinned configuration) pairs in force, () for NCCL's own everywhere
    steps = online["step_ms"]
    states = [tuple((b, tuple(c)) for b, c in s) for s in online["states"]]
    skip = online["warmup_steps"]
    by_state: dict[tuple, list[float]] = {}
    for ms, state in zip(steps[skip:], states[skip:], strict=True):
        by_state.setdefault(state, []).append(ms)
    median = {state: statistics.median(v) for state, v in by_state.items()}
    default_ms = median.get(())
    best = min(median.values())
    fine = [median[s] <= (1 + WITHIN) * best if s in median else False for s in states]
    within = next((i for i in range(len(fine)) if all(fine[i:])), len(fine))
    explored_until = online["exploration_ends_step"]
    after = steps[explored_until:] if explored_until is not None else []
    slower = sum(ms > (1 + WITHIN) * default_ms for ms in after) if default_ms else None
    ratios = []
    for trials in online["trials"].values():
        default = [t for c, t in trials if c is None]
        if default:
            ratios += [t / min(default) for c, t in trials if c is not None]
    final = states[-1] if states else ()
    return {"steps": len(steps), "default_step_ms": default_ms, "best_step_ms": best,
            "final_step_ms": median.get(final), "final_state": [list(x) for x in final],
            "steps_to_within_5pct": within, "exploration_ends_step": explored_until,
            "slower_steps_after_exploration": slower, "steps_after_exploration": len(after),
            "worst_trial_vs_default": max(ratios, default=None), "lockstep": online["lockstep"]}


def analyse(doc: dict) -> dict:
    """Every verdict of a recorded run, and the issue's goals met or not."""
    out: dict[str, Any] = {}
    if doc.get("ab"):
        out["ab"] = ab_rows(doc)
    if doc.get("ddp"):
        out["ddp"] = ddp_summary(doc)
    if doc.get("online"):
        out["online"] = online_summary(doc["online"])
    goals: dict[str, bool] = {}
    out["goals"] = goals
    if doc["system"].get("backend") == "gloo":  # gloo's timings say nothing about NCCL's choices
        out["goals_not_judged"] = "a gloo rehearsal: the goals are NCCL's, judged on a GPU only"
        return out
    if "ddp" in out:
        goals["ddp_speedup_1.25x"] = out["ddp"]["speedup"] >= GOAL_DDP_SPEEDUP
        goals["ddp_losses_match"] = out["ddp"]["losses_match"]
    if "ab" in out:
        at = [r for r in out["ab"] if r["size"] == GOAL_AB_SIZE]
        goals["ab_64KiB_1.4x"] = bool(at) and at[0]["speedup"] >= GOAL_AB_SPEEDUP
        goals["ab_no_size_slower_beyond_spread"] = all(r["verdict"] != "slower" for r in out["ab"])
    if "online" in out:
        o = out["online"]
        goals["online_within_5pct_in_50_steps"] = o["steps_to_within_5pct"] <= GOAL_ONLINE_STEPS
        goals["online_no_slower_step_after_exploration"] = o["slower_steps_after_exploration"] == 0
        goals["online_worst_trial_2x"] = (o["worst_trial_vs_default"] or 0.0) <= GOAL_ONLINE_WORST
        goals["online_lockstep"] = bool(o["lockstep"])
    return out


def print_report(doc: dict, analysis: dict) -> None:
    """The run at a glance: one table per phase, then the goals."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(120, Console().width))
    s, system = doc["settings"], doc["system"]
    if system.get("backend") == "gloo":
        console.print(f"gloo on the CPU (the dress rehearsal), {s['nprocs']} ranks; "
                      f"{doc.get('seconds', 0):.0f} s")
    else:
        hosts = "emulated hosts" if s["emulate_hosts"] else "GPUs"
        console.print(f"{system['gpu']} x{system['gpus']}, NCCL {system['nccl']}, {s['nprocs']} "
                      f"ranks on {hosts}; {doc.get('seconds', 0):.0f} s")
    own = (doc.get("sweep") or {}).get("own_launch") or {}
    if own:
        console.print("sweep: measured in launches of their own (not pinnable call by call): "
                      + "; ".join(f"{label} ({why})" for label, why in own.items()))
    if "ab" in analysis:
        table = Table(title=f"all-reduce, interleaved launches ({s['pairs']} pairs): NCCL's default "
                            "against the tuned policy", title_justify="left")
        for col in ("size", "default µs", "tuned µs", "speedup", "spread", "decision", "evidence",
                    "verdict"):
            table.add_column(col, justify="left" if col in ("decision", "evidence", "verdict")
                             else "right")
        for r in analysis["ab"]:
            table.add_row(format_size(r["size"]), f"{r['default_us']:.1f}", f"{r['tuned_us']:.1f}",
                          f"x{r['speedup']:.2f}", f"{100 * r['spread']:.1f}%", r["decision"],
                          r["evidence"], r["verdict"])
        console.print(table)
    if "ddp" in analysis:
        d = analysis["ddp"]
        console.print(f"DDP ({s['ddp_layers']} x Linear({s['ddp_width']}), bucket_cap_mb "
                      f"{s['ddp_bucket_mb']}): median step {d['plain_step_ms']:.2f} ms plain, "
                      f"{d['tuned_step_ms']:.2f} ms with the policy: x{d['speedup']:.2f} (spread "
                      f"{100 * d['spread']:.1f}%); losses {'match' if d['losses_match'] else 'DIFFER'} "
                      f"(max relative difference {d['max_loss_rel_diff']:.1e})")
    if "online" in analysis:
        o = analysis["online"]
        worst = o["worst_trial_vs_default"]
        timing = ", trials timed by NCCL's profiler" if s.get("profiler") else ""
        console.print(
            f"online tuner on {doc['online']['hosts']} hosts ({doc['online']['tuner']}, no policy "
            f"file{timing}): within 5 % of the best configuration from step {o['steps_to_within_5pct']}, "
            f"exploration ended at step {o['exploration_ends_step']}; {o['slower_steps_after_exploration']}"
            f" of {o['steps_after_exploration']} later steps > 5 % slower than NCCL's default "
            f"({o['default_step_ms'] or float('nan'):.2f} ms; best {o['best_step_ms']:.2f} ms); worst "
            f"trial x{worst or float('nan'):.2f} NCCL's time; lockstep {o['lockstep']}")
    console.print("goals: " + (analysis.get("goals_not_judged") or ", ".join(
        f"{k} {'met' if v else 'NOT met'}" for k, v in analysis["goals"].items())))
    if system.get("cannot_show"):
        console.print(system["cannot_show"])
