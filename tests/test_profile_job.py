"""``dynamiccl profile job``: a user's job run with NCCL's profiler loaded, its collective mix written.

On a CPU machine no NCCL runs, so nothing loads the profiler: the jobs here play NCCL's part towards
the real plugin themselves (``nccl_profiler_standin``, a stand-in for NCCL). One is a real gloo job
(a plain script starting two ranks) reporting each of its collectives with its host time; the others
are small scripts for the command's process handling. The GPU version of these checks, with NCCL
itself, is in tests/test_profiler_gpu_nccl.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import srun_standin
from srun_standin import install_srun

from dynamiccl.cli.main import main
from dynamiccl.plugin.profile_ring import PROFILE_ENV, RECORDS_ENV, ring_files
from dynamiccl.profiler.formats import job_mix
from dynamiccl.profiler.formats.records import read_jsonl
from dynamiccl.profiler.measure.job_process import ESCALATE_S, GRACE_S

TESTS = Path(__file__).parent
GLOO_JOB = TESTS / "gloo_job_with_nccl_standin.py"


def _standin_job(tmp_path: Path, body: str) -> list[str]:
    """A torch-free job that reports collectives to the plugin through the stand-in for NCCL."""
    script = tmp_path / "standin_job.py"
    script.write_text(f"import os, subprocess, sys, time\nsys.path.insert(0, {str(TESTS)!r})\n"
                      "from nccl_profiler_standin import NcclProfilerStandIn\n"
                      "from dynamiccl.system.nccl import Algorithm, Collective, Protocol\n"
                      "nccl = NcclProfilerStandIn(os.environ['NCCL_PROFILER_PLUGIN'], 7, 1, 0)\n"
                      + body)
    return [sys.executable, str(script)]


@pytest.mark.multiproc
def test_a_gloo_jobs_mix_lists_every_size_and_count_exactly(tmp_path, capsys):
    """The job exits 3: profile job writes the mix anyway and exits 3; --rings keeps the rings."""
    sys.path.insert(0, str(TESTS))
    from gloo_job_with_nccl_standin import ALL_GATHERS, ALL_REDUCES

    out, rings = tmp_path / "out", tmp_path / "rings"
    code = main(["profile", "job", "--out", str(out), "--rings", str(rings), "--",
                 sys.executable, str(GLOO_JOB), "--exit-code", "3"])
    captured = capsys.readouterr()
    assert code == 3, captured.err[-3000:]
    entries = job_mix.read(out / "job.jsonl")
    mix = {(e.record.collective, e.record.nbytes): e for e in entries}
    expected = {("allreduce", 4 * n): k for n, k in ALL_REDUCES} | \
        {("allgather", 4 * n * 2): k for n, k in ALL_GATHERS}  # nccl-tests' size: the whole gather
    assert {key: e.calls for key, e in mix.items()} == expected
    for (collective, _), e in mix.items():
        r = e.record
        assert (r.nranks, r.nnodes, r.algorithm, r.protocol, r.channels) == (2, 1, None, None, None)
        assert (r.nccl_pick, e.nccl_channels) == (("ring/simple", 2) if collective == "allreduce"
                                                  else ("ring/ll", 1))
        assert e.untimed_calls == 0 and len(r.time_us_runs) == e.calls
        assert e.p10_us <= r.time_us <= e.p90_us and e.total_us == pytest.approx(sum(r.time_us_runs))
    assert [e.total_us for e in entries] == sorted((e.total_us for e in entries), reverse=True)
    # the same file is measurements tune reads: NCCL's default, with the pair it ran
    records = read_jsonl(out / "job.jsonl")
    assert {(r.collective, r.nbytes, r.nccl_pick) for r in records} == \
        {(k[0], k[1], e.record.nccl_pick) for k, e in mix.items()}
    assert len(ring_files(rings)) == 2  # one per rank of the one communicator, kept
    assert "allreduce" in captured.out and "1048576" in captured.out
    assert "exited with status 3" in captured.err and str(out / "job.jsonl") in captured.err


def test_the_job_gets_the_profiler_environment_and_nothing_recorded_is_said(tmp_path, capsys):
    seen = tmp_path / "env.txt"
    cmd = [sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write(repr(dict(os.environ)))"]
    code = main(["profile", "job", "--out", str(tmp_path / "out"), "--records", "128", "--", *cmd])
    err = capsys.readouterr().err
    env = eval(seen.read_text())  # noqa: S307 - our own repr of a dict of strings
    from dynamiccl.plugin import build as plugin
    assert env["NCCL_PROFILER_PLUGIN"] == str(plugin.library_path())
    assert env[RECORDS_ENV] == "128" and env[PROFILE_ENV].startswith("/dev/shm/")
    assert not Path(env[PROFILE_ENV]).exists()  # the temporary rings' folder is removed
    assert code == 1 and "no NCCL communicator recorded anything" in err
    assert not (tmp_path / "out").exists()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.multiproc
def test_a_stopped_job_is_ended_with_its_children_and_its_mix_so_far_written(tmp_path, capsys):
    pidfile = tmp_path / "child.pid"
    cmd = _standin_job(tmp_path, "for i in range(3):\n"
                       "    nccl.collective(Collective.ALLREDUCE, 256, Algorithm.TREE, Protocol.LL, "
                       "1, 1000 * i, 300)\n"
                       "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                       f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
                       "time.sleep(600)\n")
    began = time.monotonic()
    code = main(["profile", "job", "--out", str(tmp_path / "out"), "--timeout", "4", "--", *cmd])
    assert time.monotonic() - began < 60
    err = capsys.readouterr().err
    assert code == 124 and "stopped after the timeout of 4 s" in err
    (e,) = job_mix.read(tmp_path / "out" / "job.jsonl")
    assert (e.record.collective, e.record.nbytes, e.calls, e.record.nccl_pick) == \
        ("allreduce", 1024, 3, "tree/ll")
    assert e.record.time_us == pytest.approx(0.3)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid), "the job's child outlived the job"


def test_a_second_run_needs_force_and_keeps_a_file_it_did_not_write(tmp_path, capsys):
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\nnccl.finalize()\n")
    out = tmp_path / "out"
    assert main(["profile", "job", "--out", str(out), "--", *cmd]) == 0
    first = (out / "job.jsonl").read_text()
    assert main(["profile", "job", "--out", str(out), "--", *cmd]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "job.jsonl").read_text() == first
    assert main(["profile", "job", "--out", str(out), "--force", "--", *cmd]) == 0
    (out / "job.jsonl").write_text("my notes\n")
    assert main(["profile", "job", "--out", str(out), "--force", "--", *cmd]) == 2
    assert "is not a job's collective mix" in capsys.readouterr().err
    assert (out / "job.jsonl").read_text() == "my notes\n"


@pytest.mark.parametrize(("args", "message"), [
    ([], "no command given"),
    (["--"], "no command given"),
    (["--", "no-such-program-xyz"], "command not found"),
    (["--", "{file}"], "is not executable; chmod +x it"),
    (["--records", "100", "--", "true"], "not a power of two"),
    (["--records", "16", "--", "true"], "16"),
    (["--timeout", "0", "--", "true"], "--timeout"),
    (["--out", "{file}", "--", "true"], "is a file"),
    (["--out", "{missing}/out", "--", "true"], "parent folder does not exist"),
    (["--rings", "{file}", "--", "true"], "is a file"),
    (["--rings", "{ringed}", "--", "true"], "already holds rings"),
    (["--rings", "{mine}", "--", "true"], "--rings {mine} holds other files (.hidden, notes.txt, "
                                          "photos, ...) and the rings would be kept among them; give "
                                          "an empty or new folder"),
    (["--out", "{tmp}/both", "--rings", "{tmp}/both", "--", "true"], "overlap"),
    (["--out", "{tmp}/mix", "--rings", "{tmp}/mix/rings", "--", "true"],
     "--out {tmp}/mix and --rings {tmp}/mix/rings overlap: the kept rings and job.jsonl would "
     "share a folder; give each a folder of its own"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)  # where the default --out goes: refused, it must not be left here
    (tmp_path / "file").write_text("x")
    (tmp_path / "ringed").mkdir()
    (tmp_path / "ringed" / "dynamiccl-1-0-0000000000000001-r0.ring").write_text("x")
    mine = tmp_path / "mine"  # a folder of the user's own files: the rings would be lost among them
    (mine / "photos").mkdir(parents=True)
    for name in ("notes.txt", "todo.txt", ".hidden"):
        (mine / name).write_text("mine")
    places = {"file": tmp_path / "file", "missing": tmp_path / "missing",
              "ringed": tmp_path / "ringed", "mine": mine, "tmp": tmp_path}
    argv = [a.format(**places) for a in args]
    assert main(["profile", "job", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message.format(**places) in err and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "mine", "ringed"]
    assert os.listdir(tmp_path / "ringed") == ["dynamiccl-1-0-0000000000000001-r0.ring"]
    assert sorted(os.listdir(mine)) == [".hidden", "notes.txt", "photos", "todo.txt"]


def test_a_benchmark_loads_the_profiler_with_rings_in_a_folder_removed_afterwards(tmp_path):
    """``profiler_loaded`` (bench_real's and bench_runtime's ``--profiler``): the environment names
    the library and a fresh ring folder, which is gone afterwards, also when the launch failed."""
    from dynamiccl.plugin.profile_ring import JOB_RECORDS
    from dynamiccl.profiler.measure.job_profile import profiler_loaded
    from dynamiccl.system.nccl_profiler import PROFILER_PLUGIN_ENV

    library = tmp_path / "libdynamiccl.so"
    with pytest.raises(RuntimeError), profiler_loaded(library) as env:
        rings = Path(env[PROFILE_ENV])
        assert rings.is_dir() and not any(rings.iterdir())
        assert env[PROFILER_PLUGIN_ENV] == str(library) and env[RECORDS_ENV] == str(JOB_RECORDS)
        raise RuntimeError("the launch failed")
    assert not rings.exists()


# ---- a job is never orphaned: every stop reaches all of it, and the mix so far is written ---------

SLOW_JOB = TESTS / "slow_job_with_nccl_standin.py"
DYNAMICCL = [sys.executable, "-m", "dynamiccl.cli.main"]  # the console command, as `dynamiccl` runs it


def _start_slow_job(tmp_path: Path, *args: str, stubborn: bool = False,
                    wrapper: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Path]:
    """``dynamiccl profile job`` (its own process, as a user starts it) on the slow job: a launcher
    and two ranks, rank 1 in a session of its own; returns once both ranks have recorded."""
    pids = tmp_path / "pids"
    env = {**os.environ, "STANDIN_PIDS": str(pids), "STANDIN_SLEEP": "60",
           "STANDIN_STUBBORN": "1" if stubborn else "0"}
    proc = subprocess.Popen([*wrapper, *DYNAMICCL, "profile", "job", "--out", str(tmp_path / "out"),
                             *args, "--", sys.executable, str(SLOW_JOB)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pids.is_file() and pids.read_text().endswith("\n")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc, pids


def _nothing_of_the_job_left(pids: Path) -> None:
    """Every process of the job ended and its temporary ring folder removed."""
    lines = pids.read_text().splitlines()
    deadline = time.monotonic() + 10
    alive = [int(p) for p in lines[0].split()]
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _gone(p)]
        time.sleep(0.05)
    assert not alive, f"processes of the job outlived it: {alive}"
    assert lines[1].startswith("/dev/shm/") and not Path(lines[1]).exists(), lines[1]


def _partial_mix(out: Path) -> job_mix.MixEntry:
    (e,) = job_mix.read(out / "job.jsonl")
    assert (e.record.collective, e.record.nbytes, e.calls) == ("allreduce", 4096, 5)
    assert e.partial.startswith("the job was stopped"), e.partial
    return e


@pytest.mark.multiproc
@pytest.mark.parametrize(("how", "status", "says"), [
    ("timeout", 124, "stopped by SIGTERM"),  # `timeout 4 dynamiccl ...`: SIGTERM to dynamiccl
    ("SIGTERM", 143, "stopped by SIGTERM"),
    ("SIGHUP", 129, "stopped by SIGHUP"),  # the ssh session closed
    ("SIGQUIT", 131, "stopped by SIGQUIT"),  # Ctrl-\
    ("SIGINT", 130, "stopped by SIGINT"),  # Ctrl-C
])
def test_a_stop_ends_every_process_of_the_job_and_writes_the_mix_so_far(tmp_path, how, status, says):
    wrapper = ("timeout", "6") if how == "timeout" else ()
    proc, pids = _start_slow_job(tmp_path, wrapper=wrapper)
    if how != "timeout":
        proc.send_signal(getattr(signal, how))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert says in err and "marked partial" in err and "Traceback" not in err, err
    _partial_mix(tmp_path / "out")
    _nothing_of_the_job_left(pids)


@pytest.mark.multiproc
def test_a_second_ctrl_c_kills_a_job_that_ignores_the_first(tmp_path):
    """The job ignores every signal but SIGKILL: the first Ctrl-C starts the 60 s grace, the second
    kills all of it at once (rank 1, in a session of its own, included)."""
    proc, pids = _start_slow_job(tmp_path, "--grace", "60", stubborn=True)
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - began < 30
    assert proc.returncode == 130, err
    assert "killed (SIGKILL) at a second signal" in err and "killed by SIGKILL" in err, err
    _partial_mix(tmp_path / "out")
    _nothing_of_the_job_left(pids)


@pytest.mark.multiproc
def test_a_job_that_ignores_the_stop_is_killed_after_the_grace(tmp_path):
    proc, pids = _start_slow_job(tmp_path, "--grace", "1", stubborn=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "killed (SIGKILL) 1 s later" in err, err
    _partial_mix(tmp_path / "out")
    _nothing_of_the_job_left(pids)


@pytest.mark.multiproc
def test_ctrl_c_to_a_job_under_srun_ends_its_ranks_by_sigterm_stand_in_srun(tmp_path):
    """One Ctrl-C only makes srun report its tasks (srun(1)): SIGTERM follows it, which srun hands
    to every task, so the remote task and its rank end by SIGTERM well inside the grace (they were
    left to SIGKILL of srun after it) and nothing of the job is left."""
    record = tmp_path / "record"
    srun = install_srun(tmp_path / "bin")
    proc = subprocess.Popen([*DYNAMICCL, "profile", "job", "--out", str(tmp_path / "out"), "--",
                             str(srun), "--ntasks=1", sys.executable, str(TESTS / "srun_standin.py"),
                             str(record)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    err, took = srun_standin.ctrl_c_once(proc, record)
    assert proc.returncode == 130, err
    assert srun_standin.ended_by_sigterm_with_nothing_left(record) and took < GRACE_S / 2, took
    assert "srun: interrupt" in err  # the Ctrl-C reached srun, which only reported
    assert f"the job was stopped by SIGINT to dynamiccl (SIGTERM {ESCALATE_S:g} s later)" in err, err
    assert "SIGKILL" not in err, err


@pytest.mark.multiproc
def test_dynamiccl_killed_with_sigkill_leaves_no_process_of_the_job_running_stand_in_nccl(tmp_path):
    """SIGKILL to dynamiccl alone (the OOM killer, ``kill -9``) runs no handler: the job's launcher
    and both ranks (one in a session of its own) ran on to their own end, 60 s here. The job's
    watchdog sees dynamiccl's end as the end of its input and ends them at once."""
    proc, pids = _start_slow_job(tmp_path, "--grace", "2")
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    alive = [int(p) for p in pids.read_text().splitlines()[0].split()]
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _gone(p)]
        time.sleep(0.05)
    assert not alive, f"processes of the job outlived dynamiccl: {alive}"
    proc.communicate(timeout=60)  # the job held dynamiccl's output open: it has ended


@pytest.mark.multiproc
def test_rings_left_in_dev_shm_by_a_profile_job_killed_with_sigkill_are_removed_by_the_next(
        tmp_path):
    """SIGKILL to dynamiccl alone (the OOM killer, ``kill -9``) runs no cleanup: its rings stayed
    in /dev/shm, memory until the machine reboots. The next profile job removes them and says so,
    and never the rings of one still running. NCCL is played by the slow stand-in job."""
    for run in ("killed", "running"):
        (tmp_path / run).mkdir()
    killed, killed_pids = _start_slow_job(tmp_path / "killed")
    running, running_pids = _start_slow_job(tmp_path / "running")
    try:
        killed.kill()
        killed.communicate(timeout=60)  # its job held its output open until its watchdog ended it
        left, live = (Path(p.read_text().splitlines()[1]) for p in (killed_pids, running_pids))
        assert ring_files(left) and ring_files(live)
        again = subprocess.run([*DYNAMICCL, "profile", "job", "--out", str(tmp_path / "again"),
                                "--", "true"], capture_output=True, text=True, timeout=120)
        assert f"note: removed {left}, the rings of a profile job killed before it could remove " \
               "them" in again.stderr, again.stderr
        assert not left.exists() and ring_files(live), "a running job's rings were removed"
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=60)
    _nothing_of_the_job_left(running_pids)


def test_a_job_killed_by_a_signal_exits_as_a_shell_says(tmp_path, capsys):
    cmd = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert main(["profile", "job", "--out", str(tmp_path / "out"), "--", *cmd]) == 137
    err = capsys.readouterr().err
    assert "the job was killed by SIGKILL" in err and "-9" not in err, err


# ---- no profile is lost ------------------------------------------------------------------------------


@pytest.mark.multiproc
def test_a_second_run_into_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    proc, pids = _start_slow_job(tmp_path)
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\n")
    assert main(["profile", "job", "--out", str(tmp_path / "out"), "--", *cmd]) == 2
    err = capsys.readouterr().err.strip()
    assert "is being written by another `dynamiccl profile job`" in err and "\n" not in err, err
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    _partial_mix(tmp_path / "out")  # the first run's mix, whole
    _nothing_of_the_job_left(pids)


def test_an_out_that_cannot_be_created_is_refused_before_the_job_runs(tmp_path, capsys):
    ran = tmp_path / "ran"
    cmd = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    assert main(["profile", "job", "--out", "/proc/dynamiccl-prof", "--", *cmd]) == 2
    err = capsys.readouterr().err
    assert "--out /proc/dynamiccl-prof: cannot create the folder" in err, err
    assert not ran.exists()  # the job never started


@pytest.mark.parametrize("taken", ["a file of the user's", "the folder replaced by a file"])
def test_a_mix_that_cannot_go_to_out_is_written_elsewhere_not_lost(tmp_path, capsys, monkeypatch,
                                                                   taken):
    """While the job runs, job.jsonl appears in --out (the user's own), or --out itself is
    replaced by a file: the user's file stays, and the mix is written beside it or in the current
    folder, said in a line."""
    out = tmp_path / "out"
    if taken == "a file of the user's":
        act = f"open({str(out / 'job.jsonl')!r}, 'w').write('my notes')\n"
    else:
        act = f"os.rmdir({str(out)!r}); open({str(out)!r}, 'w').write('my notes')\n"
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\n" + act)
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "job", "--out", str(out), "--", *cmd]) == 0
    err = capsys.readouterr().err
    user = out / "job.jsonl" if taken == "a file of the user's" else out
    assert user.read_text() == "my notes"
    spare = Path(err.split("the mix is in ")[1].split(" instead")[0])
    assert spare.parent == (out if taken == "a file of the user's" else tmp_path), err
    (e,) = job_mix.read(spare)
    assert e.calls == 1 and not e.partial


# ---- rings the plugin did not write ------------------------------------------------------------------

def _ring_of_the_standin(tmp_path: Path) -> Path:
    """A ring the plugin wrote: a stand-in rank's three all-reduces of 8 B, in a folder of its own."""
    folder = tmp_path / "made"
    folder.mkdir()
    cmd = _standin_job(tmp_path, "for i in range(3):\n    nccl.collective(Collective.ALLREDUCE, 2, "
                                 "Algorithm.RING, Protocol.SIMPLE, 1, 1000 * i, 200)\n")
    env = {**os.environ, PROFILE_ENV: str(folder), "NCCL_PROFILER_PLUGIN": str(_library())}
    subprocess.run(cmd, env=env, check=True)
    (ring,) = ring_files(folder)
    return ring


def _library() -> Path:
    from dynamiccl.plugin import build as plugin

    return plugin.library_path()


def _patched(ring: Path, where: str, field: str, value: int) -> bytes:
    """The ring's bytes with one header field, or one field of its second record, set to ``value``."""
    import numpy as np

    from dynamiccl.plugin.profile_ring import HEADER_BYTES, HEADER_DTYPE, RECORD_DTYPE

    data = bytearray(ring.read_bytes())
    if where == "header":
        view = np.frombuffer(data, HEADER_DTYPE, count=1)
    else:
        view = np.frombuffer(data, RECORD_DTYPE, count=2, offset=HEADER_BYTES)[1:]
    view[field] = value
    return bytes(data)


BAD_RINGS = {
    "unknown collective": ("record", "coll", 77, "collective id 77"),
    "unknown algorithm": ("record", "algo", 99, "algorithm id 99"),
    "negative algorithm": ("record", "algo", -3, "algorithm id -3"),
    "unknown protocol": ("record", "proto", 9, "protocol id 9"),
    "stop before start": ("record", "gpu_stop_ns", 5, "a GPU stop before its start"),
    "nranks 0": ("header", "nranks", 0, "nranks 0"),
    "nranks negative": ("header", "nranks", -2, "nranks -2"),
    "rank beyond nranks": ("header", "rank", 7, "rank 7"),
    "nnodes 0": ("header", "nnodes", 0, "nnodes 0"),
}


@pytest.mark.parametrize("bad", BAD_RINGS)
def test_a_ring_the_plugin_did_not_write_is_skipped_by_name_and_the_mix_kept(tmp_path, capsys, bad):
    """Planted in --rings while the job runs (a local user with write access to a shared folder):
    the ring is skipped with a note naming it and why, the job's own calls make the mix, the job's
    status is the command's."""
    where, field, value, says = BAD_RINGS[bad]
    planted = tmp_path / "planted.bin"
    planted.write_bytes(_patched(_ring_of_the_standin(tmp_path), where, field, value))
    name = "dynamiccl-1-0-00000000000000aa-r0.ring"
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\n"
                       f"import shutil; shutil.copy({str(planted)!r}, "
                       f"os.path.join(os.environ['DYNAMICCL_PROFILE'], {name!r}))\n"
                       "time.sleep(0.5)\nsys.exit(5)\n")
    code = main(["profile", "job", "--out", str(tmp_path / "out"), "--rings", str(tmp_path / "rings"),
                 "--", *cmd])
    err = capsys.readouterr().err
    assert code == 5, err
    assert f"skipped {tmp_path / 'rings' / name}" in err and says in err, err
    (e,) = job_mix.read(tmp_path / "out" / "job.jsonl")
    assert (e.record.nbytes, e.calls, e.record.nranks) == (32, 1, 1)


def test_a_ring_cut_short_while_read_is_given_up_not_a_crash(tmp_path):
    """The reader copies with pread, never through a mapping: a ring truncated under it (SIGBUS for
    a mapped reader) is a short read, named, and the calls read before stay."""
    from dynamiccl.plugin.profile_ring import HEADER_BYTES, RingFormatError, RingView
    from dynamiccl.profiler.measure.profile_reader import ProfileReader

    ring = _ring_of_the_standin(tmp_path)
    with ProfileReader(ring.parent) as reader:
        assert len(reader.poll()) == 3
        os.truncate(ring, HEADER_BYTES + 64)
        assert len(reader.poll()) == 0
        assert "cut short while being read" in reader.unreadable[ring]
        assert len(reader.poll()) == 0 and reader.seen == {ring}
    with pytest.raises(RingFormatError, match="not a DynamICCL profile ring"):
        RingView(ring)


def test_rings_are_the_users_only_and_a_relative_rings_folder_is_made_absolute(tmp_path, monkeypatch):
    seen = tmp_path / "seen.txt"
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\nd = os.environ['DYNAMICCL_PROFILE']\n"
                                 f"open({str(seen)!r}, 'w').write(d + ' ' + ' '.join(oct(os.stat("
                                 "os.path.join(d, f)).st_mode & 0o777) for f in sorted(os.listdir(d))) "
                                 "+ ' ' + oct(os.stat(d).st_mode & 0o777))\n")
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "job", "--out", "out", "--rings", "rings", "--", *cmd]) == 0
    folder, ring_mode, folder_mode = seen.read_text().split()
    assert folder == str(tmp_path / "rings") and ring_mode == "0o600" and folder_mode == "0o700"
    assert main(["profile", "job", "--out", "out2", "--", *cmd]) == 0
    folder, ring_mode, folder_mode = seen.read_text().split()
    assert folder.startswith("/dev/shm/") and (ring_mode, folder_mode) == ("0o600", "0o700")


def test_a_rank_whose_ring_cannot_be_created_makes_the_mix_partial_and_says_so(tmp_path, capsys):
    """A full /dev/shm, played by a file-size limit on one rank: its ring cannot be reserved, the
    plugin leaves a note saying why, and the mix of the other rank is written marked partial."""
    cmd = _standin_job(tmp_path, "")  # rank 0 of one communicator of one rank: replaced below
    script = Path(cmd[1])
    script.write_text(f"import os, resource, signal, sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                      "from nccl_profiler_standin import NcclProfilerStandIn\n"
                      "from dynamiccl.system.nccl import Algorithm, Collective, Protocol\n"
                      "lib = os.environ['NCCL_PROFILER_PLUGIN']\n"
                      "a = NcclProfilerStandIn(lib, 7, 2, 0)\n"
                      "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                      "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
                      "b = NcclProfilerStandIn(lib, 7, 2, 1)\n"
                      "assert not b.recording\n"
                      "a.collective(Collective.ALLREDUCE, 8, Algorithm.RING, Protocol.SIMPLE, 1, 0, 100)\n")
    assert main(["profile", "job", "--out", str(tmp_path / "out"), "--", *cmd]) == 0
    err = capsys.readouterr().err
    assert "marked partial: 1 rank(s) recorded nothing: cannot reserve" in err, err
    assert "the plugin could not create dynamiccl-" in err, err
    (e,) = job_mix.read(tmp_path / "out" / "job.jsonl")
    assert e.partial.startswith("1 rank(s) recorded nothing") and e.calls == 1


def test_processes_a_job_leaves_running_when_it_ends_are_ended_and_named(tmp_path, capsys):
    pidfile = tmp_path / "daemon.pid"
    cmd = _standin_job(tmp_path, "nccl.collective(Collective.ALLREDUCE, 8, Algorithm.RING, "
                                 "Protocol.SIMPLE, 1, 0, 100)\n"
                                 "d = subprocess.Popen([sys.executable, '-c', 'import time; "
                                 "time.sleep(60)'], start_new_session=True)\n"
                                 f"open({str(pidfile)!r}, 'w').write(str(d.pid))\ntime.sleep(1.5)\n"
                                 "sys.exit(4)\n")
    assert main(["profile", "job", "--out", str(tmp_path / "out"), "--", *cmd]) == 4  # the job's
    pid = int(pidfile.read_text())
    err = capsys.readouterr().err
    assert f"1 process(es) the job started still ran after it ended (pid {pid}): ended with it" in err
    assert "the job exited with status 4" in err and "marked partial" not in err, err
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)
