"""The GPU goals of one ``experiments/gpu_checks.sh`` run, in one table: met, not met or not run.

    python experiments/gpu_goals.py RUN_FOLDER [--json]

Reads what the run left in its folder (nothing is measured here, so it runs anywhere):
``pytest_gpu.xml`` (``pytest -m gpu``'s JUnit report), ``bench_real/bench_real.json`` (the whole
user path, judged by :mod:`real_report`) and ``bench_runtime_nccl.json`` (the runtime on NCCL).
A goal whose input is missing (the step failed or ran out of time) is ``not run``; the figure
column says what was measured. The goals are issue 28's, on one H100 or H200 with emulated hosts:
every GPU test passes; the DDP job with the policy at least x1.25 faster with the same losses;
64 KiB all-reduce at least x1.4; no size slower beyond its launch spread; StragglAR saving at
least half the simulator's predicted saving at a 20 ms straggler, and the runtime's hook costing
under 2 % without one; the self-tuning job within 5 % of its best by step 50.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

#: The goals' thresholds (issue 28).
STRAGGLAR_DELAY_MS, STRAGGLAR_SHARE_OF_PREDICTED = 20.0, 0.5
HOOK_COST = 0.02
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


def bench_real_goals(folder: Path) -> dict[str, tuple[str, str]]:
    """The goals bench_real's report judges, with their figures."""
    names = ("DDP >= x1.25 with identical losses", "64 KiB all-reduce >= x1.4",
             "no size slower beyond its launch spread", "self-tuning within 5 % by step 50")
    doc = _load_json(folder / "bench_real" / "bench_real.json")
    if doc is None:
        return dict.fromkeys(names, (NOT_RUN, "no bench_real/bench_real.json"))
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import real_report

        analysis = real_report.analyse(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return dict.fromkeys(names, (NOT_RUN, f"bench_real.json unreadable ({exc!r})"))
    finally:
        sys.path.pop(0)
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
        out[names[3]] = (_status(goals["online_within_5pct_in_50_steps"]),
                         f"within 5 % from step {o['steps_to_within_5pct']} of {o['steps']}")
    return {name: out.get(name, (NOT_RUN, "that phase did not run")) for name in names}


def bench_runtime_goals(folder: Path) -> dict[str, tuple[str, str]]:
    names = (f"StragglAR >= 1/2 of its predicted saving at {STRAGGLAR_DELAY_MS:g} ms",
             "runtime hook costs < 2 % without a straggler")
    doc = _load_json(folder / "bench_runtime_nccl.json")
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
    missing = "no bench_runtime_nccl.json" if doc is None else "that delay was not run"
    return {name: out.get(name, (NOT_RUN, missing)) for name in names}


def goals(folder: Path) -> dict[str, tuple[str, str]]:
    return {"pytest -m gpu: every test passes": pytest_goal(folder), **bench_real_goals(folder),
            **bench_runtime_goals(folder)}


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
        print(json.dumps({k: {"status": s, "figure": f} for k, (s, f) in table.items()}, indent=1))
        return 0
    width = max(map(len, table))
    print(f"{'goal (issue 28)':<{width}}  {'status':<7}  figure")
    for name, (status, figure) in table.items():
        print(f"{name:<{width}}  {status:<7}  {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
