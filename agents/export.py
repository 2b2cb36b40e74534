"""Export: evaluate a policy over the decision grid and turn its answers into policy-file rules.

The plugin can only look rules up; it never runs the policy. So export asks the policy everywhere a
job could call NCCL -- every collective, every message size from 8 B to 16 GiB, each node count and
GPUs-per-node exported, each context slice -- and writes down what it answered. Sizes are sampled on
a fine log grid and wherever two neighbouring samples disagree the exact byte where the decision
changes is found by bisection, so a range boundary sits where the policy changes its mind, not on a
fixed coarse grid. Whatever the policy cannot say (a non-exportable or masked action, sizes beyond
the grid, other node counts) is written as an explicit "defer to NCCL" rule.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from dynamiccl import policy_file as pf
from dynamiccl.knobs import ACTIONS, N_ACTIONS, valid_mask
from dynamiccl.nccl import Collective
from dynamiccl.scenario import Scenario
from dynamiccl.topology import Topology

MIN_BYTES = 8
MAX_BYTES = 16 << 30
DEFAULT_POINTS_PER_OCTAVE = 8

Observe = Callable[[Scenario], np.ndarray]


@dataclass(frozen=True)
class Cell:
    """One evaluated call: the policy's answer there (None = defer to NCCL)."""

    collective: Collective
    nbytes: int
    nodes: int
    ranks: int
    context: tuple[str, str]
    decision: pf.Decision | None


@dataclass(frozen=True)
class ExportResult:
    policy_file: pf.PolicyFile
    #: Every call the policy was asked about; the plugin must answer each one the same way.
    cells: tuple[Cell, ...]


def size_grid(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES,
              points_per_octave: int = DEFAULT_POINTS_PER_OCTAVE) -> list[int]:
    """Log-spaced integer sizes including both ends and every power of two between them."""
    if not 1 <= min_bytes <= max_bytes:
        raise ValueError(f"size range {min_bytes}..{max_bytes} is empty")
    if points_per_octave < 1:
        raise ValueError("points_per_octave must be at least 1")
    octaves = np.log2(max_bytes / min_bytes)
    n = int(np.ceil(octaves * points_per_octave)) + 1
    sizes = np.rint(min_bytes * np.exp2(np.linspace(0.0, octaves, n))).astype(np.int64)
    powers = [1 << k for k in range(min_bytes.bit_length() - 1, max_bytes.bit_length())]
    grid = {int(s) for s in sizes} | {p for p in powers if min_bytes <= p <= max_bytes}
    return sorted(grid | {min_bytes, max_bytes})


def _default_observe() -> Observe:
    from dynamiccl.envs.observation import encode

    return encode


def context_scenario(topology: Topology, collective: Collective, nbytes: int,
                     context: tuple[str, str]) -> Scenario:
    """The scenario a slice stands for: its bucket's representative straggler delay and C2C; the
    straggler is the last rank (only its presence and delay are known to a running job)."""
    straggler, c2c = context
    delay = pf.STRAGGLER_BUCKETS[straggler]
    rank = topology.nranks - 1 if delay > 0 else None
    return Scenario(topology, collective, nbytes, straggler_rank=rank, straggler_delay_us=delay,
                    c2c=pf.C2C_BUCKETS[c2c])


class _Evaluator:
    """Asks the policy once per distinct call and remembers the answer."""

    def __init__(self, policy: object, observe: Observe) -> None:
        self.policy = policy
        self.observe = observe
        self.answers: dict[tuple, pf.Decision | None] = {}

    def __call__(self, topology: Topology, collective: Collective, nbytes: int,
                 context: tuple[str, str]) -> pf.Decision | None:
        key = (topology, collective, nbytes, context)
        if key not in self.answers:
            self.answers[key] = self._ask(topology, collective, nbytes, context)
        return self.answers[key]

    def _ask(self, topology: Topology, collective: Collective, nbytes: int,
             context: tuple[str, str]) -> pf.Decision | None:
        scenario = context_scenario(topology, collective, nbytes, context)
        mask = valid_mask(topology, collective, deployable=True)
        action = self.policy.act(self.observe(scenario), scenario=scenario, action_mask=mask)
        try:
            action = int(action)
        except (TypeError, ValueError):
            return None
        if not 0 <= action < N_ACTIONS or not mask[action] or not ACTIONS[action].exportable:
            return None
        config = ACTIONS[action]
        return pf.Decision(config.algorithm, config.protocol, config.channels)


def _piecewise(decide: Callable[[int], pf.Decision | None], grid: Sequence[int]
               ) -> list[tuple[int, pf.Decision | None]]:
    """(size, decision) at every grid point and at both sides of every change, found by bisection.

    Neighbouring samples that disagree end up one byte apart, so the decision is constant between
    consecutive returned sizes whenever their decisions agree.
    """
    points = {s: decide(s) for s in grid}

    def refine(lo: int, hi: int) -> None:
        stack = [(lo, hi)]
        while stack:
            a, b = stack.pop()
            if b - a <= 1 or points[a] == points[b]:
                continue
            mid = (a + b) // 2
            points[mid] = decide(mid)
            stack += [(a, mid), (mid, b)]

    for a, b in zip(grid, grid[1:], strict=False):
        refine(a, b)
    return sorted(points.items())


def _ranges(points: list[tuple[int, pf.Decision | None]]
            ) -> list[tuple[int, int, pf.Decision | None]]:
    """Inclusive byte ranges covering 0..2^64-1: the grid's decisions, "defer" outside the grid,
    neighbours with the same decision merged."""
    starts = [(0, None), *points, (MAX_BYTES + 1, None)]
    ranges: list[tuple[int, int, pf.Decision | None]] = []
    for size, decision in starts:
        if ranges and ranges[-1][2] == decision:
            continue
        if ranges:
            ranges[-1] = (ranges[-1][0], size - 1, ranges[-1][2])
        ranges.append((size, pf.MAX_BYTES, decision))
    return ranges


def _clean_header_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._:+@=/-]", "_", text.strip())[: pf.MAX_HEADER_VALUE]
    return value or "unnamed"


def export_policy(
    policy: object,
    topology: Topology,
    *,
    policy_name: str | None = None,
    node_counts: Iterable[int] | None = None,
    gpus_per_node: Iterable[int] | None = None,
    collectives: Iterable[Collective] = tuple(Collective),
    contexts: Iterable[tuple[str, str]] = (pf.DEFAULT_CONTEXT,),
    points_per_octave: int = DEFAULT_POINTS_PER_OCTAVE,
    observe: Observe | None = None,
    created: str | None = None,
    nccl_range: str = pf.DEFAULT_NCCL_RANGE,
    config_hash: str | None = None,
    policy_digest: str | None = None,
) -> ExportResult:
    """Evaluates ``policy`` (a :class:`dynamiccl.agents.policy.Policy`) over the grid.

    ``node_counts`` / ``gpus_per_node`` default to the topology's own; every combination is exported
    and every other one defers. ``observe`` builds the observation (default: the environment's
    encoder). The config hash is ``config_hash``, else the policy's own ``config_hash`` attribute,
    else a digest of the export settings and ``policy_digest`` (e.g. the checkpoint's sha256).
    """
    observe = observe or _default_observe()
    nodes_list = sorted(set(node_counts or [topology.nodes]))
    ppn_list = sorted(set(gpus_per_node or [topology.gpus_per_node]))
    colls = [Collective(c) for c in collectives]
    ctx_list = list(dict.fromkeys(contexts))
    if pf.DEFAULT_CONTEXT not in ctx_list:
        ctx_list.insert(0, pf.DEFAULT_CONTEXT)
    for s, c in ctx_list:
        if s not in pf.STRAGGLER_BUCKETS or c not in pf.C2C_BUCKETS:
            raise ValueError(f"unknown context straggler={s} c2c={c}; buckets are "
                             f"{list(pf.STRAGGLER_BUCKETS)} and {list(pf.C2C_BUCKETS)}")
    systems = [topology.resized(nodes=n, gpus_per_node=g) for n in nodes_list for g in ppn_list]
    grid = size_grid(points_per_octave=points_per_octave)
    evaluate = _Evaluator(policy, observe)
    cells: list[Cell] = []
    slices = []
    for context in ctx_list:
        rules: list[pf.Rule] = []
        for coll in colls:
            for system in systems:
                key = dict(nodes=system.nodes, ranks=system.nranks)
                points = _piecewise(lambda n, s=system, c=coll, x=context: evaluate(s, c, n, x),
                                    grid)
                cells += [Cell(coll, n, system.nodes, system.nranks, context, d) for n, d in points]
                rules += [pf.Rule(coll, lo, hi, **key, decision=d) for lo, hi, d in _ranges(points)]
            rules.append(pf.Rule(coll, 0, pf.MAX_BYTES))  # any other nodes/ranks: NCCL decides
        slices.append(pf.Slice(*context, rules=tuple(rules)))
    name = _clean_header_value(policy_name or getattr(policy, "name", type(policy).__name__))
    settings = {"policy": name, "fingerprint": topology.fingerprint(), "nodes": nodes_list,
                "gpus_per_node": ppn_list, "collectives": [int(c) for c in colls],
                "contexts": ctx_list, "points_per_octave": points_per_octave,
                "format": pf.FORMAT_VERSION, "policy_digest": policy_digest}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    header = pf.Header(
        policy=name,
        created=created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        topology=_clean_header_value(topology.name),
        fingerprint=topology.fingerprint(),
        features=pf.system_features(all(s.ll128_enabled for s in systems), topology.features.nvls,
                                    topology.features.collnet),
        nccl=nccl_range,
        config_hash=_clean_header_value(config_hash or getattr(policy, "config_hash", None)
                                        or digest),
    )
    return ExportResult(pf.PolicyFile(header, tuple(slices)), tuple(cells))
