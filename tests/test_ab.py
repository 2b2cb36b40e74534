"""``dynamiccl ab``: interleaved default/policy launches of a real command whose timing the test
controls (it sleeps less when the policy's variables reach it), medians, spread and verdict; Ctrl-C
keeps what was measured; the diff of two job mixes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats import job_mix
from dynamiccl.profiler.measure.ab import verdict
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
    plugin = tmp_path / "libstandin.so"
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


def test_the_verdict_needs_every_pair_and_three_of_them():
    assert verdict([0.9, 0.95, 0.97]).startswith("policy faster by 5.0%")
    assert verdict([1.1, 1.02, 1.05]).startswith("policy slower by 5.0%")
    assert verdict([0.9, 1.01, 0.95]).startswith("no difference beyond the spread")
    assert verdict([0.5, 0.5]).startswith("too few pairs")


def test_mpirun_gets_the_variables_on_its_command_line(tmp_path, policy, capsys):
    assert main(["ab", "run", "--policy", str(policy), "--pairs", "1", "--launcher", "openmpi",
                 "--dry-run", "--plugin", "/lib/x.so", "--", "mpirun", "-np", "16", "python", "t.py"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("#")]
    assert lines[0].endswith(" mpirun -np 16 python t.py") and "-x" not in lines[0]
    assert lines[1].endswith("mpirun -x NCCL_TUNER_PLUGIN -x DYNAMICCL_POLICY -x "
                             "DYNAMICCL_POLICY_SHA256 -np 16 python t.py")


def test_nccls_own_forcing_in_the_environment_is_refused(tmp_path, policy, capsys, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    assert main(["ab", "run", "--policy", str(policy), "--dry-run", "--", "true"]) == 2
    assert "NCCL_ALGO set in the environment" in capsys.readouterr().err


def test_ctrl_c_stops_the_running_launch_and_keeps_what_was_measured(tmp_path, policy):
    job, out = _job(tmp_path), tmp_path / "ab"
    cmd = [sys.executable, "-m", "dynamiccl.cli.main", "ab", "run", "--policy", str(policy),
           "--pairs", "3", "--out", str(out), "--plugin", "x.so", "--", sys.executable, str(job),
           "30", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / "launch_02_policy.log.part").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (out / "ab.json").exists()  # the first launch is on record already
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted after 1 launch(es)" in stderr
    doc = json.loads((out / "ab.json").read_text())
    assert doc["interrupted"] and [x["side"] for x in doc["launches"]] == ["default"]
    assert "default:" in stdout


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
