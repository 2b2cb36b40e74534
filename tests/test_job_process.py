"""The job's watchdog (profiler/measure/job_watchdog.py), run as JobProcess runs it: what ends a
job when dynamiccl dies without ending it, and what leaves one alone that dynamiccl finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dynamiccl.profiler.measure.job_process import WATCHDOG, JobProcess
from dynamiccl.profiler.measure.job_watchdog import process_table


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if pid not in process_table():
            return True
        time.sleep(0.05)
    return False


def _job() -> subprocess.Popen:
    """A job in a session of its own, with a child that leaves for a session of its own too (as
    OpenMPI's ranks leave their launcher's group); prints the child's pid."""
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)'], start_new_session=True); print(c.pid, flush=True); "
            "time.sleep(60)")
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)


def _watch(job: subprocess.Popen) -> subprocess.Popen:
    """The job's watchdog, told nothing of the job's processes: it finds them itself."""
    return subprocess.Popen([sys.executable, "-I", "-S", str(WATCHDOG), str(job.pid), "2"],
                            stdin=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.multiproc
def test_the_end_of_the_watchdogs_input_without_done_ends_the_job_and_what_left_its_group():
    """The child left the job's group for a session of its own before dynamiccl could follow it:
    the watchdog finds it as the job's leader's child."""
    job = _job()
    child = int(job.stdout.readline())
    dog = _watch(job)
    dog.stdin.close()  # as the kernel closes it when dynamiccl dies
    assert dog.wait(timeout=30) == 0
    assert job.wait(timeout=10) == -signal.SIGTERM and _gone(child, 10)


@pytest.mark.multiproc
def test_done_leaves_the_job_alone():
    job = _job()
    child = int(job.stdout.readline())
    dog = _watch(job)
    try:
        dog.stdin.write("done\n")
        dog.stdin.close()
        assert dog.wait(timeout=30) == 0
        assert job.poll() is None and child in process_table()
    finally:
        job.kill()
        os.kill(child, signal.SIGKILL)
        job.wait()


def _watchdogs_of(pid: int) -> list[int]:
    """The running processes that are ``pid``'s watchdog (by their command line)."""
    found = []
    for running in process_table():
        try:
            words = open(f"/proc/{running}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if str(WATCHDOG).encode() in words and str(pid).encode() in words:
            found.append(running)
    return found


@pytest.mark.multiproc
def test_a_job_process_starts_its_watchdog_and_finishing_the_job_ends_it():
    job = JobProcess([sys.executable, "-c", "import time; time.sleep(2)"], dict(os.environ))
    deadline = time.monotonic() + 10
    while not _watchdogs_of(job.pid) and time.monotonic() < deadline:  # until its exec is done
        time.sleep(0.05)
    assert len(_watchdogs_of(job.pid)) == 1
    assert job.finish() == 0 and _watchdogs_of(job.pid) == []
