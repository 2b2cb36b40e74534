"""The GPU goals of one ``experiments/gpu_checks.sh`` run, in one table: met, not met or not run.

    python experiments/gpu_goals.py RUN_FOLDER [--json]

Reads what the run left in its folder (nothing is measured here, so it runs anywhere):
``pytest_gpu.xml`` (``pytest -m gpu``'s JUnit report), ``bench_real/bench_real.json`` (the whole
user path, judged by :mod:`real_report`), ``bench_runtime_nccl.json`` (the runtime on NCCL),
``profiler.json`` and ``profiler_ddp.json`` (``bench_profiler.py``), ``profiled/bench_real.json``
and ``bench_runtime_profiled.json`` (the self-tuning job and StragglAR timing by the profiler),
``chunk/chunk_nccl.json`` (``chunk_nccl.py``: chunk sizes through the plugin on NCCL).
A goal whose input is missing (the step failed, ran out of time or was not selected) is
``not run``; the figure column says what was measured. The goals, on one H100 or H200 with
emulated hosts, and the issue that set each:

- 28: every GPU test passes; the DDP job with the policy at least x1.25 faster with the same
  losses; 64 KiB all-reduce at least x1.4; no size slower beyond its launch spread; StragglAR
  saving at least half the simulator's predicted saving at a 20 ms straggler, the runtime's hook
  costing under 2 % without one; the self-tuning job within 5 % of its best by step 50.
- 30: the profiler at most 100 ns per event pair and under 1 % of a DDP step; with it, the
  self-tuning job within 5 % of its best by step 50 and no step after exploration slower than
  NCCL's default beyond the noise; StragglAR engaging at 20 ms with half its predicted saving.
- 31: the evidence tuner (the self-tuning job's default) within 5 % of its best by step 50 with
  the profiler's timings (the row issue 30 shares).
- 38: two chunk sizes pinned through the plugin (getChunkSize) with every call pinned and NCCL's
  INFO log showing NCCL asked the plugin for each; both timed interleaved with NCCL's own chunk.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import real_report  # experiments/, beside this script

#: The goals' thresholds (issues 28 and 30).
STRAGGLAR_DELAY_MS, STRAGGLAR_SHARE_OF_PREDICTED = 20.0, 0.5
HOOK_COST = 0.02
PROFILER_NS_PER_PAIR, PROFILER_DDP_PCT = 100.0, 1.0
NOT_RUN = "not run"


def _load_json(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _status(ok: bool) -> str:
    return "met" if ok else "NOT met"


def pytest_goal(folder: Path) -> tuple[str, str]:
    try:
        root = ET.parse(folder / "pytest_gpu.xml").getroot()
    except (OSError, ET.ParseError):
        return NOT_RUN, "no pytest_gpu.xml"
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors",
                                                                 "skipped")}
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    figure = (f"{passed}/{count['tests']} passed ({count['failures'] + count['errors']} failed, "
              f"{count['skipped']} skipped)")
    return _status(count["tests"] > 0 and passed == count["tests"]), figure


def _analysed(path: Path) -> tuple[dict | None, str]:
    """bench_real's analysis of a recorded run (:mod:`real_report`), or why there is none."""
    doc = _load_json(path)
    if doc is None:
        return None, f"no {path.parent.name}/{path.name}"
    try:
        return real_report.analyse(doc), ""
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, f"{path.name} unreadable ({exc!r})"


def _online_figure(o: dict) -> str:
    return (f"within 5 % from step {o['steps_to_within_5pct']} of {o['steps']}; "
            f"{o['slower_steps_after_exploration']} of {o['steps_after_exploration']} steps after "
            "exploration slower than NCCL's default")


def bench_real_goals(folder: Path) -> dict[str, tuple[str, str]]:
    """The goals bench_real's report judges, with their figures."""
    names = ("DDP >= x1.25 with identical losses", "64 KiB all-reduce >= x1.4",
             "no size slower beyond its launch spread", "self-tuning within 5 % by step 50")
    analysis, why = _analysed(folder / "bench_real" / "bench_real.json")
    if analysis is None:
        return dict.fromkeys(names, (NOT_RUN, why))
    goals, out = analysis["goals"], {}
    if "ddp" in analysis:
        d = analysis["ddp"]
        out[names[0]] = (_status(goals["ddp_speedup_1.25x"] and goals["ddp_losses_match"]),
                         f"x{d['speedup']:.2f}, losses {'match' if d['losses_match'] else 'DIFFER'}")
    if "ab" in analysis:
        at = [r for r in analysis["ab"] if r["size"] == real_report.GOAL_AB_SIZE]
        out[names[1]] = (_status(goals["ab_64KiB_1.4x"]),
                         f"x{at[0]['speedup']:.2f}" if at else "64 KiB not measured")
        slower = [r for r in analysis["ab"] if r["verdict"] == "slower"]
        out[names[2]] = (_status(not slower), f"{len(slower)} of {len(analysis['ab'])} sizes slower"
                         + (f" ({', '.join(str(r['size']) for r in slower)} B)" if slower else ""))
    if "online" in analysis:
        o = analysis["online"]
        out[names[3]] = (_status(goals["online_within_5pct_in_50_steps"]), _online_figure(o))
    return {name: out.get(name, (NOT_RUN, "that phase did not run")) for name in names}


def bench_runtime_goals(folder: Path, file: str = "bench_runtime_nccl.json", how: str = ""
                        ) -> dict[str, tuple[str, str]]:
    """StragglAR's saving at a 20 ms straggler and the hook's cost without one (``how``: the
    rows' suffix, e.g. with the profiler)."""
    names = (f"StragglAR >= 1/2 of its predicted saving at {STRAGGLAR_DELAY_MS:g} ms{how}",
             f"runtime hook costs < 2 % without a straggler{how}")
    doc = _load_json(folder / file)
    cases = {c.get("straggler_delay_ms"): c for c in (doc or {}).get("cases", [])
             if isinstance(c, dict)}
    out = {}
    late = cases.get(STRAGGLAR_DELAY_MS)
    if late is not None:
        predicted = late["predicted_alone_saving_ms"]
        share = late["measured_saving_ms"] / predicted if predicted > 0 else 0.0
        out[names[0]] = (_status(share >= STRAGGLAR_SHARE_OF_PREDICTED),
                         f"saved {late['measured_saving_ms']:.2f} of {predicted:.2f} ms predicted "
                         f"({share:.2f}); detected {late['detected_delay_ms']:.1f} ms, StragglAR "
                         f"on {late['stragglar_share']:.0%} of steps")
    calm = cases.get(0.0)
    if calm is not None:
        cost = calm["hook_step_ms"] / calm["plain_step_ms"] - 1
        out[names[1]] = (_status(cost < HOOK_COST),
                         f"{100 * cost:+.1f} % ({calm['hook_step_ms']:.2f} against "
                         f"{calm['plain_step_ms']:.2f} ms a step)")
    missing = f"no {file}" if doc is None else "that delay was not run"
    return {name: out.get(name, (NOT_RUN, missing)) for name in names}


def _figure_goal(path: Path, key: str, passes: Callable[[float], bool],
                 figure: Callable[[dict], str]) -> tuple[str, str]:
    """A goal judged on one number ``key`` of a benchmark's JSON, ``not run`` when it is missing."""
    doc = _load_json(path)
    if doc is None or not isinstance(doc.get(key), (int, float)):
        return NOT_RUN, f"no {path.name}"
    return _status(passes(doc[key])), figure(doc)


def profiler_goals(folder: Path) -> dict[str, tuple[str, str]]:
    """The profiler's cost per event pair and in a DDP step (``bench_profiler.py``)."""
    return {
        f"profiler <= {PROFILER_NS_PER_PAIR:g} ns per event pair": _figure_goal(
            folder / "profiler.json", "ns_per_event_pair", lambda ns: ns <= PROFILER_NS_PER_PAIR,
            lambda d: f"{d['ns_per_event_pair']:.1f} ns at worst ({d.get('worst_channels')} channels, "
                      f"{d.get('worst_depth')} in flight; no-op {d.get('noop_ns_per_event_pair')} ns)"),
        f"profiler costs < {PROFILER_DDP_PCT:g} % of a DDP step": _figure_goal(
            folder / "profiler_ddp.json", "ddp_step_overhead_pct", lambda pct: pct < PROFILER_DDP_PCT,
            lambda d: f"{d['ddp_step_overhead_pct']:+.2f} % (median of {d.get('pairs')} launch pairs, "
                      f"{d.get('min_pct')} .. {d.get('max_pct')} %)"),
    }


def profiled_goals(folder: Path) -> dict[str, tuple[str, str]]:
    """The self-tuning job timing its trials by the profiler (issues 30 and 31)."""
    names = ("self-tuning with the profiler within 5 % by step 50",
             "no step slower than NCCL after exploration, with the profiler")
    analysis, why = _analysed(folder / "profiled" / "bench_real.json")
    if analysis is None or "online" not in analysis:
        return dict.fromkeys(names, (NOT_RUN, why or "the self-tuning job did not run"))
    goals, o = analysis["goals"], analysis["online"]
    return {names[0]: (_status(goals.get("online_within_5pct_in_50_steps", False)), _online_figure(o)),
            names[1]: (_status(goals.get("online_no_slower_step_after_exploration", False)),
                       f"{o['slower_steps_after_exploration']} of {o['steps_after_exploration']} "
                       f"steps; worst trial x{o['worst_trial_vs_default'] or 0:.2f} NCCL's")}


def chunk_goals(folder: Path) -> dict[str, tuple[str, str]]:
    """Chunk sizes through the plugin on NCCL (``chunk_nccl.py``)."""
    names = ("two chunk sizes pinned through getChunkSize, NCCL used them",
             "the chunk sizes timed interleaved with NCCL's own")
    doc = _load_json(folder / "chunk" / "chunk_nccl.json")
    rows = (doc or {}).get("chunks")
    if not isinstance(rows, list) or len(rows) < 3:
        return dict.fromkeys(names, (NOT_RUN, "no chunk/chunk_nccl.json"))

    def name(row: dict) -> str:
        return "NCCL's" if row.get("chunk_bytes") is None else f"{row['chunk_bytes'] >> 10} KiB"

    asked = ", ".join(f"{name(r)}: {'pinned' if r.get('pinned') else 'NOT pinned'}, "
                      f"{'asked' if r.get('nccl_asked') else 'NOT asked'}" for r in rows[1:3])
    clamp = "; NCCL clamped the over-ceiling one" if doc.get("nccl_clamped_over") else ""
    times = ", ".join(f"{name(r)} {r['time_us']:.1f} us" for r in rows[:3])
    ratio = doc.get("ratio")
    return {names[0]: (_status(bool(doc.get("nccl_used_both"))), asked + clamp),
            names[1]: (_status(all(r.get("time_us", 0) > 0 for r in rows[:3])),
                       times + (f" (x{ratio:.2f} between them)" if ratio else ""))}


def goals(folder: Path) -> dict[str, tuple[str, str, str]]:
    """Goal -> (issue, status, figure), in the order the checks run."""
    rows: list[tuple[str, dict[str, tuple[str, str]]]] = [
        ("28", {"pytest -m gpu: every test passes": pytest_goal(folder)}),
        ("28", bench_real_goals(folder)),
        ("28", bench_runtime_goals(folder)),
        ("30", profiler_goals(folder)),
        ("30/31", profiled_goals(folder)),
        ("30", bench_runtime_goals(folder, "bench_runtime_profiled.json", ", with the profiler")),
        ("38", chunk_goals(folder)),
    ]
    return {name: (issue, *verdict) for issue, table in rows for name, verdict in table.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the run folder gpu_checks.sh wrote")
    p.add_argument("--json", action="store_true", help="print the goals as JSON")
    args = p.parse_args(argv)
    if not args.folder.is_dir():
        print(f"gpu_goals: {args.folder}: no such folder; give the run folder gpu_checks.sh wrote",
              file=sys.stderr)
        return 2
    table = goals(args.folder)
    if args.json:
        print(json.dumps({k: {"issue": i, "status": s, "figure": f}
                          for k, (i, s, f) in table.items()}, indent=1))
        return 0
    width = max(map(len, table))
    print(f"{'issue':<5}  {'goal':<{width}}  {'status':<7}  figure")
    for name, (issue, status, figure) in table.items():
        print(f"{issue:<5}  {name:<{width}}  {status:<7}  {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
