"""``dynamiccl ab``: interleaved default/policy launches of a real command whose timing the test
controls (it sleeps less when the policy's variables reach it), medians, spread and verdict; Ctrl-C
keeps what was measured; the diff of two job mixes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import srun_standin
from srun_standin import install_srun

from dynamiccl.cli.main import main
from dynamiccl.files import text_lines
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin.build import library_path
from dynamiccl.profiler.formats import job_mix
from dynamiccl.profiler.measure.ab import OutputChecks, verdict
from dynamiccl.profiler.measure.job_process import ESCALATE_S, GRACE_S
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

#: A job that takes DEFAULT_S without the policy and POLICY_S with it, prints its step time, and
#: records the variables it was started with.
JOB = """import json, os, sys, time
policy = os.environ.get("DYNAMICCL_POLICY")
time.sleep(float(sys.argv[1]) if policy else float(sys.argv[2]))
seen = {k: os.environ.get(k) for k in ("NCCL_TUNER_PLUGIN", "DYNAMICCL_POLICY", "DYNAMICCL_POLICY_SHA256")}
print("env", json.dumps(seen))
print("step time", 20 if policy else 60, "ms")
"""


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "p.dccl"
    header = pf.Header("tune", "2026-01-01T00:00:00Z", "dgx_h100", "0123456789abcdef",
                       "2.26.2..2.26.2", "cafe", "ll128,nvls")
    pf.write(pf.PolicyFile(header, (pf.Slice(rules=(pf.Rule(Collective.ALLREDUCE, 0, pf.MAX_BYTES),)),)),
             path)
    return path


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    return job


def test_a_faster_policy_is_called_faster_and_every_launch_saw_its_own_environment(
        tmp_path, policy, capsys):
    job, out = _job(tmp_path), tmp_path / "ab"
    plugin = library_path().resolve()
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "3", "--out", str(out),
                 "--plugin", str(plugin), "--", sys.executable, str(job), "0.05", "0.25"]) == 0
    printed = capsys.readouterr().out
    assert "verdict: policy faster by" in printed and "every pair faster" in printed
    doc = json.loads((out / "ab.json").read_text())
    sides = [x["side"] for x in doc["launches"]]
    assert sides == ["default", "policy", "policy", "default", "default", "policy"]
    assert doc["summary"]["verdict"].startswith("policy faster") and not doc["interrupted"]
    for launch in doc["launches"]:
        seen = json.loads(Path(launch["log"]).read_text().split("env ", 1)[1].splitlines()[0])
        if launch["side"] == "policy":
            assert seen == {"NCCL_TUNER_PLUGIN": str(plugin), "DYNAMICCL_POLICY": str(policy),
                            "DYNAMICCL_POLICY_SHA256": pf.file_hash(policy)}
        else:
            assert seen == {"NCCL_TUNER_PLUGIN": None, "DYNAMICCL_POLICY": None,
                            "DYNAMICCL_POLICY_SHA256": None}
    # the same command scored by the step time it prints, and the same job both ways: no verdict
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "3", "--out", str(out), "--force",
                 "--plugin", str(plugin), "--metric", r"step time (\d+) ms", "--",
                 sys.executable, str(job), "0", "0"]) == 0
    summary = json.loads((out / "ab.json").read_text())["summary"]
    assert summary["pair_ratios"] == [pytest.approx(1 / 3)] * 3


def test_the_verdict_needs_every_pair_three_of_them_and_their_interval():
    assert verdict([0.90, 0.91, 0.92]).startswith("policy faster by 9.0%")
    assert verdict([1.10, 1.05, 1.08]).startswith("policy slower by 8.0%")
    assert verdict([0.9, 1.01, 0.95]).startswith("no difference beyond the spread")
    assert verdict([0.5, 0.5]).startswith("too few pairs")
    # every pair faster, but spread so wide that the 95 % interval of the change crosses zero
    said = verdict([0.9, 0.95, 0.97])
    assert said.startswith("no difference beyond the spread") and "-3.4% to +14.7%" in said


@pytest.mark.parametrize("pairs", [3, 5])
def test_two_identical_sides_rarely_get_a_verdict(pairs):
    """Noise alone makes every one of 3 pairs point the same way one time in four (5 pairs: one in
    sixteen); the interval holds the verdicts on identical sides to about the 5 % it promises."""
    rng = np.random.default_rng(0)
    draws = 4000
    said = sum(not verdict(list(np.exp(rng.normal(0, 0.01, pairs)))).startswith("no difference")
               for _ in range(draws))
    agree = 2 * 0.5 ** pairs
    assert said / draws < 0.06 < agree


def test_a_policy_variable_in_the_file_nccl_reads_is_named_since_the_default_side_loads_it(
        tmp_path, policy, capsys, monkeypatch):
    """NCCL takes a variable from $NCCL_CONF_FILE (or ~/.nccl.conf) and /etc/nccl.conf where the
    environment has none, so the default side, run without the variables, would load the plugin;
    and an NCCL_DEBUG_FILE hides the plugin's warnings the A/B reports, which it says too."""
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME=eth0\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    args = ["ab", "run", "--policy", str(policy), "--pairs", "1", "--dry-run", "--plugin",
            "/lib/x.so", "--", "python", "t.py"]
    assert main(args) == 0
    assert str(conf) not in capsys.readouterr().err
    conf.write_text("NCCL_DEBUG=WARN\nNCCL_TUNER_PLUGIN=/opt/libdynamiccl_tuner.so\n")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"note: {conf} sets NCCL_TUNER_PLUGIN" in err and "not NCCL's default" in err
    assert "NCCL_DEBUG_FILE" not in err
    monkeypatch.setenv("NCCL_DEBUG_FILE", str(tmp_path / "nccl.%h.%p.log"))
    assert main(args) == 0
    assert "note: NCCL_DEBUG_FILE=" in capsys.readouterr().err


def test_mpirun_gets_the_variables_on_its_command_line(tmp_path, policy, capsys):
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--launcher", "openmpi",
                 "--dry-run", "--plugin", "/lib/x.so", "--", "mpirun", "-np", "16", "python", "t.py"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines[0].endswith(" mpirun -np 16 python t.py") and "-x" not in lines[0]
    assert lines[1].endswith("mpirun -x NCCL_TUNER_PLUGIN -x DYNAMICCL_POLICY -x "
                             "DYNAMICCL_POLICY_SHA256 -np 16 python t.py")


@pytest.mark.parametrize(("value", "says"), [("0", "must be positive, got 0"),
                                             ("1025", "must be 1..1024, got 1025"),
                                             ("16M", "'16M' is not a whole number"),
                                             ("nan", "'nan' is not a whole number")])
def test_a_keep_output_out_of_range_is_one_line_and_exit_2(tmp_path, policy, capsys, value, says):
    out = tmp_path / "ab"
    assert main(["ab", "run", "--policy", str(policy), "--out", str(out), "--keep-output", value,
                 "--", "true"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"argument --keep-output: {says}" in err and "\n" not in err and not out.exists()


def test_nccls_own_forcing_in_the_environment_is_refused(tmp_path, policy, capsys, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    assert main(["ab", "run", "--policy", str(policy), "--dry-run", "--", "true"]) == 2
    assert "NCCL_ALGO set in the environment" in capsys.readouterr().err


def test_ctrl_c_stops_the_running_launch_and_keeps_what_was_measured(tmp_path, policy):
    job, out = _job(tmp_path), tmp_path / "ab"
    cmd = [sys.executable, "-m", "dynamiccl.cli.main", "ab", "run", "--policy", str(policy),
           "--pairs", "3", "--out", str(out), "--plugin", str(library_path()), "--",
           sys.executable, str(job), "30", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob(".launch_02_policy.log.*.part")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (out / "ab.json").exists()  # the first launch is on record already
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted (SIGINT) after 1 launch(es)" in stderr
    doc = json.loads((out / "ab.json").read_text())
    assert doc["interrupted"] and doc["stopped_by"] == "SIGINT"
    # the stopped launch is kept, with its output and how it was stopped, but scores nothing
    stopped = doc["launches"][1]
    assert [x["side"] for x in doc["launches"]] == ["default", "policy"]
    assert stopped["status"] == 130 and stopped["score"] is None
    assert stopped["stopped"].startswith("was stopped by SIGINT") and Path(stopped["log"]).is_file()
    assert not list(out.glob(".*.part")) and "default:" in stdout


def _job_processes(job: Path) -> list[int]:
    """The processes running ``job`` (``python JOB ...``; not dynamiccl, whose command names it too)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if words[1:2] == [str(job)]:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("how", ["timeout", "SIGHUP"])
def test_a_stop_from_outside_ends_every_process_of_the_launch_and_keeps_ab_json(tmp_path, policy, how):
    """``timeout`` (SIGTERM) or a closed terminal (SIGHUP) to dynamiccl: the launch's processes,
    its child that ignores the signal included, are ended (SIGKILL after the grace), ab.json says
    what happened, and dynamiccl exits as a shell reports the signal."""
    job, out = tmp_path / "stubborn.py", tmp_path / "ab"
    shutil.copy(Path(__file__).with_name("stubborn_job.py"), job)  # only SIGKILL ends it
    ab = ["dynamiccl", "ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
          "--plugin", str(library_path()), "--", sys.executable, str(job)]
    if how == "timeout":
        proc = subprocess.run(["timeout", "6", *ab], capture_output=True, text=True, timeout=60)
        code, signum = proc.returncode, signal.SIGTERM
    else:
        run = subprocess.Popen(ab, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                "child ready" in part.read_text() for part in out.glob(".launch_01_default.log.*")):
            time.sleep(0.05)
        run.send_signal(signal.SIGHUP)
        run.communicate(timeout=60)
        code, signum = run.returncode, signal.SIGHUP
    assert code == (124 if how == "timeout" else 128 + signum)
    assert _job_processes(job) == []
    doc = json.loads((out / "ab.json").read_text())
    assert doc["stopped_by"] == signal.Signals(signum).name
    (launch,) = doc["launches"]
    assert launch["status"] == 128 + signum and "killed (SIGKILL)" in launch["stopped"]
    assert "step time 10 ms" in Path(launch["log"]).read_text()


def test_ctrl_c_to_a_launch_under_srun_ends_its_ranks_by_sigterm_stand_in_srun(tmp_path, policy):
    """One Ctrl-C only makes srun report its tasks (srun(1)), so dynamiccl follows it with SIGTERM,
    which srun hands to every task: the remote task and its rank end by SIGTERM well inside the
    grace, where they were left to SIGKILL of srun after it, and nothing of the launch is left."""
    out, record = tmp_path / "ab", tmp_path / "record"
    srun = install_srun(tmp_path / "bin")
    proc = subprocess.Popen(
        ["dynamiccl", "ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
         "--plugin", str(library_path()), "--", str(srun), "--ntasks=1", sys.executable,
         str(Path(__file__).with_name("srun_standin.py")), str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    err, took = srun_standin.ctrl_c_once(proc, record)
    assert proc.returncode == 130 and "interrupted (SIGINT)" in err, err
    assert srun_standin.ended_by_sigterm_with_nothing_left(record) and took < GRACE_S / 2, took
    (launch,) = json.loads((out / "ab.json").read_text())["launches"]
    assert launch["status"] == 130 and "SIGKILL" not in launch["stopped"]
    assert launch["stopped"] == f"was stopped by SIGINT to dynamiccl (SIGTERM {ESCALATE_S:g} s later)"
    assert "srun: interrupt" in Path(launch["log"]).read_text()  # the Ctrl-C reached srun


def test_two_runs_into_one_folder_the_second_is_refused_before_it_runs_anything(tmp_path, policy):
    job, out = _job(tmp_path), tmp_path / "ab"
    ab = ["dynamiccl", "ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
          "--plugin", str(library_path()), "--", sys.executable, str(job)]
    first = subprocess.Popen([*ab, "3", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (out / "ab.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run([*ab, "0", "0"], capture_output=True, text=True, timeout=60)
    assert second.returncode == 2 and "is being written by another `dynamiccl ab run`" in second.stderr
    assert first.wait(timeout=60) == 0
    doc = json.loads((out / "ab.json").read_text())
    assert [x["seconds"] > 2.5 for x in doc["launches"]] == [True, True]  # the first run's own


def test_a_plugin_nccl_cannot_load_and_a_json_file_of_the_users_are_refused(tmp_path, policy, capsys):
    job, out = _job(tmp_path), tmp_path / "ab"
    for plugin, says in ((tmp_path / "nosuch.so", "no such file"), (policy, "no ELF header")):
        assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
                     "--plugin", str(plugin), "--", sys.executable, str(job), "0", "0"]) == 2
        assert says in capsys.readouterr().err
    out.mkdir()
    (out / "ab.json").write_text('{"the user\'s": "settings"}\n')
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out), "--force",
                 "--plugin", str(library_path()), "--", sys.executable, str(job), "0", "0"]) == 2
    assert "is not an A/B result" in capsys.readouterr().err
    assert (out / "ab.json").read_text() == '{"the user\'s": "settings"}\n'


#: A job whose "NCCL" is the tuner stand-in (the real NCCL library and the real plugin, on no GPU):
#: NCCL loads the plugin NCCL_TUNER_PLUGIN names for one communicator and prints the plugin's
#: warnings as NCCL does at NCCL_DEBUG=WARN.
TUNED_JOB = """import os, sys
sys.path.insert(0, {tests!r})
from nccl_tuner_standin import WARN, NcclTunerStandIn
if os.environ.get("NCCL_TUNER_PLUGIN"):
    nccl = NcclTunerStandIn(os.environ["NCCL_TUNER_PLUGIN"], 8)
    for message in nccl.messages(WARN):
        print("host:1:1 [0] NCCL WARN", message)
print("step time 10 ms")
"""


def test_a_policy_the_plugin_does_not_apply_under_this_nccl_is_said_so(tmp_path, policy, capsys):
    """The policy holds for NCCL 2.26.2 and the NCCL here (the nvidia-nccl wheel) is another: the
    A/B says so before it starts, and the plugin's own warning in the policy launches' output is
    printed and kept in ab.json, so 'no difference' is not read as the policy's verdict."""
    pytest.importorskip("nvidia.nccl", reason="needs the real NCCL library (the nvidia-nccl wheel)")
    job, out = tmp_path / "tuned_job.py", tmp_path / "ab"
    job.write_text(TUNED_JOB.format(tests=str(Path(__file__).parent)))
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
                 "--metric", r"step time (\d+) ms", "--", sys.executable, str(job)]) == 0
    err = capsys.readouterr().err
    assert "holds for NCCL 2.26.2..2.26.2, and this environment's NCCL is" in err
    assert "warning: the plugin warned in 1 policy launch(es)" in err and "outside the versions" in err
    launches = json.loads((out / "ab.json").read_text())["launches"]
    assert [bool(x["plugin_warnings"]) for x in launches] == [False, True]


#: A job that prints BLOCKS blocks of NCCL-like lines (about 96 kB each) after NCCL's version line;
#: halfway, the plugin's warning (policy side) and a step time; at the end its score, unless argv[2]
#: is "middle" (then the halfway step time is the score, megabytes before the end).
LOUD_JOB = """import os, sys
policy = bool(os.environ.get("DYNAMICCL_POLICY"))
blocks, where = int(sys.argv[1]), sys.argv[2]
w = sys.stdout.write
w("host:1:1 [0] NCCL INFO NCCL version 2.26.2+cuda12.8\\n")
block = "".join("host:1:1 [0] NCCL INFO call %07d " % i + "." * 60 + "\\n" for i in range(1000))
for b in range(blocks):
    w(block)
    if b == blocks // 2:
        if policy:
            w("host:1:1 [0] NCCL WARN DynamICCL: the policy holds for NCCL 2.26.2..2.26.2 only\\n")
        w("step time %d ms\\n" % ((20 if policy else 60) if where == "middle" else 99))
if where == "end":
    w("step time %d ms\\n" % (20 if policy else 60))
w("done\\n")
"""


@pytest.mark.parametrize("score_at", ["end", "middle"])
def test_a_launch_printing_tens_of_megabytes_keeps_a_bounded_log_and_scores_as_from_all_of_it(
        tmp_path, policy, capsys, score_at):
    """20 MB a launch, --keep-output 1: each log is the output's first and last half MiB with one
    line between saying what was left out, and the score and the plugin's warning, which fall in the
    left-out middle, are what the whole output gives."""
    job, out = tmp_path / "loud_job.py", tmp_path / "ab"
    job.write_text(LOUD_JOB)
    metric = r"step time (\d+) ms"
    cmd = [sys.executable, str(job), "210", score_at]
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--out", str(out),
                 "--plugin", str(library_path()), "--metric", metric, "--keep-output", "1",
                 "--", *cmd]) == 0
    assert capsys.readouterr().err.count("MiB of output left out of its log") == 2
    doc = json.loads((out / "ab.json").read_text())
    assert doc["keep_output_mib"] == 1 and doc["summary"]["pair_ratios"] == [pytest.approx(1 / 3)]
    warning = "DynamICCL: the policy holds for NCCL 2.26.2..2.26.2 only"
    for launch in doc["launches"]:
        env = {**os.environ, "DYNAMICCL_POLICY": str(policy)} if launch["side"] == "policy" else \
            {k: v for k, v in os.environ.items() if k != "DYNAMICCL_POLICY"}
        whole = tmp_path / f"whole_{launch['side']}.log"
        with open(whole, "wb") as fh:  # the same launch, all of its output in a file
            subprocess.run(cmd, stdout=fh, env=env, check=True)
        full, log = whole.read_bytes(), Path(launch["log"]).read_bytes()
        assert len(full) > 20_000_000 and launch["output_bytes"] == len(full)
        assert len(log) <= (1 << 20) + 200 and log.startswith(b"host:1:1 [0] NCCL INFO NCCL version")
        (note,) = [line for line in log.splitlines(keepends=True) if line.startswith(b"[dynamiccl: ")]
        head, tail = log.split(note)
        assert full.startswith(head) and full.endswith(tail) and tail.endswith(b"done\n")
        assert launch["left_out_bytes"] == len(full) - len(head) - len(tail)
        assert note.startswith(f"[dynamiccl: {launch['left_out_bytes']:,} bytes (".encode())
        # what the A/B read while the job printed is what all of its output says
        checks = OutputChecks(re.compile(metric))
        checks.lines(list(text_lines(whole)))
        expected = 20.0 if launch["side"] == "policy" else 60.0
        assert launch["score"] == checks.score(0.0) == expected
        if score_at == "end":
            assert b"step time %d ms" % expected in tail
        else:  # the score fell in the middle, and was read all the same
            assert not re.search(rb"step time (20|60) ms", log)
        if launch["side"] == "policy":
            assert launch["plugin_warnings"] == checks.warnings == [warning]
            assert warning.encode() not in log  # it fell in the middle, and was read all the same


def _mix(path: Path, per_call_us: float, algorithm: Algorithm) -> Path:
    entries = [job_mix.entry(Collective.ALLREDUCE, n, 16, 2, algorithm, Protocol.SIMPLE, 16, 100,
                             100, 100 * per_call_us, np.full(100, per_call_us), launch="job")
               for n in (1 << 20, 1 << 26)]
    job_mix.write(entries, path)
    return path


def test_diff_lays_two_job_mixes_side_by_side(tmp_path, capsys):
    a = _mix(tmp_path / "a.jsonl", 100.0, Algorithm.RING)
    b = _mix(tmp_path / "b.jsonl", 80.0, Algorithm.TREE)
    assert main(["ab", "diff", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total_us"] == [20000.0, 16000.0]
    row = doc["rows"][0]
    assert (row["a"]["nccl"], row["b"]["nccl"], row["ratio"]) == ("ring/simple/16ch",
                                                                  "tree/simple/16ch", 0.8)
    assert main(["ab", "diff", str(a), str(b)]) == 0
    assert "collective time: A 20.000 ms, B 16.000 ms (-20.0%)" in capsys.readouterr().out
    (tmp_path / "bad.jsonl").write_text("{}\n")
    assert main(["ab", "diff", str(a), str(tmp_path / "bad.jsonl")]) == 2
