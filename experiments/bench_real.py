"""The whole user path on the GPUs present, in one command: ``python experiments/bench_real.py``.

By default four NCCL ranks run as emulated hosts on the GPUs present (``--emulate-hosts``: one
H100 is enough, with the CUDA MPS daemon; ``--no-emulate-hosts --nprocs N`` uses N real GPUs):

1. sweep — nccl-tests-style all-reduce timings of NCCL's default and of every Ring/Tree x
   LL/LL128/Simple pair (``--choices``) at ``--sizes``, in ``--launches`` rounds of launches: the
   choices the tuner plugin can pin measured interleaved call by call in one launch, each choice
   NCCL disables for pins (LL128 on a socket network) in a launch of its own with ``NCCL_ALGO``/
   ``NCCL_PROTO`` naming it, the order alternating from round to round
   (:mod:`dynamiccl.profiler.measure.interleave`);
2. tune — ``dynamiccl tune`` on those records and the system's topology writes ``tuned.dccl``;
3. deploy, interleaved — ``--pairs`` pairs of launches, NCCL's default and NCCL with the plugin
   (``NCCL_TUNER_PLUGIN``) and the policy (``DYNAMICCL_POLICY``), alternating which goes first;
4. DDP — a real training job (``--ddp-layers`` x Linear(``--ddp-width``), ``--ddp-bucket-mb``
   buckets) with and without the policy, same seed, in ``--ddp-pairs`` interleaved launch pairs:
   step times and whether the losses match;
5. online — a DDP job on ``--online-hosts`` ranks whose buckets sit where NCCL's default loses,
   with the plugin and no policy file, tuning itself from the step times it measures (the
   runtime's online tuner: the evidence tuner with its shipped settings, or the adaptive policy of
   ``--online-model``, trained in simulation by ``experiments/bench_online.py --model FILE``).

Every launch is its own process launch; every collective measured is written as runner records
(``sweep.jsonl``, ``ab.jsonl`` in ``--out``: valid ``dynamiccl tune --measurements`` input, each
record naming its launch; a tuned launch's records carry the configuration the policy forced at
each size). The report (:mod:`real_report`) gives per size the medians over launches, the
launch-to-launch spread, the decision and its evidence and the verdict; DDP step times and losses;
the online tuner's path. ``--json`` prints everything; ``--analyse FILE.json`` re-prints a recorded
run (no GPU needed).

``--backend gloo`` is the dress rehearsal on a CPU: the same code end to end with gloo standing in
for NCCL, the same JSON sections. Gloo has no algorithms, so every measurement is gloo's own (and
recorded as such), tune finds nothing it can use, the plugin's pins run its code in the ranks with
nothing reading them, and the topology is a stand-in preset; what it shows is that every step runs
and hands the next what it expects (:data:`GLOO_CANNOT_SHOW` is printed with it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from dynamiccl.cli.common import UserError, read_head
from dynamiccl.files import write_text_atomic
from dynamiccl.plugin.policy_format import POLICY_ENV
from dynamiccl.profiler.formats.records import MeasurementRecord, write_jsonl
from dynamiccl.profiler.measure import emulation
from dynamiccl.profiler.measure.interleave import measure_choices
from dynamiccl.profiler.measure.launcher import LaunchError, launch
from dynamiccl.profiler.measure.runner import (
    STEERING_ENV,
    CollectiveSpec,
    inherited_steering,
    measure_many,
)
from dynamiccl.system.nccl import TUNER_PLUGIN_ENV
from dynamiccl.system.units import parse_size

#: The sweep's choices besides NCCL's default: every (algorithm, protocol) pair of Ring and Tree.
CHOICES = [(a, p) for a in ("ring", "tree") for p in ("ll", "ll128", "simple")]
#: What a run on gloo (``--backend gloo``) cannot show, said with its report.
GLOO_CANNOT_SHOW = ("gloo rehearsal: every step ran with gloo standing in for NCCL; it cannot show "
                    "NCCL's choices or their times (gloo has one algorithm of its own, so tune had "
                    "nothing to decide from and wrote a policy deferring to NCCL), the plugin "
                    "steering NCCL (its pins ran in the ranks with nothing reading them), GPU "
                    "timings, emulated hosts or MPS; its topology is a "
                    "stand-in preset")
#: A gloo rehearsal's defaults where they differ: what shows every step's path in a few minutes
#: on 2 cores, not statistics. One choice (gloo runs none; one shows the path of a choice the plugin
#: cannot pin, and the launches of its own it then gets), fewer pairs and steps, and the
#: self-tuning job on as many ranks as the rest (eight processes on 2 cores time the scheduler).
GLOO_DEFAULTS = {"choices": "tree/simple", "pairs": 2, "ddp_pairs": 2, "ddp_steps": 40,
                 "online_hosts": 4, "online_steps": 80}
#: The stand-in system of a gloo rehearsal (tune needs one; gloo records fit none), resized to
#: the ranks.
GLOO_TOPOLOGY = "dgx_h100"
#: The largest run file --analyse reads (a recorded run is a few MB).
MAX_RUN_BYTES = 64 << 20
#: The online job's layers: Linear(128, 128), 66 KiB of gradient each, three to a bucket (and a
#: last one alone): 194 KiB and 65 KiB buckets, where NCCL's default loses on 8 emulated hosts.
ONLINE_WIDTH, ONLINE_LAYERS = 128, 13
ONLINE_BUCKET_MB = 3 * (ONLINE_WIDTH * ONLINE_WIDTH + ONLINE_WIDTH) * 4 / 2**20


@dataclass
class Settings:
    nprocs: int = 4
    emulate_hosts: bool = True
    sizes: list[int] = field(default_factory=lambda: [parse_size(s) for s in
                                                      ("4K", "16K", "64K", "256K", "1M", "4M")])
    warmup: int = 5
    iters: int = 20
    runs: int = 3
    #: NCCL on the GPUs, or gloo on the CPU (the dress rehearsal).
    backend: str = "nccl"
    #: Rounds of sweep launches (each choice measured once per round).
    launches: int = 2
    choices: list[tuple[str, str]] = field(default_factory=lambda: list(CHOICES))
    pairs: int = 3
    ddp_pairs: int = 3
    ddp_steps: int = 150
    ddp_warmup: int = 30
    ddp_width: int = 256
    ddp_layers: int = 12
    ddp_bucket_mb: float = 0.25
    online_hosts: int = 8
    online_steps: int = 200
    online_model: str | None = None
    #: The self-tuning job's ranks load the plugin as NCCL's profiler too: the runtime times its
    #: trials by each call's GPU time instead of its own bucket timing.
    profiler: bool = False
    timeout_s: float = 600.0
    seed: int = 0


def clean_environment(environ: dict[str, str]) -> list[str]:
    """Drops the runner's :data:`~dynamiccl.profiler.measure.runner.STEERING_ENV` from ``environ``
    (the DDP jobs' ranks inherit it too; the benchmark sets it per launch itself, NCCL's default arm
    runs NCCL alone); returns what was set."""
    dropped = inherited_steering(environ)
    for name in STEERING_ENV:
        environ.pop(name, None)
    return dropped


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def specs_for(s: Settings, algorithm: str | None = None, protocol: str | None = None
              ) -> list[CollectiveSpec]:
    return [CollectiveSpec("allreduce", n, s.backend, s.warmup, s.iters, s.runs,
                           algorithm=algorithm, protocol=protocol) for n in s.sizes]


def run_sweep(s: Settings, out: Path) -> dict:
    """NCCL's default and every choice at every size, in ``s.launches`` rounds of launches (pinned
    choices interleaved, the others each in a launch of its own); every result a record in
    ``sweep.jsonl``."""
    specs = [spec for algorithm, protocol in [(None, None), *s.choices]
             for spec in specs_for(s, algorithm, protocol)]
    sweep = measure_choices([specs] * s.launches, s.nprocs, s.timeout_s, s.emulate_hosts,
                            progress=lambda line: progress(f"[sweep] {line}"))
    write_jsonl([r.to_record() for r in sweep.results], out / "sweep.jsonl")
    launches = []
    for note in sweep.launches:
        times: dict[str, dict[str, float]] = {}
        for r in (r for r in sweep.results if r.launch == note.launch):
            times.setdefault(r.spec.config_label, {})[str(r.spec.nbytes)] = r.time_us
        launches.append({**asdict(note), "times_us": times})
    return {"records": str(out / "sweep.jsonl"), "launches": launches,
            "own_launch": sweep.own_launch}


def run_tune(s: Settings, topology: Path | str, records: Path, policy: Path) -> dict:
    """``dynamiccl tune`` as a user runs it; its JSON decision rows."""
    from dynamiccl.cli.main import main
    from dynamiccl.plugin import policy_file as pf

    buffer = io.StringIO()
    size = [] if s.emulate_hosts else ["--nodes", "1", "--gpus-per-node", str(s.nprocs)]
    # gloo's records are of gloo's own algorithm, nothing tune may decide from: the rehearsal writes
    # the policy tune writes without evidence, one that leaves every call to NCCL
    evidence = ["--no-measurements"] if s.backend == "gloo" else ["--measurements", str(records)]
    with contextlib.redirect_stdout(buffer):
        code = main(["tune", "--topology", str(topology), *size, *evidence,
                     "--collective", "allreduce", "-o", str(policy), "--force", "--json"])
    if code != 0:
        raise SystemExit(f"bench_real: dynamiccl tune failed (exit {code}); see its message above")
    return {"policy": str(policy), "sha256": pf.file_hash(policy), "rows": json.loads(buffer.getvalue())}


def deployed_env(policy: Path | None) -> dict[str, str]:
    """The plugin NCCL loads, and the policy it reads (none: the plugin only follows pins)."""
    from dynamiccl.plugin import build as plugin

    env = {TUNER_PLUGIN_ENV: str(plugin.library_path())}
    return {**env, POLICY_ENV: str(policy)} if policy is not None else env


def tuned_record(record: MeasurementRecord, policy, policy_path: Path) -> MeasurementRecord:
    """A record of a launch with the plugin, labelled with what the policy forced at its size
    (NCCL's default where the policy has no rule or defers), so tune reads it for what ran."""
    from dynamiccl.system.knobs import Collective

    rule = policy.decide(Collective[record.collective.upper()], record.nbytes, record.nranks,
                         record.nnodes or 1)
    env = {POLICY_ENV: str(policy_path)}
    if rule is None or rule.decision is None:
        return replace(record, env=env)
    return replace(record, **rule.decision.record(), env=env)


def run_ab(s: Settings, policy_path: Path, out: Path) -> dict:
    """Interleaved launch pairs, NCCL's default against the tuned policy, the order alternating."""
    from dynamiccl.plugin import policy_file as pf

    policy = pf.read(policy_path)
    records, launches = [], []
    for pair in range(s.pairs):
        for arm in ("default", "tuned") if pair % 2 == 0 else ("tuned", "default"):
            env = deployed_env(policy_path) if arm == "tuned" else None
            began = time.monotonic()
            results = measure_many(specs_for(s), s.nprocs, s.timeout_s, s.emulate_hosts, env=env)
            progress(f"[A/B pair {pair + 1}/{s.pairs}] {arm}: {time.monotonic() - began:.0f} s")
            plain = [r.to_record() for r in results]
            records += plain if arm == "default" else [tuned_record(r, policy, policy_path) for r in plain]
            launches.append({"arm": arm, "pair": pair,
                             "times_us": {str(r.spec.nbytes): r.time_us for r in results},
                             "runs_us": {str(r.spec.nbytes): list(r.time_us_runs) for r in results}})
    write_jsonl(records, out / "ab.jsonl")
    return {"records": str(out / "ab.jsonl"), "launches": launches}


def run_ddp(s: Settings, policy_path: Path) -> dict:
    """The training job with and without the policy, interleaved launch pairs, the same seed."""
    launches = []
    for pair in range(s.ddp_pairs):
        for arm in ("plain", "tuned") if pair % 2 == 0 else ("tuned", "plain"):
            began = time.monotonic()
            out = launch(f"{__file__}:ddp_rank", s.nprocs,
                         {"steps": s.ddp_steps, "width": s.ddp_width, "layers": s.ddp_layers,
                          "bucket_mb": s.ddp_bucket_mb, "seed": s.seed, "backend": s.backend},
                         timeout_s=s.timeout_s,
                         env=rank_env(s, deployed_env(policy_path) if arm == "tuned" else {}),
                         emulate_hosts=s.emulate_hosts)[0]
            progress(f"[DDP pair {pair + 1}/{s.ddp_pairs}] {arm}: median step "
                     f"{statistics.median(out['step_ms'][s.ddp_warmup:]):.2f} ms "
                     f"({time.monotonic() - began:.0f} s)")
            launches.append({"arm": arm, "pair": pair, **out})
    return {"launches": launches}


def rank_env(s: Settings, env: dict[str, str]) -> dict[str, str]:
    """A DDP job's rank environment: ``env``, and on gloo no GPU (the ranks train on the CPU)."""
    return {**env, "CUDA_VISIBLE_DEVICES": ""} if s.backend == "gloo" else env


def run_online(s: Settings, topology: Path | str) -> dict:
    """The self-tuning DDP job; every rank's tuning log must be the same (lockstep)."""
    from dynamiccl.plugin import build as plugin
    from dynamiccl.profiler.measure.job_profile import profiler_loaded

    began = time.monotonic()
    with (profiler_loaded(plugin.library_path()) if s.profiler else contextlib.nullcontext({})) as timing:
        per_rank = launch(f"{__file__}:online_rank", s.online_hosts,
                          {"steps": s.online_steps, "topology": str(topology), "model": s.online_model,
                           "seed": s.seed, "gpus_per_node": None if s.emulate_hosts else s.online_hosts,
                           "backend": s.backend},
                          timeout_s=s.timeout_s, env=rank_env(s, {**deployed_env(None), **timing}),
                          emulate_hosts=s.emulate_hosts)
    timed = ", trials timed by NCCL's profiler" if s.profiler else ""
    progress(f"[online] {s.online_hosts} ranks, {s.online_steps} steps{timed}: "
             f"{time.monotonic() - began:.0f} s")
    out = per_rank[0]
    out["lockstep"] = all(r["events"] == out["events"] for r in per_rank)
    out["hosts"] = s.online_hosts
    return out


# ---- rank side --------------------------------------------------------------------------------
def _join(ctx, backend: str):
    import torch
    import torch.distributed as dist

    if backend == "gloo":
        dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank,
                                world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s))
        return torch.device("cpu")
    device = torch.device("cuda", ctx.gpu())
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=ctx.init_method, rank=ctx.rank,
                            world_size=ctx.world_size, timeout=timedelta(seconds=ctx.timeout_s),
                            device_id=device)
    return device


def _mlp(width: int, layers: int, seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(*[m for _ in range(layers)
                                 for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])


def _timed_steps(ctx, model, device, steps: int, width: int, seed: int, before_step=None):
    """Trains ``model`` ``steps`` steps on this rank's fixed data; step times (ms, a GPU idle at
    both ends) and losses."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1000 * seed + ctx.rank)
    data = torch.randn(steps, 32, width, generator=gen).to(device)
    idle = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    step_ms, losses = [], []
    for i in range(steps):
        if before_step is not None:
            before_step(i)
        idle()
        t0 = time.perf_counter()
        loss = model(data[i]).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        idle()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.detach())
    return step_ms, [float(x) for x in torch.stack(losses).cpu()]


def _bucket_bytes(model) -> list[int]:
    data = model._get_ddp_logging_data()
    return [int(b) for b in str(data.get("rebuilt_bucket_sizes", data["bucket_sizes"])).split(",")]


def _device_ids(device) -> list[int] | None:
    return [device.index] if device.type == "cuda" else None


def ddp_rank(ctx, steps: int, width: int, layers: int, bucket_mb: float, seed: int,
             backend: str = "nccl") -> dict | None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = _join(ctx, backend)
    model = DDP(_mlp(width, layers, seed).to(device), device_ids=_device_ids(device),
                bucket_cap_mb=bucket_mb)
    step_ms, losses = _timed_steps(ctx, model, device, steps, width, seed)
    buckets = _bucket_bytes(model)
    dist.destroy_process_group()
    return {"step_ms": step_ms, "losses": losses, "bucket_bytes": buckets} if ctx.rank == 0 else None


def online_rank(ctx, steps: int, topology: str, model: str | None, seed: int,
                gpus_per_node: int | None, backend: str = "nccl") -> dict:
    """DDP through the runtime with an online tuner and no policy file: per step what the tuner had
    pinned and how long the step took; the tuning log (every rank returns it)."""
    import torch.distributed as dist

    from dynamiccl import runtime
    from dynamiccl.agents.policies.adaptive import load_adaptive
    from dynamiccl.agents.policies.evidence import load_evidence
    from dynamiccl.agents.policies.runtime_tuner import RuntimeTunerAdapter
    from dynamiccl.system.topology import load_topology

    device = _join(ctx, backend)
    system = load_topology(topology, gpus_per_node=gpus_per_node)
    tuner = load_adaptive(model) if model else load_evidence()
    config = runtime.RuntimeConfig(stragglar=False, tune_start_step=3, tune_steps_per_trial=2)
    ddp = runtime.ddp(_mlp(ONLINE_WIDTH, ONLINE_LAYERS, seed).to(device), config,
                      tuner=RuntimeTunerAdapter(tuner, system), device_ids=_device_ids(device),
                      bucket_cap_mb=ONLINE_BUCKET_MB)
    rt = ddp.dynamiccl_runtime
    states: list[list] = []
    explored: list[bool] = []

    def before_step(_: int) -> None:  # what this step runs: the pins set at the last boundary
        queue = rt.tuning.queue if rt.tuning is not None else []
        states.append([[b.size_bin.min_bytes, list(b.current.ids())] for b in queue
                       if b.current is not None])
        explored.append(rt.tuning is not None and rt.tuning.active is None)

    step_ms, _ = _timed_steps(ctx, ddp, device, steps, ONLINE_WIDTH, seed, before_step)
    trials: dict[str, list] = {}
    for event in rt.tuning_log:
        if event.ended is not None:
            size_bin, candidate, agreed_us = event.ended
            trials.setdefault(str(size_bin.min_bytes), []).append(
                [list(candidate.ids()) if candidate is not None else None, agreed_us])
    events = [[e.step, e.size_bin.min_bytes, e.kind, list(e.candidate.ids()) if e.candidate else None]
              for e in rt.tuning_log]
    buckets = _bucket_bytes(ddp)
    dist.destroy_process_group()
    return {"step_ms": step_ms, "states": states, "trials": trials, "events": events,
            "exploration_ends_step": explored.index(True) if True in explored else None,
            "warmup_steps": config.tune_start_step, "bucket_bytes": buckets,
            "tuner": "adaptive policy" if model else "evidence tuner (no --online-model)"}


# ---- the command ------------------------------------------------------------------------------
def write_topologies(s: Settings, out: Path) -> tuple[Path | str, Path | str]:
    """The system of the microbenchmark and DDP job (nprocs ranks) and of the online job, written
    by `dynamiccl profile topology`: what NCCL sees on emulated hosts, else the GPUs found (one
    node, resized to the ranks by the reader); on gloo the stand-in preset."""
    from dynamiccl.cli.main import main

    if s.backend == "gloo":
        return GLOO_TOPOLOGY, GLOO_TOPOLOGY
    paths = out / "topology.yaml", out / "online_topology.yaml"
    for path, n in zip(paths, (s.nprocs, s.online_hosts), strict=True):
        emulate = ["--emulate-hosts", str(n)] if s.emulate_hosts else []
        if main(["profile", "topology", "-o", str(path), "--force", *emulate]) != 0:
            raise SystemExit("bench_real: `dynamiccl profile topology` failed; see above")
    return paths


def system_facts(s: Settings) -> dict:
    import torch

    facts = {"backend": s.backend, "torch": torch.__version__, "emulated_hosts": s.emulate_hosts}
    if s.backend == "gloo":
        return {**facts, "gpus": 0, "gpu": "CPU (gloo)", "nccl": "none", "cannot_show": GLOO_CANNOT_SHOW}
    return {**facts, "gpus": torch.cuda.device_count(), "gpu": torch.cuda.get_device_name(0),
            "nccl": ".".join(map(str, torch.cuda.nccl.version()))}


def check_out(out: Path) -> str | None:
    """Why ``out`` cannot take a run's files (None: it can): only an empty folder or an earlier
    run's."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file; name a folder"
    if out.is_dir() and any(out.iterdir()) and not (out / "bench_real.json").is_file():
        return f"--out {out} holds files of something else; name an empty or new folder"
    return None


def measure(s: Settings, out: Path, ddp: bool, online: bool, user_path: bool = True) -> dict:
    """The phases asked for: the user path (sweep, tune, A/B launches), DDP with and without its
    policy (which needs the path's policy), and the self-tuning job (which needs nothing before)."""
    began = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    topology, online_topology = write_topologies(s, out)
    doc: dict = {"settings": asdict(s), "system": system_facts(s), "topology": str(topology)}
    if user_path:
        doc["sweep"] = run_sweep(s, out)
        progress(f"[sweep] {time.monotonic() - began:.0f} s in all")
        doc["tune"] = run_tune(s, topology, out / "sweep.jsonl", out / "tuned.dccl")
        progress(f"[tune] {sum(r['ours'] != 'NCCL default' for r in doc['tune']['rows'])} decision "
                 f"rows override NCCL; policy {doc['tune']['policy']}")
        doc["ab"] = run_ab(s, out / "tuned.dccl", out)
    if ddp and user_path:
        doc["ddp"] = run_ddp(s, out / "tuned.dccl")
    if online:
        doc["online"] = run_online(s, online_topology)
    doc["seconds"] = round(time.monotonic() - began, 1)
    return doc


def parse_choice(text: str) -> tuple[str, str]:
    """``ring/ll`` -> ("ring", "ll"), checked against NCCL's names."""
    from dynamiccl.system.knobs import parse_enum
    from dynamiccl.system.nccl import Algorithm, Protocol

    algorithm, sep, protocol = text.partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not ALGORITHM/PROTOCOL (e.g. tree/simple)")
    return (Algorithm(parse_enum(Algorithm, algorithm)).name.lower(),
            Protocol(parse_enum(Protocol, protocol)).name.lower())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="--backend gloo changes these defaults: " + ", ".join(
                                    f"--{k.replace('_', '-')} {v}" for k, v in GLOO_DEFAULTS.items()))
    p.add_argument("--json", action="store_true", help="print the whole run (and its analysis) as JSON")
    p.add_argument("--analyse", type=Path, metavar="FILE.json",
                   help="re-print the report of a run recorded with --json (no GPU needed)")
    p.add_argument("--out", type=Path, default=Path("bench_real_out"),
                   help="folder for records, topology and policy (default bench_real_out)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=d.backend,
                   help="nccl on the GPUs (default), or gloo on the CPU: the dress rehearsal of "
                        "every step, with no NCCL to tune")
    p.add_argument("--nprocs", type=int, default=d.nprocs, help=f"ranks (default {d.nprocs})")
    p.add_argument("--emulate-hosts", action=argparse.BooleanOptionalAction, default=None,
                   help="NCCL ranks as hosts of their own sharing the GPUs (default on with nccl; "
                        "needs MPS)")
    p.add_argument("--sizes", default="4K,16K,64K,256K,1M,4M",
                   help="all-reduce sizes, nccl-tests' column (default 4K,16K,64K,256K,1M,4M)")
    p.add_argument("--choices",
                   help="the sweep's choices besides NCCL's default (default every Ring/Tree x "
                        "LL/LL128/Simple pair)")
    p.add_argument("--launches", type=int, default=d.launches,
                   help=f"rounds of sweep launches, each choice once per round ({d.launches})")
    p.add_argument("--iters", type=int, default=d.iters, help=f"iterations per run ({d.iters})")
    p.add_argument("--runs", type=int, default=d.runs,
                   help=f"runs per launch: the sweep's rounds ({d.runs})")
    p.add_argument("--pairs", type=int, help=f"interleaved A/B pairs ({d.pairs})")
    p.add_argument("--ddp-pairs", type=int, help=f"DDP launch pairs ({d.ddp_pairs})")
    p.add_argument("--ddp-steps", type=int, help=f"DDP steps ({d.ddp_steps})")
    p.add_argument("--online-hosts", type=int, help=f"ranks of the self-tuning job ({d.online_hosts})")
    p.add_argument("--online-steps", type=int, help=f"its steps ({d.online_steps})")
    p.add_argument("--online-model", help="the adaptive policy (.zip) from bench_online.py --model "
                                          "(default: the evidence tuner, shipped settings)")
    p.add_argument("--no-ddp", action="store_true", help="skip the DDP job")
    p.add_argument("--no-online", action="store_true", help="skip the self-tuning job")
    p.add_argument("--online-only", action="store_true",
                   help="only the self-tuning job (no sweep, tune, A/B or DDP: it needs none of them)")
    p.add_argument("--profiler", action="store_true",
                   help="the self-tuning job's ranks load DynamICCL as NCCL's profiler too, and the "
                        "runtime times its trials by each call's GPU time (nccl only)")
    args = p.parse_args(argv)
    defaults = {"choices": ",".join(f"{a}/{p}" for a, p in CHOICES), **{
        k: getattr(d, k) for k in ("pairs", "ddp_pairs", "ddp_steps", "online_hosts", "online_steps")}}
    if args.backend == "gloo":
        defaults.update(GLOO_DEFAULTS)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.size_list = [parse_size(x) for x in args.sizes.split(",")]
        args.choice_list = [parse_choice(x) for x in args.choices.split(",") if x]
    except ValueError as exc:
        p.error(f"--sizes/--choices: {exc}")
    if args.emulate_hosts and args.backend == "gloo":
        p.error("--emulate-hosts makes NCCL ranks hosts of their own; gloo ranks need none")
    if args.emulate_hosts is None:
        args.emulate_hosts = args.backend == "nccl"
    if min(args.nprocs, args.online_hosts) < 2 or min(args.pairs, args.ddp_pairs, args.iters,
                                                      args.runs, args.launches) < 1:
        p.error("--nprocs and --online-hosts need at least 2 ranks; pairs, launches, iters and runs "
                "at least 1")
    if args.ddp_steps <= d.ddp_warmup:
        p.error(f"--ddp-steps must exceed the {d.ddp_warmup} warmup steps")
    if args.online_only and args.no_online:
        p.error("--online-only runs only the self-tuning job, which --no-online skips; drop one")
    if args.profiler and args.backend == "gloo":
        p.error("--profiler loads NCCL's profiler, which gloo never loads; use --backend nccl")
    if args.online_model and not Path(args.online_model).is_file():
        p.error(f"--online-model {args.online_model}: no such file; train one with "
                "`python experiments/bench_online.py --model FILE.zip`")
    return args


def read_run(path: Path) -> dict:
    """A run recorded with --json, read within bounds (a FIFO or device is never opened, a file
    over :data:`MAX_RUN_BYTES` never read whole); raises UserError naming what is wrong."""
    raw = read_head(path, "run recorded with --json", MAX_RUN_BYTES + 1)
    if len(raw) > MAX_RUN_BYTES:
        raise UserError(f"{path} is larger than {MAX_RUN_BYTES >> 20} MiB, which no recorded run "
                        "is; give the bench_real.json of a run")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise UserError(f"{path} is not JSON ({why}); give a run recorded with --json") from None
    missing = [k for k in ("settings", "system") if not isinstance(doc, dict) or
               not isinstance(doc.get(k), dict)]
    if missing:
        raise UserError(f"{path} is not a run recorded with --json (no {' or '.join(missing)} "
                        "object); give the bench_real.json of a run")
    return doc


def report(doc: dict, as_json: bool, source: str) -> str:
    """The report of a run (or its JSON with the analysis), as text; UserError where the run
    lacks what the report needs."""
    import real_report

    try:
        analysis = real_report.analyse(doc)
        if as_json:
            return json.dumps({**doc, "analysis": analysis}, indent=1)
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            real_report.print_report(doc, analysis)
        return buffer.getvalue()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError,
            statistics.StatisticsError) as exc:
        raise UserError(f"{source} lacks what the report needs ({type(exc).__name__}: {exc}); give "
                        "the bench_real.json of a run") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.analyse:
            doc = read_run(args.analyse)
        else:
            doc = run(args)
            if isinstance(doc, int):
                return doc
        text = report(doc, args.json, str(args.analyse or "the run"))
    except UserError as exc:
        print(f"bench_real: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def run(args: argparse.Namespace) -> dict | int:
    """Measures everything the arguments ask for; the recorded run, or an exit code."""
    s = Settings(nprocs=args.nprocs, emulate_hosts=args.emulate_hosts, sizes=args.size_list,
                 iters=args.iters, runs=args.runs, pairs=args.pairs, ddp_pairs=args.ddp_pairs,
                 ddp_steps=args.ddp_steps, online_hosts=args.online_hosts,
                 online_steps=args.online_steps, online_model=args.online_model,
                 profiler=args.profiler,
                 backend=args.backend, launches=args.launches, choices=args.choice_list)
    problem = check_out(args.out)
    if s.backend == "nccl" and emulation.visible_gpus() == 0:
        problem = ("measures NCCL on GPUs and none is visible here; --backend gloo rehearses every "
                   "step on the CPU, --analyse FILE.json re-prints a run recorded on a GPU machine")
    if problem is not None:
        raise UserError(problem)
    dropped = clean_environment(os.environ)
    if dropped:
        progress(f"note: ignoring {', '.join(dropped)} from the environment: each launch sets "
                 "what steers NCCL itself (NCCL's default arm runs NCCL alone)")
    if s.backend == "gloo":
        progress(f"note: {GLOO_CANNOT_SHOW}")
    try:
        if s.backend == "nccl":
            emulation.prepare(max(0 if args.online_only else s.nprocs,
                                  0 if args.no_online else s.online_hosts),
                              emulation.visible_gpus(), s.emulate_hosts)
        doc = measure(s, args.out, not args.no_ddp, not args.no_online, not args.online_only)
    except emulation.EmulationError as exc:
        raise UserError(str(exc)) from None
    except LaunchError as exc:
        print(f"bench_real: a launch failed: {exc}", file=sys.stderr)
        return 1
    write_text_atomic(args.out / "bench_real.json", json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    sys.exit(main())
