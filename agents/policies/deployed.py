"""Shipped policy files as policies: what a job will actually get, scored like anything else.

A policy file is not the policy it came from: export samples the policy, bisects, gates and
defers. So ``evaluate --policy FILE.dccl`` scores the file itself, looking each call up exactly
as the C plugin does (:meth:`dynamiccl.plugin.policy_file.PolicyFile.decide`, the same lookup in Python,
default context slice: a job without ``DYNAMICCL_CONTEXT``), and pinning in NCCL what the rule
says. NVIDIA's example-tuner CSV is scored with that plugin's own semantics (``plugins/tuner/example/
plugin.c``): the first matching line whose algorithm/protocol NCCL can run for the call wins (a
line NCCL's cost table marks unusable is passed over), and because it sets one channel before
matching, a line with channels -1 or a call no line matches runs on one channel (NCCL 2.30.7
``plugins/tuner/example/plugin.c``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dynamiccl.agents.policies.policy import allowed_actions, forced_action, require_scenario
from dynamiccl.decisions import KnobConstraints, why_impossible
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin.nccl_csv import CsvRule, exported_from, read_nccl_example_csv

if TYPE_CHECKING:
    from dynamiccl.system.scenario import Scenario


class _Forcing:
    """Shared ``act`` for policies defined by what they pin."""

    name = "deployed"
    deployable = True

    def force(self, scenario: Scenario) -> KnobConstraints:
        raise NotImplementedError

    def act(self, observation: np.ndarray, *, scenario: Scenario | None = None,
            action_mask: np.ndarray | None = None) -> int:
        scenario = require_scenario(self.name, scenario)
        return forced_action(scenario, self.force(scenario),
                             allowed_actions(scenario, action_mask, True))


class PolicyFilePolicy(_Forcing):
    """A ``.dccl`` file, looked up as the plugin looks it up."""

    def __init__(self, policy: pf.PolicyFile, name: str) -> None:
        self.policy = policy
        self.name = name
        #: The policy the file was exported from, as its header records it (None: not recorded).
        self.source = policy.header.source

    def force(self, scenario: Scenario) -> KnobConstraints:
        topo = scenario.topology
        rule = self.policy.decide(scenario.collective, scenario.nbytes, topo.nranks, topo.nodes)
        if rule is None or rule.decision is None:
            return KnobConstraints()
        d = rule.decision
        return KnobConstraints(algorithm=d.algorithm, protocol=d.protocol, channels=d.channels)


class NcclExampleCsvPolicy(_Forcing):
    """NVIDIA's example tuner reading its CSV."""

    def __init__(self, rules: list[CsvRule], name: str, source: str | None = None) -> None:
        self.rules = rules
        self.name = name
        #: The policy the file was exported from (its ``# source`` comment; None: not recorded).
        self.source = source

    def lists(self, scenario: Scenario) -> bool:
        """Whether any line names this call's collective and system (else: one channel)."""
        topo = scenario.topology
        return any(r.collective == scenario.collective and r.nodes in (None, topo.nodes)
                   and r.ranks in (None, topo.nranks) for r in self.rules)

    def force(self, scenario: Scenario) -> KnobConstraints:
        topo = scenario.topology
        for rule in self.rules:
            if not rule.matches(scenario.collective, scenario.nbytes, topo.nodes, topo.nranks):
                continue
            pair = KnobConstraints(algorithm=rule.algorithm, protocol=rule.protocol)
            if why_impossible(scenario, pair) is None:
                return replace(pair, channels=rule.channels or 1)
        return KnobConstraints(channels=1)


def is_policy_file(path: str | Path) -> bool:
    """A shipped file (``.dccl`` or the example tuner's CSV/conf) rather than a checkpoint."""
    path = Path(path)
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        head = fh.read(64)
    return head.startswith(pf.MAGIC.encode()) or path.suffix in (pf.SUFFIX, ".csv", ".conf")


def load_deployed(path: str | Path) -> PolicyFilePolicy | NcclExampleCsvPolicy:
    """The shipped file at ``path`` as a policy; a bad file raises one PolicyFileError."""
    path = Path(path)
    with path.open("rb") as fh:
        head = fh.read(len(pf.MAGIC))
    if head == pf.MAGIC.encode():
        return PolicyFilePolicy(pf.read(path), name=path.name)
    text = path.read_text(encoding="ascii", errors="replace")
    rules = read_nccl_example_csv(text, source=str(path))
    if not rules:
        raise pf.PolicyFileError(f"{path}: no rules (neither a DynamICCL policy file nor NVIDIA "
                                 "example-tuner CSV lines)")
    return NcclExampleCsvPolicy(rules, name=path.name, source=exported_from(text))
