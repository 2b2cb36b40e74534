"""How far the datasheet model is from real systems, where the learned prior is not scored:
``python experiments/prior_residuals.py``.

The learned prior trains against perturbed realities (:mod:`dynamiccl.envs.backends.perturbed`); the
system-wide part of that perturbation (:class:`~dynamiccl.envs.backends.perturbed.SystemMiscalibration`:
each tier's latency and bandwidth off by one factor, the same for every algorithm and protocol)
takes its ranges from here. Fitted on the published runs the prior is *not* scored on: every
fixture system under ``tests/fixtures/real/`` except the datasets ``bench_prior_real.py`` scores
(those with a held-out decision), so nothing scored there shaped what it learned.

Per run (NCCL's default or the forced algorithm/protocol, each simulated on the system's datasheet
topology as ``validate_real.py`` does): log(measured / predicted) per size band. The system's
error is the median over its runs' records in a band: below 64 KiB a call's time is its latency
floor, from 16 MiB its bandwidth. The ranges printed span the systems' medians (natural log of the
factor a time is off by): network latency from multi-node systems' small sizes, network bandwidth
from their large sizes, the node's bandwidth from single-node (or single-NVLink-domain) runs at
large sizes. With one system per transport or two, a range is all these few systems can say; no
distribution is fitted within it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

import numpy as np
from bench_prior_real import FIXTURES, scored_datasets
from validate_real import predicted_us

from dynamiccl.profiler.formats.published import load_system, system_dirs, system_topology

#: (label, lower bound inclusive, upper bound exclusive) in bytes: latency- and bandwidth-bound.
SMALL, LARGE = (0, 64 << 10), (16 << 20, math.inf)


def system_errors(name: str) -> dict:
    """One fixture system's median log(measured / predicted) at small and large sizes, across
    nodes and within one node."""
    folder = FIXTURES / name
    runs = load_system(folder)
    topology = system_topology(folder)
    launches = {run.launch for run in runs}
    if len(launches) == 1:
        topology = replace(topology, launch=launches.pop())
    records = [r for run in runs for r in run.records]
    errors = np.log(np.array([r.time_us for r in records]) / predicted_us(records, topology))
    sizes = np.array([r.nbytes for r in records], dtype=float)
    multi = np.array([(r.nnodes or 1) > 1 for r in records])

    def median(where: np.ndarray, band: tuple[float, float]) -> float | None:
        sel = errors[where & (sizes >= band[0]) & (sizes < band[1])]
        return round(float(np.median(sel)), 3) if len(sel) else None

    transports = sorted({t.transport or t.link for t in topology.tiers if t.link == "net"})
    return {"transports": transports, "records": len(records),
            "network_small": median(multi, SMALL), "network_large": median(multi, LARGE),
            "node_large": median(~multi, LARGE)}


def fit(errors: dict[str, dict]) -> dict[str, list[float]]:
    """The ranges (natural log of the factor a time is off by) the systems' medians span."""
    def span(key: str) -> list[float]:
        values = [e[key] for e in errors.values() if e[key] is not None]
        return [min(values), max(values)] if values else []
    return {"network_latency": span("network_small"), "network_bandwidth": span("network_large"),
            "node_bandwidth": span("node_large")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    scored = set(scored_datasets())
    fitted_on = [d.name for d in system_dirs(FIXTURES) if d.name not in scored and load_system(d)]
    errors = {name: system_errors(name) for name in fitted_on}
    doc = {"fitted_on": fitted_on, "held_out_for_scoring": sorted(scored), "systems": errors,
           "ranges_log": fit(errors)}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print("log(measured / predicted), median per system (datasheet topology); fitted on the systems "
          f"bench_prior_real does not score (held out: {', '.join(sorted(scored))})")
    print(f"{'system':26} {'transports':18} {'records':>7} {'net < 64KiB':>12} {'net >= 16MiB':>12} "
          f"{'node >= 16MiB':>13}")
    for name, e in errors.items():
        cells = ["-" if e[k] is None else f"{e[k]:+.2f}" for k in
                 ("network_small", "network_large", "node_large")]
        print(f"{name:26} {','.join(e['transports']) or '-':18} {e['records']:>7} {cells[0]:>12} "
              f"{cells[1]:>12} {cells[2]:>13}")
    for key, (lo, hi) in ((k, v) for k, v in doc["ranges_log"].items() if v):
        print(f"{key}: a time off by x{math.exp(lo):.2f} .. x{math.exp(hi):.2f} (log {lo:+.2f} .. {hi:+.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
