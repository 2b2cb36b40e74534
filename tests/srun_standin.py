"""A stand-in for Slurm's ``srun`` (no Slurm runs here) and a task with a rank of its own that
records the signal that ended it: how a stop reaches the ranks of a launch under Slurm, for the
plan script's tests and for ``ab run``'s and ``profile job``'s.

:data:`SRUN` behaves as srun(1) says (SIGNALS AND ESCAPE SEQUENCES): one Ctrl-C (SIGINT) only
reports the tasks' state and the step goes on; SIGTERM and SIGHUP are passed on to the tasks. The
task runs here, in the background of the script.

Run as ``python srun_standin.py RECORD``, this file is such a task as it runs on a node of its own:
in a session of its own (a signal to srun's process group never reaches a remote task), it starts a
child rank and both wait. SIGTERM ends each: the task passes it on to its rank, and each appends
``<task|rank> <pid> SIGTERM`` to RECORD, where each wrote ``<task|rank> <pid> ready`` once running
(the task its srun's pid too). A process ended by SIGKILL writes nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SRUN = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done
"$@" &
task=$!
trap 'echo "srun: interrupt (one more within 1 sec to abort)" >&2' INT
trap 'kill -TERM $task' TERM HUP
while :; do wait $task; status=$?; kill -0 $task 2>/dev/null || break; done
exit $status
"""


def install_srun(folder: Path) -> Path:
    """``folder/srun`` as :data:`SRUN`, executable; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    srun = folder / "srun"
    srun.write_text(SRUN)
    srun.chmod(0o755)
    return srun


def _note(record: str, line: str) -> None:
    """One line appended to ``record`` in one write (each process's lines whole)."""
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _rank(record: str) -> None:
    def stopped(signum: int, _frame: object) -> None:
        _note(record, f"rank {os.getpid()} {signal.Signals(signum).name}")
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stopped)
    _note(record, f"rank {os.getpid()} ready")
    time.sleep(120)


def _task(record: str) -> None:
    srun = os.getppid()
    os.setsid()
    rank = subprocess.Popen([sys.executable, __file__, "--rank", record])

    got: list[int] = []

    def stopped(signum: int, _frame: object) -> None:  # waits nowhere: the loop below may hold rank
        if not got:
            got.append(signum)
            _note(record, f"task {os.getpid()} {signal.Signals(signum).name}")
            rank.send_signal(signum)

    signal.signal(signal.SIGTERM, stopped)
    _note(record, f"task {os.getpid()} ready srun {srun}")
    while rank.poll() is None:
        time.sleep(0.05)
    sys.exit(128 + got[0] if got else rank.returncode)


def ready(record: Path) -> bool:
    """Whether the task and its rank both run (a stop now reaches both)."""
    text = record.read_text() if record.exists() else ""
    return "task " in text and "rank " in text


def ended_by(record: Path) -> dict[str, str]:
    """``task``/``rank`` -> the signal that ended it, as RECORD says ("" where none did)."""
    lines = [line.split() for line in record.read_text().splitlines()]
    return {words[0]: next((w[2] for w in lines if w[:2] == words[:2] and w[2] != "ready"), "")
            for words in lines if words[2] == "ready"}


def groups(record: Path) -> set[int]:
    """The process groups of the launch RECORD names: srun's (the job's own) and the task's."""
    found = set()
    for words in (line.split() for line in record.read_text().splitlines()):
        if words[:1] == ["task"] and words[2] == "ready":
            found |= {int(words[1]), int(words[4])}
    return found


def left_in(pgids: set[int]) -> list[str]:
    """``pid command`` of each live process in one of ``pgids`` (zombies have ended)."""
    left = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) in pgids:
                left.append(f"{entry.name} {(entry / 'cmdline').read_text().replace(chr(0), ' ')}")
        except (OSError, IndexError):
            continue
    return left


def ctrl_c_once(proc: subprocess.Popen, record: Path) -> tuple[str, float]:
    """One SIGINT to the session of ``proc`` (dynamiccl running a launch under :data:`SRUN`, started
    in a session of its own) once the task and its rank run, as a terminal's Ctrl-C: what it
    printed on stderr, and the seconds it took to end after the signal."""
    deadline = time.monotonic() + 60
    while not ready(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return err, time.monotonic() - began


def ended_by_sigterm_with_nothing_left(record: Path) -> bool:
    """Whether the task and its rank both ended by SIGTERM and no process of the launch is left."""
    return ended_by(record) == {"task": "SIGTERM", "rank": "SIGTERM"} and \
        left_in(groups(record)) == []


if __name__ == "__main__":
    if sys.argv[1] == "--rank":
        _rank(sys.argv[2])
    else:
        _task(sys.argv[1])
