"""The knob space: one definition shared by the simulator, the environment, the agents and export.

Every tunable choice is enumerated once, here, as a flat table of joint actions. An action id is an
index into :data:`ACTIONS`; the environment's ``Discrete`` space, the oracle, the policy file and the
simulator all speak in these ids, so a decision means the same thing everywhere.

Collectives, algorithms and protocols are NCCL's own enums with NCCL's integer ids
(:mod:`dynamiccl.system.nccl`), because the policy file and the C plugin must use exactly NCCL's numbering.

Which joint actions are *valid* depends on the system and the collective (:func:`valid_mask`); which
ones NCCL can be *told* to do through a tuner plugin is the ``exportable`` column, written down in
one place (:data:`EXPORTABLE_ALGO_HIERARCHY`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.system.nccl import (
    ALGORITHM_SPECS,
    MAX_CHANNELS,
    NCCL_ALGORITHMS,
    NCCL_ALIASES,
    Algorithm,
    Collective,
    Protocol,
)

if TYPE_CHECKING:
    from dynamiccl.system.topology import Topology


class Hierarchy(enum.IntEnum):
    FLAT = 0
    HIERARCHICAL = 1


class Schedule(enum.IntEnum):
    """How a hierarchical collective is split across tiers (seed 000's two policies).

    ``BASELINE``: a full collective in every tier, one tier after the other (seed 000's FIFO).
    ``BW_AWARE``: reduce-scatter inside, the collective across tiers on 1/k of the data, all-gather
    inside (seed 000's localBWAware): only a k-th of the bytes cross the slow tier.
    """

    BASELINE = 0
    BW_AWARE = 1


#: Channel counts the agents choose among (NCCL allows 1..64; powers of two cover the range).
CHANNEL_LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Active chunks in flight per tier for pipelined hierarchical collectives.
CHUNK_LEVELS: tuple[int, ...] = (1, 2, 4, 8)

# The (algorithm, hierarchy) pairs that exist: every algorithm with the hierarchy it intrinsically
# has (dynamiccl.system.nccl's capability table), plus the simulator's ring-over-ring, which shares Ring's
# algorithm but is hierarchical. The order fixes the action ids.
ALGO_HIERARCHY_PAIRS: tuple[tuple[Algorithm, Hierarchy], ...] = (
    (Algorithm.RING, Hierarchy.FLAT),
    (Algorithm.RING, Hierarchy.HIERARCHICAL),
    *((algo, Hierarchy(ALGORITHM_SPECS[algo].hierarchical)) for algo in Algorithm if algo != Algorithm.RING),
)

#: The one place that says which (algorithm, hierarchy) pairs exist only in the simulator: a
#: ring-over-ring with a chosen scheduling policy, and every algorithm NCCL lacks (StragglAR). Every
#: other pair is an NCCL algorithm with the hierarchy it intrinsically has, which a tuner plugin can
#: make NCCL run.
SIMULATOR_ONLY: frozenset[tuple[Algorithm, Hierarchy]] = frozenset(
    {(Algorithm.RING, Hierarchy.HIERARCHICAL)}
    | {pair for pair in ALGO_HIERARCHY_PAIRS if pair[0] not in NCCL_ALGORITHMS}
)
EXPORTABLE_ALGO_HIERARCHY: frozenset[tuple[Algorithm, Hierarchy]] = frozenset(
    pair for pair in ALGO_HIERARCHY_PAIRS if pair not in SIMULATOR_ONLY
)


@dataclass(frozen=True, order=True)
class Config:
    """One joint choice of every knob."""

    algorithm: Algorithm
    protocol: Protocol
    channels: int
    hierarchy: Hierarchy = Hierarchy.FLAT
    schedule: Schedule = Schedule.BASELINE
    chunks: int = 1

    @property
    def exportable(self) -> bool:
        return (
            (self.algorithm, self.hierarchy) in EXPORTABLE_ALGO_HIERARCHY
            and self.schedule == Schedule.BASELINE
            and self.chunks == 1
        )

    def to_dict(self) -> dict[str, str | int]:
        return {
            "algorithm": self.algorithm.name.lower(),
            "protocol": self.protocol.name.lower(),
            "channels": self.channels,
            "hierarchy": self.hierarchy.name.lower(),
            "schedule": self.schedule.name.lower(),
            "chunks": self.chunks,
        }

    def __deepcopy__(self, memo: dict) -> Config:
        return self  # immutable; SB3's DummyVecEnv deep-copies every step's info dict

    def label(self) -> str:
        """Short human label, e.g. ``ring/simple/16ch`` or ``ring-hier(bw_aware,4ck)/simple/8ch``."""
        algo = self.algorithm.name.lower()
        if self.algorithm == Algorithm.RING and self.hierarchy == Hierarchy.HIERARCHICAL:
            algo = f"ring-hier({self.schedule.name.lower()},{self.chunks}ck)"
        return f"{algo}/{self.protocol.name.lower()}/{self.channels}ch"


def span_label(configs: Sequence[Config]) -> str:
    """One label for configurations that differ at most in their channel count, the count as a
    range (``ring/ll/1-24ch``): what NCCL picks over a range of sizes, where its channel count grows
    with the size while its algorithm and protocol stay."""
    channels = sorted({c.channels for c in configs})
    base = configs[0].label().rsplit("/", 1)[0]
    return f"{base}/{channels[0]}ch" if len(channels) == 1 else f"{base}/{channels[0]}-{channels[-1]}ch"


def without_channels(config: Config) -> str:
    """A configuration's label less its channel count (``ring/ll``)."""
    return config.label().rsplit("/", 1)[0]


def _enumerate_actions() -> tuple[Config, ...]:
    actions: list[Config] = []
    for algo, hier in ALGO_HIERARCHY_PAIRS:
        variants = [(Schedule.BASELINE, 1)]
        if algo == Algorithm.RING and hier == Hierarchy.HIERARCHICAL:
            variants = [(s, c) for s in Schedule for c in CHUNK_LEVELS]
        for proto in Protocol:
            for ch in CHANNEL_LEVELS:
                for sched, chunks in variants:
                    actions.append(Config(algo, proto, ch, hier, sched, chunks))
    return tuple(actions)


#: Every joint action; an action id is an index into this tuple.
ACTIONS: tuple[Config, ...] = _enumerate_actions()
N_ACTIONS = len(ACTIONS)
ACTION_INDEX: dict[Config, int] = {c: i for i, c in enumerate(ACTIONS)}


class ActionColumns:
    """The action table as numpy columns, so vectorized code never loops over actions."""

    algorithm = np.array([int(c.algorithm) for c in ACTIONS], dtype=np.int64)
    protocol = np.array([int(c.protocol) for c in ACTIONS], dtype=np.int64)
    channels = np.array([c.channels for c in ACTIONS], dtype=np.int64)
    hierarchy = np.array([int(c.hierarchy) for c in ACTIONS], dtype=np.int64)
    schedule = np.array([int(c.schedule) for c in ACTIONS], dtype=np.int64)
    chunks = np.array([c.chunks for c in ACTIONS], dtype=np.int64)
    exportable = np.array([c.exportable for c in ACTIONS], dtype=bool)


EXPORTABLE_MASK: np.ndarray = ActionColumns.exportable


@dataclass(frozen=True)
class ConfigBatch:
    """Configurations as parallel integer columns: the simulator's vectorized input.

    Unlike action ids, a batch may hold any channel count 1..64 (NCCL's own pick is often 24 or 13).
    """

    algorithm: np.ndarray
    protocol: np.ndarray
    channels: np.ndarray
    hierarchy: np.ndarray
    schedule: np.ndarray
    chunks: np.ndarray

    def __len__(self) -> int:
        return len(self.algorithm)

    @classmethod
    def from_configs(cls, configs: list[Config] | tuple[Config, ...]) -> ConfigBatch:
        cols = zip(*[(int(c.algorithm), int(c.protocol), c.channels, int(c.hierarchy),
                      int(c.schedule), c.chunks) for c in configs], strict=True)
        return cls(*(np.array(col, dtype=np.int64) for col in cols))

    @classmethod
    def all_actions(cls) -> ConfigBatch:
        c = ActionColumns
        return cls(c.algorithm, c.protocol, c.channels, c.hierarchy, c.schedule, c.chunks)

    def take(self, index: np.ndarray) -> ConfigBatch:
        return ConfigBatch(*(getattr(self, f)[index] for f in
                             ("algorithm", "protocol", "channels", "hierarchy", "schedule", "chunks")))


def action_id(config: Config) -> int:
    """Id of ``config``; raises a readable error for a combination the knob space does not have."""
    try:
        return ACTION_INDEX[config]
    except KeyError:
        raise ValueError(
            f"{config.label()} is not in the knob space: channels must be one of "
            f"{CHANNEL_LEVELS}, chunks one of {CHUNK_LEVELS}, and only ring may be hierarchical "
            "with a scheduling policy"
        ) from None


# ---------------------------------------------------------------------------------------------
# Validity rules. Each returns a reason string for an invalid combination (None when valid), so
# the CLI can say *why* a choice is impossible; valid_mask vectorizes the same rules.
# ---------------------------------------------------------------------------------------------

def _shape_problem(config: Config) -> str | None:
    if not 1 <= config.channels <= MAX_CHANNELS:
        return f"channels must be 1..{MAX_CHANNELS}, got {config.channels}"
    if config.chunks not in CHUNK_LEVELS:
        return f"active chunks must be one of {CHUNK_LEVELS}, got {config.chunks}"
    pair = (config.algorithm, config.hierarchy)
    if pair not in ALGO_HIERARCHY_PAIRS:
        return f"{config.algorithm.name.lower()} is not {config.hierarchy.name.lower()}"
    if pair != (Algorithm.RING, Hierarchy.HIERARCHICAL) and (
        config.schedule != Schedule.BASELINE or config.chunks != 1
    ):
        return "a scheduling policy and active chunks apply only to the hierarchical ring"
    return None


def invalid_reason(topology: Topology, collective: Collective, config: Config, *,
                   protocol_named: bool = False) -> str | None:
    """Why ``config`` cannot run ``collective`` on ``topology`` (None when it can).

    The rules follow NCCL's own enable rules (NCCL 2.30.7 ``src/graph/tuning.cc``,
    ``src/enqueue.cc``) where NCCL has them. ``protocol_named``: the run named its protocol in
    ``NCCL_PROTO``, which enables it whatever the default rule says (LL128 off by default: NCCL
    still runs it when forced, :class:`dynamiccl.nccl_model.NcclModel`); a policy never pins such a
    choice, but a measurement forced so is something NCCL ran.
    """
    algo, proto = config.algorithm, config.protocol
    nranks = topology.nranks
    shape_problem = _shape_problem(config)
    if shape_problem:
        return shape_problem
    if nranks == 1:
        if (algo, proto, config.hierarchy) != (Algorithm.RING, Protocol.SIMPLE, Hierarchy.FLAT):
            return "a single rank only runs NCCL's local copy (ring/simple)"
        return None
    capability = ALGORITHM_SPECS[algo]
    if collective not in capability.collectives:
        allowed = ", ".join(sorted(c.name.lower() for c in capability.collectives))
        return f"{algo.name.lower()} only implements {allowed}"
    if algo == Algorithm.RING and config.hierarchy == Hierarchy.HIERARCHICAL:
        if collective not in (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCESCATTER):
            return "ring-over-ring is modelled for allreduce, allgather and reducescatter"
        if len(topology.ring_dimensions) < 2:
            return ("a hierarchical ring needs two levels to run along: at least 2 nodes with at "
                    "least 2 GPUs each, or the two dimensions of a 2-D torus")
    for requirement in capability.requirements:
        if not requirement.met_by(topology):
            return requirement.missing
    # Protocol rules last: when the system cannot run the algorithm at all, that is the reason to
    # give (NVLS on an A100 needs NVSwitch multicast), not a protocol the user could change.
    if proto not in capability.protocols:
        allowed = " or ".join(p.name.lower() for p in sorted(capability.protocols))
        return f"{algo.name.lower()} only runs the {allowed} protocol"
    if proto == Protocol.LL128 and not topology.ll128_enabled and not protocol_named:
        return (
            "LL128 is off on this system (NCCL enables it only on sm70+ GPUs whose intra-node "
            "path is NVLink)"
        )
    return None


def validity_key(topology: Topology) -> tuple:
    """Everything :func:`invalid_reason` reads of ``topology``: systems with equal keys accept
    exactly the same configurations, so validity is cached by it (the thousands of random systems a
    learner draws share a few dozen keys; a calibration's thousands of bandwidths share one)."""
    return (topology.nranks == 1, len(topology.ring_dimensions) >= 2, topology.ll128_enabled,
            tuple(r.met_by(topology) for spec in ALGORITHM_SPECS.values() for r in spec.requirements))


@lru_cache(maxsize=4096)
def _valid_mask_cached(topology: Topology, collective: Collective) -> np.ndarray:
    mask = np.array([invalid_reason(topology, collective, c) is None for c in ACTIONS], dtype=bool)
    mask.setflags(write=False)
    return mask


def valid_mask(
    topology: Topology, collective: Collective, *, deployable: bool = False
) -> np.ndarray:
    """Boolean mask over :data:`ACTIONS`; with ``deployable`` only exportable actions survive."""
    mask = _valid_mask_cached(topology, Collective(collective))
    return mask & EXPORTABLE_MASK if deployable else mask


#: Other names people use for the knob-space-only choices (seed 000's policy names).
_KNOB_ALIASES = {"BWAWARE": "BW_AWARE", "FIFO": "BASELINE", "LOCALBWAWARE": "BW_AWARE",
                 "HIER": "HIERARCHICAL"}


def parse_enum(enum_cls: type[enum.IntEnum], text: str | int) -> enum.IntEnum:
    """Accepts a name in any case (``nvls_tree``, ``NVLSTree``) or NCCL's integer id."""
    if isinstance(text, int) or (isinstance(text, str) and text.strip().lstrip("-").isdigit()):
        return enum_cls(int(text))
    key = str(text).strip().upper().replace("-", "_")
    aliases = {**NCCL_ALIASES, **_KNOB_ALIASES}
    key = aliases.get(key.replace("_", ""), aliases.get(key, key))
    try:
        return enum_cls[key]
    except KeyError:
        choices = ", ".join(m.name.lower() for m in enum_cls)
        raise ValueError(f"unknown {enum_cls.__name__.lower()} {text!r}; choose from {choices}") from None


#: The hierarchy each NCCL algorithm intrinsically has (the exportable mapping, keyed by algorithm).
NCCL_ALGORITHM_HIERARCHY: dict[Algorithm, Hierarchy] = {
    algo: hier for algo, hier in EXPORTABLE_ALGO_HIERARCHY
}


def nccl_config(algorithm: Algorithm, protocol: Protocol, channels: int) -> Config:
    """The knob-space configuration of what NCCL runs when it picks (algorithm, protocol, channels)."""
    return Config(Algorithm(algorithm), Protocol(protocol), int(channels),
                  NCCL_ALGORITHM_HIERARCHY[Algorithm(algorithm)])
