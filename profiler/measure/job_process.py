"""A user's job as one thing to stop: every process it starts ends with it, whatever ends it.

A job (torchrun and its workers, mpirun and its ranks, a plain script and what it forks) runs in a
session and process group of its own (:class:`JobProcess`), so a terminal's signals reach it only
through dynamiccl, which passes them on. :class:`Stops` catches the signals that end a command
(SIGINT, SIGTERM, SIGHUP, SIGQUIT: Ctrl-C, ``kill``, ``timeout``, a closed ssh session, Ctrl-\\)
while a job runs: the first goes to the job's whole process group as it came and starts a grace
period (:data:`GRACE_S`), and what outlives the job's leader gets it too. A job still running
:data:`ESCALATE_S` seconds later gets SIGTERM as well: Slurm's ``srun`` only reports its tasks'
state at one SIGINT (srun(1), "SIGNALS AND ESCAPE SEQUENCES") and hands SIGTERM to every task, as
``mpirun`` does, so the launcher ends its ranks itself, remote ones included, where SIGKILL to it
would leave them running until Slurm notices. Any later signal, or the end of the grace, kills
every process of the job with SIGKILL: its group and every process it started that left the group
(OpenMPI's ranks each have a group of their own), which :meth:`JobProcess.track` follows through
``/proc`` while the job runs. A signal the shell set to be ignored (``nohup``, a background job)
stays ignored.

dynamiccl killed with SIGKILL can pass nothing on: the job's watchdog
(:mod:`~dynamiccl.profiler.measure.job_watchdog`), which reads the processes followed on a socket,
sees its end as the end of that socket and ends the job.

Exit statuses are a shell's (:func:`shell_status`): a job killed by SIGKILL is 137, and dynamiccl
stopped by SIGTERM exits 143 once the job is ended and its profile written.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from dynamiccl.profiler.measure import job_watchdog
from dynamiccl.profiler.measure.job_watchdog import (
    follow,
    process_table,
    signal_process,
    still_running,
)

#: The signals that end a command, passed on to the job.
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Seconds a stopped job gets to exit before every process of it is killed.
GRACE_S = 10.0
#: Seconds a job stopped by another signal than SIGTERM gets before SIGTERM follows (half the grace
#: where that is shorter): time for a job to act on the signal it got (torchrun passes Ctrl-C on to
#: its workers), short beside the grace that a launcher only reporting its tasks would wait out.
ESCALATE_S = 1.5
#: Seconds between two looks at the job's processes in /proc while it runs.
TRACK_S = 1.0
#: The watchdog every job gets, which ends it where dynamiccl is killed with SIGKILL.
WATCHDOG = Path(job_watchdog.__file__)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def shell_status(returncode: int) -> int:
    """The exit status a shell reports for a process that ended with ``returncode`` (Python's
    negative number for a signal): 128 + the signal, as ``$?`` says it."""
    return 128 - returncode if returncode < 0 else returncode


def how_it_ended(returncode: int) -> str:
    """``exited with status 3`` or ``was killed by SIGKILL``."""
    if returncode < 0:
        return f"was killed by {signal_name(-returncode)}"
    return f"exited with status {returncode}"


class JobProcess:
    """``cmd`` started in a session of its own; :meth:`stop` passes a stop on to all of it.

    The leader is reaped only by :meth:`finish`: until then its pid, which names the job's process
    group and session, cannot be given to another process, so signalling the group never reaches a
    stranger."""

    def __init__(self, cmd: Sequence[str], env: dict[str, str], grace_s: float = GRACE_S,
                 output: IO[bytes] | None = None) -> None:
        """``output``: where the job's stdout and stderr go (its stdin is then empty); None: the
        terminal's, as a job started by hand."""
        redirect = {} if output is None else {"stdout": output, "stderr": subprocess.STDOUT,
                                              "stdin": subprocess.DEVNULL}
        self.proc = subprocess.Popen(list(cmd), env=env, start_new_session=True, **redirect)
        self.grace_s = grace_s
        #: Ends the job if dynamiccl dies without ending it (:mod:`job_watchdog`): it reads the
        #: processes followed, and ``done`` from :meth:`finish`, on a socket (sent with
        #: MSG_NOSIGNAL: a watchdog gone, killed by someone, is no SIGPIPE for dynamiccl, whose
        #: console command restores SIGPIPE's default action).
        self._to_watchdog, theirs = socket.socketpair()
        with theirs:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WATCHDOG), str(self.pid), f"{grace_s:g}"],
                stdin=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        #: Every process of the job seen so far: pid -> its start time (a reused pid is another).
        self.known: dict[int, int] = {}
        self.stopped_by: int | None = None  # the signal the stop passed on
        #: Seconds after the stop SIGTERM followed it (None: it did not).
        self.terminated_after: float | None = None
        self.killed = False  # SIGKILL went to every process of the job
        self._deadline: float | None = None
        self._terminate_s = 0.0  # seconds after the stop SIGTERM is to follow it
        self._terminate_at: float | None = None
        self._sent: int | None = None  # the last signal the job's group got
        self._passed_on: int | None = None  # the last signal what outlived the leader got
        self._tracked_at = 0.0
        self.track()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        """Whether the job still runs: its leader, and after a stop any process of it (a stopped
        job's workers get the grace period to exit after their launcher). Sends a stopped job
        still running SIGTERM when its time comes and kills it when the grace has run out; follows
        its processes as they start."""
        now = time.monotonic()
        if self._deadline is not None and not self.killed and now > self._deadline:
            self.kill()
        if self.stopped_by is not None or now - self._tracked_at >= TRACK_S:
            self.track()  # while the job stops, each look: a process whose parent ends is lost
        leader = not self._leader_exited()
        left = [] if leader or self.stopped_by is None or self.killed else self.leftovers()
        if (leader or left) and not self.killed and self._terminate_at is not None \
                and now > self._terminate_at:
            self._terminate()
        if leader:
            return True
        if self.stopped_by is None or self.killed:
            return False
        if left and self._passed_on != self._sent:  # the launcher ended without passing it on
            self._passed_on = self._sent
            for pid in left:
                signal_process(pid, self._sent)
        return bool(left)

    def _leader_exited(self) -> bool:
        if not hasattr(os, "waitid"):  # no way to look without reaping it (macOS)
            return self.proc.poll() is not None
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def stop(self, signum: int) -> None:
        """The first stop: ``signum`` to the job's process group and the grace period begins (with
        SIGTERM :data:`ESCALATE_S` seconds on where ``signum`` is another); any later one: SIGKILL
        to every process of the job now."""
        if self.stopped_by is not None:
            self.kill()
            return
        self.track()  # every process of the job, before any of them ends and orphans its children
        self.stopped_by = signum
        now = time.monotonic()
        self._deadline = now + self.grace_s
        if signum != signal.SIGTERM:
            self._terminate_s = min(ESCALATE_S, self.grace_s / 2)
            self._terminate_at = now + self._terminate_s
        self._sent = signum
        _signal_group(self.pid, signum)

    def _terminate(self) -> None:
        """SIGTERM to the job's process group, and to what outlived its leader, after a stop by
        another signal left the job running (srun only reports its tasks at one SIGINT)."""
        self.terminated_after = self._terminate_s
        self._terminate_at = None
        self._sent = signal.SIGTERM
        _signal_group(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the job's process group and to every process of it seen, wherever it went."""
        self.track()
        self.killed = True
        if self.proc.returncode is None:
            _signal_group(self.pid, signal.SIGKILL)
        for pid in self.leftovers():
            signal_process(pid, signal.SIGKILL)

    def finish(self) -> int:
        """Reaps the leader and returns its return code; after a stop, kills first whatever of the
        job still runs (a worker that ignored the signal, a rank its launcher no longer reaches)."""
        if self.stopped_by is not None and not self.killed and self.leftovers():
            self.kill()
        returncode = self.proc.wait()
        self._tell_watchdog(f"{job_watchdog.DONE}\n")
        self._to_watchdog.close()
        self._watchdog.wait()
        return returncode

    def _tell_watchdog(self, text: str) -> None:
        """A line to the watchdog, unbuffered: a signal's handler may follow the job (:meth:`stop`)
        while a line is being sent, which a buffered file would refuse."""
        try:
            if self._to_watchdog.fileno() != -1:
                self._to_watchdog.sendall(text.encode(), socket.MSG_NOSIGNAL)
        except OSError:  # it ended (killed by someone): nothing to tell
            pass

    def leftovers(self) -> list[int]:
        """Processes of the job still running (a zombie has ended)."""
        return still_running(self.track(), self.known)

    def track(self) -> dict[int, tuple[int, int, int]]:
        """Adds every process now in the job's group, or whose parent is a process of the job, and
        tells the watchdog of each; returns the process table it looked at."""
        self._tracked_at = time.monotonic()
        table = process_table()
        found = follow(table, self.pid if self.proc.returncode is None else None, self.known)
        self.known.update(found)
        for pid, started in found.items():
            self._tell_watchdog(f"{pid} {started}\n")
        return table


def end_what_it_left(job: JobProcess, left: list[int]) -> bool:
    """A job that ended on its own leaving processes running (a forgotten ``nvidia-smi dmon &``, a
    worker its launcher did not wait for) is not done: they get SIGTERM, then SIGKILL after the
    grace, as a stopped job's do (``left`` names them); whether there were any."""
    if job.stopped_by is not None:
        return False
    left.extend(job.leftovers())
    if left:
        job.stop(signal.SIGTERM)
    return bool(left)


@dataclass
class Ending:
    """How a supervised job (:func:`supervise`) ended."""

    returncode: int
    #: It ran past the timeout and was stopped.
    timed_out: bool
    #: Processes it started that still ran when it ended on its own (ended with it).
    left: list[int] = field(default_factory=list)


def supervise(job: JobProcess, *, began: float, timeout_s: float | None = None,
              poll_s: float = 0.2, each: Callable[[], None] | None = None) -> Ending:
    """Waits for ``job`` and everything it started to end, calling ``each`` every ``poll_s``
    seconds meanwhile; past ``timeout_s`` seconds from ``began`` (``time.monotonic()``) the job is
    stopped (SIGTERM, SIGKILL after its grace). A signal :class:`Stops` caught meanwhile has been
    passed on to it already; what the job left running when it ended on its own is ended too."""
    timed_out = False
    left: list[int] = []
    while job.running() or end_what_it_left(job, left):
        if each is not None:
            each()
        if timeout_s is not None and job.stopped_by is None and time.monotonic() - began > timeout_s:
            timed_out = True
            job.stop(signal.SIGTERM)
        time.sleep(poll_s)
    return Ending(job.finish(), timed_out, left)


def stopped_status(job: JobProcess, ending: Ending, *, timeout_s: float | None,
                   signals: int) -> tuple[int, str]:
    """What to exit with as a shell reports it, and why the job was stopped in words ("" when it
    ended on its own): its own status (128 + the signal that killed it), 124 after the timeout,
    128 + the signal dynamiccl received that stopped it (``signals``: how many it received)."""
    status = shell_status(ending.returncode)
    if job.stopped_by is None or ending.left:
        return status, ""
    status = 124 if ending.timed_out else 128 + job.stopped_by
    stopped = (f"was stopped after the timeout of {timeout_s:g} s" if ending.timed_out else
               f"was stopped by {signal_name(job.stopped_by)} to dynamiccl")
    if job.terminated_after is not None:
        stopped += f" (SIGTERM {job.terminated_after:g} s later)"
    stopped += (" and killed (SIGKILL) at a second signal" if job.killed and signals > 1
                else f" and killed (SIGKILL) {job.grace_s:g} s later" if job.killed else "")
    return status, stopped


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class Stops:
    """The terminating signals received while installed (a context manager), each passed on to the
    job :meth:`attach` names (:meth:`JobProcess.stop`). Handlers are restored on exit; outside the
    main thread (where Python cannot catch signals) nothing is installed."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._job: JobProcess | None = None
        self._before: dict[int, object] = {}

    def __enter__(self) -> Stops:
        for signum in TERMINATING:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # nohup, or a background job of a shell: the user asked to ignore it
            try:
                self._before[signum] = signal.signal(signum, self._caught)
            except ValueError:
                break  # not the main thread
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._before.clear()

    def attach(self, job: JobProcess) -> None:
        """From now on a signal stops ``job``; one received before it started stops it at once."""
        self._job = job
        for signum in self.received[:2]:
            job.stop(signum)

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def _caught(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self._job is not None and self._job.proc.returncode is None:
            self._job.stop(signum)
