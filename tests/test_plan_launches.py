"""``tune --plan``'s launches: the communicator's own shape, node-hours, and a script that survives
Ctrl-C and goes on where it stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from srun_standin import install_srun

from dynamiccl.agents.shipping.launchers import Launch, estimate, launches, script
from dynamiccl.agents.shipping.tune_measurements import DEFAULT, Choice
from dynamiccl.agents.shipping.tune_plan import PlannedMeasurement
from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats import job_mix
from dynamiccl.system.knobs import Algorithm, Collective, Protocol


def _job_on_16_nodes(path: Path) -> Path:
    """A job whose 16-rank data-parallel group puts one rank on each of 16 nodes."""
    entries = [job_mix.entry(Collective.ALLREDUCE, n, 16, 16, Algorithm.RING, Protocol.SIMPLE, 4,
                             100, 100, 5000.0, np.full(100, 50.0), launch="job")
               for n in (1 << 20, 1 << 24)]
    job_mix.write(entries, path)
    return path


def test_a_workloads_16_rank_group_over_16_nodes_is_planned_on_16_nodes(tmp_path, capsys, monkeypatch):
    """Issue 41: it was planned as `-np 16 -N 8` (2 nodes: ranks / GPUs per node)."""
    monkeypatch.chdir(tmp_path)  # a printed plan writes its chunk runs' pin policies into logs/
    job = _job_on_16_nodes(tmp_path / "job.jsonl")
    base = ["tune", "--topology", "dgx_h100", "--nodes", "16", "--workload", str(job), "--plan",
            "--budget", "12"]
    assert main([*base, "--launcher", "srun"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()  # every line a launch, a chunk run's too
    assert lines and all("--nodes=16 --ntasks-per-node=1 --gpus-per-node=1" in line for line in lines)
    assert "on 16 nodes x 1 rank per node (srun)" in captured.err
    assert main([*base, "--launcher", "openmpi"]) == 0
    assert all("mpirun -np 16 -N 1 " in line for line in capsys.readouterr().out.splitlines())
    assert main([*base, "--json"]) == 0
    rows = __import__("json").loads(capsys.readouterr().out)
    assert {(r["ranks"], r["nodes"], r["ranks_per_node"]) for r in rows} == {(16, 16, 1)}
    assert all(r["log"].endswith(".txt") and "_16x1_" in r["log"] for r in rows)


def test_a_budget_in_node_hours_bounds_the_plans_estimate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a printed plan writes its chunk runs' pin policies into logs/
    base = ["tune", "--topology", "dgx_h100", "--nodes", "16", "--plan", "--launcher", "srun",
            "--collective", "allreduce"]
    hours = []
    for budget in ("1node-hours", "4nh"):
        assert main([*base, "--budget", budget]) == 0
        err = capsys.readouterr().err
        hours.append(float(re.search(r"and ([0-9.]+) node-hours", err).group(1)))
    assert 0 < hours[0] <= 1.0 < hours[1] <= 4.0
    assert main([*base, "--budget", "0nh"]) == 2
    assert main([*base, "--budget", "two"]) == 2 and "node-hours" in capsys.readouterr().err


def test_node_hours_count_the_start_up_and_every_call_at_the_shapes_nodes():
    m = [PlannedMeasurement(Collective.ALLREDUCE, 16, DEFAULT, 1 << 20, 1.0, "", 1, 2)]
    run, = launches(m, 8, call_us=lambda _: 1000.0)  # 1 ms a call
    assert (run.nodes, run.ranks_per_node) == (2, 8)
    assert run.seconds == 30.0 + 50 * 1e-3
    assert estimate([run]) == (run.seconds, run.seconds * 2 / 3600)


def _slow_binary(folder: Path, seconds: float) -> dict[str, str]:
    """An nccl-tests stand-in that takes ``seconds`` and prints one published table."""
    folder.mkdir(exist_ok=True)
    standin = Path(__file__).parent / "nccl_tests_standin.py"
    (folder / "all_reduce_perf").write_text(
        f"#!/bin/sh\nsleep {seconds}\nexec {sys.executable} {standin} all_reduce_perf \"$@\"\n")
    (folder / "all_reduce_perf").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_the_plan_script_stops_on_ctrl_c_and_goes_on_where_it_stopped(tmp_path):
    """Interrupted during its second launch, the script leaves the first launch's log and sidecar,
    the second's output as `.part` only, and exits 130; run again it skips the first and finishes."""
    runs = [Launch(1, Collective.ALLREDUCE, 1, 8, choice, (1 << 20,), 10.0)
            for choice in (DEFAULT, Choice(Algorithm.RING, Protocol.LL))]
    (tmp_path / "plan.sh").write_text(script(runs, "local", logs="logs", made_by="test",
                                             then="tune"))
    env = _slow_binary(tmp_path / "bin", 1.0)
    proc = subprocess.Popen(["bash", "plan.sh"], cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = tmp_path / "logs" / f"{runs[1].name}.txt.part"
    deadline = time.monotonic() + 60
    while not second.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "run bash plan.sh again to go on" in err
    assert (tmp_path / "logs" / f"{runs[0].name}.txt").is_file()
    assert (tmp_path / "logs" / f"{runs[0].name}.yaml").is_file()
    assert not (tmp_path / "logs" / f"{runs[1].name}.txt").exists()
    again = subprocess.run(["bash", "plan.sh"], cwd=tmp_path, env=_slow_binary(tmp_path / "bin", 0),
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"skip {runs[0].name}" in again.stderr and f"run  {runs[1].name}" in again.stderr
    assert (tmp_path / "logs" / f"{runs[1].name}.yaml").is_file() and not second.exists()


def test_a_failed_launch_stops_the_script_unless_told_to_keep_going(tmp_path):
    runs = [Launch(1, coll, 1, 8, DEFAULT, (1 << 20,), 10.0)
            for coll in (Collective.BROADCAST, Collective.ALLREDUCE)]
    (tmp_path / "plan.sh").write_text(script(runs, "local", logs="logs", made_by="test", then="tune"))
    env = _slow_binary(tmp_path / "bin", 0)  # no broadcast_perf on PATH
    stopped = subprocess.run(["bash", "plan.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert stopped.returncode == 1 and f"failed: {runs[0].name}" in stopped.stderr
    assert not (tmp_path / "logs" / f"{runs[1].name}.txt").exists()
    kept = subprocess.run(["bash", "plan.sh"], cwd=tmp_path, env={**env, "KEEP_GOING": "1"},
                          capture_output=True, text=True)
    assert kept.returncode == 1 and "1 launch(es) failed" in kept.stderr
    assert (tmp_path / "logs" / f"{runs[1].name}.txt").is_file()


def test_a_script_across_nodes_names_its_launcher(tmp_path, capsys):
    assert main(["tune", "--topology", "dgx_h100", "--nodes", "2", "--plan", "--script",
                 str(tmp_path / "p.sh")]) == 2
    assert "add --launcher srun or openmpi or mpich" in capsys.readouterr().err
    assert not (tmp_path / "p.sh").exists()


#: An nccl-tests stand-in that prints its header and the first three rows of its table, then, where
#: NCCL is forced, waits argv[1] seconds before the rest: a launch cut there leaves half a table.
MID_TABLE = """import os, subprocess, sys, time
out = subprocess.run([sys.executable, sys.argv[2], *sys.argv[3:]], capture_output=True, text=True,
                     check=True).stdout.splitlines(keepends=True)
cut = [i for i, line in enumerate(out) if line.strip()[:1].isdigit()][2] + 1
sys.stdout.writelines(out[:cut])
sys.stdout.flush()
if os.environ.get("NCCL_ALGO"):
    time.sleep(float(sys.argv[1]))
sys.stdout.writelines(out[cut:])
"""

def _binary_stopping_mid_table(folder: Path, seconds: float) -> dict[str, str]:
    """A PATH with ``all_reduce_perf`` as :data:`MID_TABLE` and ``srun`` as srun's stand-in
    (:data:`srun_standin.SRUN`: one Ctrl-C only reports its tasks)."""
    install_srun(folder)
    standin = Path(__file__).parent / "nccl_tests_standin.py"
    (folder / "mid_table.py").write_text(MID_TABLE)
    (folder / "all_reduce_perf").write_text(f"#!/bin/sh\nexec {sys.executable} {folder / 'mid_table.py'} "
                                            f'{seconds} {standin} all_reduce_perf "$@"\n')
    (folder / "all_reduce_perf").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _wait_for_rows(part: Path) -> None:
    """Until the launch logging to ``part`` has printed its first rows (at most a minute)."""
    deadline = time.monotonic() + 60
    while "262144" not in (part.read_text() if part.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)


def _tune(folder: Path, capsys) -> tuple[str, list]:
    """tune on ``folder``'s logs: what it said, and the policy's rules."""
    assert main(["tune", "--topology", "dgx_h100", "--measurements", str(folder / "logs"), "-o",
                 str(folder / "tuned.dccl"), "--force"]) == 0
    err = capsys.readouterr().err
    return err, [rule for sl in pf.read(folder / "tuned.dccl").slices for rule in sl.rules]


def test_a_launch_stopped_by_slurms_sigterm_is_skipped_by_tune_and_redone_stand_in_nccl_tests(
        tmp_path, capsys):
    """Slurm's time limit (SIGTERM to every process) cuts the second launch after three rows of
    its table: tune reads the finished launch only and names the cut one, and the plan run again
    ends where the uninterrupted plan does."""
    runs = [Launch(1, Collective.ALLREDUCE, 1, 8, choice, tuple(1 << k for k in range(16, 24)), 10.0)
            for choice in (DEFAULT, Choice(Algorithm.RING, Protocol.LL))]
    text = script(runs, "local", logs="logs", made_by="test", then="tune")
    for name in ("cut", "whole"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.sh").write_text(text)
    subprocess.run(["bash", "plan.sh"], cwd=tmp_path / "whole", check=True, capture_output=True,
                   env=_binary_stopping_mid_table(tmp_path / "fast", 0))
    cut = tmp_path / "cut"
    proc = subprocess.Popen(["bash", "plan.sh"], cwd=cut, start_new_session=True,
                            env=_binary_stopping_mid_table(tmp_path / "slow", 60),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    part = cut / "logs" / f"{runs[1].name}.txt.part"
    _wait_for_rows(part)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "run bash plan.sh again to go on" in err
    said, _ = _tune(cut, capsys)
    assert f"{part}: the output of a launch that did not finish" in said
    assert re.search(r"^8 measurements \(8 usable points", said, re.M), said  # the first launch's
    subprocess.run(["bash", "plan.sh"], cwd=cut, check=True, capture_output=True,
                   env=_binary_stopping_mid_table(tmp_path / "fast", 0))
    (resumed, rules), (whole, whole_rules) = _tune(cut, capsys), _tune(tmp_path / "whole", capsys)
    assert "did not finish" not in resumed and rules == whole_rules
    assert re.search(r"^16 measurements", resumed, re.M) and re.search(r"^16 measurements", whole, re.M)


def test_a_launch_stopped_between_its_sidecar_and_its_log_is_named_as_unfinished_stand_in_nccl_tests(
        tmp_path, capsys):
    """The plan writes a launch's sidecar, then renames its log from ``.part``: a stop between the
    two leaves a sidecar whose log did not finish, which tune names as such (it said the sidecar
    was no measurement format it reads), and the plan run again redoes the launch."""
    runs = [Launch(1, Collective.ALLREDUCE, 1, 8, choice, tuple(1 << k for k in range(16, 24)), 10.0)
            for choice in (DEFAULT, Choice(Algorithm.RING, Protocol.LL))]
    (tmp_path / "plan.sh").write_text(script(runs, "local", logs="logs", made_by="test", then="tune"))
    env = _binary_stopping_mid_table(tmp_path / "fast", 0)
    subprocess.run(["bash", "plan.sh"], cwd=tmp_path, check=True, capture_output=True, env=env)
    log = tmp_path / "logs" / f"{runs[1].name}.txt"
    log.rename(f"{log}.part")  # as a stop between the sidecar's rename and the log's leaves it
    said, _ = _tune(tmp_path, capsys)
    assert f"{log.with_suffix('.yaml')}: the sidecar of {log.name}, a launch that did not finish" \
        in said and "not a measurement format" not in said
    subprocess.run(["bash", "plan.sh"], cwd=tmp_path, check=True, capture_output=True, env=env)
    assert log.is_file() and "did not finish" not in _tune(tmp_path, capsys)[0]


def test_tune_names_the_launches_of_the_plan_that_never_ran_stand_in_nccl_tests(tmp_path, capsys):
    """A folder of logs does not show a launch that never started (the plan stopped before it, or
    an allocation ended): the plan lists its launches beside the logs, and tune names those with
    no finished log; none once the plan has run to its end."""
    runs = [Launch(1, Collective.ALLREDUCE, 1, 8, choice, tuple(1 << k for k in range(16, 24)), 10.0)
            for choice in (DEFAULT, Choice(Algorithm.RING, Protocol.LL), Choice(Algorithm.TREE,
                                                                                   Protocol.LL))]
    (tmp_path / "plan.sh").write_text(script(runs, "local", logs="logs", made_by="test", then="tune"))
    env = _binary_stopping_mid_table(tmp_path / "fast", 0)
    subprocess.run(["bash", "plan.sh", "--dry-run"], cwd=tmp_path, check=True, capture_output=True,
                   env=env)
    assert not (tmp_path / "logs").exists()  # a dry run writes nothing
    subprocess.run(["bash", "plan.sh"], cwd=tmp_path, check=True, capture_output=True, env=env)
    assert "no finished log" not in _tune(tmp_path, capsys)[0]
    for run in runs[1:]:  # as if the plan had stopped after its first launch
        for suffix in (".txt", ".yaml"):
            (tmp_path / "logs" / f"{run.name}{suffix}").unlink()
    said, _ = _tune(tmp_path, capsys)
    assert (f"{tmp_path / 'logs' / 'plan.launches'}: 2 of the plan's 3 launches have no finished "
            f"log ({runs[1].name}, {runs[2].name}); run the plan again to go on") in said


@pytest.mark.parametrize("how", ["ctrl-c", "timeout", "hangup"])
def test_a_stop_ends_the_running_launch_at_once_stand_in_srun_and_nccl_tests(tmp_path, how):
    """Ctrl-C (to the whole session: srun only reports its tasks at one), `timeout` (SIGTERM to the
    script alone) or SIGHUP to it: the script stops the launch under way, a 60 s one, at once (it
    waited for it to end, then dropped it; at SIGHUP it left it running), and leaves no process."""
    runs = [Launch(1, Collective.ALLREDUCE, 2, 8, choice, tuple(1 << k for k in range(16, 24)), 10.0)
            for choice in (DEFAULT, Choice(Algorithm.RING, Protocol.LL))]
    (tmp_path / "plan.sh").write_text(script(runs, "srun", logs="logs", made_by="test", then="tune"))
    proc = subprocess.Popen(["bash", "plan.sh"], cwd=tmp_path, start_new_session=True,
                            env=_binary_stopping_mid_table(tmp_path / "bin", 60),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    part = tmp_path / "logs" / f"{runs[1].name}.txt.part"
    _wait_for_rows(part)
    try:
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if how == "timeout" else signal.SIGHUP)
        _, err = proc.communicate(timeout=20)
        time.sleep(0.5)
        left = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(proc.pid)], capture_output=True,
                              text=True).stdout.strip()
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None or left else None
    assert proc.returncode == 130 and "run bash plan.sh again to go on" in err, err
    assert not left, left
    assert part.is_file() and not part.with_suffix("").exists()
