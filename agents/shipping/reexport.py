"""A policy file exported again keeps its decisions and the evidence they were made on.

``tune`` pins a choice where measurements say it wins, however little the model would have
predicted it; passed through the model's gate again (``export --policy tuned.dccl``), such a rule
would be judged on the model alone and dropped. So a ``.dccl`` with its evidence beside it
(``<file>.evidence.json``, :func:`~dynamiccl.agents.shipping.export.rule_evidence`) is exported as
the file decides: each call gets the file's own rule, and the verdict it was written with (NCCL's
pick, the gain, its uncertainty and what that rests on), so every format and every further export
carries the measured rules and their evidence. Calls the evidence does not cover (other shapes,
other slices) keep the file's rule and carry no verdict.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import replace

from dynamiccl import decisions
from dynamiccl.agents.policies.deployed import PolicyFilePolicy
from dynamiccl.agents.shipping.gate import Verdict
from dynamiccl.decisions import KnobConstraints
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system.scenario import Scenario

_Key = tuple[str, int | None, int | None]


class EvidencedPolicyFile:
    """A shipped ``.dccl`` with its evidence rows, as a policy export writes unchanged."""

    observation = "deployable"

    def __init__(self, file: PolicyFilePolicy, rows: list[dict[str, object]]) -> None:
        self.file = file
        self.name = file.name
        self.source = file.source
        self.config_hash = file.policy.header.config_hash
        self._rows: dict[_Key, list[dict[str, object]]] = defaultdict(list)
        for row in rows:
            self._rows[(str(row["collective"]), row["nodes"], row["ranks"])].append(row)
        for group in self._rows.values():
            group.sort(key=lambda r: int(r["min_bytes"]))

    def _row(self, scenario: Scenario) -> dict[str, object] | None:
        topo = scenario.topology
        group = self._rows.get((pf.COLL_TOKENS[scenario.collective], topo.nodes, topo.nranks), [])
        i = bisect_right([int(r["min_bytes"]) for r in group], scenario.nbytes) - 1
        if i >= 0 and scenario.nbytes < int(group[i]["max_bytes"]):
            return group[i]
        return None

    def decide_rule(self, scenario: Scenario) -> tuple[pf.Decision | None, Verdict | None]:
        """The file's rule for the call, with the verdict its evidence records (None where none)."""
        topo = scenario.topology
        rule = self.file.policy.decide(scenario.collective, scenario.nbytes, topo.nranks, topo.nodes)
        decision = None if rule is None else rule.decision
        row = self._row(scenario)
        if row is None:
            return decision, None
        nccl = decisions.nccl_default(scenario).config
        proposed = nccl
        if decision is not None:
            pinned = KnobConstraints(algorithm=decision.algorithm, protocol=decision.protocol,
                                     channels=decision.channels)
            try:
                proposed = decisions.nccl_default(scenario, pinned).config
            except ValueError:  # the model cannot run it here: keep what the file pins
                proposed = replace(nccl, algorithm=decision.algorithm, protocol=decision.protocol,
                                   channels=decision.channels or nccl.channels)
        return decision, Verdict(nccl, proposed, float(row["gain"]), float(row["uncertainty"]),
                                 str(row["evidence"]), decision is not None)

    def force(self, scenario: Scenario) -> KnobConstraints:
        return self.file.force(scenario)

    def act(self, observation, *, scenario: Scenario | None = None, action_mask=None) -> int:
        return self.file.act(observation, scenario=scenario, action_mask=action_mask)
