"""The README's day-one walk-through, run line by line on CPU: plan for 16 x 8 under Slurm, the
launches' logs with their labels, tune, show (the srun line with the policy's SHA-256), the A/B.

No cluster and no GPU here, so ``srun`` and nccl-tests' binaries are stand-ins
(``tests/nccl_tests_standin.py`` prints the published 8xH100 runs as NCCL 2.26.2 would, with
``NCCL_DEBUG=INFO`` lines; ``srun`` runs the command once); the plan's script, its sidecars, tune,
show and ab are the real ones.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.plugin import policy_file as pf
from dynamiccl.profiler.formats.published import load_sidecar

REPO = Path(__file__).resolve().parents[1]
STANDIN = Path(__file__).parent / "nccl_tests_standin.py"


def walkthrough() -> list[str]:
    """The command lines of the README's day-one block, in order."""
    section = (REPO / "README.md").read_text().split("## Day one on a cluster")[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def stand_ins(folder: Path) -> dict[str, str]:
    """A PATH with ``srun`` (runs the command once, with the SLURM_NNODES and SLURM_NTASKS srun
    gives its tasks) and nccl-tests' binaries."""
    folder.mkdir()
    (folder / "srun").write_text(
        '#!/bin/sh\nnodes=1 per=1\nwhile [ $# -gt 0 ]; do case "$1" in --nodes=*) nodes=${1#*=}; '
        'shift;; --ntasks-per-node=*) per=${1#*=}; shift;; --*) shift;; *) break;; esac; done\n'
        'export SLURM_NNODES=$nodes SLURM_NTASKS=$((nodes * per))\nexec "$@"\n')
    for binary in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"):
        (folder / binary).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} '
                                     f'{shlex.quote(str(STANDIN))} {binary} "$@"\n')
    for f in folder.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def run_cli(line: str, capsys) -> tuple[int, str, str]:
    words = shlex.split(line)
    assert words[0] == "dynamiccl"
    code = main(words[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_day_one_walkthrough_with_stand_in_srun_and_nccl_tests(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = stand_ins(tmp_path / "bin")
    plan_line, dry_run, tune_line, show_line, ab_line = walkthrough()

    # 1. the plan: a Slurm script for 16 nodes x 8 ranks, with its cost
    code, out, err = run_cli(plan_line, capsys)
    assert code == 0, err
    summary = next(line for line in err.splitlines() if line.startswith("plan: "))
    assert "on 16 nodes x 8 ranks per node (srun)" in summary and "node-hours" in summary
    launches = int(re.search(r"plan: (\d+) launches", summary).group(1))
    script = Path("plan.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash\n# DynamICCL measurement plan")

    # 2. dry run: every launch on 16 x 8 under srun, with NCCL's debug lines and a named log
    shown = subprocess.run(["bash", *dry_run.split()[1:]], capture_output=True, text=True, env=env,
                           check=True).stdout.strip().splitlines()
    assert len(shown) == launches
    for line in shown:
        assert "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV NCCL_DEBUG_FILE= " in line
        assert "srun --export=ALL --nodes=16 --ntasks-per-node=8 --gpus-per-node=8" in line
        assert re.search(r"_perf -b \d+ -e \d+ -f 2 -g 1 -w 5 -n 20  > logs/r\d+_\w+_16x8_", line)
    assert not Path("logs").exists()  # a dry run runs nothing

    # ... and for real, with the stand-ins: every launch leaves its log and its label
    ran = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    logs = sorted(Path("logs").glob("*.txt"))
    assert len(logs) == launches and not list(Path("logs").glob("*.part"))
    for log in logs:
        run, = load_sidecar(log.with_suffix(".yaml"))
        assert (run.nodes, run.gpus_per_node, run.launch) == (16, 8, "process_per_gpu")
        assert ("default" in log.name) == (run.forced == {}) == run.is_default
        assert {r.nccl_version for r in run.records} == {"2.26.2"}
    again = subprocess.run(["bash", "plan.sh"], capture_output=True, text=True, env=env, check=True)
    assert again.stderr.count("skip ") == launches  # run again: nothing is measured twice

    # 3. tune reads the labelled logs and stamps the release they ran
    code, out, err = run_cli(tune_line, capsys)
    assert code == 0, err
    assert "wrote tuned.dccl (dccl, NCCL 2.26.2..2.26.2)" in err
    policy = pf.read("tuned.dccl")
    assert policy.header.nccl == "2.26.2..2.26.2"
    assert any(r.nodes == 16 and r.ranks == 128 for sl in policy.slices for r in sl.rules)

    # 4. show: the srun line that loads it on every rank, with its checksum
    code, out, err = run_cli(show_line, capsys)
    assert code == 0, err
    digest = pf.file_hash("tuned.dccl")
    deploy = next(line for line in out.splitlines() if line.startswith("deploy (Slurm):"))
    assert f"DYNAMICCL_POLICY={tmp_path / 'tuned.dccl'}" in deploy
    assert f"DYNAMICCL_POLICY_SHA256={digest} srun --export=ALL" in deploy
    assert "NCCL_TUNER_PLUGIN=$(dynamiccl plugin path)" in deploy

    # 5. the A/B, dry: the same command, the variables toggled, the order alternating
    code, out, err = run_cli(ab_line, capsys)
    assert code == 0, err
    sides = re.findall(r"^# launch \d+/10: (default|policy)", out, re.M)
    assert sides == ["default", "policy", "policy", "default"] * 2 + ["default", "policy"]
    commands = [line for line in out.splitlines() if not line.startswith("#")]
    assert all(line.endswith("srun --nodes 16 --ntasks-per-node 8 python train.py")
               for line in commands)
    for side, line in zip(sides, commands, strict=True):
        assert (f"DYNAMICCL_POLICY_SHA256={digest}" in line) == (side == "policy")
        assert ("-u DYNAMICCL_POLICY " in line) == (side == "default")


@pytest.mark.parametrize("launcher", ["local", "openmpi", "mpich"])
def test_a_plans_script_dry_run_prints_the_launches_it_would_run(tmp_path, capsys, monkeypatch,
                                                                  launcher):
    monkeypatch.chdir(tmp_path)
    nodes = "1" if launcher == "local" else "2"
    assert main(["tune", "--topology", "dgx_h100", "--nodes", nodes, "--plan", "--launcher", launcher,
                 "--script", "p.sh", "--budget", "8", "--collective", "allreduce"]) == 0
    printed = capsys.readouterr()
    assert main(["tune", "--topology", "dgx_h100", "--nodes", nodes, "--plan", "--launcher", launcher,
                 "--budget", "8", "--collective", "allreduce"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    shown = subprocess.run(["bash", "p.sh", "--dry-run"], capture_output=True, text=True,
                           check=True).stdout.strip().splitlines()
    assert "wrote p.sh" in printed.err and len(shown) == len(lines)
    for script_line, printed_line in zip(shown, lines, strict=True):
        command = printed_line.split("  # ")[0]
        assert script_line.replace("  > ", " > ") == command.replace(" 2>&1", "")


def test_export_and_three_paths_deploy_lines_load_the_policy_with_no_warning_stand_in_srun_nccl_tests(
        tmp_path, capsys, monkeypatch):
    """The line `export` prints and the README's "Three paths" line, run as printed (torchrun ...
    standing for the job: nccl-tests under srun) load the policy on every rank with no warning
    from the plugin (a relative DYNAMICCL_POLICY is warned about: each rank resolves its own)."""
    monkeypatch.chdir(tmp_path)
    env = stand_ins(tmp_path / "bin")
    section = (REPO / "README.md").read_text().split("## Three paths")[1].split("\n## ")[0]
    block = re.findall(r"```bash\n(.*?)```", section, re.S)[1]
    export_line, *_, readme_line = [line for line in block.splitlines() if line.strip()]
    assert main(shlex.split(export_line)[1:]) == 0
    printed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("use:"))
    job = ("env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING srun --export=ALL --nodes=2 "
           "--ntasks-per-node=8 all_reduce_perf -b 1048576 -e 1048576 -f 2 -g 1")
    for line in (printed.removeprefix("use:").strip(), readme_line):
        assert line.endswith(" torchrun ...")
        ran = subprocess.run(["bash", "-c", line.removesuffix("torchrun ...") + job], env=env,
                             capture_output=True, text=True, check=True)
        assert "DynamICCL: policy oracle" in ran.stdout, ran.stdout  # loaded, and on 2 x 8 ranks
        assert "WARN" not in ran.stdout, line
