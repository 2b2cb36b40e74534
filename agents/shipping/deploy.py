"""After training: ship the policy as the plugin will run it, and score the shipped file.

A trained agent is not what a job gets; the exported, gated policy file is. So the training run
ends by exporting the agent for the systems named in the config's ``deploy`` section (through the
safety gate: never predicted slower than NCCL), writing ``policy.dccl`` and its evidence into the
run folder, and scoring that file on the evaluation suite next to the agent it came from.

With only the model as evidence the gate ships an override only where the predicted gain is very
large, so a file that ships little is the usual outcome of simulation alone, not a failed training:
:func:`what_next` says so after the table, with what the learned policy gains in simulation and the
command that gets the measurements the gate needs.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: The shipped file "ships little" when it keeps less than this share of the learned policy's
#: log-speedup on the evaluation suite.
LITTLE = 0.5


@dataclass(frozen=True)
class Shipment:
    """What a training run shipped: ``report`` scores the file on the suite; ``result`` holds every
    exported call with the gate's verdict on what the policy proposed there."""

    path: Path
    report: Any
    result: Any
    topology: str
    nodes: list[int]
    margin: float


def export_and_score(cfg: DictConfig, policy: Any, run_dir: Path) -> Shipment | None:
    """Exports ``policy`` per ``cfg.deploy`` into ``run_dir/policy.dccl`` and scores the file on the
    evaluation suite (None when the config has no ``deploy`` section)."""
    deploy = OmegaConf.select(cfg, "deploy", default=None)
    if deploy is None:
        return None
    from dynamiccl.agents.policies.deployed import PolicyFilePolicy
    from dynamiccl.agents.shipping.evaluate import evaluate_policies
    from dynamiccl.agents.shipping.export import export_policy, rule_evidence, save_evidence
    from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN, Gate
    from dynamiccl.envs.workloads import load_suite
    from dynamiccl.files import write_text_atomic
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.system.topology import load_topology

    unknown = set(deploy) - {"topology", "nodes", "margin"}
    if unknown or "topology" not in deploy:
        raise ValueError(f"config section 'deploy' takes topology, nodes and margin (got "
                         f"{sorted(map(str, deploy))})")
    topology = load_topology(str(deploy.topology))
    nodes = [int(n) for n in deploy.get("nodes") or [topology.nodes]]
    gate = Gate(margin=float(deploy.get("margin", DEFAULT_MARGIN)))
    result = export_policy(policy, topology, policy_name=str(cfg.task_name), node_counts=nodes,
                           gate=gate, progress=True,
                           source=str(next((p for p in (run_dir / "model.zip", run_dir / "model.pt")
                                            if p.exists()), run_dir).resolve()))
    if result.predicted_slower():  # the gate makes this impossible; refuse rather than ship
        raise ValueError("the exported policy is predicted slower than NCCL somewhere; not shipped")
    path = write_text_atomic(run_dir / "policy.dccl", pf.dumps(result.policy_file))
    save_evidence(path, rule_evidence(result))
    shipped = PolicyFilePolicy(result.policy_file, name="policy.dccl (shipped)")
    [report] = evaluate_policies([shipped], load_suite(str(cfg.eval.suite)), deployable=True,
                                 progress=True)
    return Shipment(path, report, result, topology.name, nodes, gate.margin)


def what_next(shipment: Shipment, learned: Any, suite: str) -> str:
    """After the evaluation table: what the file ships and, when that is nothing or little next to
    what the learned policy (``learned``, its report on ``suite``) gains, why and what to run next
    (a paragraph, wrapped)."""
    cells = shipment.result.cells
    overrides = sum(1 for c in cells if c.decision is not None)
    where = f"{shipment.topology}, {'/'.join(map(str, shipment.nodes))} node(s)"
    if overrides and math.log(shipment.report.geomean_speedup) >= LITTLE * math.log(learned.geomean_speedup):
        return (f"{shipment.path} overrides NCCL at {overrides} of {len(cells)} exported calls "
                f"({where}); inspect it with `dynamiccl show {shipment.path}`")
    text = [f"{shipment.path} overrides NCCL at only {overrides} of {len(cells)} exported calls ({where})."
            if overrides else f"{shipment.path} ships no override: NCCL decides every call ({where})."]
    deferred = [c.verdict for c in cells if c.decision is None and c.verdict is not None
                and c.verdict.proposed != c.verdict.nccl]
    if deferred:
        best = max(deferred, key=lambda v: v.gain)
        more = "more " if overrides else ""
        text.append(f"The learned policy would override NCCL at {len(deferred)} {more}calls, but no "
                    f"measurement backs its predicted gains (at most {100 * best.gain:+.1f}%, "
                    f"±{100 * best.sigma:.0f}% there), and the gate overrides nothing on the model's "
                    "word alone: on real systems its ratios were off by a quarter of the time and "
                    "more.")
    share = "n/a" if math.isnan(learned.oracle_share) else f"{learned.oracle_share:.3f}"
    text.append(f"On the {suite} suite (simulator) it runs at {learned.geomean_speedup:.3f}x NCCL's speed "
                f"(oracle share {share}), the shipped file at {shipment.report.geomean_speedup:.3f}x.")
    text.append(f"Next, on your system: `dynamiccl tune --topology {shipment.topology} --plan` lists the "
                "nccl-tests runs that would settle the most valuable decisions; `dynamiccl tune --topology "
                f"{shipment.topology} --measurements LOGS... -o tuned.dccl` ships what they confirm.")
    return textwrap.fill(" ".join(text), width=100, break_on_hyphens=False, break_long_words=False)
