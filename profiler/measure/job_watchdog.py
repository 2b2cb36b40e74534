"""What ends a user's job when dynamiccl itself is killed with SIGKILL, and the ``/proc`` reading
both sides share.

SIGKILL (``kill -9``, the OOM killer) runs no handler, so dynamiccl cannot pass it on to the job it
started in a session of its own (:mod:`~dynamiccl.profiler.measure.job_process`): the job would run
on, unsupervised, to its own end. So every job gets a watchdog, this file run as a script with the
standard library alone (``python job_watchdog.py PGID GRACE_S``, in a session of its own so that no
signal for dynamiccl reaches it): it reads, on its stdin, the job's processes dynamiccl follows as
``PID START`` lines, and ``done`` once the job has ended. The kernel closes dynamiccl's end when
dynamiccl dies however it dies, so an end of input without ``done`` means the job was left: the
watchdog sends SIGTERM to its process group and to every process of it that is still the one
followed (a pid is matched with its start time), and SIGKILL to what is left after ``GRACE_S``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

#: The line dynamiccl writes once the job has ended: the watchdog then has nothing to do.
DONE = "done"
#: A process's /proc/PID/stat fields (after the command name) read here.
_PPID, _PGRP, _START = 1, 2, 19


def signal_process(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, process group, start time) of every running process (empty where there
    is no /proc); zombies are left out, they hold nothing."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and fields[0] != "Z":
                table[int(entry)] = (int(fields[_PPID]), int(fields[_PGRP]), int(fields[_START]))
    return table


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def still_running(table: dict[int, tuple[int, int, int]], known: dict[int, int]) -> list[int]:
    """The processes of ``known`` (pid -> start time) that ``table`` (:func:`process_table`) shows
    still running: the same pid and start time (a reused pid is another; a zombie has ended)."""
    return [pid for pid, started in known.items() if pid in table and table[pid][2] == started]


def follow(table: dict[int, tuple[int, int, int]], pgid: int | None, known: dict[int, int]
           ) -> dict[int, int]:
    """The processes of ``table`` (:func:`process_table`) not in ``known`` that are the job's, pid
    -> start time: in its process group ``pgid`` (None: not looked at), or started by a process of
    the job (its parent matched by start time, so a reused pid is another), however deep."""
    found: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, pgrp, started) in table.items():
            if pid in known or pid in found:
                continue
            parent = table.get(ppid)
            if pgrp == pgid or (parent is not None and known.get(ppid, found.get(ppid)) == parent[2]):
                found[pid] = started
                changed = True
    return found


def _alive(pgid: int, known: dict[int, int]) -> list[int]:
    """The job's processes still running, the ones started since dynamiccl last looked included."""
    table = process_table()
    known.update(follow(table, pgid, known))
    return still_running(table, known)


def end_left_job(pgid: int, known: dict[int, int], grace_s: float) -> None:
    """SIGTERM to every process of the job, once; SIGKILL to what still runs after the grace."""
    termed: set[int] = set()
    deadline = time.monotonic() + grace_s
    while (alive := _alive(pgid, known)) and time.monotonic() < deadline + grace_s:
        late = time.monotonic() > deadline
        for pid in alive:
            if late or pid not in termed:
                signal_process(pid, signal.SIGKILL if late else signal.SIGTERM)
                termed.add(pid)
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)  # a terminal's signals are dynamiccl's to pass on
    pgid, grace_s = int(argv[1]), float(argv[2])
    known: dict[int, int] = {}
    for line in sys.stdin:
        if line.strip() == DONE:
            return 0
        words = line.split()
        if len(words) == 2 and all(w.isdigit() for w in words):
            known[int(words[0])] = int(words[1])
    end_left_job(pgid, known, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
