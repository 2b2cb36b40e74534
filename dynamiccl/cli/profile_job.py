"""``dynamiccl profile job [--out DIR] -- CMD ...``: a user's job, its collectives as NCCL ran them.

The command (torchrun, mpirun, a plain script) runs with DynamICCL's library loaded as NCCL's
profiler plugin (:mod:`dynamiccl.plugin.profile_ring`); every NCCL communicator of every rank records its
collectives, and the job's mix — per collective, size, ranks, nodes and NCCL's choice: how many
calls, the time per call, the job's time in them — is written to ``DIR/job.jsonl``
(:mod:`~dynamiccl.profiler.formats.job_mix`: measurement records ``tune --measurements`` reads, and
what ``tune --workload`` weighs by) and printed. The job's exit status is the command's, as a shell
reports it (137 for a job killed by SIGKILL).

The job runs in a session of its own; a signal dynamiccl receives (Ctrl-C, ``kill``, ``timeout``,
a closed ssh session, Ctrl-\\) is passed on to all of it, SIGTERM follows shortly (``srun`` only
reports its tasks at one Ctrl-C, and hands SIGTERM to every task), a second signal or the end of
``--grace`` kills it (:mod:`~dynamiccl.profiler.measure.job_process`), and the mix collected so
far is written, marked partial, before the rings are removed. ``--out`` is claimed before the job
starts (created, checked writable, locked against a second run) and checked again when the mix is
written; a mix that cannot go there is written beside it or in the temporary folder, never dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dynamiccl.cli.common import (
    UserError,
    float_up_to,
    int_between,
    job_command,
    path_arg,
    positive_float,
)
from dynamiccl.plugin.profile_ring import (
    DEFAULT_RECORDS,
    JOB_RECORDS,
    MAX_RECORDS,
    MIN_RECORDS,
    failed_rings,
    ring_files,
)
from dynamiccl.profiler.measure.job_process import GRACE_S

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
        "NCCL profiler. Exits with the job's status. Ctrl-C, kill, timeout or a closed session "
        "stop the whole job (a second one kills it) and the mix so far is written, marked partial.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    j.add_argument("--out", type=path_arg, default="dynamiccl-job", metavar="DIR",
                   help=f"folder for {JOB_FILE} (created if missing; default dynamiccl-job)")
    j.add_argument("--force", action="store_true",
                   help=f"replace a {JOB_FILE} an earlier profile job wrote in DIR")
    j.add_argument("--rings", type=path_arg, metavar="DIR",
                   help="where the ranks write their rings (kept): a new or empty folder; on "
                        "several nodes a folder every node sees. Default: a temporary folder in "
                        "/dev/shm, removed afterwards")
    j.add_argument("--records", type=_records_arg, default=JOB_RECORDS, metavar="N",
                   help=f"records per rank's ring, a power of two in {MIN_RECORDS}..{MAX_RECORDS} "
                        f"(default {JOB_RECORDS}; the plugin's own default is {DEFAULT_RECORDS})")
    j.add_argument("--timeout", type=positive_float, metavar="S",
                   help="stop the job after S seconds (its mix so far is still written)")
    j.add_argument("--grace", type=float_up_to(MAX_GRACE_S, " s"), default=GRACE_S, metavar="S",
                   help=f"seconds a stopped job gets to exit before all of it is killed with "
                        f"SIGKILL (default {GRACE_S:g}; 0..{MAX_GRACE_S:g})")
    j.add_argument("--emulated-hosts", action="store_true",
                   help="the job's ranks are emulated hosts (ranks sharing GPUs over loopback "
                        "sockets): the records say so, so tune never mixes them with a real system")
    j.add_argument("--json", action="store_true", help="print the mix as JSON instead of a table")
    j.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the job's command line, after --")
    j.set_defaults(func=run_job_command)


#: The longest --grace (a stopped job held for longer is not being stopped).
MAX_GRACE_S = 600.0


def _records_arg(text: str) -> int:
    value = int_between(MIN_RECORDS, MAX_RECORDS)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"{value} is not a power of two")
    return value


def _command(args: argparse.Namespace) -> list[str]:
    return job_command(args.cmd, "dynamiccl profile job -- torchrun --nproc-per-node 2 train.py")


@contextmanager
def _claimed_out(args: argparse.Namespace) -> Iterator[Path]:
    """The --out folder, checked before the job runs: created if missing (and removed again if
    nothing is written into it), writable, held against a second `profile job` writing into it
    (:func:`~dynamiccl.files.claimed_folder`), its job.jsonl one it may write."""
    from dynamiccl.files import claim_output, claimed_folder
    from dynamiccl.profiler.formats.job_mix import JOB_MIX

    with claimed_folder(args.out, flag="--out", holds=JOB_FILE,
                        command="dynamiccl profile job") as out:
        claim_output(out / JOB_FILE, JOB_MIX, force=args.force, flag="--out")
        yield out


def _separate_folders(args: argparse.Namespace) -> None:
    """Refuse an --out and a --rings that are one folder or one inside the other, before either is
    made: the rings are kept and the mix is replaced by the next run's, so in one folder each run
    would leave files among the other's (and an --out made here and left empty is removed)."""
    if args.rings is None:
        return
    out, rings = (Path(p).resolve() for p in (args.out, args.rings))
    if out == rings or out.is_relative_to(rings) or rings.is_relative_to(out):
        raise UserError(f"--out {args.out} and --rings {args.rings} overlap: the kept rings and "
                        f"{JOB_FILE} would share a folder; give each a folder of its own")


def _rings_folder(args: argparse.Namespace) -> tuple[Path, bool]:
    """(folder, whether to remove it at the end); a folder made here is the user's only (0700),
    and a relative --rings is made absolute (a job that changes folder finds it all the same). An
    existing folder must be empty: the rings are kept there, and mixed with another run's rings
    (which the mix would read as this job's) or with the user's own files they would be neither's."""
    if args.rings is None:
        from dynamiccl.profiler.measure.job_profile import temporary_rings

        def said(stale: Path) -> None:
            print(f"note: removed {stale}, the rings of a profile job killed before it could "
                  "remove them", file=sys.stderr)

        return temporary_rings(said), True
    folder = Path(args.rings).absolute()
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--rings {args.rings} is a file; give a folder")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--rings {args.rings}: cannot create the folder ({exc.strerror or exc}); "
                        "give another folder") from None
    if ring_files(folder) or failed_rings(folder):
        raise UserError(f"--rings {args.rings} already holds rings of another run; give an empty "
                        "folder")
    try:
        held = sorted(os.listdir(folder))
    except OSError as exc:
        raise UserError(f"--rings {args.rings}: cannot list the folder ({exc.strerror or exc}); "
                        "give another folder") from None
    if held:
        raise UserError(f"--rings {args.rings} holds other files ({', '.join(held[:3])}"
                        f"{', ...' if len(held) > 3 else ''}) and the rings would be kept among "
                        "them; give an empty or new folder")
    if not os.access(folder, os.W_OK):
        raise UserError(f"--rings {args.rings} is not writable; give another folder")
    return folder, False


def run_job_command(args: argparse.Namespace) -> int:
    from dynamiccl.plugin import build as plugin
    from dynamiccl.profiler.measure.job_process import Stops, signal_name
    from dynamiccl.profiler.measure.job_profile import profiling_env, remove_rings, run_job
    from dynamiccl.system.nccl_profiler import PROFILER_PLUGIN_ENV

    cmd = _command(args)
    _separate_folders(args)
    try:
        library = plugin.library_path()
    except plugin.PluginError as exc:
        raise UserError(str(exc)) from None
    given = os.environ.get(PROFILER_PLUGIN_ENV)
    # every stop from here on is passed to the job, which ends, and the mix so far is written
    # before the rings are removed
    with Stops() as stops, _claimed_out(args) as out:
        rings, temporary = _rings_folder(args)
        try:
            if given and Path(given) != library:
                print(f"note: {PROFILER_PLUGIN_ENV}={given} is replaced by DynamICCL's profiler for "
                      "this job", file=sys.stderr)
            env = {**os.environ, **profiling_env(library, rings, args.records)}
            if stops.first is not None:
                print(f"stopped by {signal_name(stops.first)} before the job started; nothing run",
                      file=sys.stderr)
                return 128 + stops.first
            print(f"profiling `{' '.join(cmd)}`: rings in {rings}", file=sys.stderr)
            try:
                run = run_job(cmd, env, rings, stops, timeout_s=args.timeout, grace_s=args.grace)
            except OSError as exc:
                raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
            entries, path, moved = _write_mix(args, out, run) if run.rings else ([], None, "")
        finally:
            if temporary:
                remove_rings(rings)
    _report(args, run, entries, path, moved, cmd)
    return run.status if path is not None else run.status or NOTHING_RECORDED


def _write_mix(args: argparse.Namespace, out: Path, run) -> tuple[list, Path, str]:
    """The mix, written to DIR/job.jsonl, or where that cannot be written (the folder went
    read-only, a file appeared there meanwhile) to a new file beside it or in the temporary
    folder: never lost. Returns the entries, where they went and, if elsewhere, why."""
    from dynamiccl.files import OutputRefused
    from dynamiccl.profiler.formats.job_mix import write
    from dynamiccl.profiler.measure.nvml import NoDriverError, local_provider

    try:
        gpus = local_provider().snapshot().gpus
    except NoDriverError:
        gpus = ()
    entries = run.mix.entries(launch=f"job-{uuid.uuid4().hex[:12]}", gpu=gpus[0].name if gpus else "",
                              emulated_hosts=args.emulated_hosts, partial=run.partial)
    try:
        return entries, write(entries, out / JOB_FILE), ""
    except (OutputRefused, OSError) as exc:
        why = str(exc) if isinstance(exc, OutputRefused) else \
            f"cannot write {out / JOB_FILE} ({exc.strerror or exc})"
    for folder in (out, Path.cwd(), Path(tempfile.gettempdir())):
        try:
            fd, spare = tempfile.mkstemp(prefix="job-", suffix=".jsonl", dir=folder)
        except OSError:
            continue
        os.close(fd)
        return entries, write(entries, spare), why
    raise UserError(f"{why}; nor could the mix be written to {out}, the current folder or "
                    f"{tempfile.gettempdir()}: the profile is lost")


def _report(args: argparse.Namespace, run, entries: list, path: Path | None, moved: str,
            cmd: list[str]) -> None:
    """What the job did and where its mix is. Printing may fail where the terminal has gone (a
    closed ssh session): the mix is written by then, and the exit status is the job's all the same."""
    try:
        if path is None:
            for note in _notes(run):
                print(f"note: {note}", file=sys.stderr)
            print(f"{run.ended}; no NCCL communicator recorded anything: no NCCL collective ran, "
                  "or NCCL is older than 2.27, or the launcher did not pass the environment to the "
                  "ranks (export NCCL_PROFILER_PLUGIN, DYNAMICCL_PROFILE and "
                  "DYNAMICCL_PROFILE_RECORDS)"
                  + ("" if not run.failed else ", or no ring could be created (see the notes)")
                  + "; nothing written", file=sys.stderr)
            return
        if args.json:
            print(json.dumps([e.to_json() for e in entries], indent=1))
        else:
            _print_mix(entries, cmd, run.partial)
        for note in _notes(run):
            print(f"note: {note}", file=sys.stderr)
        if moved:
            print(f"warning: {moved}; the mix is in {path} instead", file=sys.stderr)
        stop_only = run.partial == f"the job {run.stopped}"
        kept = (f"wrote {path}" if not run.partial else
                f"wrote the mix collected so far to {path}, marked partial" if stop_only else
                f"wrote {path}, marked partial: {run.partial}")
        print(f"{run.ended}; {kept} ({len(entries)} kinds of call); then: dynamiccl tune ... "
              f"--workload {path}", file=sys.stderr)
    except OSError:
        pass


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
    if run.left_running:
        notes.append(f"{len(run.left_running)} process(es) the job started still ran after it ended "
                     f"(pid {', '.join(map(str, run.left_running[:5]))}): ended with it (SIGTERM, "
                     "SIGKILL after --grace), as nothing of a job outlives it")
    for path, why in run.failed.items():
        notes.append(f"the plugin could not create {path.with_suffix('.ring').name} (this rank "
                     f"recorded nothing): {why}")
    return notes


def _print_mix(entries: list, cmd: list[str], partial: str) -> None:
    from rich.table import Table

    from dynamiccl.console import console

    total = sum(e.total_us for e in entries) or 1.0
    calls = sum(e.calls for e in entries)
    table = Table(title=f"`{' '.join(cmd)}`: {calls} collective calls, {total / 1e3:.2f} ms of GPU "
                        "time in them (per call: the slowest rank's)"
                        + (f"; PARTIAL: {partial}" if partial else ""))
    for col in ("collective", "size", "ranks", "nodes", "calls", "NCCL's pick", "time (us)",
                "p10", "p90", "share of time"):
        table.add_column(col, justify="left" if col in ("collective", "NCCL's pick") else "right")
    for e in entries:
        r = e.record
        table.add_row(r.collective, str(r.nbytes), str(r.nranks), str(r.nnodes), str(e.calls),
                      f"{r.nccl_pick}/{e.nccl_channels}ch", f"{r.time_us:.2f}", f"{e.p10_us:.2f}",
                      f"{e.p90_us:.2f}", f"{100 * e.total_us / total:.1f}%")
    console().print(table)
