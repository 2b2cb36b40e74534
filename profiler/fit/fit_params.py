"""What a calibration can fit, how each parameter is coded for the solver, and its prior.

Two families:

* **tier** parameters — each tier's bandwidth and latency, written into the tiers. They have no
  prior: the data determines them or the fit refuses them (``calibrate.py``).
* **refinements** — per (algorithm, protocol) bandwidth efficiency and base latency, the host's
  launch floor and the network transport's per-message overhead, written into the topology's
  ``calibration:`` section (``dynamiccl.system.calibration``). Each starts at what the physical model
  assumes and carries a *prior* around it, so a refinement the data says nothing about stays where
  physics put it instead of wandering along a direction the data cannot see (e.g. a tier bandwidth
  and the efficiency of the only algorithm that crosses the tier). Priors, in the units the solver
  sees: efficiency log-normal around 1 with sigma 0.5 (implementations differ from the physical
  model by tens of percent, not by factors of ten); latencies and floors normal around the model's
  value with sigma ``LATENCY_PRIOR_US``.

Positive scale parameters (bandwidths, efficiencies) are solved in log space, so a step is a factor
and they stay positive; latencies, floors and overheads are solved in µs with a lower bound of 0.
Physics bounds both further: a tier's hop takes at least ``HOP_LATENCY_FLOOR_US`` of its link, and
an algorithm/protocol moves data at most at the physical model's rate (efficiency <= 1: the model's
rate is already what the links carry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dynamiccl.simulator.launch import launch_floor_us
from dynamiccl.simulator.protocols import base_latency_us
from dynamiccl.system.calibration import AlgoProtoFit, Calibration, Fitted
from dynamiccl.system.knobs import Config
from dynamiccl.system.nccl import Algorithm, Protocol
from dynamiccl.system.topology import Topology
from dynamiccl.system.transports import TRANSPORTS

EFFICIENCY_PRIOR_LOG_SIGMA = 0.5
#: The least one hop across a tier takes (µs), by link: the fastest NVSwitch and PCIe-switch hops
#: take a few hundred ns and an RDMA network hop (InfiniBand, RoCE) about a microsecond end to end.
#: A fit that drives a tier's latency lower has put its time elsewhere (a base latency, the launch
#: floor), which the data cannot tell apart.
HOP_LATENCY_FLOOR_US = {"nvlink": 0.1, "pcie": 0.1, "net": 0.5}
#: The most an algorithm/protocol's bandwidth efficiency may be (the physical model's own rate).
MAX_EFFICIENCY = 1.0
LATENCY_PRIOR_US = 10.0
TIER_FIELDS = ("bandwidth_GBps", "latency_us")


@dataclass(frozen=True)
class Param:
    #: "tier", "efficiency", "base_latency", "launch_floor" or "transport_overhead".
    kind: str
    label: str
    tier: int = -1
    field: str = ""
    algorithm: int = -1
    protocol: int = -1
    #: A latency's physical floor (µs); 0 for the additive refinements.
    floor_us: float = 0.0

    @property
    def log_coded(self) -> bool:
        """Bandwidths and efficiencies are scale parameters (a step is a factor); latencies are
        solved in µs, so a latency the data puts at zero is determined there, not lost in log."""
        return self.kind == "efficiency" or (self.kind == "tier" and self.field != "latency_us")

    @property
    def prior_sigma(self) -> float | None:
        """Prior sigma in solver units; None for tier parameters (no prior)."""
        if self.kind == "tier":
            return None
        return EFFICIENCY_PRIOR_LOG_SIGMA if self.kind == "efficiency" else LATENCY_PRIOR_US


def tier_params(base: Topology) -> list[Param]:
    """Bandwidth and latency of every tier, and the socket link of a PCIe node spread over
    several CPU sockets (it, not the PCIe links, paces the GPUs' traffic there)."""
    out = [Param("tier", f"{t.name}.{f}", tier=i, field=f,
                 floor_us=HOP_LATENCY_FLOOR_US[t.link] if f == "latency_us" else 0.0)
           for i, t in enumerate(base.tiers) for f in TIER_FIELDS]
    out += [Param("tier", f"{t.name}.socket_link_GBps", tier=i, field="socket_link_GBps")
            for i, t in enumerate(base.tiers) if t.path == "SYS"]
    return out


def refinement_params(base: Topology, configs: Sequence[Config], crosses_network: bool) -> list[Param]:
    """Refinements for the (algorithm, protocol) pairs that ran, the floor and the transport."""
    pairs = sorted({(int(c.algorithm), int(c.protocol)) for c in configs})
    out = []
    for a, p in pairs:
        name = f"{Algorithm(a).name.lower()}/{Protocol(p).name.lower()}"
        out.append(Param("efficiency", f"{name}.bw_efficiency", algorithm=a, protocol=p))
        out.append(Param("base_latency", f"{name}.base_latency_us", algorithm=a, protocol=p))
    out.append(Param("launch_floor", "launch_floor_us"))
    if crosses_network and any(t.link == "net" for t in base.tiers):
        out.append(Param("transport_overhead", "transport_overhead_us"))
    return out


def natural_value(base: Topology, p: Param) -> float:
    """The value the uncalibrated model uses for ``p`` (µs, GB/s or a factor)."""
    if p.kind == "tier":
        tier = base.tiers[p.tier]
        return float(getattr(tier.pcie if p.field == "socket_link_GBps" else tier, p.field))
    if p.kind == "efficiency":
        return 1.0
    if p.kind == "base_latency":
        return float(base_latency_us(Algorithm(p.algorithm), np.array([p.protocol]))[0])
    if p.kind == "launch_floor":
        return launch_floor_us(replace(base, calibration=None))
    net = next(t for t in base.tiers if t.link == "net")
    return TRANSPORTS[net.transport].message_overhead_us


def encode(p: Param, value: float) -> float:
    return float(np.log(max(value, 1e-3))) if p.log_coded else float(value)


def decode(p: Param, x: float) -> float:
    return float(np.exp(min(x, 700.0))) if p.log_coded else float(x)


def lower_bound(p: Param) -> float:
    """The least value ``p`` may take, in solver units."""
    return -np.inf if p.log_coded else p.floor_us


def upper_bound(p: Param) -> float:
    """The most value ``p`` may take, in solver units (an efficiency at most ``MAX_EFFICIENCY``)."""
    return float(np.log(MAX_EFFICIENCY)) if p.kind == "efficiency" else np.inf


def apply(base: Topology, params: Sequence[Param], x: np.ndarray,
          rel_std: np.ndarray | None = None) -> Topology:
    """``base`` with every parameter set to its decoded value (and, if given, its uncertainty)."""
    tiers = list(base.tiers)
    fits: dict[tuple[int, int], dict[str, Fitted]] = {}
    floor = overhead = None
    tier_fits = []
    for i, p in enumerate(params):
        value = decode(p, float(x[i]))
        fitted = Fitted(value, 0.0 if rel_std is None else float(rel_std[i]))
        if p.kind == "tier" and p.field == "socket_link_GBps":
            tiers[p.tier] = replace(tiers[p.tier], pcie=replace(tiers[p.tier].pcie, socket_link_GBps=value))
            tier_fits.append((p.label, fitted))
        elif p.kind == "tier":
            tiers[p.tier] = replace(tiers[p.tier], **{p.field: value})
            tier_fits.append((p.label, fitted))
        elif p.kind == "efficiency":
            fits.setdefault((p.algorithm, p.protocol), {})["bw_efficiency"] = fitted
        elif p.kind == "base_latency":
            fits.setdefault((p.algorithm, p.protocol), {})["base_latency_us"] = fitted
        elif p.kind == "launch_floor":
            floor = fitted
        else:
            overhead = fitted
    algos = tuple(AlgoProtoFit(Algorithm(a), Protocol(pr), **f) for (a, pr), f in sorted(fits.items()))
    old = base.calibration or Calibration()
    cal = replace(old, launch_floor_us=floor or old.launch_floor_us,
                  transport_overhead_us=overhead or old.transport_overhead_us,
                  algorithms=algos or old.algorithms, tiers=tuple(tier_fits) or old.tiers)
    has_refinement = cal.algorithms or cal.launch_floor_us or cal.transport_overhead_us
    return replace(base, tiers=tuple(tiers), calibration=cal if has_refinement else base.calibration)
