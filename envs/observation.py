"""The observation vector: what a tuning policy sees about one collective call.

Everything a tuner plugin could know when NCCL asks it about a call goes in (the collective, its
size, the system's shape and links, overlapped compute, the straggler it has been seeing) plus the
last time it observed relative to NCCL's default, so a policy can react to a change it cannot see
directly. Every field is scaled into ``[0, 1]`` (the last one into ``[-1, 1]``) with fixed bounds,
not statistics of a training set, so a held-out system encodes the same way as a training one.

:data:`OBSERVATION_FIELDS` is the table the environment's docstring and the Box bounds come from.
The static part of a scenario's encoding is cached, so a step costs one copy and four writes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import FABRICS, LINKS, Topology

#: Tiers encoded; deeper systems are refused (seed 000's deepest system has three).
MAX_TIERS = 3
#: Message sizes are binned by powers of two (the bins NCCL's tuner tables use): bin b holds
#: ``2**b <= nbytes < 2**(b+1)``; 2**36 bytes (64 GiB) and above share the last bin.
MAX_SIZE_BIN = 36
#: log2 scale of rank, node and tier counts (4096 ranks) and of GPUs per node (128).
LOG2_MAX_RANKS = 12
LOG2_MAX_GPUS_PER_NODE = 7
#: Straggler delays are binned at these edges (µs): bin 1 is below 100 µs, bin 6 is 10 ms and
#: above (seed 004 measured typical persistent-straggler delays of a few to ten milliseconds).
DELAY_BIN_EDGES_US: tuple[float, ...] = (100.0, 300.0, 1_000.0, 3_000.0, 10_000.0)
#: The last-time ratio is encoded as log2(ratio) / LOG2_RATIO_RANGE, clipped to [-1, 1].
LOG2_RATIO_RANGE = 4.0


@dataclass(frozen=True)
class ObservationField:
    index: int
    name: str
    meaning: str
    low: float
    high: float


def field_table(specs: Sequence[tuple[str, str, float, float]]
                ) -> tuple[tuple[ObservationField, ...], np.ndarray, np.ndarray, dict[str, int]]:
    """An observation's table from its (name, meaning, low, high) specs, in order: the numbered
    fields, their low and high bounds as gymnasium's ``Box`` takes them (float32), and each name's
    index. Both observations (this one and the deployable one) are built by it."""
    fields = tuple(ObservationField(i, *spec) for i, spec in enumerate(specs))
    low = np.array([f.low for f in fields], dtype=np.float32)
    high = np.array([f.high for f in fields], dtype=np.float32)
    return fields, low, high, {f.name: f.index for f in fields}


def _field_specs() -> list[tuple[str, str, float, float]]:
    specs: list[tuple[str, str, float, float]] = [
        (f"collective_{c.name.lower()}", f"1 if the call is {c.name.lower()}", 0.0, 1.0)
        for c in Collective
    ]
    specs += [
        ("size_bin", f"floor(log2 bytes) / {MAX_SIZE_BIN}", 0.0, 1.0),
        ("ranks", f"log2(ranks) / {LOG2_MAX_RANKS}", 0.0, 1.0),
        ("nodes", f"log2(nodes) / {LOG2_MAX_RANKS}", 0.0, 1.0),
        ("gpus_per_node", f"log2(GPUs per node) / {LOG2_MAX_GPUS_PER_NODE}", 0.0, 1.0),
        ("gpu_arch", "(SM version - 70) / 30 (sm70 = 0, sm100 = 1)", 0.0, 1.0),
        ("feature_nvls", "1 if NVSwitch multicast (NVLS) is available", 0.0, 1.0),
        ("feature_collnet", "1 if in-network reduction (CollNet/SHARP) is available", 0.0, 1.0),
        ("c2c", "c2c / (1 + c2c): compute-to-communication ratio of overlapped compute", 0.0, 1.0),
    ]
    for k in range(MAX_TIERS):
        t = f"tier{k}"
        specs += [
            (f"{t}_present",
             "1 if the system has this tier (0 = innermost, the node); an outer tier of size 1 "
             "carries no traffic and is encoded as absent (all its fields 0)", 0.0, 1.0),
            (f"{t}_size", f"log2(tier size) / {LOG2_MAX_RANKS}", 0.0, 1.0),
            (f"{t}_bandwidth", "log10(per-rank port GB/s) / 3 (1 GB/s = 0, 1 TB/s = 1)", 0.0, 1.0),
            (f"{t}_bandwidth_ratio",
             "log2(tier-0 GB/s / this tier's per-rank GB/s) / 8 (1:1 = 0, 256:1 = 1)", 0.0, 1.0),
            (f"{t}_latency", "log10(10 x hop latency µs) / 3 (0.1 µs = 0, 100 µs = 1)", 0.0, 1.0),
        ]
        specs += [(f"{t}_fabric_{f}", f"1 if the tier's fabric is {f}", 0.0, 1.0) for f in FABRICS]
        specs += [(f"{t}_link_{ln}", f"1 if the tier's links are {ln}", 0.0, 1.0) for ln in LINKS]
    specs += [
        ("straggler_present", "1 if a rank was seen arriving late", 0.0, 1.0),
        ("straggler_position", "late rank / (ranks - 1) (0 without a straggler)", 0.0, 1.0),
        ("straggler_delay_bin",
         f"delay bin / {len(DELAY_BIN_EDGES_US) + 1}: 0 none, then edges "
         f"{', '.join(f'{e:g}' for e in DELAY_BIN_EDGES_US)} µs", 0.0, 1.0),
        ("last_time_ratio",
         f"log2(last observed time / NCCL default's time) / {LOG2_RATIO_RANGE:g}, clipped "
         "(0 = as fast as NCCL, < 0 faster)", -1.0, 1.0),
    ]
    return specs


OBSERVATION_FIELDS, OBS_LOW, OBS_HIGH, _INDEX = field_table(_field_specs())
OBS_SIZE = len(OBSERVATION_FIELDS)
#: The fields that describe only the system, in :func:`system_features`' order.
SYSTEM_FIELDS: tuple[ObservationField, ...] = tuple(
    f for f in OBSERVATION_FIELDS
    if f.name in ("ranks", "nodes", "gpus_per_node", "gpu_arch", "feature_nvls", "feature_collnet")
    or f.name.startswith("tier")
)
_STRAGGLER = _INDEX["straggler_present"]
_LAST = _INDEX["last_time_ratio"]
_TIER_WIDTH = _INDEX["tier1_present"] - _INDEX["tier0_present"]


def size_bin(nbytes: int) -> int:
    """The power-of-two size bin of a message (0 for an empty one)."""
    return min(max(int(nbytes).bit_length() - 1, 0), MAX_SIZE_BIN)


def delay_bin(delay_us: float) -> int:
    """0 without delay, else 1 + the number of :data:`DELAY_BIN_EDGES_US` at or below it."""
    if delay_us <= 0:
        return 0
    return 1 + sum(delay_us >= e for e in DELAY_BIN_EDGES_US)


def _unit(x: float) -> float:
    return min(max(x, 0.0), 1.0)


@lru_cache(maxsize=1024)
def _topology_part(topology: Topology) -> np.ndarray:
    """Fields that depend only on the system, from ``ranks`` to the last tier field."""
    if len(topology.tiers) > MAX_TIERS:
        raise ValueError(
            f"{topology.name} has {len(topology.tiers)} tiers; the observation encodes at most "
            f"{MAX_TIERS} (merge tiers, or raise observation.MAX_TIERS and retrain)"
        )
    head = [
        _unit(math.log2(topology.nranks) / LOG2_MAX_RANKS),
        _unit(math.log2(topology.nodes) / LOG2_MAX_RANKS),
        _unit(math.log2(topology.gpus_per_node) / LOG2_MAX_GPUS_PER_NODE),
        _unit((topology.gpu.sm - 70) / 30),
        float(topology.features.nvls),
        float(topology.features.collnet),
    ]
    tiers = np.zeros(MAX_TIERS * _TIER_WIDTH)
    inner_bw = topology.tiers[0].port_bandwidth_GBps
    for k, tier in enumerate(topology.tiers):
        if k > 0 and tier.size == 1:
            continue
        bw = tier.port_bandwidth_GBps
        values = [
            1.0,
            _unit(math.log2(tier.size) / LOG2_MAX_RANKS),
            _unit(math.log10(bw) / 3),
            _unit(math.log2(inner_bw / bw) / 8),
            _unit(math.log10(max(10 * tier.latency_us, 1.0)) / 3),
            *(float(tier.fabric == f) for f in FABRICS),
            *(float(tier.link == ln) for ln in LINKS),
        ]
        tiers[k * _TIER_WIDTH:(k + 1) * _TIER_WIDTH] = values
    return np.concatenate([head, tiers])


def system_features(topology: Topology) -> np.ndarray:
    """The :data:`SYSTEM_FIELDS` of ``topology`` (read-only, cached per system)."""
    return _topology_part(topology)


@lru_cache(maxsize=65536)
def _static_part(topology: Topology, collective: Collective, nbytes: int, c2c: float) -> np.ndarray:
    one_hot = [float(c == collective) for c in Collective]
    call = [size_bin(nbytes) / MAX_SIZE_BIN]
    system = _topology_part(topology)
    vec = np.zeros(OBS_SIZE, dtype=np.float32)
    head = np.concatenate([one_hot, call, system[:6], [c2c / (1.0 + c2c)], system[6:]])
    vec[:_STRAGGLER] = head
    vec.setflags(write=False)
    return vec


def static_features(scenario: Scenario) -> np.ndarray:
    """The part of ``scenario``'s observation that does not change between calls (read-only)."""
    return _static_part(scenario.topology, scenario.collective, scenario.nbytes, scenario.c2c)


def encode(
    scenario: Scenario,
    last_time_ratio: float = 1.0,
    *,
    observed_straggler: tuple[int | None, float] | None = None,
) -> np.ndarray:
    """The observation of ``scenario`` (a fresh float32 array of length :data:`OBS_SIZE`).

    ``last_time_ratio`` is the previous call's time over NCCL default's time (1.0 when nothing has
    been observed yet). The straggler fields describe ``scenario``'s own straggler unless
    ``observed_straggler`` = (rank or None, delay µs) says what was actually seen; the environment
    passes what its backend observed on the previous call.
    """
    if observed_straggler is None:
        observed_straggler = (scenario.straggler_rank, scenario.straggler_delay_us)
    return complete(static_features(scenario), scenario.topology.nranks, *observed_straggler,
                    last_time_ratio)


def complete(static: np.ndarray, nranks: int, straggler_rank: int | None,
             straggler_delay_us: float, last_time_ratio: float) -> np.ndarray:
    """:func:`static_features` plus what was observed: the environment's per-step fast path."""
    if not last_time_ratio > 0:  # zero or NaN: nothing sensible was observed
        raise ValueError(f"last_time_ratio must be positive, got {last_time_ratio!r}")
    vec = static.copy()
    if straggler_rank is not None and straggler_delay_us > 0:
        vec[_STRAGGLER] = 1.0
        vec[_STRAGGLER + 1] = min(straggler_rank / max(nranks - 1, 1), 1.0)
        vec[_STRAGGLER + 2] = delay_bin(straggler_delay_us) / (len(DELAY_BIN_EDGES_US) + 1)
    vec[_LAST] = min(max(math.log2(last_time_ratio) / LOG2_RATIO_RANGE, -1.0), 1.0)
    return vec


def describe(observation: np.ndarray) -> dict[str, float]:
    """Field name → value, for logs and debugging."""
    return {f.name: float(observation[f.index]) for f in OBSERVATION_FIELDS}
