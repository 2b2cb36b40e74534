"""``dynamiccl profile job [--out DIR] -- CMD ...``: a user's job, its collectives as NCCL ran them.

The command (torchrun, mpirun, a plain script) runs with DynamICCL's library loaded as NCCL's
profiler plugin (:mod:`dynamiccl.plugin.profile_ring`); every NCCL communicator of every rank records its
collectives, and the job's mix — per collective, size, ranks, nodes and NCCL's choice: how many
calls, the time per call, the job's time in them — is written to ``DIR/job.jsonl``
(:mod:`~dynamiccl.profiler.formats.job_mix`: measurement records ``tune --measurements`` reads, and
what ``tune --workload`` weighs by) and printed. The job's exit status is the command's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import uuid
from pathlib import Path

from dynamiccl.cli.common import UserError, int_between, path_arg, positive_float
from dynamiccl.plugin.profile_ring import DEFAULT_RECORDS, JOB_RECORDS, MAX_RECORDS, MIN_RECORDS, ring_files

JOB_FILE = "job.jsonl"
#: Exit status when the job ran but no NCCL communicator recorded anything.
NOTHING_RECORDED = 1

EPILOG = """examples:
  dynamiccl profile job -- torchrun --nproc-per-node 8 train.py
  dynamiccl profile job --out prof -- python train.py
  dynamiccl profile job --rings /shared/rings -- mpirun -x NCCL_PROFILER_PLUGIN -x DYNAMICCL_PROFILE \\
      -x DYNAMICCL_PROFILE_RECORDS -np 16 python train.py
then: dynamiccl tune --topology T --measurements M --workload prof/job.jsonl --plan"""


def register_job(kinds: argparse._SubParsersAction) -> None:
    j = kinds.add_parser(
        "job", help="run a job with NCCL's profiler loaded; write its collective mix",
        description="Run CMD (torchrun, mpirun, a plain script) with DynamICCL as NCCL's profiler "
        "plugin and write the job's collectives as NCCL ran them: per collective, size, ranks, "
        "nodes and NCCL's choice the calls, the GPU time per call and the job's time in them, to "
        f"DIR/{JOB_FILE}. Needs NCCL 2.27 or newer (profiler interface v4+); gloo jobs have no "
        "NCCL profiler. Exits with the job's status.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    j.add_argument("--out", type=path_arg, default="dynamiccl-job", metavar="DIR",
                   help=f"folder for {JOB_FILE} (created if missing; default dynamiccl-job)")
    j.add_argument("--force", action="store_true",
                   help=f"replace a {JOB_FILE} an earlier profile job wrote in DIR")
    j.add_argument("--rings", type=path_arg, metavar="DIR",
                   help="where the ranks write their rings (kept); on several nodes a folder every "
                        "node sees. Default: a temporary folder in /dev/shm, removed afterwards")
    j.add_argument("--records", type=_records_arg, default=JOB_RECORDS, metavar="N",
                   help=f"records per rank's ring, a power of two in {MIN_RECORDS}..{MAX_RECORDS} "
                        f"(default {JOB_RECORDS}; the plugin's own default is {DEFAULT_RECORDS})")
    j.add_argument("--timeout", type=positive_float, metavar="S",
                   help="stop the job after S seconds (its mix so far is still written)")
    j.add_argument("--emulated-hosts", action="store_true",
                   help="the job's ranks are emulated hosts (ranks sharing GPUs over loopback "
                        "sockets): the records say so, so tune never mixes them with a real system")
    j.add_argument("--json", action="store_true", help="print the mix as JSON instead of a table")
    j.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the job's command line, after --")
    j.set_defaults(func=run_job_command)


def _records_arg(text: str) -> int:
    value = int_between(MIN_RECORDS, MAX_RECORDS)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"{value} is not a power of two")
    return value


def _command(args: argparse.Namespace) -> list[str]:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UserError("no command given; write it after --, e.g. "
                        "dynamiccl profile job -- torchrun --nproc-per-node 2 train.py")
    if not shutil.which(cmd[0]):
        raise UserError(f"{cmd[0]}: command not found; give the job's command after --")
    return cmd


def _claim_outputs(args: argparse.Namespace) -> Path:
    from dynamiccl.files import claim_output
    from dynamiccl.profiler.formats.job_mix import JOB_MIX

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder for {JOB_FILE}")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: its parent folder does not exist; create it first")
    if out.is_dir():
        claim_output(out / JOB_FILE, JOB_MIX, force=args.force, flag="--out")
    return out


def _rings_folder(args: argparse.Namespace) -> tuple[Path, bool]:
    """(folder, whether to remove it at the end)."""
    if args.rings is None:
        from dynamiccl.profiler.measure.job_profile import temporary_rings

        return temporary_rings(), True
    folder = Path(args.rings)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--rings {folder} is a file; give a folder")
    folder.mkdir(parents=True, exist_ok=True)
    if ring_files(folder):
        raise UserError(f"--rings {folder} already holds rings of another run; give an empty folder")
    if not os.access(folder, os.W_OK):
        raise UserError(f"--rings {folder} is not writable; give another folder")
    return folder, False


def run_job_command(args: argparse.Namespace) -> int:
    from dynamiccl.plugin import build as plugin
    from dynamiccl.profiler.measure.job_profile import profiling_env, run_job
    from dynamiccl.system.nccl_profiler import PROFILER_PLUGIN_ENV

    cmd = _command(args)
    out = _claim_outputs(args)
    try:
        library = plugin.library_path()
    except plugin.PluginError as exc:
        raise UserError(str(exc)) from None
    rings, temporary = _rings_folder(args)
    given = os.environ.get(PROFILER_PLUGIN_ENV)
    if given and Path(given) != library:
        print(f"note: {PROFILER_PLUGIN_ENV}={given} is replaced by DynamICCL's profiler for this job",
              file=sys.stderr)
    env = {**os.environ, **profiling_env(library, rings, args.records)}
    print(f"profiling `{' '.join(cmd)}`: rings in {rings}", file=sys.stderr)
    try:
        run = run_job(cmd, env, rings, timeout_s=args.timeout)
    except OSError as exc:
        raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    finally:
        if temporary:
            shutil.rmtree(rings, ignore_errors=True)
    return _report(args, out, run, cmd)


def _report(args: argparse.Namespace, out: Path, run, cmd: list[str]) -> int:
    from dynamiccl.profiler.formats.job_mix import write
    from dynamiccl.profiler.measure.nvml import NoDriverError, local_provider

    status = run.status
    ended = f"the job {run.stopped}" if run.stopped else f"the job exited with status {run.exit_code}"
    if run.rings == 0:
        print(f"{ended}; no NCCL communicator recorded anything: no NCCL collective ran, or NCCL "
              "is older than 2.27, or the launcher did not pass the environment to the ranks "
              "(export NCCL_PROFILER_PLUGIN, DYNAMICCL_PROFILE and DYNAMICCL_PROFILE_RECORDS); "
              f"nothing written", file=sys.stderr)
        return status or NOTHING_RECORDED
    try:
        gpus = local_provider().snapshot().gpus
    except NoDriverError:
        gpus = ()
    entries = run.mix.entries(launch=f"job-{uuid.uuid4().hex[:12]}", gpu=gpus[0].name if gpus else "",
                              emulated_hosts=args.emulated_hosts)
    out.mkdir(exist_ok=True)
    path = write(entries, out / JOB_FILE)
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=1))
    else:
        _print_mix(entries, cmd)
    for note in _notes(run):
        print(f"note: {note}", file=sys.stderr)
    print(f"{ended}; wrote {path} ({len(entries)} kinds of call); then: dynamiccl tune ... "
          f"--workload {path}", file=sys.stderr)
    return status


def _notes(run) -> list[str]:
    notes = []
    if run.lost:
        notes.append(f"{run.lost} records were overwritten before they could be read: raise --records")
    recorded = sum(run.drops.get(r, 0) for r in ("no_slot", "descriptor"))
    if recorded:
        notes.append(f"the profiler could not record {recorded} calls "
                     f"({run.drops.get('no_slot', 0)} with every slot busy, "
                     f"{run.drops.get('descriptor', 0)} of a kind it has no id for)")
    if run.mix.untimed:
        notes.append(f"{run.mix.untimed} calls of kinds with no GPU time at all are left out")
    if run.mix.partial:
        notes.append(f"{run.mix.partial} calls were counted without every rank's record")
    for path, why in run.unreadable.items():
        notes.append(f"skipped {path}: {why}")
    return notes


def _print_mix(entries: list, cmd: list[str]) -> None:
    from rich.table import Table

    from dynamiccl.console import console

    total = sum(e.total_us for e in entries) or 1.0
    calls = sum(e.calls for e in entries)
    table = Table(title=f"`{' '.join(cmd)}`: {calls} collective calls, {total / 1e3:.2f} ms of GPU "
                        "time in them (per call: the slowest rank's)")
    for col in ("collective", "size", "ranks", "nodes", "calls", "NCCL's pick", "time (us)",
                "p10", "p90", "share of time"):
        table.add_column(col, justify="left" if col in ("collective", "NCCL's pick") else "right")
    for e in entries:
        r = e.record
        table.add_row(r.collective, str(r.nbytes), str(r.nranks), str(r.nnodes), str(e.calls),
                      f"{r.nccl_pick}/{e.nccl_channels}ch", f"{r.time_us:.2f}", f"{e.p10_us:.2f}",
                      f"{e.p90_us:.2f}", f"{100 * e.total_us / total:.1f}%")
    console().print(table)
