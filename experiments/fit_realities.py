"""Fit the ``measured`` perturbed realities to the published runs: ``python experiments/fit_realities.py``.

Per kind of system (networks over TCP apart from the rest), the spreads of the ``measured``
profile's model error (``envs.backends.perturbed.MEASURED_MODEL_ERROR``) whose realities give the
same mean |residual| as the replay tables of ``tests/fixtures/real/replay`` on the same calls
(``envs.backends.reality_fit``): the ratio residual of forced choices against NCCL's default, and
NCCL's default's own. Prints them next to the shipped values with the median and 90 % quantile
each gives (the fit matches means; those say whether the body and the tail agree too), and the
``uniform`` profile's figures on the same calls. ``--json`` prints it all as one object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from dynamiccl.envs.backends.perturbed import MEASURED_MODEL_ERROR, PerturbedBackend
from dynamiccl.envs.backends.reality_fit import (
    ResidualPoint,
    fit,
    real_statistics,
    residual_points,
    simulated_statistics,
)
from dynamiccl.simulator import evaluate

REPLAY_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real" / "replay"


def uniform_statistics(points: list[ResidualPoint], draws: int = 100) -> dict:
    """The same statistics in ``uniform`` realities (seeds 0..draws-1) on the same calls."""
    out = {}
    for kind in sorted({p.kind for p in points}):
        mine = [p for p in points if p.kind == kind]
        calls = list({(p.system, p.scenario): p for p in mine}.values())
        ratio, default = [], []
        for seed in range(draws):
            reality = PerturbedBackend(seed, noisy=False)
            ratio += [abs(math.log(reality.true_time(p.scenario, p.choice)
                                   / reality.true_time(p.scenario, p.default)) - p.model_log_ratio)
                      for p in mine if p.told_apart]
            default += [abs(math.log(reality.true_time(p.scenario, p.default)
                                     / evaluate(p.scenario, p.default).time_us)) for p in calls]
        out[kind] = {f"{name}_{stat}": float(f(np.array(x)))
                     for name, x in (("ratio", ratio), ("default", default))
                     for stat, f in (("mean", np.mean), ("median", np.median),
                                     ("q90", lambda v: np.quantile(v, 0.9)))}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", type=Path, default=REPLAY_DIR, metavar="DIR",
                        help="folder of replay tables (default: tests/fixtures/real/replay)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.replay.is_dir():
        parser.error(f"--replay {args.replay}: no such folder of replay tables")
    points = residual_points(args.replay)
    fitted = fit(points)
    doc = {"real": real_statistics(points),
           "fitted": {k: vars(e) for k, e in fitted.items()},
           "shipped": {k: vars(e) for k, e in MEASURED_MODEL_ERROR.items()},
           "measured_profile": simulated_statistics(points, MEASURED_MODEL_ERROR),
           "uniform_profile": uniform_statistics(points),
           "systems": sorted({f"{p.system} ({p.kind})" for p in points})}
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print("systems:", ", ".join(doc["systems"]))
    for kind, real in doc["real"].items():
        f, s = doc["fitted"][kind], doc["shipped"][kind]
        m, u = doc["measured_profile"][kind], doc["uniform_profile"][kind]
        print(f"{kind}: fitted pair {f['pair']:.3f} common {f['common']:.3f} (shipped {s['pair']:.3f} / "
              f"{s['common']:.3f})")
        for label, key in (("|ratio residual|", "ratio"), ("|default residual|", "default")):
            def row(stats: dict, key: str = key) -> str:
                return " / ".join(f"{stats[f'{key}_{x}']:.3f}" for x in ("mean", "median", "q90"))
            print(f"  {label:<19} mean / median / q90: real {row(real)} ({real[f'{key}_points']} "
                  f"points); measured profile {row(m)}; uniform profile {row(u)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
