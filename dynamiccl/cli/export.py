"""``dynamiccl export --policy NAME|PATH --topology NAME|FILE -o policy.dccl``: deploy a policy.

Evaluates the policy over every collective, size (8 B..16 GiB), node count and GPUs-per-node asked
for, passes every answer through the safety gate (an override only where the predicted gain clears
the margin and the model's uncertainty; NCCL decides elsewhere), and writes the policy file the
NCCL tuner plugin reads (or NVIDIA's example-tuner CSV) with its evidence beside it
(``<file>.evidence.json``, what ``dynamiccl show`` prints). A file predicted slower than NCCL for
any call is refused unless ``--allow-slower`` is given. A trained policy must have been trained on
the deployable observation (``env.observation=deployable``): export shows it exactly that, and
freezes nothing it learned to vary. On a terminal a progress bar runs on stderr meanwhile.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from dynamiccl.cli.common import (
    UserError,
    add_gate_margin_arg,
    add_topology_args,
    check_output_format,
    non_negative_int,
    positive_int,
    topology_from_args,
)
from dynamiccl.cli.policy_sniff import load_policy_arg

EPILOG = """examples:
  dynamiccl export --policy oracle --topology dgx_h100 --nodes 2 -o oracle.dccl
  dynamiccl export --policy outputs/run/model.zip --topology dgx_h100 --node-counts 1,2,4 \\
      -o policy.dccl
  dynamiccl export --policy oracle --topology dgx_h100 --nodes 2 --format nccl-example-csv \\
      -o nccl_tuner.conf
then: NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) DYNAMICCL_POLICY=$PWD/policy.dccl torchrun ..."""


#: Node counts (GPUs-per-node values) one export evaluates; each costs a full sweep of sizes.
MAX_LIST = 64


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    if len(values) > MAX_LIST:
        raise argparse.ArgumentTypeError(f"{len(values)} values; export at most {MAX_LIST} at once")
    return values


def _contexts(text: str) -> list[tuple[str, str]]:
    from dynamiccl.plugin import policy_file as pf
    if text == "default":
        return [pf.DEFAULT_CONTEXT]
    if text == "all":
        return [(s, c) for s in pf.STRAGGLER_BUCKETS for c in pf.C2C_BUCKETS]
    raise argparse.ArgumentTypeError("--contexts is 'default' or 'all'")


def _checkpoint_digest(name_or_path: str) -> str | None:
    path = Path(name_or_path)
    files = [path] if path.is_file() else sorted(p for ext in ("*.zip", "*.pt")
                                                 for p in path.rglob(ext)) if path.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _source(name_or_path: str) -> str:
    """What the file records as its source: a built-in policy's name, else the checkpoint's
    absolute path (so ``evaluate`` finds it from any folder)."""
    from dynamiccl.agents.policies.registry import BUILTIN

    key = name_or_path.strip().lower()
    return key if key in BUILTIN else str(Path(name_or_path).resolve())


def _output(args: argparse.Namespace) -> Path:
    """The -o path (and the evidence beside a .dccl), checked before any work: never a folder, a
    missing or read-only place, an input (the policy, the topology), an existing file without
    --force, or a file of another kind than the format written (e.g. the model itself)."""
    from dynamiccl.agents.shipping.export import EVIDENCE, evidence_path
    from dynamiccl.files import claim_output
    from dynamiccl.plugin import nccl_csv
    from dynamiccl.plugin import policy_file as pf

    check_output_format(args.output, args.format)
    inputs = [args.policy, args.topology]
    kind = pf.KIND if args.format == "dccl" else nccl_csv.KIND
    out = claim_output(args.output, kind, inputs=inputs, force=args.force)
    if args.format == "dccl":
        claim_output(evidence_path(out), EVIDENCE, inputs=inputs, force=True)
    return out


def _check_policy_file_system(policy, name: str, topology, node_counts: list[int],
                              gpus_per_node: list[int] | None) -> None:
    """A policy file exported again onto another system than its own: refused where none of its
    rules applies to the shapes exported (the file written would leave every call to NCCL), said
    in one line where some do."""
    from dynamiccl.agents.policies.deployed import PolicyFilePolicy

    if not isinstance(policy, PolicyFilePolicy):
        return
    file, header = policy.policy, policy.policy.header
    if header.fingerprint == topology.fingerprint():
        return
    shapes = [topology.resized(nodes=n, gpus_per_node=g) for n in node_counts
              for g in gpus_per_node or [None]]
    pinned = file.pinned_shapes()
    written = (f"{name} was written for {header.topology} (fingerprint {header.fingerprint}) and "
               + (f"pins choices for {pinned}" if pinned != "none" else "pins nothing"))
    here = ", ".join(f"{t.nodes} nodes x {t.nranks} ranks" for t in shapes)
    if not any(file.overrides_on(t.nranks, t.nodes) for t in shapes):
        raise UserError(f"{written}; none of its rules applies to {topology.name} on {here}, so the "
                        "file written would leave every call to NCCL: export it with the topology "
                        "it was written for, or tune this system")
    print(f"note: {written}, not for {topology.name} (fingerprint {topology.fingerprint()}); its rules "
          f"for {here} are exported as they stand", file=sys.stderr)


def _with_evidence(policy, name: str):
    """A ``.dccl`` exported again: with its evidence beside it, it is written as it decides, each
    rule with the evidence it was made on (:mod:`~dynamiccl.agents.shipping.reexport`: a measured
    rule is not judged again on the model), and it keeps the NCCL releases it was stamped with.
    Anything else: as it is, stamped with the plugin's whole range."""
    from dynamiccl.agents.policies.deployed import PolicyFilePolicy
    from dynamiccl.agents.shipping.export import read_evidence
    from dynamiccl.agents.shipping.reexport import EvidencedPolicyFile
    from dynamiccl.plugin import policy_file as pf

    if not isinstance(policy, PolicyFilePolicy):
        return policy, pf.DEFAULT_NCCL_RANGE
    rows, problem = read_evidence(name)
    if rows is None:
        print(f"note: {name} has no evidence beside it{f' ({problem})' if problem else ''}: its "
              "rules pass the model's gate again, as any policy's would", file=sys.stderr)
        return policy, policy.policy.header.nccl
    return EvidencedPolicyFile(policy, rows), policy.policy.header.nccl


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.agents.policies.deployed import NcclExampleCsvPolicy
    from dynamiccl.agents.shipping import export as exporting
    from dynamiccl.agents.shipping.gate import Gate
    from dynamiccl.plugin import policy_file as pf
    from dynamiccl.plugin.nccl_csv import read_nccl_example_csv, to_nccl_example_csv, write_nccl_example_csv

    if args.points_per_octave > exporting.MAX_POINTS_PER_OCTAVE:
        raise UserError(f"--points-per-octave {args.points_per_octave}: points per octave must be "
                        f"1..{exporting.MAX_POINTS_PER_OCTAVE} (boundaries are bisected to the byte anyway)")
    out = _output(args)
    topology = topology_from_args(args)
    node_counts = args.node_counts or [topology.nodes]
    for nodes in node_counts:  # within the system limits, said before any work
        for gpus in args.gpus_per_node_list or [None]:
            topology.resized(nodes=nodes, gpus_per_node=gpus)
    try:
        policy = load_policy_arg(args.policy, topology=topology, deployable=True, seed=args.seed)
        digest = _checkpoint_digest(args.policy)
    except PermissionError as exc:
        raise UserError(f"{exc.filename}: permission denied; make it readable") from None
    _check_policy_file_system(policy, args.policy, topology, node_counts, args.gpus_per_node_list)
    policy, nccl_range = _with_evidence(policy, args.policy)
    if args.no_gate and args.allow_model_only:
        raise UserError("--allow-model-only changes how the gate judges the model; with --no-gate "
                        "there is no gate: give one of them")
    gate = None if args.no_gate else Gate(margin=args.margin, model_only=args.allow_model_only)
    try:
        observe = exporting.observer_for(policy)
    except exporting.NotExportable as exc:
        raise UserError(str(exc)) from None
    result = exporting.export_policy(
        policy, topology, policy_name=Path(args.policy).stem if Path(args.policy).exists()
        else args.policy, node_counts=node_counts, gpus_per_node=args.gpus_per_node_list,
        contexts=args.contexts, points_per_octave=args.points_per_octave, observe=observe,
        policy_digest=digest, gate=gate, source=_source(args.policy), progress=True,
        nccl_range=nccl_range)
    shipped = result.policy_file
    own_evidence = hasattr(policy, "decide_rule")
    slower = {c: (c.verdict.gain, f"{c.verdict.proposed.label()} vs NCCL's "
                                  f"{c.verdict.nccl.label()}") for c in result.predicted_slower()}
    if args.format == "nccl-example-csv":
        shipped = exporting.for_example_tuner(result, topology)
        try:
            rules = read_nccl_example_csv(to_nccl_example_csv(shipped))
        except pf.PolicyFileError as exc:
            raise UserError(str(exc)) from None
        as_run = exporting.predicted_slower_as_shipped(NcclExampleCsvPolicy(rules, out.name),
                                                       result, topology)
        for cell, gain in as_run:
            if own_evidence and cell.decision is not None and cell.verdict is not None:
                continue  # a rule the file's own evidence (a measurement) decided is judged by it
            if gain < slower.get(cell, (0.0, ""))[0]:
                slower[cell] = (gain, "as NVIDIA's example tuner runs the CSV")
    if slower:
        worst = min(slower, key=lambda c: slower[c][0])
        gain, how = slower[worst]
        what = (f"{len(slower)} of {len(result.cells)} evaluated calls are predicted slower than "
                f"NCCL's own choice (worst: {worst.collective.name.lower()} {worst.nbytes} B on "
                f"{worst.nodes} nodes, {how}, {100 * gain:+.1f}%)")
        if not args.allow_slower:
            raise UserError(f"{what}; export with the gate (drop --no-gate) or pass "
                            "--allow-slower to write it anyway")
        print(f"dynamiccl export: warning: {what}; written anyway (--allow-slower)",
              file=sys.stderr)
    try:
        if args.format == "nccl-example-csv":
            write_nccl_example_csv(shipped, out, notes=exporting.example_tuner_notes(result, shipped))
        else:
            pf.write(result.policy_file, out)
            exporting.save_evidence(out, exporting.rule_evidence(result))
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}; pick another -o path") from None
    n_rules = sum(1 for sl in shipped.slices for r in sl.rules if r.decision is not None) \
        if args.format == "nccl-example-csv" else shipped.n_rules
    n_defer = sum(1 for c in result.cells if c.decision is None)
    gate_note = ("ungated" if gate is None else
                 f"gate: margin {100 * gate.margin:g}% and the model's uncertainty"
                 f"{'' if gate.model_only else ', no override on the model alone'}, "
                 f"{result.gated} proposed overrides deferred")
    print(f"wrote {out}: {n_rules} rules from {len(result.cells)} evaluated "
          f"calls ({n_defer} left to NCCL; {gate_note}), nodes {node_counts}, format {args.format}")
    if args.format == "nccl-example-csv":
        print(f"note: NVIDIA's example tuner runs every call no line matches on 1 channel, so any "
              f"communicator other than {topology.name} on {', '.join(map(str, node_counts))} "
              "node(s) (a tensor-parallel group inside one node, too) runs on 1 channel; export "
              "every node count the job's communicators use (--node-counts 1,2,...)")
    if args.format == "dccl":
        print(f"inspect: dynamiccl show {out}")
        print(f"score:   dynamiccl evaluate --policy {out} --suite heldout")
        print(f"use:     NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) DYNAMICCL_POLICY={Path(out).resolve()} "
              "torchrun ...")  # every rank reads the same file: the plugin warns at a relative path
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a policy file for the NCCL tuner plugin",
        description="Evaluate a policy over collectives x sizes (8 B..16 GiB, boundaries where the "
                    "decision changes) x node counts x GPUs per node and write the policy file the "
                    "DynamICCL tuner plugin loads. Only exportable knobs are used; an answer whose "
                    "predicted gain does not clear the gate's margin and the model's uncertainty, "
                    "and every situation not exported, is written as 'defer to NCCL'.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, metavar="NAME|PATH",
                        help="built-in policy (oracle, nccl_default, static_best, random, ...) or "
                             "a checkpoint (model.zip, model.pt or a run folder) trained on the "
                             "deployable observation")
    add_topology_args(parser)
    parser.add_argument("--node-counts", type=_int_list, default=None, metavar="N,N,...",
                        help="export several node counts (default: the system's own)")
    parser.add_argument("--gpus-per-node-list", type=_int_list, default=None, metavar="G,G,...",
                        help="export several GPUs-per-node values (default: the system's own)")
    parser.add_argument("--contexts", type=_contexts, default="default",
                        help="context slices: 'default' (no straggler, no overlap) or 'all'")
    parser.add_argument("--points-per-octave", type=positive_int, default=8,
                        help="size samples per doubling before bisection (1..64, default 8)")
    add_gate_margin_arg(parser, "gate: override NCCL only where the predicted gain exceeds this and "
                                "the model's uncertainty")
    parser.add_argument("--no-gate", action="store_true",
                        help="write the policy's answers ungated (still refused where predicted "
                             "slower than NCCL, unless --allow-slower)")
    parser.add_argument("--allow-model-only", action="store_true",
                        help="let a rule whose only evidence is the model (no calibration, or a "
                             "pair the calibration did not fit) override NCCL where its predicted "
                             "gain clears the model's measured error on real systems (0.24 of log "
                             "time over RDMA, 0.75 over TCP); by default such a rule defers, so "
                             "without measurements nothing is overridden. show marks such rules")
    parser.add_argument("--allow-slower", action="store_true",
                        help="write the file even where it is predicted slower than NCCL (warned)")
    parser.add_argument("--force", action="store_true", help="replace an existing policy file")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of random policies")
    parser.add_argument("--format", choices=("dccl", "nccl-example-csv"), default="dccl",
                        help="dccl (DynamICCL plugin, default) or NVIDIA's example-tuner CSV")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
    parser.set_defaults(func=_run)
