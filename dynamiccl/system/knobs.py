"""The knob space: one definition shared by the simulator, the environment, the agents and export.

Every knob is declared once, as one entry of :data:`KNOBS` (a :class:`Knob`): its name (the attribute
of every record, the policy file's column, the JSON key), its levels, its range, and for a knob NCCL
can be told (:class:`NcclKnob`) the C type of its field in the plugin, the environment variables
that force it, the NCCL release that honours it and the policy-file format version that added its
column. Everything else reads the table: :class:`Config` and :class:`ConfigBatch` (the joint action
and its numpy columns), :class:`Knobs` (what NCCL is told for a call: the policy file's decisions,
tune's choices, the runtime's pins, the measurement records), the policy format and the generated C
header and parser, the CSV columns, ``show`` and ``explain``.

"Keep NCCL's own value" has one spelling per medium: ``None`` in Python (:data:`KEEP`), ``-1``
in integer columns (:data:`KEEP_ID`: numpy, ctypes, the C plugin's ``DCCL_KEEP``) and ``-`` in
the policy file (``policy_format.KEEP``).

The tunable choices are enumerated once, here, as a flat table of joint actions. An action id is an
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
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from dynamiccl.system.nccl import (
    ALGO_ENV,
    ALGORITHM_NCCL_NAMES,
    ALGORITHM_SPECS,
    MAX_CHANNELS,
    MAX_CHANNELS_ENV,
    MIN_CHANNELS_ENV,
    NCCL_ALGORITHMS,
    NCCL_ALIASES,
    PROTO_ENV,
    PROTOCOL_NCCL_NAMES,
    Algorithm,
    Collective,
    Protocol,
)
from dynamiccl.system.units import format_size

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
#: Chunk sizes (bytes) tried beside NCCL's own: smaller than NCCL's Simple defaults (512 KiB a
#: slot, 2 MiB a Ring/Simple chunk) and larger than its NVLS/PAT/CollNet ones (16-256 KiB).
CHUNK_BYTES_LEVELS: tuple[int, ...] = (16 << 10, 64 << 10, 256 << 10, 1 << 20)

# ---------------------------------------------------------------------------------------------
# The knob table: every knob once
# ---------------------------------------------------------------------------------------------

#: "Keep NCCL's own value" in Python: every record's field, every decision.
KEEP = None
#: "Keep NCCL's own value" in integer columns: numpy batches, the ctypes calls into the plugin and
#: the plugin's ``dccl_knobs_t`` (``DCCL_KEEP`` in the generated header).
KEEP_ID = -1


@dataclass(frozen=True)
class NcclKnob:
    """How NCCL is told a knob: through the tuner plugin, and through NCCL's environment where NCCL
    has a variable for it."""

    #: The C type of its field in the plugin's ``dccl_knobs_t`` (signed: KEEP_ID is -1).
    c_type: str
    #: The policy-file format version that added its column (older files keep NCCL's value).
    format_version: int
    #: The first NCCL release whose tuner interface lets a plugin set it (older NCCL ignores it).
    nccl_since: str
    #: How the plugin sets it (the tuner interface's entry point), for ``show`` and the docs.
    via: str
    #: NCCL's environment variables that force it for a whole process, each set to NCCL's spelling
    #: of the value; () where NCCL has none (then only the plugin's pin sets it).
    env: tuple[str, ...] = ()
    #: NCCL's spelling of each value of an enum knob (what its variables and logs say).
    nccl_names: Mapping[Any, str] | None = None
    #: The values a rule may name (enum knobs; None: every member).
    values: tuple[Any, ...] | None = None
    #: A rule may keep NCCL's value (``-``); False: a rule names it, or defers as a whole.
    keepable: bool = True
    #: NCCL's own value for a call, ``module:name`` of a function (NcclModel, collective, nbytes,
    #: config) -> value that ``NcclModel.own_value`` loads; None where NCCL's pick names it.
    nccl_default: str | None = None


@dataclass(frozen=True)
class Knob:
    """One knob, declared once: every record, file column and table reads it from here."""

    #: The attribute of Config and of every record, the policy file's column, the JSON key.
    name: str
    #: What people call it, in help and messages.
    title: str
    #: Its type: an IntEnum of its values, or int.
    kind: type
    #: The values the agents choose among (enum knobs: every member).
    levels: tuple[Any, ...]
    #: The accepted range of an integer knob, inclusive (files, records, the C parser, the plugin).
    lo: int = 0
    hi: int = 0
    #: Config's default; "named": every configuration names it.
    default: Any = "named"
    #: The learner's joint action table enumerates its levels; else every action keeps its default
    #: and the knob is decided for the chosen action on its own (``decisions``).
    in_action_table: bool = True
    #: How a value reads in labels after the number (``16ch``); enum knobs read as their names.
    suffix: str = ""
    #: Labels name it where NCCL keeps its value too (``nccl-ch``, ``auto-ch``); else they omit it.
    always_labelled: bool = True
    #: Its values are sizes in bytes: labels read ``256KiB`` (then the suffix).
    size: bool = False
    #: How NCCL is told it; None for a knob only the simulator has.
    nccl: NcclKnob | None = None
    #: Its physics where the cost models do not read it, ``module:name`` of a simulator function
    #: (topology, collectives [B], sizes [B], tables, columns [J], times [B, J]) -> times with the
    #: knob's values applied (``dynamiccl.simulator.tables.KnobEffect``), run on the columns that
    #: give it a value; None where the cost models time it themselves.
    effect: str | None = None

    @property
    def is_enum(self) -> bool:
        return isinstance(self.kind, type) and issubclass(self.kind, enum.IntEnum)

    def value(self, raw: Any) -> Any:
        """``raw`` (a member, a name in any case, NCCL's spelling or id, digits) as the knob's
        type; None stays None (keep NCCL's). Raises ValueError for anything else."""
        if raw is None:
            return None
        if self.is_enum:
            return self.kind(parse_enum(self.kind, raw))
        if isinstance(raw, bool) or not isinstance(raw, (int, np.integer, str)):
            raise ValueError(f"{self.name} {raw!r} is not a whole number")
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{self.name} {raw!r} is not a whole number") from None

    def token(self, value: Any) -> str:
        """Its spelling in a policy file and a record: the lower-case name, or the digits."""
        return value.name.lower() if self.is_enum else str(int(value))

    def record(self, value: Any) -> str | int | None:
        """Its JSON form in measurement records: names for enum knobs, integers otherwise."""
        return None if value is None else (self.token(value) if self.is_enum else int(value))

    def label(self, value: Any, keep: str | None) -> str | None:
        """Its part of a label; ``keep`` spells NCCL's own value (``nccl`` reads ``nccl-ch``;
        None, or a knob not always labelled: left out)."""
        if value is None:
            if keep is None or not self.always_labelled:
                return None
            return f"{keep}-{self.suffix}" if self.suffix else keep
        if self.is_enum:
            return self.token(value)
        return f"{format_size(value) if self.size else value}{self.suffix}"


#: Every knob, in Config's field order. NCCL's knobs (those with ``nccl``) are what a policy rule,
#: a pin, a measurement and tune's choices carry, in this order; the others only the simulator has.
KNOBS: tuple[Knob, ...] = (
    Knob("algorithm", "algorithm", Algorithm, tuple(Algorithm),
         nccl=NcclKnob("int8_t", 2, "2.21.5", "getCollInfo's cost table", env=(ALGO_ENV,),
                       nccl_names=ALGORITHM_NCCL_NAMES, values=NCCL_ALGORITHMS, keepable=False)),
    Knob("protocol", "protocol", Protocol, tuple(Protocol),
         nccl=NcclKnob("int8_t", 2, "2.21.5", "getCollInfo's cost table", env=(PROTO_ENV,),
                       nccl_names=PROTOCOL_NCCL_NAMES, keepable=False)),
    Knob("channels", "a channel count", int, CHANNEL_LEVELS, 1, MAX_CHANNELS, suffix="ch",
         nccl=NcclKnob("int8_t", 2, "2.21.5", "getCollInfo's nChannels",
                       env=(MIN_CHANNELS_ENV, MAX_CHANNELS_ENV))),
    Knob("hierarchy", "hierarchy", Hierarchy, tuple(Hierarchy), default=Hierarchy.FLAT),
    Knob("schedule", "scheduling policy", Schedule, tuple(Schedule), default=Schedule.BASELINE),
    Knob("chunks", "active chunks", int, CHUNK_LEVELS, 1, max(CHUNK_LEVELS), default=1),
    # NCCL 2.30's tuner v6 getChunkSize (src/include/plugin/tuner/tuner_v6.h): per (algorithm,
    # protocol) choice, not in the joint table (dynamiccl/README.md, "Chunk size"). The range's
    # floor stays above LL128's 1920-byte grain, below which NCCL would round a chunk to nothing.
    Knob("chunk_bytes", "a chunk size in bytes", int, CHUNK_BYTES_LEVELS, 4096, 16 << 20,
         default=None, in_action_table=False, suffix="-chunk", always_labelled=False, size=True,
         nccl=NcclKnob("int32_t", 3, "2.30.3", "getChunkSize (tuner v6)",
                       nccl_default="dynamiccl.nccl_model.model:own_chunk_bytes"),
         effect="dynamiccl.simulator.chunking:with_chunk"),
)
KNOB: dict[str, Knob] = {k.name: k for k in KNOBS}
#: The knobs NCCL can be told, in table order.
NCCL_KNOBS: tuple[Knob, ...] = tuple(k for k in KNOBS if k.nccl is not None)

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
    """One joint choice of every knob: the fields of :data:`KNOBS`, in its order."""

    algorithm: Algorithm
    protocol: Protocol
    channels: int
    hierarchy: Hierarchy = Hierarchy.FLAT
    schedule: Schedule = Schedule.BASELINE
    chunks: int = 1
    chunk_bytes: int | None = None

    @property
    def exportable(self) -> bool:
        return (
            (self.algorithm, self.hierarchy) in EXPORTABLE_ALGO_HIERARCHY
            and self.schedule == Schedule.BASELINE
            and self.chunks == 1
        )

    def to_dict(self) -> dict[str, str | int | None]:
        return {k.name: k.record(getattr(self, k.name)) for k in KNOBS}

    def __deepcopy__(self, memo: dict) -> Config:
        return self  # immutable; SB3's DummyVecEnv deep-copies every step's info dict

    def label(self) -> str:
        """Short human label, e.g. ``ring/simple/16ch`` or ``ring-hier(bw_aware,4ck)/simple/8ch``."""
        algo = self.algorithm.name.lower()
        if self.algorithm == Algorithm.RING and self.hierarchy == Hierarchy.HIERARCHICAL:
            algo = f"ring-hier({self.schedule.name.lower()},{self.chunks}ck)"
        rest = [k.label(getattr(self, k.name), None) for k in NCCL_KNOBS if k.name != "algorithm"]
        return "/".join([algo, *(part for part in rest if part is not None)])


assert [(f.name, "named" if f.default is MISSING else f.default) for f in fields(Config)] \
    == [(k.name, k.default) for k in KNOBS], \
    "Config's fields are the knob table's, in its order and with its defaults"


def span_label(configs: Sequence[Config]) -> str:
    """One label for configurations that differ at most in their channel count, the count as a
    range (``ring/ll/1-24ch``): what NCCL picks over a range of sizes, where its channel count grows
    with the size while its algorithm and protocol stay."""
    channels = sorted({c.channels for c in configs})
    base = without_channels(configs[0])
    return f"{base}/{channels[0]}ch" if len(channels) == 1 else f"{base}/{channels[0]}-{channels[-1]}ch"


def without_channels(config: Config) -> str:
    """A configuration's label less its channel count and what follows it (``ring/ll``)."""
    return "/".join(config.label().split("/")[:2])


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


def knob_id(value: Any) -> int:
    """A knob's value in an integer column: NCCL's id or the number, KEEP_ID for NCCL's own."""
    return KEEP_ID if value is None else int(value)


def config_from_ids(row: Sequence[int]) -> Config:
    """The configuration of one row of integer columns (knob table order, KEEP_ID for NCCL's own
    value); ValueError for an id outside an enum."""
    return Config(*(None if int(v) == KEEP_ID and k.nccl is not None and k.nccl.keepable
                    else k.value(int(v)) for k, v in zip(KNOBS, row, strict=True)))


def _column(configs: Sequence[Config], knob: Knob) -> np.ndarray:
    return np.array([knob_id(getattr(c, knob.name)) for c in configs], dtype=np.int64)


#: The action table as numpy columns, one per knob (``ActionColumns.channels``) plus
#: ``exportable``, so vectorized code never loops over actions.
ActionColumns = type("ActionColumns", (), {
    "__doc__": "The action table as numpy columns, so vectorized code never loops over actions.",
    **{k.name: _column(ACTIONS, k) for k in KNOBS},
    "exportable": np.array([c.exportable for c in ACTIONS], dtype=bool),
})

EXPORTABLE_MASK: np.ndarray = ActionColumns.exportable


class _Batch:
    """Methods of :class:`ConfigBatch` (its fields, one integer column per knob, come from KNOBS)."""

    def __len__(self) -> int:
        return len(self.algorithm)

    @classmethod
    def from_configs(cls, configs: Sequence[Config]) -> ConfigBatch:
        return cls(*(_column(configs, k) for k in KNOBS))

    @classmethod
    def all_actions(cls) -> ConfigBatch:
        return cls(*(getattr(ActionColumns, k.name) for k in KNOBS))

    def take(self, index: np.ndarray) -> ConfigBatch:
        return type(self)(*(getattr(self, k.name)[index] for k in KNOBS))


#: Configurations as parallel integer columns (NCCL's ids, KEEP_ID where NCCL keeps its value),
#: one per knob of :data:`KNOBS`: the simulator's vectorized input. Unlike action ids, a batch may
#: hold any channel count 1..64 (NCCL's own pick is often 24 or 13).
ConfigBatch = make_dataclass("ConfigBatch", [(k.name, np.ndarray) for k in KNOBS], bases=(_Batch,),
                             frozen=True)
ConfigBatch.__module__ = __name__
ConfigBatch.__doc__ = ("Configurations as parallel integer columns, one per knob of KNOBS (NCCL's ids, "
                       "KEEP_ID where NCCL keeps its value): the simulator's vectorized input.")

# ---------------------------------------------------------------------------------------------
# What NCCL is told for a call: one record for every place that carries NCCL's knobs
# ---------------------------------------------------------------------------------------------


class KnobValues:
    """What every record of NCCL's knob values can do; its fields (one per NCCL knob, None = keep
    NCCL's value) come from :data:`NCCL_KNOBS` in :class:`Knobs`, which policy decisions, tune's
    choices and the runtime's pins are."""

    def __post_init__(self) -> None:
        for k in NCCL_KNOBS:  # names, NCCL's ids and digits read as the knob's type
            raw = getattr(self, k.name)
            if raw is not None and not isinstance(raw, k.kind if k.is_enum else int):
                object.__setattr__(self, k.name, k.value(raw))

    def given(self) -> dict[str, Any]:
        """The knobs named (not left to NCCL), in table order."""
        return {k.name: getattr(self, k.name) for k in NCCL_KNOBS if getattr(self, k.name) is not None}

    @property
    def is_default(self) -> bool:
        """Every knob left to NCCL: NCCL's own choice."""
        return not self.given()

    def ids(self) -> tuple[int, ...]:
        """The values as the plugin's integer columns take them (KEEP_ID for NCCL's own)."""
        return tuple(knob_id(getattr(self, k.name)) for k in NCCL_KNOBS)

    @classmethod
    def from_ids(cls, ids: Sequence[int]) -> Any:
        if len(ids) != len(NCCL_KNOBS):
            raise ValueError(f"{len(ids)} knob values for the {len(NCCL_KNOBS)} knobs "
                             f"{', '.join(k.name for k in NCCL_KNOBS)}")
        return cls(**{k.name: None if int(i) == KEEP_ID else int(i)
                      for k, i in zip(NCCL_KNOBS, ids, strict=True)})

    @classmethod
    def of(cls, source: Any) -> Any:
        """The NCCL knobs of anything carrying them as attributes (a Config, a measurement record
        with names, a spec), each read as the knob's type; a missing one is NCCL's own."""
        return cls(**{k.name: k.value(getattr(source, k.name, None)) for k in NCCL_KNOBS})

    def record(self) -> dict[str, str | int | None]:
        """The values as measurement records and JSON spell them (names, integers, None)."""
        return {k.name: k.record(getattr(self, k.name)) for k in NCCL_KNOBS}

    def env(self) -> dict[str, str]:
        """The environment that makes NCCL run the knobs given that NCCL has variables for
        (:func:`forcing_env`)."""
        return forcing_env(self)

    def unforceable(self) -> tuple[str, ...]:
        """The knobs given that no NCCL variable forces: only the plugin can set them."""
        return tuple(name for name in self.given() if not KNOB[name].nccl.env)

    def parts(self, keep: str | None) -> list[str]:
        """Each knob's part of a label (:meth:`Knob.label`; ``keep`` spells NCCL's own value)."""
        parts = (k.label(getattr(self, k.name), keep) for k in NCCL_KNOBS)
        return [p for p in parts if p is not None]


#: What NCCL is told for a call: one field per knob of :data:`NCCL_KNOBS`, each None where NCCL
#: keeps its own value. ``Knobs()`` is NCCL's default.
Knobs = make_dataclass("Knobs", [(k.name, f"{k.kind.__name__} | None", field(default=KEEP))
                                 for k in NCCL_KNOBS], bases=(KnobValues,), frozen=True)
Knobs.__module__ = __name__
Knobs.__doc__ = ("What NCCL is told for a call: one field per NCCL knob (dynamiccl.system.knobs."
                 "NCCL_KNOBS), None where NCCL keeps its own value; Knobs() is NCCL's default.")


def forcing_env(knobs: KnobValues) -> dict[str, str]:
    """The environment that makes NCCL run the knobs given (empty: NCCL's default): each knob's
    variables set to NCCL's spelling of its value -- NCCL_ALGO and NCCL_PROTO in NCCL's names, a
    channel count as NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS (what nccl-tests runs, the runner's
    ranks and a plan's printed command lines all set). A knob NCCL has no variable for is left out
    (:meth:`KnobValues.unforceable` names it)."""
    env: dict[str, str] = {}
    for name, value in knobs.given().items():
        nccl = KNOB[name].nccl
        spelled = nccl.nccl_names[value] if nccl.nccl_names else str(int(value))
        env.update(dict.fromkeys(nccl.env, spelled))
    return env


def knob_fields(cls: type) -> type:
    """Gives a record class (under ``@dataclass``) a keyword-only field, default None (NCCL's
    own), for every NCCL knob it does not declare itself, so a knob added to the table is a field
    of every record that carries NCCL's knobs. Records hold each knob in its JSON form
    (:meth:`Knob.record`)."""
    annotations = cls.__dict__.get("__annotations__", {})
    for k in NCCL_KNOBS:
        if k.name not in annotations:
            annotations[k.name] = f"{'str' if k.is_enum else 'int'} | None"
            setattr(cls, k.name, field(default=None, kw_only=True))
    cls.__annotations__ = annotations
    return cls


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
    for k in NCCL_KNOBS:
        value = getattr(config, k.name)
        if not k.is_enum and value is not None and not k.lo <= value <= k.hi:
            return f"{k.name} must be {k.lo}..{k.hi}, got {value}"
    if config.chunks not in CHUNK_LEVELS:
        return f"active chunks must be one of {CHUNK_LEVELS}, got {config.chunks}"
    pair = (config.algorithm, config.hierarchy)
    if pair not in ALGO_HIERARCHY_PAIRS:
        return f"{config.algorithm.name.lower()} is not {config.hierarchy.name.lower()}"
    if pair != (Algorithm.RING, Hierarchy.HIERARCHICAL) and (
        config.schedule != Schedule.BASELINE or config.chunks != 1
    ):
        return "a scheduling policy and active chunks apply only to the hierarchical ring"
    if config.chunk_bytes is not None and not config.exportable:
        return "a chunk size is NCCL's knob: only NCCL's own algorithms take one"
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
