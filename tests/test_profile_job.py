"""``dynamiccl profile job``: a user's job run with NCCL's profiler loaded, its collective mix written.

On a CPU machine no NCCL runs, so nothing loads the profiler: the jobs here play NCCL's part towards
the real plugin themselves (``nccl_profiler_standin``, a stand-in for NCCL). One is a real gloo job
(a plain script starting two ranks) reporting each of its collectives with its host time; the others
are small scripts for the command's process handling. The GPU version of these checks, with NCCL
itself, is in tests/test_profiler_gpu_nccl.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.plugin.profile_ring import PROFILE_ENV, RECORDS_ENV, ring_files
from dynamiccl.profiler.formats import job_mix
from dynamiccl.profiler.formats.records import read_jsonl

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
    (["--records", "100", "--", "true"], "not a power of two"),
    (["--records", "16", "--", "true"], "16"),
    (["--timeout", "0", "--", "true"], "--timeout"),
    (["--out", "{file}", "--", "true"], "is a file"),
    (["--out", "{missing}/out", "--", "true"], "parent folder does not exist"),
    (["--rings", "{file}", "--", "true"], "is a file"),
    (["--rings", "{ringed}", "--", "true"], "already holds rings"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "ringed").mkdir()
    (tmp_path / "ringed" / "dynamiccl-1-0-0000000000000001-r0.ring").write_text("x")
    places = {"file": tmp_path / "file", "missing": tmp_path / "missing",
              "ringed": tmp_path / "ringed"}
    argv = [a.format(**places) for a in args]
    assert main(["profile", "job", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "ringed"]
    assert os.listdir(tmp_path / "ringed") == ["dynamiccl-1-0-0000000000000001-r0.ring"]


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
