"""Benchmark: `dynamiccl simulate --batch` requests per second against one CLI process per request.

Scripts and notebooks that ask the simulator many questions used to start ``dynamiccl simulate
--json`` once per question. This measures both ways on the same random requests (three presets,
1–8 nodes, all collectives, sizes 8 B–1 GiB, a third with a pinned algorithm, some with a straggler):

* ``batch_requests_per_s``: one ``dynamiccl simulate --batch FILE`` process answering N requests,
  start-up included (what a script pays);
* ``batch_steady_requests_per_s``: the same answers in-process, start-up excluded (what a long
  notebook session pays per request), and ``batch_steady_requests_per_cpu_s`` per CPU second (what
  the code costs, whatever else shares the machine);
* ``cli_process_s``: the median wall time of one ``dynamiccl simulate … --json`` process, and the
  requests per second that implies.

Target (issue 10): thousands of requests per second. Numbers depend on the machine's load; the
load average is printed with them.

    python experiments/bench_batch.py                  # table
    python experiments/bench_batch.py --json           # one JSON object
    python experiments/bench_batch.py --requests 5000 --cli-runs 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dynamiccl.cli.simulate_batch import CHUNK_LINES, BatchSimulator
from dynamiccl.cli.simulate_request import REQUEST_FLAGS

CLI = [sys.executable, "-m", "dynamiccl.cli.main"]


def make_requests(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        request = {"topology": rng.choice(["dgx_h100", "dgx_a100", "ring_ring_8to1"]),
                   "nodes": rng.choice([1, 2, 4, 8]),
                   "collective": rng.choice(["allreduce", "allgather", "reducescatter", "broadcast",
                                             "reduce"]),
                   "size": str(rng.randint(8, 2**30))}
        if i % 3 == 0:
            request["algo"] = "ring"
        if i % 7 == 0:
            request.update(straggler_rank=0, straggler_delay=f"{rng.randint(1, 5000)}us")
        out.append(request)
    return out


def bench_batch_process(lines: list[str]) -> tuple[float, float]:
    """(requests/s, seconds) of one `simulate --batch FILE` process, start-up included."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        path.write_text("\n".join(lines) + "\n")
        start = time.perf_counter()
        proc = subprocess.run([*CLI, "simulate", "--batch", str(path)], capture_output=True, text=True)
        elapsed = time.perf_counter() - start
    answers = proc.stdout.splitlines()
    if proc.returncode != 0 or len(answers) != len(lines) or any('"error"' in a for a in answers):
        raise SystemExit(f"the batch run failed: {proc.stderr.strip()[:500]}")
    return len(lines) / elapsed, elapsed


def _chunked(lines: list[str]) -> list[list[str]]:
    return [lines[i:i + CHUNK_LINES] for i in range(0, len(lines), CHUNK_LINES)]


def bench_batch_steady(lines: list[str]) -> tuple[float, float]:
    """(requests per wall second, per CPU second) in-process on fresh requests, systems warm.

    CPU seconds say what the code costs when the machine is shared; wall seconds what a user waits.
    """
    defaults = argparse.Namespace(**{**dict.fromkeys(REQUEST_FLAGS), "straggler_delay": 0.0, "c2c": 0.0})
    batch = BatchSimulator(defaults)
    half = len(lines) // 2
    batch.run(_chunked(lines[:half]), io.StringIO())  # first sight of every system
    wall, cpu = time.perf_counter(), time.process_time()
    batch.run(_chunked(lines[half:]), io.StringIO())
    n = len(lines) - half
    return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)


def bench_cli_process(request: dict, runs: int) -> float:
    """Median seconds of one `dynamiccl simulate ... --json` process."""
    argv = [a for k, v in request.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*CLI, "simulate", *argv, "--json"], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests in the batch (default 3000)")
    parser.add_argument("--cli-runs", type=int, default=3, help="CLI processes timed (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    requests = make_requests(args.requests)
    lines = [json.dumps(r) for r in requests]
    batch_rps, batch_s = bench_batch_process(lines)
    fresh = [json.dumps(r) for r in make_requests(args.requests, seed=1)]
    steady_rps, steady_cpu_rps = bench_batch_steady(fresh)
    cli_s = bench_cli_process(requests[0], args.cli_runs)
    result = {
        "requests": args.requests,
        "batch_requests_per_s": batch_rps,
        "batch_process_s": batch_s,
        "batch_steady_requests_per_s": steady_rps,
        "batch_steady_requests_per_cpu_s": steady_cpu_rps,
        "cli_process_s": cli_s,
        "cli_requests_per_s": 1.0 / cli_s,
        "speedup_vs_cli": batch_rps * cli_s,
        "load_average_1min": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    from rich.table import Table

    from dynamiccl.console import console as table_console

    table = Table(title=f"simulate: {args.requests} requests (load average {result['load_average_1min']:.1f} "
                        f"on {result['cpus']} CPUs)")
    for col in ("way", "requests/s", "seconds"):
        table.add_column(col, justify="right" if col != "way" else "left")
    table.add_row("--batch FILE, one process", f"{batch_rps:,.0f}", f"{batch_s:.2f}")
    table.add_row("--batch, in-process steady state", f"{steady_rps:,.0f}", "")
    table.add_row("--batch, in-process, per CPU second", f"{steady_cpu_rps:,.0f}", "")
    table.add_row("one CLI process per request", f"{1 / cli_s:,.2f}", f"{cli_s:.2f} each")
    table_console().print(table)


if __name__ == "__main__":
    main()
