"""Measurements of a system whose truth we know: the simulator with perturbed tier parameters.

Calibration can only be trusted if it recovers parameters it was not told. This module plays the
"real cluster": it perturbs a preset's tiers, lets the NCCL-default model pick what NCCL would run
on *that* system (or uses forced configurations, as a user setting NCCL_ALGO/NCCL_PROTO would),
simulates, and adds seeded log-normal noise like run-to-run jitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dynamiccl.nccl_model import NcclModel
from dynamiccl.profiler.fit.calibrate import scaled_bandwidth
from dynamiccl.profiler.formats.records import MeasurementRecord, bandwidths
from dynamiccl.simulator import simulate
from dynamiccl.system.knobs import Config, ConfigBatch, Knobs
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class Sweep:
    """nccl-tests style sweep: one collective over sizes on ``nodes`` nodes, NCCL default or forced."""

    collective: Collective
    sizes: tuple[int, ...]
    nodes: int = 1
    config: Config | None = None


def perturbed(topology: Topology, factors: dict[str, float]) -> Topology:
    """``factors``: ``"<tier name>.<field>" → multiplier``, e.g. ``{"nvlink.bandwidth_GBps": 0.8}``."""
    tiers = list(topology.tiers)
    for key, factor in factors.items():
        name, _, fld = key.partition(".")
        idx = next((i for i, t in enumerate(tiers) if t.name == name), None)
        if idx is None or fld not in ("bandwidth_GBps", "latency_us"):
            raise ValueError(f"{key!r} is not <tier name>.bandwidth_GBps or .latency_us of "
                             f"{topology.name}")
        tiers[idx] = replace(tiers[idx], **{fld: getattr(tiers[idx], fld) * factor})
    return replace(topology, tiers=tuple(tiers))


def measurements(truth: Topology, sweeps: Sequence[Sweep], noise_sigma: float = 0.03,
                 seed: int = 0,
                 efficiency: dict[tuple[Algorithm, Protocol], float] | None = None,
                 ) -> list[MeasurementRecord]:
    """Records as nccl-tests would have produced them on ``truth``.

    ``efficiency`` makes an (algorithm, protocol) run at that fraction of the tier bandwidths the
    simulator assumes, like an implementation that is slower on this system than modelled.
    """
    rng = np.random.default_rng(seed)
    out: list[MeasurementRecord] = []
    for sweep in sweeps:
        topo = truth.resized(nodes=sweep.nodes)
        model = NcclModel(topo)
        configs = [sweep.config or model.choose(sweep.collective, n).config for n in sweep.sizes]
        sizes = np.array(sweep.sizes, dtype=float)
        times = np.empty(len(configs))
        for config in set(configs):
            rows = [i for i, c in enumerate(configs) if c == config]
            factor = (efficiency or {}).get((config.algorithm, config.protocol), 1.0)
            res = simulate(scaled_bandwidth(topo, factor), np.full(len(rows), int(sweep.collective)),
                           sizes[rows], ConfigBatch.from_configs([config]))
            times[rows] = res.time_us[:, 0]
        times = times * rng.lognormal(0.0, noise_sigma, size=len(times))
        for n, t in zip(sweep.sizes, times, strict=True):
            algbw, busbw = bandwidths(sweep.collective, n, topo.nranks, float(t))
            forced = sweep.config
            out.append(MeasurementRecord(
                collective=sweep.collective.name.lower(), nbytes=int(n), nranks=topo.nranks,
                time_us=float(t), algbw_GBps=algbw, busbw_GBps=busbw,
                **(Knobs.of(forced).record() if forced else {}), nnodes=sweep.nodes,
                source=f"synthetic:{truth.name}:{sweep.nodes}n"))
    return out


def powers_of_two(lo: int, hi: int, step: int = 1) -> tuple[int, ...]:
    return tuple(2**k for k in range(lo, hi + 1, step))
