"""``experiments/gpu_checks.sh``, the one command for every GPU check, run here with stand-ins for
the NVIDIA driver's tools and for pip (this machine has no GPU, and the test must not reinstall
the package): its steps run in order into a fresh folder per run, each bounded, the MPS daemon is
started when none answers, a failing step does not stop the next, the exit status counts the
failures, and the run ends with the table of the GPU goals."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "gpu_checks.sh"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_goals  # noqa: E402

sys.path.pop(0)

STAND_IN_SMI = "#!/bin/sh\necho 'stand-in nvidia-smi'\n"
#: Answers no get_server_list (no daemon yet) and records a start.
STAND_IN_MPS = ('#!/bin/sh\n[ "$1" = "-d" ] && { echo started >> "$(dirname "$0")/started"; exit 0; }\n'
                "cat >/dev/null\nexit 1\n")
#: Records what it was asked to install.
STAND_IN_PIP = '#!/bin/sh\necho "$@" >> "$(dirname "$0")/pip_calls"\n'


def _stand_ins(folder: Path) -> dict[str, str]:
    folder.mkdir()
    for name, text in (("nvidia-smi", STAND_IN_SMI), ("nvidia-cuda-mps-control", STAND_IN_MPS),
                       ("stand-in-pip", STAND_IN_PIP)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
            f"{os.environ['PATH']}", "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"), "PIP": str(folder / "stand-in-pip")}


def _steps(log: str) -> list[str]:
    return [line.split(":")[0].removeprefix("=== ") for line in log.splitlines()
            if line.startswith("=== ") and (": exit " in line or ": not run" in line)]


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for Linux GPU machines")
def test_gpu_checks_with_stand_in_driver_tools_runs_every_step_and_ends_with_the_goals(tmp_path):
    env = _stand_ins(tmp_path / "bin")
    (tmp_path / "model.zip").write_text("not a model: bench_real stops before reading it")
    done = subprocess.run(["bash", str(SCRIPT), "relout", "model.zip"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    (run,) = (p for p in (tmp_path / "relout").iterdir() if p.is_dir())  # relative to the caller
    assert run.name.startswith("run-") and not (ROOT / "relout").exists()
    log = (run / "gpu_checks.log").read_text()
    assert _steps(log) == ["gpu", "install", "bench_real", "pytest -m gpu", "bench_runtime on NCCL",
                           "profiler per event pair", "profiler in a DDP step",
                           "profiled self-tuning job", "profiled bench_runtime", "chunk size on NCCL"]
    assert (tmp_path / "bin" / "pip_calls").read_text() == \
        "install --no-build-isolation --no-deps -e .\n"
    assert (tmp_path / "bin" / "started").read_text() == "started\n"
    assert f"--online-model {tmp_path / 'model.zip'}" in log  # the caller's model, found
    assert "=== pytest -m gpu: exit 0" in log and " skipped" in log  # no GPU: every GPU test skips
    assert "-m gpu -n 0" in log  # one process: the GPU tests share one GPU
    # the benchmarks that need NCCL ranks refuse without a GPU, in one line each; the script goes
    # on and counts them; the profiler's C harness needs none, and its figure is judged
    assert log.count("bench_real: measures NCCL on GPUs and none is visible here") == 2
    assert log.count("bench_runtime: 4 nccl rank(s) need a GPU") == 2
    assert "--ddp needs NCCL ranks on GPUs" in log
    assert "chunk_nccl: measures NCCL on GPUs and none is visible here" in log
    goals = (run / "goals.txt").read_text()
    assert goals.splitlines()[0].split() == ["issue", "goal", "status", "figure"] and goals in log
    ddp = next(line for line in goals.splitlines() if "DDP >= x1.25" in line)
    assert ddp.startswith("28 ") and " not run " in ddp and ddp.endswith("no bench_real/bench_real.json")
    assert sum(" not run " in line for line in goals.splitlines()) == 13
    assert "NOT met  0/" in goals  # pytest ran, and every GPU test skipped
    pair = next(line for line in goals.splitlines() if "ns per event pair" in line)
    assert pair.startswith("30 ") and " not run " not in pair and " ns at worst" in pair
    assert done.returncode == 6 and "6 step(s) failed" in done.stdout
    assert sorted(p.name for p in run.iterdir()) == ["goals.txt", "gpu_checks.log", "profiler.json",
                                                     "pytest_gpu.xml"]
    # the whole folder, packed beside it: one file to carry off the machine
    with tarfile.open(run.with_name(run.name + ".tar.gz")) as packed:
        names = packed.getnames()
    assert f"{run.name}/goals.txt" in names and f"{run.name}/profiler.json" in names
    # a second run beside the first gets a folder of its own; with no time left nothing runs
    again = subprocess.run(["bash", str(SCRIPT), "relout"], env={**env, "GPU_CHECKS_BUDGET_S": "5"},
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    runs = sorted(p for p in (tmp_path / "relout").iterdir() if p.is_dir())
    assert len(runs) == 2 and again.returncode == 10, again.stdout + again.stderr
    second = (runs[1] / "gpu_checks.log").read_text()
    assert second.count("not run (the time budget is spent)") == 10


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for Linux GPU machines")
def test_gpu_checks_steps_runs_only_the_steps_named(tmp_path):
    """A second call for what the first one's budget did not reach: ``--steps profiler``."""
    env = _stand_ins(tmp_path / "bin")
    done = subprocess.run(["bash", str(SCRIPT), "--steps", "profiler", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    (run,) = (p for p in (tmp_path / "out").iterdir() if p.is_dir())
    log = (run / "gpu_checks.log").read_text()
    assert _steps(log) == ["gpu", "install", "profiler per event pair", "profiler in a DDP step"]
    assert done.returncode == 1 and "(steps: profiler)" in log  # the DDP half needs a GPU
    goals = (run / "goals.txt").read_text()
    assert "no bench_real/bench_real.json" in goals and "ns at worst" in goals


def test_gpu_checks_refuses_bad_input_in_one_line_with_exit_2(tmp_path):
    env = _stand_ins(tmp_path / "bin")
    (tmp_path / "afile").write_text("x")
    cases = {(): "usage", (str(tmp_path / "new"), str(tmp_path / "none.zip")): "no such file",
             ("-x",): "unknown option -x", (str(tmp_path / "new"), "--fast"): "unknown option",
             ("",): "OUT is empty", (str(tmp_path / "afile"),): "is a file",
             ("--steps", "pytest,ddp", str(tmp_path / "new")): "no step 'ddp'",
             ("--steps", "", str(tmp_path / "new")): "--steps needs", ("--steps",): "--steps needs"}
    for args, said in cases.items():
        done = subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "bin"]  # no -x, no /gpu_checks.log
    no_driver = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "x")], env=no_driver,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no NVIDIA driver" in done.stderr
    helped = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "pytest -m gpu" in helped.stdout and "--steps LIST" in helped.stdout
    assert "antlr4-python3-runtime==4.9.3" in helped.stdout and "omegaconf==2.3.0" in helped.stdout


def test_the_goals_table_reads_a_runs_folder_met_not_met_and_not_run(tmp_path):
    """gpu_goals.py on a run folder: pytest's JUnit report, bench_real's JSON and bench_runtime's."""
    import json

    from test_bench_real import _doc

    (tmp_path / "pytest_gpu.xml").write_text(
        '<testsuites><testsuite tests="14" failures="0" errors="0" skipped="0"/></testsuites>')
    (tmp_path / "bench_real").mkdir()
    (tmp_path / "bench_real" / "bench_real.json").write_text(json.dumps(_doc()))
    table = {k: v[1:] for k, v in gpu_goals.goals(tmp_path).items()}
    assert table["pytest -m gpu: every test passes"] == ("met", "14/14 passed (0 failed, 0 skipped)")
    assert table["DDP >= x1.25 with identical losses"][0] == "met"
    assert table["64 KiB all-reduce >= x1.4"] == ("met", "x1.54")
    assert table["no size slower beyond its launch spread"][0] == "NOT met"
    assert table["self-tuning within 5 % by step 50"][0] == "met"
    stragglar, cost = (k for k in table
                       if k.startswith(("StragglAR", "runtime hook")) and "profiler" not in k)
    assert table[stragglar][0] == table[cost][0] == "not run"
    case = {"plain_step_ms": 30.0, "hook_step_ms": 30.3, "measured_saving_ms": 1.0,
            "predicted_alone_saving_ms": 3.0, "detected_delay_ms": 19.0, "stragglar_share": 0.9}
    (tmp_path / "bench_runtime_nccl.json").write_text(json.dumps({"cases": [
        {**case, "straggler_delay_ms": 0.0}, {**case, "straggler_delay_ms": 20.0}]}))
    (tmp_path / "profiler_ddp.json").write_text(json.dumps(
        {"ddp_step_overhead_pct": 1.4, "pairs": 3, "min_pct": 0.2, "max_pct": 2.0}))
    (tmp_path / "profiled").mkdir()  # the profiled self-tuning job: the online phase alone
    (tmp_path / "profiled" / "bench_real.json").write_text(json.dumps(
        {k: v for k, v in _doc().items() if k not in ("tune", "ab", "ddp")}))
    table = {k: v[1:] for k, v in gpu_goals.goals(tmp_path).items()}
    assert table[stragglar][0] == "NOT met" and "saved 1.00 of 3.00 ms" in table[stragglar][1]
    assert table[cost] == ("met", "+1.0 % (30.30 against 30.00 ms a step)")
    assert table["profiler costs < 1 % of a DDP step"] == (
        "NOT met", "+1.40 % (median of 3 launch pairs, 0.2 .. 2.0 %)")
    assert table["self-tuning with the profiler within 5 % by step 50"][0] == "met"
    assert table["no step slower than NCCL after exploration, with the profiler"][0] == "NOT met"
    assert table["profiler <= 100 ns per event pair"] == ("not run", "no profiler.json")
    assert table["StragglAR >= 1/2 of its predicted saving at 20 ms, with the profiler"] == (
        "not run", "no bench_runtime_profiled.json")
    chunked, timed = (k for k in table if "chunk sizes" in k)
    assert table[chunked] == table[timed] == ("not run", "no chunk/chunk_nccl.json")
    (tmp_path / "chunk").mkdir()  # what chunk_nccl.py writes, NCCL having asked for one only
    rows = [{"chunk_bytes": None, "time_us": 100.0, "pinned": True, "nccl_asked": True},
            {"chunk_bytes": 131072, "time_us": 120.0, "pinned": True, "nccl_asked": True},
            {"chunk_bytes": 524288, "time_us": 104.0, "pinned": True, "nccl_asked": False}]
    (tmp_path / "chunk" / "chunk_nccl.json").write_text(json.dumps(
        {"chunks": rows, "nccl_used_both": False, "nccl_clamped_over": True, "ratio": 120 / 104}))
    table = {k: v[1:] for k, v in gpu_goals.goals(tmp_path).items()}
    assert table[chunked] == ("NOT met", "128 KiB: pinned, asked, 512 KiB: pinned, NOT asked; NCCL "
                                         "clamped the over-ceiling one")
    assert table[timed] == ("met", "NCCL's 100.0 us, 128 KiB 120.0 us, 512 KiB 104.0 us (x1.15 "
                                   "between them)")


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for Linux GPU machines")
def test_the_mps_pipe_is_a_private_folder_never_a_fixed_shared_path(tmp_path):
    """Without CUDA_MPS_PIPE_DIRECTORY the daemon's pipe goes to a fresh 0700 folder (a fixed
    /tmp/mps could be another user's), the daemon started there is stopped at the end and the
    folder removed; a pipe folder of another user's is refused in one line."""
    env = _stand_ins(tmp_path / "bin")
    (tmp_path / "bin" / "nvidia-cuda-mps-control").write_text(
        '#!/bin/sh\nd=$(dirname "$0")\nif [ "$1" = "-d" ]; then\n'
        '  stat -c "%a %U" "$CUDA_MPS_PIPE_DIRECTORY" >> "$d/started"; echo "$CUDA_MPS_PIPE_DIRECTORY" '
        '>> "$d/started"; exit 0\nfi\ncat >> "$d/asked"\nexit 1\n')
    del env["CUDA_MPS_PIPE_DIRECTORY"], env["CUDA_MPS_LOG_DIRECTORY"]
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    done = subprocess.run(["bash", str(SCRIPT), "--steps", "profiler", str(tmp_path / "out")],
                          env={**env, "GPU_CHECKS_BUDGET_S": "60"}, capture_output=True, text=True,
                          timeout=300)
    mode, pipe = (tmp_path / "bin" / "started").read_text().splitlines()
    assert mode.split()[0] == "700" and pipe.startswith(str(tmp_path / "tmp" / "dynamiccl-mps.")), mode
    assert (tmp_path / "bin" / "asked").read_text().splitlines()[-1] == "quit", done.stdout
    assert not Path(pipe).exists() and not any((tmp_path / "tmp").iterdir())
    (run,) = (p for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert (run / "mps_log").is_dir()  # the daemon's log travels with the run
    if os.geteuid() != 0:
        pytest.skip("only root can make a folder another user's here")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)  # nobody's, as another user's folder is
    refused = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out2")],
                             env={**env, "CUDA_MPS_PIPE_DIRECTORY": str(theirs)}, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "belongs to another user" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not (tmp_path / "out2").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script for Linux GPU machines")
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stopped_run_stops_its_step_and_leaves_no_private_folder(tmp_path, signum):
    """Ctrl-C or a kill while a step runs: the script stops at once, the step with it (it ran on
    until its cap, orphaned, when the script died), and the MPS pipe folder made for it is gone."""
    import signal
    import time

    env = _stand_ins(tmp_path / "bin")
    del env["CUDA_MPS_PIPE_DIRECTORY"]
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    pip = tmp_path / "bin" / "stand-in-pip"
    pip.write_text(f'#!/bin/sh\necho $$ > {tmp_path}/pip.pid\nexec sleep 120\n')
    script = subprocess.Popen(["bash", str(SCRIPT), str(tmp_path / "out")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pip.pid").is_file():
        assert time.monotonic() < deadline and script.poll() is None
        time.sleep(0.05)
    began = time.monotonic()
    script.send_signal(getattr(signal, signum))
    script.communicate(timeout=60)
    assert time.monotonic() - began < 15 and script.returncode == (143 if signum == "SIGTERM" else 130)
    stat = Path(f"/proc/{int((tmp_path / 'pip.pid').read_text())}/stat")
    while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z" \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # ended
    assert not any((tmp_path / "tmp").iterdir())  # the private MPS folder is removed
