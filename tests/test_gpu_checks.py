"""``experiments/gpu_checks.sh``, the one command for every GPU check, run here with stand-ins for
the NVIDIA driver's tools (this machine has no GPU): its steps run in order into one log, the MPS
daemon is started when none answers, a failing step does not stop the next, and the exit status
counts the failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gpu_checks.sh"

STAND_IN_SMI = "#!/bin/sh\necho 'stand-in nvidia-smi'\n"
#: Answers no get_server_list (no daemon yet) and records a start.
STAND_IN_MPS = ('#!/bin/sh\n[ "$1" = "-d" ] && { echo started >> "$(dirname "$0")/started"; exit 0; }\n'
                "cat >/dev/null\nexit 1\n")


def _stand_ins(folder: Path) -> dict[str, str]:
    folder.mkdir()
    for name, text in (("nvidia-smi", STAND_IN_SMI), ("nvidia-cuda-mps-control", STAND_IN_MPS)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
            f"{os.environ['PATH']}", "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for Linux GPU machines")
def test_gpu_checks_with_stand_in_driver_tools_runs_every_step_and_counts_the_failures(tmp_path):
    env = _stand_ins(tmp_path / "bin")
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    log = (out / "gpu_checks.log").read_text()
    steps = [line.split(":")[0].removeprefix("=== ") for line in log.splitlines()
             if line.startswith("=== ") and ": exit " in line]
    assert steps == ["gpu", "pytest -m gpu", "bench_real", "bench_runtime on NCCL"]
    assert (tmp_path / "bin" / "started").read_text() == "started\n"
    assert "=== pytest -m gpu: exit 0" in log and " skipped" in log  # no GPU: every GPU test skips
    # both benchmarks refuse without a GPU, in one line each; the script goes on and counts them
    assert "bench_real: measures NCCL on GPUs and none is visible here" in log
    assert "bench_runtime: 4 nccl rank(s) need a GPU" in log
    assert done.returncode == 2 and "2 step(s) failed" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["gpu_checks.log"]  # no half-written JSON


def test_gpu_checks_refuses_bad_input_in_one_line_with_exit_2(tmp_path):
    env = _stand_ins(tmp_path / "bin")
    (tmp_path / "out" / "bench_real").mkdir(parents=True)
    cases = {(): "usage", (str(tmp_path / "new"), str(tmp_path / "none.zip")): "no such file",
             (str(tmp_path / "out"),): "exists"}
    for args, said in cases.items():
        done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and said in done.stdout + done.stderr
    assert not (tmp_path / "new").exists()
    no_driver = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "x")], env=no_driver,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no NVIDIA driver" in done.stderr
    helped = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "pytest -m gpu" in helped.stdout
