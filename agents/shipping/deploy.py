"""After training: ship the policy as the plugin will run it, and score the shipped file.

A trained agent is not what a job gets; the exported, gated policy file is. So the training run
ends by exporting the agent for the systems named in the config's ``deploy`` section (through the
safety gate: never predicted slower than NCCL), writing ``policy.dccl`` and its evidence into the
run folder, and scoring that file on the evaluation suite next to the agent it came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def export_and_score(cfg: DictConfig, policy: Any, run_dir: Path) -> list[Any]:
    """Exports ``policy`` per ``cfg.deploy`` into ``run_dir/policy.dccl`` and returns the file's
    evaluation report (an empty list when the config has no ``deploy`` section)."""
    deploy = OmegaConf.select(cfg, "deploy", default=None)
    if deploy is None:
        return []
    from dynamiccl import policy_file as pf
    from dynamiccl.agents.policies.deployed import PolicyFilePolicy
    from dynamiccl.agents.shipping.evaluate import evaluate_policies
    from dynamiccl.agents.shipping.export import export_policy, rule_evidence, save_evidence
    from dynamiccl.agents.shipping.gate import DEFAULT_MARGIN, Gate
    from dynamiccl.envs.workloads import load_suite
    from dynamiccl.files import write_text_atomic
    from dynamiccl.topology import load_topology

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
    return evaluate_policies([shipped], load_suite(str(cfg.eval.suite)), deployable=True,
                             progress=True)
