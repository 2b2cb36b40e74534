"""Export: evaluate a policy over the decision grid and turn its answers into policy-file rules.

The plugin can only look rules up; it never runs the policy. So export asks the policy everywhere a
job could call NCCL -- every collective, every message size from 8 B to 16 GiB, each node count and
GPUs-per-node exported, each context slice -- and writes down what it answered. Sizes are sampled on
a fine log grid and wherever two neighbouring samples disagree the exact byte where the decision
changes is found by bisection, so a range boundary sits where the policy changes its mind, not on a
fixed coarse grid. Whatever the policy cannot say (a non-exportable or masked action, sizes beyond
the grid, other node counts), and wherever a policy that pins knobs (NCCL's default, the
full-information learner) pins nothing, is written as an explicit "defer to NCCL" rule. A learned
policy is shown the deployable observation, the one it must have been trained on.

Every answer passes the safety gate (:mod:`dynamiccl.agents.shipping.gate`): where the predicted gain over
NCCL's own choice does not clear the margin and the model's uncertainty, the rule defers. Each cell
keeps the gate's verdict, so ``show`` can say per rule what NCCL would pick, what was proposed, the
predicted gain, its uncertainty and the evidence (:func:`rule_evidence`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dynamiccl import decisions
from dynamiccl.agents.shipping.gate import Gate, Verdict, clearance
from dynamiccl.agents.shipping.progress import progress_bar
from dynamiccl.decisions import KnobConstraints
from dynamiccl.files import FileKind, read_head, write_text_atomic
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.knobs import ACTIONS, N_ACTIONS, span_label, valid_mask, without_channels
from dynamiccl.system.nccl import Collective
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import Topology

MIN_BYTES = 8
#: The gate every export passes through unless the caller asks for none.
DEFAULT_GATE = Gate()
MAX_BYTES = 16 << 30
DEFAULT_POINTS_PER_OCTAVE = 8
#: More samples than this only cost time: boundaries are found to the byte by bisection.
MAX_POINTS_PER_OCTAVE = 64
#: Relative difference below which two model times are the same (rounding, not a regression).
SAME_TIME = 1e-6
#: The narrowest override (octaves of message size) written between two ranges that defer: half
#: the step of an nccl-tests sweep (-f 2), finer than any measurement or validation of the model
#: resolves. A narrower one is a gain grazing its threshold (the oracle on two DGX H100 nodes
#: overrode broadcast from 16 to 16.4 MiB at +24 % against ±21.5 %, and deferred above with the same
#: figures), and a table that flips for it reads as noise.
MIN_OVERRIDE_OCTAVES = 0.5
#: What the evidence of such an override's calls says once it defers.
NARROW = " (an override narrower than half an octave)"

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
    #: The gate's verdict on what the policy proposed (None: it proposed nothing exportable).
    verdict: Verdict | None = None


@dataclass(frozen=True)
class ExportResult:
    policy_file: pf.PolicyFile
    #: Every call the policy was asked about; the plugin must answer each one the same way.
    cells: tuple[Cell, ...]

    def predicted_slower(self) -> list[Cell]:
        """Calls where the file overrides NCCL with a choice the model predicts slower."""
        return [c for c in self.cells
                if c.decision is not None and c.verdict is not None and c.verdict.gain < 0]

    @property
    def gated(self) -> int:
        """Calls where the policy proposed an override the gate turned into a defer."""
        return sum(1 for c in self.cells if c.decision is None and c.verdict is not None
                   and not c.verdict.override and c.verdict.proposed != c.verdict.nccl)


def size_grid(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES,
              points_per_octave: int = DEFAULT_POINTS_PER_OCTAVE) -> list[int]:
    """Log-spaced integer sizes including both ends and every power of two between them."""
    if not 1 <= min_bytes <= max_bytes:
        raise ValueError(f"size range {min_bytes}..{max_bytes} is empty")
    if not 1 <= points_per_octave <= MAX_POINTS_PER_OCTAVE:
        raise ValueError(f"points per octave must be 1..{MAX_POINTS_PER_OCTAVE} (bisection finds "
                         f"every boundary exactly anyway), got {points_per_octave}")
    octaves = np.log2(max_bytes / min_bytes)
    n = int(np.ceil(octaves * points_per_octave)) + 1
    sizes = np.rint(min_bytes * np.exp2(np.linspace(0.0, octaves, n))).astype(np.int64)
    powers = [1 << k for k in range(min_bytes.bit_length() - 1, max_bytes.bit_length())]
    grid = {int(s) for s in sizes} | {p for p in powers if min_bytes <= p <= max_bytes}
    return sorted(grid | {min_bytes, max_bytes})


class NotExportable(ValueError):
    """A policy that reads what the tuner plugin cannot see: exporting it would freeze that."""


def deployable_observe(scenario: Scenario) -> np.ndarray:
    """What a policy is shown for an exported call: the deployable observation, whose context
    fields are the slice the call is exported for (:func:`context_scenario` round-trips)."""
    from dynamiccl.decisions import nccl_model_for
    from dynamiccl.envs.deployable_observation import encode_deployable

    return encode_deployable(scenario, nccl_model_for(scenario.topology))


def observer_for(policy: object) -> Observe:
    """The observation export shows ``policy``: the deployable one, which holds only what the plugin
    sees per call plus constants of the deployment, so nothing the policy was trained to vary is
    frozen. A policy trained on another set (its ``observation``) is refused; policies that name
    none (the baselines) read the scenario, not the vector."""
    trained_on = getattr(policy, "observation", "deployable")
    if trained_on != "deployable":
        name = getattr(policy, "name", type(policy).__name__)
        raise NotExportable(
            f"{name} was trained on the {trained_on} observation, which holds what the tuner plugin "
            "cannot see per call (the last call's time, the straggler's rank, the exact c2c); export "
            "would freeze those at constants. Train it with env.observation=deployable to ship it")
    return deployable_observe


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
    """Asks the policy once per distinct call, gates its answer and remembers both.

    ``gate=None`` writes every exportable answer (ungated); the verdict is still recorded so that
    an answer predicted slower than NCCL can be refused. A policy with ``decide_rule(scenario) ->
    (decision, verdict)`` answers with its own evidence (tune's measurements) and gates itself.
    """

    def __init__(self, policy: object, observe: Observe, gate: Gate | None) -> None:
        self.policy = policy
        self.observe = observe
        self.gate = gate
        self.judge = gate or Gate(margin=0.0)
        self.answers: dict[tuple, pf.Decision | None] = {}
        self.verdicts: dict[tuple, Verdict | None] = {}

    def __call__(self, topology: Topology, collective: Collective, nbytes: int,
                 context: tuple[str, str]) -> pf.Decision | None:
        key = (topology, collective, nbytes, context)
        if key not in self.answers:
            self.answers[key] = self._ask(key, topology, collective, nbytes, context)
        return self.answers[key]

    def _ask(self, key: tuple, topology: Topology, collective: Collective, nbytes: int,
             context: tuple[str, str]) -> pf.Decision | None:
        scenario = context_scenario(topology, collective, nbytes, context)
        decide_rule = getattr(self.policy, "decide_rule", None)
        if decide_rule is not None:  # a policy that gates itself on its own evidence (tune)
            decision, self.verdicts[key] = decide_rule(scenario)
            return decision
        self.verdicts[key] = None
        force = getattr(self.policy, "force", None)
        if force is not None and not force(scenario).given():
            return None  # a policy that pins nothing leaves the call to NCCL, as it does in a job
        mask = valid_mask(topology, collective, deployable=True)
        action = self.policy.act(self.observe(scenario), scenario=scenario, action_mask=mask)
        try:
            action = int(action)
        except (TypeError, ValueError):
            return None
        if not 0 <= action < N_ACTIONS or not mask[action] or not ACTIONS[action].exportable:
            return None
        config = ACTIONS[action]
        verdict = self.judge.judge(scenario, config)
        self.verdicts[key] = verdict
        if (self.gate is not None and not verdict.override) or config == verdict.nccl:
            return None  # NCCL's own pick is left to NCCL, gated or not: pinning it changes nothing
        return pf.Decision.of(config)


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


def _slivers(points: list[tuple[int, pf.Decision | None]]) -> list[tuple[int, int]]:
    """The first and last evaluated size of every override narrower than
    :data:`MIN_OVERRIDE_OCTAVES` with a defer (or the grid's end) on each side."""
    ranges = _ranges(points)
    out = []
    for i, (lo, hi, decision) in enumerate(ranges):
        if decision is None or i == 0 or i == len(ranges) - 1:
            continue
        if ranges[i - 1][2] is None and ranges[i + 1][2] is None and \
                math.log2((hi + 1) / lo) < MIN_OVERRIDE_OCTAVES:
            out.append((lo, hi))
    return out


def _ranges(points: list[tuple[int, pf.Decision | None]]
            ) -> list[tuple[int, int, pf.Decision | None]]:
    """Inclusive byte ranges covering 0..2^64-1: the grid's decisions, "defer" outside the grid,
    neighbours with the same decision merged."""
    return _runs([(0, None), *points, (MAX_BYTES + 1, None)], pf.MAX_BYTES)


def _runs(points: list[tuple[int, pf.Decision | None]], last: int
          ) -> list[tuple[int, int, pf.Decision | None]]:
    """Inclusive byte ranges from the first point's size to ``last``, one per run of equal
    decisions (a point's decision holds up to the next point's size)."""
    ranges: list[tuple[int, int, pf.Decision | None]] = []
    for size, decision in points:
        if ranges and ranges[-1][2] == decision:
            continue
        if ranges:
            ranges[-1] = (ranges[-1][0], size - 1, ranges[-1][2])
        ranges.append((size, last, decision))
    return ranges


def _name_of(policy: object, given: str | None = None) -> str:
    return given or getattr(policy, "name", type(policy).__name__)


def _clean_header_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._:+@=/-]", "_", text.strip())[: pf.MAX_HEADER_VALUE]
    return value or "unnamed"


def _source_value(source: str | None) -> str | None:
    """``source`` as a header value, or None where the file cannot record it faithfully (a
    truncated or altered path would name something else)."""
    value = (source or "").strip()
    if not 1 <= len(value) <= pf.MAX_HEADER_VALUE or not all(" " <= ch <= "~" for ch in value):
        return None
    return value


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
    gate: Gate | None = DEFAULT_GATE,
    source: str | None = None,
    progress: bool = False,
) -> ExportResult:
    """Evaluates ``policy`` (a :class:`dynamiccl.agents.policies.policy.Policy`) over the grid.

    ``node_counts`` / ``gpus_per_node`` default to the topology's own; every combination is exported
    and every other one defers. ``observe`` builds the observation (default:
    :func:`observer_for` the policy; a policy not trained on the deployable observation is refused
    with :class:`NotExportable`). The config hash is ``config_hash``, else the policy's own
    ``config_hash`` attribute, else a digest of the export settings and ``policy_digest`` (e.g. the
    checkpoint's sha256).
    ``gate`` (default: a :class:`~dynamiccl.agents.shipping.gate.Gate` with its default margin) turns
    answers without enough predicted gain into defers; pass ``gate=None`` only to see the policy
    ungated. ``source`` (a built-in policy's name or a checkpoint's absolute path) is recorded in
    the header, so the shipped file can be scored next to the policy it came from. ``progress``
    draws a bar on a terminal (nothing when piped).
    """
    observe = observe or observer_for(policy)
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
    evaluate = _Evaluator(policy, observe, gate)
    cells: list[Cell] = []
    slices = []
    groups = len(ctx_list) * len(colls) * len(systems)
    with (progress_bar(f"exporting {_name_of(policy, policy_name)}", groups) if progress
          else nullcontext(None)) as advance:
        for context in ctx_list:
            rules: list[pf.Rule] = []
            for coll in colls:
                for system in systems:
                    key = dict(nodes=system.nodes, ranks=system.nranks)
                    points = _piecewise(lambda n, s=system, c=coll, x=context: evaluate(s, c, n, x),
                                        grid)
                    for lo, hi in _slivers(points):
                        for i, (n, _) in enumerate(points):
                            if lo <= n <= hi:
                                points[i] = (n, None)
                                asked = (system, coll, n, context)
                                verdict = evaluate.verdicts.get(asked)
                                if verdict is not None:
                                    evaluate.verdicts[asked] = replace(
                                        verdict, override=False, evidence=verdict.evidence + NARROW)
                    cells += [Cell(coll, n, system.nodes, system.nranks, context, d,
                                   evaluate.verdicts.get((system, coll, n, context)))
                              for n, d in points]
                    rules += [pf.Rule(coll, lo, hi, **key, decision=d)
                              for lo, hi, d in _ranges(points)]
                    if advance is not None:
                        advance(1)
                rules.append(pf.Rule(coll, 0, pf.MAX_BYTES))  # any other nodes/ranks: NCCL decides
            slices.append(pf.Slice(*context, rules=tuple(rules)))
    name = _clean_header_value(_name_of(policy, policy_name))
    settings = {"policy": name, "fingerprint": topology.fingerprint(), "nodes": nodes_list,
                "gpus_per_node": ppn_list, "collectives": [int(c) for c in colls],
                "contexts": ctx_list, "points_per_octave": points_per_octave,
                "format": pf.FORMAT_VERSION, "policy_digest": policy_digest,
                "gate": None if gate is None else
                [gate.margin, gate.evidence, *(["model only"] if gate.model_only else [])]}
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
        source=_source_value(source),
    )
    return ExportResult(pf.PolicyFile(header, tuple(slices)), tuple(cells))


def rule_evidence(result: ExportResult) -> list[dict[str, object]]:
    """Per rule of the default slice that names a system, one row per run of sizes over which NCCL's
    pick keeps its algorithm and protocol (NCCL's cost model on the exported topology: the pick the
    gate compared against): that pick with the channel counts it runs there (``ring/ll/1-24ch``),
    the file's choice, and the predicted gain, its uncertainty and the evidence of one call of the
    run: an override's least convincing, a defer's most tempting (:func:`gate.clearance`).

    ``min_bytes``/``max_bytes`` are the run's sizes, ``max_bytes`` exclusive as in ``show --json``;
    a rule's runs cover it exactly. Rules that cover "any other system" carry no evidence (nothing
    was predicted for them: they defer).
    """
    by_group: dict[tuple, list[Cell]] = {}
    for c in result.cells:
        if c.context == pf.DEFAULT_CONTEXT and c.verdict is not None:
            by_group.setdefault((c.collective, c.nodes, c.ranks), []).append(c)
    rows: list[dict[str, object]] = []
    for rule in result.policy_file.slice(*pf.DEFAULT_CONTEXT).rules:
        cells = sorted((c for c in by_group.get((rule.collective, rule.nodes, rule.ranks), [])
                        if rule.min_bytes <= c.nbytes <= rule.max_bytes), key=lambda c: c.nbytes)
        runs: list[list[Cell]] = []
        for c in cells:
            if runs and without_channels(runs[-1][-1].verdict.nccl) == without_channels(c.verdict.nccl):
                runs[-1].append(c)
            else:
                runs.append([c])
        # an override answers for its least convincing call, a defer for its most tempting one
        pick = min if rule.decision is not None else max
        for i, run in enumerate(runs):
            # a call whose proposal is NCCL's own configuration proposes nothing
            proposals = [c for c in run if c.verdict.proposed != c.verdict.nccl] or run
            worst = pick(proposals, key=lambda c: clearance(c.verdict.gain, c.verdict.sigma))
            nccl = span_label([c.verdict.nccl for c in run])
            proposed = worst.verdict.proposed
            rows.append({
                "collective": pf.COLL_TOKENS[rule.collective], "nodes": rule.nodes,
                "ranks": rule.ranks, "min_bytes": rule.min_bytes if i == 0 else run[0].nbytes,
                "max_bytes": runs[i + 1][0].nbytes if i + 1 < len(runs) else rule.max_bytes + 1,
                "nccl": nccl,
                "ours": "defer" if rule.decision is None else rule.decision.label(),
                "proposed": nccl if proposed == worst.verdict.nccl else proposed.label(),
                "gain": round(worst.verdict.gain, 6),
                "uncertainty": round(worst.verdict.sigma, 6),
                "evidence": worst.verdict.evidence,
            })
    return rows


def evidence_path(policy_path: str | Path) -> Path:
    """Where a policy file's evidence lives: beside it, ``<file>.evidence.json``."""
    policy_path = Path(policy_path)
    return policy_path.with_name(policy_path.name + ".evidence.json")


def _file_checksum(policy_path: Path) -> str:
    return policy_path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1].decode("ascii", "replace")


def _is_evidence(path: Path) -> bool:
    head = read_head(path, 64)
    return head.startswith(b"{") and b'"policy_checksum"' in head


#: The evidence file beside a policy (``<file>.evidence.json``): replaced only when it is one.
EVIDENCE = FileKind("the evidence file of a DynamICCL policy", _is_evidence)


def save_evidence(policy_path: str | Path, rows: list[dict[str, object]]) -> Path:
    """Writes the evidence of the policy file just written (tied to it by its checksum line)."""
    policy_path = Path(policy_path)
    doc = {"policy_checksum": _file_checksum(policy_path), "rules": rows}
    return write_text_atomic(evidence_path(policy_path), json.dumps(doc, indent=1))


#: The keys of every evidence row (what ``show`` prints from it).
EVIDENCE_KEYS = ("collective", "nodes", "ranks", "min_bytes", "max_bytes", "nccl", "gain",
                 "uncertainty", "evidence")


def read_evidence(policy_path: str | Path) -> tuple[list[dict[str, object]] | None, str]:
    """(rows, why none): the evidence saved with this exact file, or None and why it cannot be
    used ("" where there is none beside it)."""
    policy_path = Path(policy_path)
    path = evidence_path(policy_path)
    if not path.exists():
        return None, ""
    try:
        doc = json.loads(path.read_text())
        rows = doc["rules"]
        if not isinstance(rows, list) or not all(
                isinstance(r, dict) and all(k in r for k in EVIDENCE_KEYS)
                and isinstance(r["gain"], (int, float)) and isinstance(r["uncertainty"], (int, float))
                for r in rows):
            raise ValueError("rows without their keys")
        checksum = doc.get("policy_checksum")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None, f"its evidence file {path} is damaged (not the JSON export and tune write)"
    if checksum != _file_checksum(policy_path):
        return None, (f"its evidence file {path} belongs to another version of {policy_path.name} "
                      "(the policy's checksum differs)")
    return list(rows), ""


def load_evidence(policy_path: str | Path) -> list[dict[str, object]] | None:
    """The evidence saved with this exact file; None when absent, unreadable or for another file."""
    return read_evidence(policy_path)[0]


# ---------------------------------------------------------------------------------------------
# NVIDIA's example tuner: no "defer", one channel for whatever no line matches
# ---------------------------------------------------------------------------------------------


def for_example_tuner(result: ExportResult, topology: Topology,
                      context: tuple[str, str] = pf.DEFAULT_CONTEXT) -> pf.PolicyFile:
    """The export's ``context`` slice as NVIDIA's example tuner must get it.

    That tuner sets one channel before it looks for a matching line (NCCL 2.30.7
    ``plugins/tuner/example/plugin.c``), so a call no line matches, or a line with channels -1, runs
    on ONE channel; it has no way to say "NCCL decides". So on every exported system each range the
    policy defers is written as what the model predicts NCCL runs there (algorithm, protocol and
    channel count, split where that changes), and each rule keeping NCCL's channel count gets the
    count the model predicts NCCL picks for its pair. Rules for any other system stay deferring:
    the CSV cannot express them, and those systems run on one channel.
    """
    rules: list[pf.Rule] = []
    for rule in result.policy_file.slice(*context).rules:
        d = rule.decision
        if rule.nodes is None or rule.ranks is None or (d is not None and d.channels is not None):
            rules.append(rule)
            continue
        system = topology.resized(nodes=rule.nodes, gpus_per_node=rule.ranks // rule.nodes)
        pin = KnobConstraints() if d is None else KnobConstraints(algorithm=d.algorithm,
                                                                  protocol=d.protocol)

        def nccl_runs(n: int, s: Topology = system, c: Collective = rule.collective,
                      k: KnobConstraints = pin) -> pf.Decision:
            scenario = context_scenario(s, c, min(max(n, MIN_BYTES), MAX_BYTES), context)
            config = decisions.nccl_default(scenario, k).config
            return pf.Decision.of(config)

        grid = sorted({rule.min_bytes, rule.max_bytes}
                      | {n for n in size_grid() if rule.min_bytes < n < rule.max_bytes})
        rules += [pf.Rule(rule.collective, lo, hi, nodes=rule.nodes, ranks=rule.ranks, decision=dec)
                  for lo, hi, dec in _runs(_piecewise(nccl_runs, grid), rule.max_bytes)]
    return pf.PolicyFile(result.policy_file.header, (pf.Slice(*context, rules=tuple(rules)),))


#: The note above a CSV line that only spells out NCCL's own choice (the example tuner cannot defer).
MODEL_PICK_NOTE = ("NCCL's own pick as the model predicts it, not a measured override: NVIDIA's "
                   "example tuner cannot defer (check the model: dynamiccl check-model)")


def example_tuner_notes(result: ExportResult, shipped: pf.PolicyFile,
                        context: tuple[str, str] = pf.DEFAULT_CONTEXT) -> dict[pf.Rule, str]:
    """What each line of the example tuner's file (:func:`for_example_tuner`) rests on: an
    override's evidence (its least convincing call, as :func:`rule_evidence` shows it), or
    :data:`MODEL_PICK_NOTE` where the file only spells out what the policy leaves to NCCL."""
    cells = {(c.collective, c.nodes, c.ranks, c.nbytes): c for c in result.cells
             if c.context == context}
    notes: dict[pf.Rule, str] = {}
    for rule in shipped.slice(*context).rules:
        if rule.decision is None or rule.nodes is None or rule.ranks is None:
            continue
        source = result.policy_file.decide(rule.collective, rule.min_bytes, rule.ranks, rule.nodes,
                                           context=context)
        if source is None or source.decision is None:
            notes[rule] = MODEL_PICK_NOTE
            continue
        inside = [c for key, c in cells.items() if key[:3] == (rule.collective, rule.nodes, rule.ranks)
                  and rule.min_bytes <= key[3] <= rule.max_bytes and c.verdict is not None]
        if inside:
            worst = min(inside, key=lambda c: clearance(c.verdict.gain, c.verdict.sigma))
            v = worst.verdict
            notes[rule] = (f"{v.evidence}: {100 * v.gain:+.1f}% +/-{100 * v.sigma:.1f}% over NCCL's "
                           f"{v.nccl.label()}")
    return notes


def predicted_slower_as_shipped(shipped: object, result: ExportResult, topology: Topology,
                                context: tuple[str, str] = pf.DEFAULT_CONTEXT
                                ) -> list[tuple[Cell, float]]:
    """Evaluated calls where the shipped file, looked up the way its plugin looks it up
    (``shipped.force(scenario)``, :mod:`dynamiccl.agents.policies.deployed`), makes NCCL run something
    the model predicts slower than NCCL's own choice; with that predicted gain (negative).

    What a file executes is not always what the policy answered: NVIDIA's example tuner runs a
    call no line matches on one channel, so the file is judged, not the answers.
    """
    slower: list[tuple[Cell, float]] = []
    for cell in result.cells:
        if cell.context != context:
            continue
        system = topology.resized(nodes=cell.nodes, gpus_per_node=cell.ranks // cell.nodes)
        scenario = context_scenario(system, cell.collective, cell.nbytes, context)
        pinned = shipped.force(scenario)
        if not pinned.given():
            continue
        t_nccl = decisions.nccl_default(scenario).time_us
        try:
            t_shipped = decisions.nccl_default(scenario, pinned).time_us
        except ValueError:  # NCCL could not run it at all
            t_shipped = math.inf
        gain = t_nccl / t_shipped - 1.0
        if gain < -SAME_TIME:
            slower.append((cell, gain))
    return slower
