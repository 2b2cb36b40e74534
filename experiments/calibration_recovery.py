"""Calibration on a system whose truth is known: how well are its parameters and times recovered?

The "real cluster" is the simulator on a DGX H100 preset whose tiers are perturbed (NVLink
bandwidth x0.8 and latency x1.5, InfiniBand bandwidth x0.7 and latency x1.4) and which has what the
tiers cannot say (a calibration section: Ring/LL128 at 0.8 of the modelled bandwidth, a 40 µs host
launch floor, 4 µs of transport overhead per network message), measured like nccl-tests would
(all-reduce, all-gather, reduce-scatter, 1 KiB-1 GiB in steps of 4x, on 1, 2 and 4 nodes, NCCL's
default picks plus forced Ring/Simple and Ring/LL128 sweeps) with seeded 3 % log-normal noise.
Calibration starts from the unperturbed preset. Held-out: sizes 3 x 2^k never fitted, on 1, 2 and
8 nodes (8 was never measured), predicted noise-free.

    python experiments/calibration_recovery.py [--noise 0.03] [--seeds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np

from dynamiccl.profiler.fit import synthetic as S
from dynamiccl.profiler.fit.calibrate import calibrate, prepare
from dynamiccl.profiler.fit.fit_report import error_table, format_table, heldout_table
from dynamiccl.system.calibration import AlgoProtoFit, Calibration, Fitted
from dynamiccl.system.knobs import nccl_config
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import load_topology

FACTORS = {"nvlink.bandwidth_GBps": 0.8, "nvlink.latency_us": 1.5,
           "infiniband.bandwidth_GBps": 0.7, "infiniband.latency_us": 1.4}
COLLECTIVES = (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER)
TRUE_REFINEMENTS = Calibration(
    algorithms=(AlgoProtoFit(Algorithm.RING, Protocol.LL128, bw_efficiency=Fitted(0.8, 0.0)),),
    launch_floor_us=Fitted(40.0, 0.0), transport_overhead_us=Fitted(4.0, 0.0))


def run(noise: float, seed: int) -> dict:
    base = load_topology("dgx_h100")
    truth = replace(S.perturbed(base, FACTORS), calibration=TRUE_REFINEMENTS)
    sizes = S.powers_of_two(10, 30, 2)
    sweeps = [S.Sweep(c, sizes, n) for c in COLLECTIVES for n in (1, 2, 4)]
    for proto in (Protocol.SIMPLE, Protocol.LL128):
        sweeps.append(S.Sweep(Collective.ALLREDUCE, sizes, 2, nccl_config(Algorithm.RING, proto, 16)))
    fit = calibrate(S.measurements(truth, sweeps, noise, seed), base)
    held = S.measurements(truth, [S.Sweep(c, tuple(3 * 2**k for k in range(11, 29, 3)), n)
                                  for c in COLLECTIVES for n in (1, 2, 8)], 0.0, seed + 1000)
    true_values = {f"{t.name}.{f}": getattr(t, f) for t in truth.tiers
                   for f in ("bandwidth_GBps", "latency_us")}
    true_values.update({"ring/ll128.bw_efficiency": 0.8, "launch_floor_us": 40.0,
                        "transport_overhead_us": 4.0})
    return {
        "seed": seed,
        "parameters": [{"parameter": p.label, "base": p.base, "true": true_values[p.label],
                        "fitted": p.fitted, "error_pct": 100 * (p.fitted / true_values[p.label] - 1),
                        "rel_std_pct": 100 * p.rel_std}
                       for p in fit.params + fit.refinements if p.label in true_values],
        "fit": error_table(fit.problem, fit.predicted_us, fit.predicted_base_us),
        "heldout": heldout_table(fit, prepare(held, base)),
        "rms_log": (fit.rms_log(False), fit.rms_log(True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--noise", type=float, default=0.03, help="log-normal sigma of the noise")
    ap.add_argument("--seeds", type=int, default=5, help="independent noise draws")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = [run(args.noise, seed) for seed in range(args.seeds)]
    if args.json:
        print(json.dumps([{**r, "fit": [x.to_json() for x in r["fit"]],
                           "heldout": [x.to_json() for x in r["heldout"]]} for r in runs], indent=2))
        return
    print(f"parameter recovery over {args.seeds} seeds (noise sigma {args.noise}):")
    print(f"{'parameter':28s} {'base':>8s} {'true':>8s} {'fitted (mean)':>14s} "
          f"{'max |err|%':>10s} {'mean ±std%':>10s}")
    for i, p in enumerate(runs[0]["parameters"]):
        fitted = np.array([r["parameters"][i]["fitted"] for r in runs])
        errs = np.array([abs(r["parameters"][i]["error_pct"]) for r in runs])
        stds = np.array([r["parameters"][i]["rel_std_pct"] for r in runs])
        print(f"{p['parameter']:28s} {p['base']:8.3g} {p['true']:8.3g} {fitted.mean():14.4g} "
              f"{errs.max():10.2f} {stds.mean():10.2f}")
    hop = [sum(p["fitted"] for p in r["parameters"]
               if p["parameter"] in ("infiniband.latency_us", "transport_overhead_us")) for r in runs]
    print(f"{'network hop (latency+overhead)':28s} {3.0:8.3g} {4.2 + 4.0:8.3g} {np.mean(hop):14.4g} "
          f"{100 * max(abs(h / 8.2 - 1) for h in hop):10.2f}   (the data sees only their sum)")
    before, after = zip(*(r["rms_log"] for r in runs), strict=True)
    print(f"RMS log error: base {np.mean(before):.3f} -> fitted {np.mean(after):.3f}")
    print("\nfit error, seed 0 (median/max |error| of the measurements fitted):")
    print(format_table(runs[0]["fit"]))
    print("\nheld-out error, seed 0 (sizes 3x2^k and 8 nodes never fitted, noise-free truth):")
    print(format_table(runs[0]["heldout"]))


if __name__ == "__main__":
    main()
