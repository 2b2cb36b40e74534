"""Emulated hosts (``--emulate-hosts``): the per-rank NCCL environment, the MPS check, placement
errors, and records that say how they were measured. This machine has no GPU and cannot run the
CUDA MPS daemon: the MPS tests put a stand-in ``nvidia-cuda-mps-control`` script on PATH, and the
launcher test stands in a GPU count (both say so in their names)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from dynamiccl.cli.main import main
from dynamiccl.profiler.formats.records import MeasurementRecord, read_jsonl, write_jsonl
from dynamiccl.profiler.measure import emulation
from dynamiccl.profiler.measure.emulation import (
    EMULATED_HOST_ENV,
    EmulationError,
    check_mps,
    check_placement,
    emulated_host_env,
    gpu_of,
    mps_problem,
)
from dynamiccl.profiler.measure.launcher import launch
from dynamiccl.profiler.measure.runner import CollectiveSpec, summarize

#: Printed plans write a chunk-size launch's pin policy under ./logs: run where they may.
pytestmark = pytest.mark.usefixtures("in_tmp_cwd")

WORKERS = str(Path(__file__).parent / "profiler_workers.py")


def _stand_in_mps_control(folder: Path, script: str) -> dict[str, str]:
    """An environment whose PATH finds a stand-in ``nvidia-cuda-mps-control`` running ``script``."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / emulation.MPS_CONTROL
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_every_rank_is_its_own_host_on_the_loopback_with_no_shortcuts():
    envs = [emulated_host_env(r) for r in range(8)]
    assert len({e[emulation.HOSTID_ENV] for e in envs}) == 8
    for e in envs:
        assert e["NCCL_NET"] == "Socket" and e["NCCL_SOCKET_IFNAME"] == "lo"
        assert e["NCCL_P2P_DISABLE"] == e["NCCL_SHM_DISABLE"] == e["NCCL_IB_DISABLE"] == "1"
        assert EMULATED_HOST_ENV.items() <= e.items()
    assert [gpu_of(r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [gpu_of(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    with pytest.raises(EmulationError, match="gloo"):
        gpu_of(0, 0)


def test_more_ranks_than_gpus_needs_the_flag_and_says_which():
    check_placement(2, 2, emulate_hosts=False)
    check_placement(8, 1, emulate_hosts=True)
    with pytest.raises(EmulationError) as exc:
        check_placement(4, 1, emulate_hosts=False)
    message = str(exc.value)
    assert "\n" not in message and "--emulate-hosts" in message and "4 nccl ranks" in message
    with pytest.raises(EmulationError, match="none is visible"):
        check_placement(4, 0, emulate_hosts=True)


def test_mps_check_with_a_stand_in_control_that_answers_asks_the_users_pipe_directory(tmp_path):
    seen = tmp_path / "seen.txt"
    env = _stand_in_mps_control(tmp_path / "bin", f'echo "$CUDA_MPS_PIPE_DIRECTORY" > {seen}\n'
                                                  f"cat >> {seen}\nexit 0\n")
    env["CUDA_MPS_PIPE_DIRECTORY"] = str(tmp_path / "pipes")
    assert mps_problem(env=env) is None
    assert seen.read_text().split() == [str(tmp_path / "pipes"), "get_server_list"]


def test_mps_check_with_a_stand_in_control_and_no_daemon_says_why_and_how_in_one_line(
        tmp_path, monkeypatch):
    env = _stand_in_mps_control(tmp_path / "bin", 'echo "Cannot find MPS control daemon process"\n'
                                                  "exit 1\n")
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nowhere-mps")
    with pytest.raises(EmulationError) as exc:
        check_mps(4, 1)
    message = str(exc.value)
    assert "\n" not in message
    assert "/tmp/nowhere-mps" in message and "Cannot find MPS control daemon process" in message
    assert "time-slice" in message and "13-40 ms" in message  # why: the scheduler, not the network
    assert "nvidia-cuda-mps-control -d" in message and "CUDA_MPS_PIPE_DIRECTORY" in message  # how
    check_mps(1, 1)  # a GPU per rank shares nothing: no daemon needed


def test_mps_check_with_a_stand_in_control_that_hangs_is_bounded(tmp_path):
    env = _stand_in_mps_control(tmp_path / "bin", "exec sleep 30\n")
    problem = mps_problem(timeout_s=0.5, env=env)
    assert problem is not None and "did not answer within 0.5 s" in problem


def test_mps_check_without_the_control_program():
    problem = mps_problem(env={"PATH": "/nonexistent"})
    assert problem is not None and "not on PATH" in problem


def test_emulated_launch_stops_before_starting_ranks_without_a_gpu():
    with pytest.raises(EmulationError, match="none is visible"):
        launch(f"{WORKERS}:echo", 2, {"value": 1}, emulate_hosts=True)


@pytest.mark.multiproc
def test_launcher_gives_each_emulated_rank_its_own_host_with_a_stand_in_gpu_count_and_mps(
        tmp_path, monkeypatch):
    """The parent believes in one GPU and finds a stand-in MPS daemon answering; the ranks (which
    touch no GPU) report the NCCL environment the launcher set in them before the target ran."""
    monkeypatch.setattr(emulation, "visible_gpus", lambda: 1)
    monkeypatch.setenv("PATH", _stand_in_mps_control(tmp_path / "bin", "exit 0\n")["PATH"])
    out = launch(f"{WORKERS}:nccl_environment", 3, {}, timeout_s=60, emulate_hosts=True)
    assert [o["emulated_hosts"] for o in out] == [True] * 3
    assert len({o["env"][emulation.HOSTID_ENV] for o in out}) == 3
    for rank, o in enumerate(out):
        assert o["env"] == emulated_host_env(rank)
    plain = launch(f"{WORKERS}:nccl_environment", 2, {}, timeout_s=60)
    assert not plain[0]["emulated_hosts"] and emulation.HOSTID_ENV not in plain[0]["env"]


def test_profile_collective_names_emulate_hosts_with_a_stand_in_gpu(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(emulation, "visible_gpus", lambda: 1)
    assert main(["profile", "collective", "--backend", "nccl", "--nprocs", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--emulate-hosts" in err
    # with the flag the launcher asks MPS first; a stand-in control finds no daemon
    monkeypatch.setenv("PATH", _stand_in_mps_control(tmp_path / "bin", "exit 1\n")["PATH"])
    assert main(["profile", "collective", "--backend", "nccl", "--nprocs", "4",
                 "--emulate-hosts"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "MPS" in err and "nvidia-cuda-mps-control -d" in err
    assert main(["profile", "collective", "--backend", "gloo", "--emulate-hosts"]) == 2
    assert "use --backend nccl" in capsys.readouterr().err


def test_tune_plan_run_passes_emulate_hosts_to_the_runner_with_a_stand_in_gpu(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(emulation, "visible_gpus", lambda: 1)
    monkeypatch.setenv("PATH", _stand_in_mps_control(tmp_path / "bin", "exit 1\n")["PATH"])
    base = ["tune", "--topology", "dgx_h100", "--nodes", "1", "--gpus-per-node", "4", "--plan",
            "--budget", "2", "--run", "--record", str(tmp_path / "r.jsonl")]
    assert main(base) == 2
    assert "--emulate-hosts" in capsys.readouterr().err
    assert main([*base, "--emulate-hosts"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "no MPS control daemon answers" in err[-1] and not (tmp_path / "r.jsonl").exists()


def _result(emulated: bool):
    spec = CollectiveSpec("allreduce", 1 << 16, backend="nccl", warmup=0, iters=2, runs=2)
    times = np.full((4, 2, 2, 2), 100.0)
    return summarize(spec, times, emulated_hosts=emulated)


def test_records_of_emulated_hosts_say_so_and_count_a_node_per_rank(tmp_path):
    record = _result(True).to_record()
    assert record.emulated_hosts and record.nnodes == record.nranks == 4
    assert _result(True).to_json()["emulated_hosts"] is True
    real = _result(False).to_record()
    assert not real.emulated_hosts and real.nnodes == 1
    write_jsonl([record, real], tmp_path / "r.jsonl")
    assert [r.emulated_hosts for r in read_jsonl(tmp_path / "r.jsonl")] == [True, False]
    old = {k: v for k, v in real.to_json().items() if k != "emulated_hosts"}  # a file from before
    assert not MeasurementRecord.from_json(old).emulated_hosts


def test_tune_and_calibrate_refuse_emulated_and_real_measurements_together(tmp_path, capsys):
    emulated, real = tmp_path / "emulated.jsonl", tmp_path / "real.jsonl"
    write_jsonl([_result(True).to_record()], emulated)
    write_jsonl([_result(False).to_record()], real)
    assert main(["tune", "--topology", "dgx_h100", "--measurements", str(emulated),
                 "--measurements", str(real), "--no-calibrate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "emulated hosts" in err and "one system" in err
    assert main(["calibrate", str(emulated), str(real), "--topology", "dgx_h100",
                 "-o", str(tmp_path / "fit.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "emulated hosts" in err
    assert not (tmp_path / "fit.yaml").exists()


def test_live_backend_and_sessions_refuse_emulated_gloo():
    from dynamiccl.envs.backends.live import LiveBackend
    from dynamiccl.profiler.measure.session import RankSession

    with pytest.raises(ValueError, match="NCCL ranks"):
        LiveBackend(nprocs=2, emulate_hosts=True)
    with pytest.raises(ValueError, match="NCCL ranks"):
        RankSession(2, "gloo", emulate_hosts=True)


def test_profile_topology_writes_the_system_nccl_sees_on_emulated_hosts(tmp_path, capsys):
    from dynamiccl.system.topology import load_topology

    recording = Path(__file__).parent / "fixtures" / "profiler" / "nvml" / "dgx_h100.yaml"
    out = tmp_path / "emulated.yaml"
    assert main(["profile", "topology", "--from", str(recording), "--emulate-hosts", "4",
                 "-o", str(out)]) == 0
    topo = load_topology(out)
    assert (topo.nodes, topo.gpus_per_node, topo.gpu.arch, topo.gpu.sms) == (4, 1, "sm90", 132)
    assert topo.tiers[1].transport == "socket" and not topo.ll128_enabled
    assert "NOT measured" in out.read_text()
