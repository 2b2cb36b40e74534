"""What the CLI tells a new user: one-rank systems, straggler times, sizes, versions, file names."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dynamiccl.cli.main import main
from dynamiccl.plugin import build as plugin


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_single_gpu_system_simulates(capsys: pytest.CaptureFixture[str]) -> None:
    for collective in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
        out = _json(capsys, "simulate", "--topology", "dgx_h100", "--nodes", "1", "--gpus-per-node", "1",
                    "--collective", collective, "--size", "1M")
        assert out["nranks"] == 1 and out["best"]["time_us"] <= out["time_us"]
        assert out["config"]["algorithm"] == "ring"  # one rank: NCCL's local copy
    # what has no meaning on one rank is refused as the user's choice, not a crash
    assert main(["simulate", "--topology", "dgx_h100", "--nodes", "1", "--gpus-per-node", "1",
                 "--collective", "allreduce", "--size", "1M", "--schedule", "bw_aware"]) == 2
    assert "a single rank only runs" in capsys.readouterr().err


def test_evaluate_runs_tensor_parallel_workloads_on_one_gpu_per_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "one_gpu.yaml"
    topo.write_text("name: one_gpu\ntiers:\n  - {name: node, size: 1, fabric: switch, bandwidth_GBps: 400, "
                    "latency_us: 0.6, link: nvlink}\n  - {name: net, size: 4, fabric: switch, "
                    "bandwidth_GBps: 50, latency_us: 3}\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: one_gpu\nsystems:\n  - {{topology: {topo}, nodes: [4]}}\n"
                     "workloads: [tp_llama2_7b]\nepisode_length: 4\n"
                     "suite: {seed: 1, episode_length: 4, repeats: 1}\n")
    assert main(["evaluate", "--policy", "oracle", "--suite", str(suite), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    report = out[0] if isinstance(out, list) else out
    assert report["scenarios"] == 4 and report["geomean_speedup"] == pytest.approx(1.0)


def test_straggler_times_each_come_with_their_own_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--topology", "dgx_a100", "--collective", "allreduce", "--size", "1G",
            "--straggler-rank", "7", "--straggler-delay", "20ms"]
    out = _json(capsys, *argv)
    size = 2**30
    for pick in (out, out["nccl_default"], out["best"]):
        assert pick["time_us"] > pick["time_after_straggler_us"]
        assert pick["algbw_with_wait_GBps"] == pytest.approx(size / pick["time_us"] / 1e3)
        assert pick["algbw_GBps"] == pytest.approx(size / pick["time_after_straggler_us"] / 1e3)
        assert pick["busbw_with_wait_GBps"] == pytest.approx(pick["algbw_with_wait_GBps"] * 2 * 7 / 8)
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "first arrival" in table and "last arrival" in table and "arrives 20.00ms late" in table


def test_json_echoes_the_resolved_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "simulate", "--topology", "dgx_h100", "--nodes", "2", "--collective", "all_reduce",
                "--size", "100M", "--proto", "LL128", "--c2c", "0.25")
    assert out["input"] == {
        "topology": "dgx_h100", "nodes": 2, "gpus_per_node": 8, "collective": "allreduce",
        "size": 100 * 2**20, "algo": None, "proto": "ll128", "channels": None, "hierarchy": None,
        "schedule": None, "chunks": None, "chunk_bytes": None, "straggler_rank": None,
        "straggler_delay": 0.0, "c2c": 0.25}


def test_help_says_sizes_are_binary_as_in_nccl_tests(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["simulate"], ["explain"], ["profile", "collective"]):
        assert main([*command, "--help"]) == 0
        assert "100M, 100MB and 100MiB are all 100 MiB" in " ".join(capsys.readouterr().out.split())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dynamiccl {version('dynamiccl')}"


def test_explain_plot_names_the_file_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "--topology", "dgx_h100", "--collective", "allgather", "--max-size", "1M",
                 "--plot", "sweep"]) == 0
    assert "plot written to sweep.png" in capsys.readouterr().out
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "sweep").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.png"]  # no temporary file left behind


def test_plugin_path_after_build_names_the_built_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(plugin.CACHE_ENV, str(tmp_path / "cache"))
    packaged = tmp_path / "site" / plugin.LIBRARY_NAME  # a current packaged build
    packaged.parent.mkdir()
    packaged.write_bytes(b"\x7fELF")
    now = time.time() + 60
    os.utime(packaged, (now, now))
    monkeypatch.setattr(plugin, "packaged_library", lambda: packaged)
    assert main(["plugin", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(packaged)
    assert main(["plugin", "build"]) == 0
    built = capsys.readouterr().out.strip()
    assert built != str(packaged) and Path(built).is_file()
    assert main(["plugin", "path"]) == 0
    assert capsys.readouterr().out.strip() == built
    Path(built).unlink()  # the user's build is gone: back to the packaged one
    assert main(["plugin", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(packaged)


def test_python_dash_m_reports_a_user_error_in_one_line() -> None:
    """Run as ``__main__``, the entry module and the subcommands must share one UserError class."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "dynamiccl.cli.main", "simulate", "--topology", "nope",
                           "--collective", "allreduce", "--size", "1M"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unknown topology 'nope'" in proc.stderr and proc.stderr.count("\n") == 1


def test_profile_topology_keeps_an_existing_file_unless_told(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    recording = Path(__file__).parent / "fixtures" / "profiler" / "nvml" / "dgx_h100.yaml"
    out = tmp_path / "mine.yaml"
    out.write_text("my hand-written topology\n")
    argv = ["profile", "topology", "--from", str(recording), "-o", str(out)]
    for force in ([], ["--force"]):  # --force replaces only a topology `profile topology` wrote
        assert main([*argv, *force]) == 2
        assert "is not a topology written by `dynamiccl profile topology`" in capsys.readouterr().err
        assert out.read_text() == "my hand-written topology\n"
    out.unlink()
    assert main(argv) == 0
    written = out.read_text()
    assert main(argv) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0
    assert out.read_text() == written and [p.name for p in tmp_path.iterdir()] == ["mine.yaml"]
    raw = tmp_path / "answers.yaml"
    raw.write_text("earlier recording\n")
    for force in ([], ["--force"]):
        assert main(["profile", "topology", "--from", str(recording), "--record", str(raw), *force]) == 2
        assert "--record path" in capsys.readouterr().err and raw.read_text() == "earlier recording\n"


@pytest.mark.parametrize("knobs", [["--hierarchy", "hierarchical"],
                                   ["--algo", "stragglar", "--channels", "1"],
                                   ["--schedule", "bw_aware", "--nodes", "2"]])
def test_pinned_knobs_yield_a_runnable_nccl_pick(capsys: pytest.CaptureFixture[str],
                                                 knobs: list[str]) -> None:
    """NCCL's pick with the pinned knobs applied on top must be something the system can run
    (seen: a ring-over-ring on one node, StragglAR with LL)."""
    out = _json(capsys, "simulate", "--topology", "dgx_h100", "--collective", "allreduce", "--size", "1K",
                *knobs)
    pinned = {"--hierarchy": "hierarchy", "--algo": "algorithm", "--channels": "channels"}
    for flag, value in zip(knobs[::2], knobs[1::2], strict=True):
        if flag in pinned:
            assert str(out["config"][pinned[flag]]) == value
    assert out["config"]["protocol"] == "simple" or out["config"]["algorithm"] != "stragglar"


def test_show_says_any_size_and_what_nvidias_example_tuner_does_with_unmatched_calls(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23: the byte column wrapped 18446744073709551615 over two lines, and for the CSV
    `show` said unmatched calls are "left to NCCL" while `export` warned they run on one channel.
    NVIDIA's example tuner sets one channel before it looks for a line (plugins/tuner/example/
    plugin.c), so `show` now says what export says, and a line's -1 channels reads 1."""
    dccl, csv = tmp_path / "p.dccl", tmp_path / "p.csv"
    export = ["export", "--policy", "oracle", "--topology", "dgx_h100"]
    assert main([*export, "-o", str(dccl)]) == 0
    assert main([*export, "--format", "nccl-example-csv", "-o", str(csv)]) == 0
    capsys.readouterr()
    assert main(["show", str(dccl)]) == 0
    shown = capsys.readouterr().out
    assert "any size" in shown and "18446744073709551615" not in shown
    assert main(["show", str(csv)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "a call no line matches keeps NCCL's algorithm and protocol but runs on 1 channel" in shown
    assert "left to NCCL" not in shown
    csv.write_text(csv.read_text() + "allreduce,0,1000,ring,simple,-1,9,72,-1,-1\n")
    assert main(["show", str(csv), "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    assert rules[-1]["channels"] == 1 and all(r["channels"] >= 1 for r in rules)


def test_a_size_0_call_is_a_no_op(capsys: pytest.CaptureFixture[str]) -> None:
    """NCCL queues nothing for a count-0 collective; the simulator said 23 µs."""
    argv = ["simulate", "--topology", "dgx_h100", "--collective", "allreduce", "--size", "0"]
    assert main([*argv, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["no_op"] and answer["time_us"] == 0.0 and answer["best"] is None
    assert answer["input"]["size"] == 0
    assert main(argv) == 0
    assert ": 0 µs; a size-0 call is a no-op" in capsys.readouterr().out


def test_main_in_process_leaves_sigpipe_alone_and_only_the_console_command_ends_quietly_in_a_pipe(
        capsys: pytest.CaptureFixture[str]) -> None:
    import signal
    import subprocess
    import sys

    before = signal.getsignal(signal.SIGPIPE)
    assert main(["--version"]) == 0 and "dynamiccl" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGPIPE) == before  # a test run (or a benchmark) keeps its own
    # the console command piped into a reader that stops early: no BrokenPipeError traceback
    console = "import sys; from dynamiccl.cli.main import console; sys.exit(console())"
    done = subprocess.run(f"'{sys.executable}' -c '{console}' explain --topology dgx_h100 --nodes 2 "
                          "--collective allreduce | head -c 10", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert len(done.stdout) == 10 and done.stderr == ""


def test_ctrl_c_while_the_commands_load_is_one_line_timed_by_a_wrapped_build_parser() -> None:
    """Ctrl-C in the quarter of a second the commands take to load printed a 20-40 line
    traceback and no word of what stopped. A real SIGINT, sent from inside ``build_parser`` so that
    it lands there every time."""
    import subprocess
    import sys

    code = ("import os, signal, sys; import dynamiccl.cli.main as m; load = m.build_parser; "
            "m.build_parser = lambda: (os.kill(os.getpid(), signal.SIGINT), load())[1]; "
            "sys.exit(m.console())")
    done = subprocess.run([sys.executable, "-c", code, "export", "--policy", "oracle", "--topology",
                           "dgx_h100", "-o", "never.dccl"], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr) == (130, "dynamiccl: interrupted\n"), done.stderr


def test_ctrl_c_between_evaluates_results_and_its_figures_names_what_was_written_timed_by_a_wrapped_plot(
        tmp_path: Path) -> None:
    """Interrupted after its tables and before its figures, evaluate said only 'interrupted': the
    user could not tell a whole result from none, and a re-run refused the tables it left. A real
    SIGINT, sent from inside the plotting call so that it lands there every time."""
    import subprocess
    import sys

    out = tmp_path / "ev"
    out.mkdir()  # an existing --out: its files are claimed before the work
    code = ("import os, signal, sys; import dynamiccl.agents.shipping.evaluation_plots as p; "
            "draw = p.plot_reports; "
            "p.plot_reports = lambda *a, **k: (os.kill(os.getpid(), signal.SIGINT), draw(*a, **k)); "
            "from dynamiccl.cli.main import console; sys.exit(console())")
    done = subprocess.run([sys.executable, "-c", code, "evaluate", "--policy", "nccl_default",
                           "--suite", "smoke", "--out", str(out), "--plots"], capture_output=True,
                          text=True, timeout=300)
    tables = ", ".join(str(out / f) for f in ("summary.csv", "summary.json", "calls.csv"))
    figures = ", ".join(str(out / f) for f in ("choices.png", "speedup_vs_size.png"))
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines()[-1] == (f"dynamiccl evaluate: interrupted after writing {tables} "
                                            f"(each whole); not written: {figures}"), done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["calls.csv", "summary.csv", "summary.json"]
