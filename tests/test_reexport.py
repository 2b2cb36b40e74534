"""Formats that keep the evidence: a tuned policy's measured rules survive every export (.dccl again,
NVIDIA's example-tuner CSV, from tune or from export), with their evidence and the NCCL releases the
file was stamped with, and NCCL's own pick is never written as an override."""

from __future__ import annotations

import json
from pathlib import Path

from dynamiccl.agents.policies.registry import load_policy
from dynamiccl.agents.shipping.export import MODEL_PICK_NOTE, export_policy
from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin.nccl_csv import read_nccl_example_csv
from dynamiccl.system.nccl import Collective
from dynamiccl.system.topology import load_topology

REAL = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"
TOPO = ["--topology", "dgx_h100", "--nodes", "1"]


def _tuned(tmp_path: Path, capsys) -> tuple[Path, list[dict]]:
    """The 8xH100 series tuned into a policy: it holds a measured override the model alone would
    not make (ring/LL128 around 8 MiB, where the model predicts NVLS faster)."""
    out = tmp_path / "tuned.dccl"
    assert main(["tune", *TOPO, "--measurements", str(REAL), "--collective", "allreduce",
                 "--no-calibrate", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["show", str(out), "--json"]) == 0
    rules = [r for r in json.loads(capsys.readouterr().out) if not r["defer"]]
    assert rules and all(r["evidence"].startswith("measured") for r in rules)
    return out, rules


def test_exporting_a_tuned_file_again_keeps_its_measured_rules_evidence_and_stamp(tmp_path, capsys):
    tuned, rules = _tuned(tmp_path, capsys)
    again = tmp_path / "again.dccl"
    assert main(["export", "--policy", str(tuned), *TOPO, "-o",
                 str(again)]) == 0
    capsys.readouterr()
    assert main(["show", str(again), "--json"]) == 0
    kept = [r for r in json.loads(capsys.readouterr().out) if not r["defer"]]
    assert [(r["collective"], r["min_bytes"], r["max_bytes"], r["algorithm"], r["protocol"],
             r["evidence"]) for r in kept] == [
        (r["collective"], r["min_bytes"], r["max_bytes"], r["algorithm"], r["protocol"], r["evidence"])
        for r in rules]
    assert pf.read(again).header.nccl == pf.read(tuned).header.nccl == "2.26.2..2.26.2"


def test_the_example_tuner_csv_keeps_the_measured_rules_from_tune_and_from_export(tmp_path, capsys):
    tuned, rules = _tuned(tmp_path, capsys)
    from_tune, from_export = tmp_path / "tune.csv", tmp_path / "export.csv"
    assert main(["tune", *TOPO, "--measurements", str(REAL), "--collective", "allreduce",
                 "--no-calibrate", "-o", str(from_tune), "--format", "nccl-example-csv"]) == 0
    assert "lines only spell out NCCL's own pick" in capsys.readouterr().err
    assert main(["export", "--policy", str(tuned), *TOPO, "-o", str(from_export),
                 "--format", "nccl-example-csv"]) == 0
    capsys.readouterr()
    for path in (from_tune, from_export):
        text = path.read_text()
        lines = text.splitlines()
        csv = read_nccl_example_csv(text)
        for rule in rules:
            hit = next(r for r in csv if r.collective == Collective.ALLREDUCE and r.nodes == 1
                       and r.min_bytes <= rule["min_bytes"] <= r.max_bytes)
            assert (hit.algorithm.name.lower(), hit.protocol.name.lower()) == \
                (rule["algorithm"], rule["protocol"]), path
            row = next(i for i, line in enumerate(lines) if line.startswith(
                f"allreduce,{hit.min_bytes},{hit.max_bytes},"))
            assert lines[row - 1].startswith("# measured"), (path, lines[row - 1])
        assert f"# {MODEL_PICK_NOTE}" in lines  # the rest only spells out NCCL's own choice


def test_nccls_own_pick_is_never_written_as_an_override_even_ungated():
    """Where the oracle's answer is NCCL's own choice (algorithm, protocol and channels), the call
    is left to NCCL, with the gate or without it: pinning it would change nothing today and freeze
    a guess of NCCL's pick for tomorrow."""
    topo = load_topology("dgx_h100", nodes=2)
    result = export_policy(load_policy("oracle", topology=topo, deployable=True), topo,
                           collectives=[Collective.ALLREDUCE], gate=None, points_per_octave=2)
    own = [c for c in result.cells if c.verdict is not None and c.verdict.proposed == c.verdict.nccl]
    assert own and all(c.decision is None for c in own)
    assert any(c.decision is not None for c in result.cells)  # ungated, the rest is pinned
