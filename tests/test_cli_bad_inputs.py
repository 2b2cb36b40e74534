"""Bad input to `simulate`, `explain`, `profile`, `plugin` and the top level: one line, exit code 2.

Every case runs through ``dynamiccl.cli.main.main`` as a user would type it. A user's mistake must
end in exactly one line on stderr that names the problem, never in a traceback; a bug inside the
layers must say "internal error" with exit code 1, never blame the user.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dynamiccl.cli.main import main

SIM = ["simulate", "--topology", "dgx_h100"]
AR = [*SIM, "--collective", "allreduce"]
AR1M = [*AR, "--size", "1M"]
EXPLAIN = ["explain", "--topology", "dgx_h100", "--collective", "allreduce"]
GLOO = ["profile", "collective", "--backend", "gloo"]

CASES = [
    # sizes (items 11 and 13)
    ([*AR, "--size", "1e400"], "too large"),
    ([*AR, "--size", str(2**63)], "below 2^63"),
    ([*AR, "--size", "99999999999999999999T"], "too large"),
    ([*AR, "--size", "1e9999999999"], "too large"),
    ([*AR, "--size", "0.5"], "whole number of bytes"),
    ([*AR, "--size", "ten"], "cannot read size"),
    ([*AR, "--size", "nan"], "cannot read size"),
    ([*AR, "--size", "-1"], "--size"),
    ([*AR, "--size", "1Q"], "cannot read size"),
    ([*AR, "--size", ""], "cannot read size"),
    ([*EXPLAIN, "--max-size", "1e400"], "too large"),
    ([*EXPLAIN, "--min-size", "1G", "--max-size", "1K"], "larger than --max-size"),
    ([*GLOO, "--size", "1e400"], "too large"),
    ([*GLOO, "--size", "2", "--nprocs", "2"], "too small"),
    ([*GLOO, "--collective", "allgather", "--size", "4", "--nprocs", "2"], "at least 8 bytes"),
    # numbers that parse but mean nothing
    ([*AR1M, "--c2c", "nan"], "finite"),
    ([*AR1M, "--c2c", "inf"], "finite"),
    ([*AR1M, "--c2c", "-1"], "--c2c"),
    ([*AR1M, "--c2c", "lots"], "not a number"),
    ([*AR1M, "--c2c", "1e300"], "at most 1000"),
    (["simulate", "--topology", "dgx_h100", "--gpus-per-node", "64", "--collective", "allgather",
      "--size", "8", "--algo", "nvls"], "like NCCL_ALGO/NCCL_PROTO"),
    ([*AR1M, "--channels", "0"], "between 1 and 64"),
    ([*AR1M, "--channels", "65"], "between 1 and 64"),
    ([*AR1M, "--channels", "x"], "--channels"),
    ([*AR1M, "--chunks", "3"], "--chunks must be one of"),
    ([*AR1M, "--nodes", "0"], "--nodes"),
    ([*AR1M, "--nodes", "-2"], "--nodes"),
    ([*AR1M, "--gpus-per-node", "0"], "--gpus-per-node"),
    # stragglers (items 11 and 14)
    ([*AR1M, "--straggler-rank", "2"], "--straggler-rank needs --straggler-delay"),
    ([*AR1M, "--straggler-rank", "2", "--straggler-delay", "0"], "needs --straggler-delay"),
    ([*AR1M, "--straggler-delay", "5ms"], "needs --straggler-rank"),
    ([*AR1M, "--straggler-rank", "8", "--straggler-delay", "1ms"], "outside 0..7"),
    ([*AR1M, "--straggler-rank", "-1", "--straggler-delay", "1ms"], "at least 0"),
    ([*AR1M, "--straggler-rank", "1", "--straggler-delay", "inf"], "cannot read duration"),
    ([*AR1M, "--straggler-rank", "1", "--straggler-delay", "1e400ms"], "finite"),
    ([*AR1M, "--straggler-rank", "1", "--straggler-delay", "-3ms"], "--option=VALUE"),
    ([*AR1M, "--straggler-rank", "1", "--straggler-delay", "soon"], "cannot read duration"),
    ([*GLOO, "--inject-straggler", "1:0ms"], "has no delay"),
    ([*GLOO, "--inject-straggler", "1"], "RANK:DELAY"),
    ([*GLOO, "--inject-straggler", "x:1ms"], "RANK:DELAY"),
    ([*GLOO, "--nprocs", "2", "--inject-straggler", "5:1ms"], "outside 0..1"),
    # knob combinations (items 12 and 15)
    ([*AR1M, "--algo", "pat"], "pat only implements"),
    (["simulate", "--topology", "dgx_a100", "--collective", "allreduce", "--size", "1M", "--algo",
      "nvls"], "needs NVSwitch multicast (features.nvls) on an sm90+ GPU"),
    (["simulate", "--topology", "dgx_a100", "--collective", "allreduce", "--size", "1M", "--algo",
      "nvls_tree", "--nodes", "2"], "sm90+"),
    ([*AR1M, "--algo", "nvls", "--proto", "ll"], "only runs the simple protocol"),
    ([*AR1M, "--algo", "tree", "--hierarchy", "flat"], "tree is not flat"),
    ([*AR1M, "--schedule", "bw_aware"], "hierarchical ring needs two levels"),
    ([*AR1M, "--algo", "collnet_direct", "--nodes", "2"], "CollNet needs"),
    ([*AR1M, "--algo", "stragglar", "--gpus-per-node", "3"], "even number of ranks"),
    ([*AR1M, "--algo", "warp"], "unknown algorithm"),
    ([*AR1M, "--proto", "ll64"], "unknown protocol"),
    ([*AR, "--size", "1M", "--collective", "allreduce", "--hierarchy", "diagonal"], "unknown hierarchy"),
    (["simulate", "--topology", "dgx_h100", "--collective", "alltoall", "--size", "1M"],
     "unknown collective"),
    # what is missing or unknown
    (["simulate"], "give --topology, --collective, --size"),
    ([*SIM, "--collective", "allreduce"], "give --size"),
    (["simulate", "--topology", "dgx_h200", "--collective", "allreduce", "--size", "1"],
     "unknown topology 'dgx_h200'"),
    (["simulate", "--topology", "/nonexistent/sys.yaml", "--collective", "allreduce", "--size", "1"],
     "no such topology file"),
    ([*AR1M, "--seed", "-1"], "unrecognized arguments: --seed -1"),
    (["evaluate", "--policy", "random", "--suite", "smoke", "--seed", "-1"], "argument --seed"),
    (["export", "--policy", "random", "--topology", "dgx_h100", "--seed", "-1", "-o", "x.dccl"],
     "argument --seed"),
    ([*AR1M, "--json", "--batch", "-"], "drop --json"),
    (["simulate", "--batch", "/nonexistent/requests.jsonl"], "no such batch file"),
    (["--bogus"], "unrecognized arguments"),
    (["frobnicate"], "invalid choice"),
    (["explain", "--topology", "dgx_h100"], "--collective"),
    ([*EXPLAIN, "--plot", "/nonexistent/dir/sweep.png"], "does not exist"),
    (["profile"], "required"),
    (["profile", "gpu"], "invalid choice"),
    ([*GLOO, "--nprocs", "0"], "--nprocs: must be positive"),
    ([*GLOO, "--nprocs", "-3"], "--nprocs"),
    ([*GLOO, "--iters", "0"], "--iters"),
    ([*GLOO, "--runs", "0"], "--runs"),
    ([*GLOO, "--warmup", "-1"], "--warmup"),
    # unbounded work (item 11)
    ([*GLOO, "--nprocs", "100000"], "--nprocs: must be 1..256, got 100000"),
    ([*GLOO, "--iters", "1000000"], "--iters: must be 1..100000"),
    ([*GLOO, "--runs", "100000"], "--runs: must be 1..1000"),
    ([*GLOO, "--warmup", "1000000"], "--warmup: must be 0..100000"),
    ([*GLOO, "--runs", "1000", "--iters", "1000"], "1000000 timed iterations, over the limit of 100000"),
    ([*GLOO, "--timeout", "nan"], "--timeout"),
    ([*GLOO, "--timeout", "0"], "--timeout"),
    ([*GLOO, "--algorithm", "ring"], "NCCL knobs; use --backend nccl"),
    (["profile", "collective", "--backend", "nccl", "--algorithm", "stragglar"], "only in the simulator"),
    (["profile", "collective", "--backend", "nccl", "--channels", "65"], "--channels"),
    (["profile", "collective", "--backend", "tcp"], "invalid choice"),
    ([*GLOO, "--record", "/nonexistent/dir/m.jsonl"], "does not exist"),
    ([*GLOO, "--plot", "/nonexistent/dir/a.png"], "does not exist"),
    (["profile", "topology", "--nodes", "0"], "--nodes"),
    (["profile", "topology", "--network-bandwidth-GBps", "inf"], "finite"),
    (["profile", "topology", "--nic-path", "node"], "--nic-path"),
    (["profile", "topology", "--from", "/nonexistent/nvml.yaml"], "no such NVML recording"),
    (["export", "--policy", "oracle", "--topology", "dgx_h100", "--points-per-octave", "0", "-o",
      "x.dccl"], "--points-per-octave: must be positive"),
    (["export", "--policy", "oracle", "--topology", "dgx_h100", "--points-per-octave", "100000", "-o",
      "x.dccl"], "points per octave must be 1..64"),
    (["export", "--policy", "/nonexistent/model.zip", "--topology", "dgx_h100", "-o", "x.dccl"],
     "/nonexistent/model.zip does not exist"),
    (["evaluate", "--policy", "/nonexistent.zip", "--suite", "smoke"], "/nonexistent.zip does not exist"),
    (["calibrate", "/nonexistent/run.txt", "--topology", "dgx_h100", "-o", "fitted.yaml"],
     "no such measurement file"),
    # an empty path (an unset shell variable) is refused, never read as '.' or as "not given"
    (["evaluate", "--policy", "oracle", "--suite", "smoke", "--out", ""], "argument --out: empty"),
    (["evaluate", "--policy", "oracle", "--suite", ""], "argument --suite: empty"),
    (["evaluate", "--policy", "oracle", "--backend", "replay", "--replay", ""], "argument --replay: empty"),
    ([*EXPLAIN, "--plot", ""], "argument --plot: empty"),
    ([*GLOO, "--plot", ""], "argument --plot: empty"),
    ([*GLOO, "--record", ""], "argument --record: empty"),
    (["profile", "topology", "-o", ""], "argument -o/--output: empty"),
    (["profile", "topology", "--record", ""], "argument --record: empty"),
    (["profile", "topology", "--from", ""], "argument --from: empty"),
    (["calibrate", "", "--topology", "dgx_h100", "-o", "f.yaml"], "argument MEASUREMENTS: empty"),
    (["calibrate", "run.txt", "--topology", "dgx_h100", "-o", ""], "argument -o/--output: empty"),
    (["calibrate", "run.txt", "--topology", "dgx_h100", "-o", "f.yaml", "--plot", ""],
     "argument --plot: empty"),
    (["tune", "--topology", "dgx_h100", "-o", ""], "argument -o/--output: empty"),
    (["tune", "--topology", "dgx_h100", "--plan", "--measurements", ""], "argument --measurements: empty"),
    (["simulate", "--batch", ""], "argument --batch: empty"),
    (["simulate", "--topology", "", "--collective", "allreduce", "--size", "1"],
     "argument --topology: empty"),
    (["show", ""], "argument file: empty"),
    (["plugin"], "required"),
    (["plugin", "frob"], "invalid choice"),
    (["plugin", "build", "--cc", "no-such-cc"], "no-such-cc"),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[-60:] for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                               message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and err.count("\n") == 1, err


def _bad_files(tmp: Path) -> dict[str, Path]:
    """Files a user might hand over by mistake."""
    files = {"folder": tmp / "folder.yaml", "binary": tmp / "binary.yaml", "text": tmp / "notes.yaml",
             "nan": tmp / "nan.yaml", "nvls80": tmp / "nvls80.yaml", "recording": tmp / "rec.yaml"}
    files["folder"].mkdir()
    files["binary"].write_bytes(b"\xff\xfe\x00garbage")
    files["text"].write_text("just: [some, notes\n")
    files["nan"].write_text("name: x\ntiers:\n  - {size: 8, fabric: switch, bandwidth_GBps: .nan, "
                            "latency_us: 1}\n")
    files["nvls80"].write_text("name: a100ish\ngpu: {arch: sm80, sms: 108}\nfeatures: {nvls: true}\n"
                               "tiers:\n  - {size: 8, fabric: switch, bandwidth_GBps: 300, latency_us: 1}\n")
    files["recording"].write_text("not: a recording\n")
    return files


@pytest.mark.parametrize(("kind", "message"), [
    ("folder", "is a folder"), ("binary", "cannot be read as a text topology"),
    ("text", "not valid YAML"), ("nan", "bandwidth_GBps"),
    ("nvls80", "NVLS needs NVSwitch multicast on sm90+"),
])
def test_a_bad_topology_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         kind: str, message: str) -> None:
    path = _bad_files(tmp_path)[kind]
    for argv in (["simulate", "--topology", str(path), "--collective", "allreduce", "--size", "1M"],
                 ["explain", "--topology", str(path), "--collective", "allreduce"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_file_that_is_not_an_nvml_recording_is_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_files(tmp_path)["recording"]
    assert main(["profile", "topology", "--from", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not an NVML recording" in err and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: x\n")
    secret.chmod(0)
    for argv in (["simulate", "--topology", str(secret), "--collective", "allreduce", "--size", "1"],
                 ["simulate", "--batch", str(secret)],
                 ["profile", "topology", "--from", str(secret)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "permission denied" in err and err.count("\n") == 1


def test_permission_errors_are_one_line_even_as_root(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Root can read any file, so the operating system's refusal is injected for one path."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: x\n")
    real = Path.read_text

    def refuse(self: Path, *args: object, **kwargs: object) -> str:
        if self == secret:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    real_open = Path.open

    def refuse_open(self: Path, *args: object, **kwargs: object):
        if self == secret:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "open", refuse_open)  # a batch file is read a line at a time
    for argv in (["simulate", "--topology", str(secret), "--collective", "allreduce", "--size", "1"],
                 ["explain", "--topology", str(secret), "--collective", "allreduce"],
                 ["simulate", "--batch", str(secret)],
                 ["profile", "topology", "--from", str(secret)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "permission denied" in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_bug_inside_is_an_internal_error_not_the_users(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A ValueError from the simulator is a bug: exit 1, 'internal error', a hint to report it."""
    from dynamiccl import decisions

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("max() arg is an empty sequence")

    monkeypatch.setattr(decisions, "best", broken)
    assert main(AR1M) == 1
    err = capsys.readouterr().err
    assert "internal error" in err and "report" in err and "empty sequence" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("DYNAMICCL_DEBUG", "1")
    with pytest.raises(ValueError, match="empty sequence"):
        main(AR1M)


def test_a_policy_name_that_names_nothing_or_a_file_that_is_no_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_a_zip = tmp_path / "model.zip"
    not_a_zip.write_text("not a zip\n")
    old_policy = tmp_path / "policy.dccl"  # evaluate scores policy files; this one is unreadable
    old_policy.write_text("DYNAMICCL-POLICY 1\n")
    for argv, message in (
            (["evaluate", "--policy", str(not_a_zip), "--suite", "smoke"], "not a checkpoint"),
            (["evaluate", "--policy", str(old_policy), "--suite", "smoke"], "re-export"),
            (["evaluate", "--policy", "oracel", "--suite", "smoke"], "unknown policy 'oracel'"),
            (["export", "--policy", "no_such_policy", "--topology", "dgx_h100", "-o",
              str(tmp_path / "out.dccl")], "unknown policy 'no_such_policy'")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def _not_policies(tmp: Path) -> dict[str, Path]:
    """Files handed to `show`/`evaluate --policy` that are no shipped policy."""
    import zipfile

    files = {"folder": tmp / "adir", "no_magic": tmp / "fake.dccl", "zip": tmp / "model_copy.dccl",
             "binary": tmp / "fake.csv", "yaml": tmp / "topo.csv", "empty": tmp / "empty.conf"}
    files["folder"].mkdir()
    files["no_magic"].write_text("hello world\nsecond line\n")
    with zipfile.ZipFile(files["zip"], "w") as zf:
        zf.writestr("data", "a checkpoint")
    files["binary"].write_bytes(bytes(range(256)) * 8)
    files["yaml"].write_text("# a topology\nname: x\ntiers: []\n")
    files["empty"].write_bytes(b"")
    return files


@pytest.mark.parametrize(("kind", "message"), [
    ("folder", "is a folder, not a policy file"),
    ("no_magic", "does not start with the 'DYNAMICCL-POLICY <version>' line"),
    ("zip", "is a zip archive"),
    ("binary", "is a binary file, not a policy file"),
    ("yaml", "neither a DynamICCL policy file (no 'DYNAMICCL-POLICY' first line) nor NVIDIA "
             "example-tuner CSV (its first rule line has no commas)"),
    ("empty", "is empty"),
])
def test_show_and_evaluate_name_what_a_file_that_is_no_policy_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, message: str) -> None:
    """Item 15: a folder was "no such policy file", a binary file or a .dccl without its first line
    "expected 8 or 10 comma-separated fields"."""
    path = _not_policies(tmp_path)[kind]
    argvs = [["show", str(path)]]
    if kind != "folder":  # evaluate reads a folder as a training run folder
        argvs.append(["evaluate", "--policy", str(path), "--suite", "smoke"])
    for argv in argvs:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def _csv_lines(n: int) -> str:
    return "".join(f"allreduce,{64 * i},{64 * i + 63},ring,simple,8,-1,-1\n" for i in range(n))


def test_show_refuses_a_csv_over_the_policy_format_limits(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A 10^6-line example-tuner CSV took 19 s to show: the limits of a .dccl file apply."""
    from dynamiccl.plugin import policy_file as pf
    too_many = tmp_path / "many.csv"
    too_many.write_text(_csv_lines(pf.MAX_RULES + 1))
    assert too_many.stat().st_size <= pf.MAX_FILE_BYTES  # the rule limit, not the byte limit
    assert main(["show", str(too_many), "--json"]) == 2
    err = capsys.readouterr().err
    assert f"line {pf.MAX_RULES + 1}: more than {pf.MAX_RULES} rules" in err and err.count("\n") == 1
    too_big = tmp_path / "big.csv"
    too_big.write_text(_csv_lines(10) + "#" * pf.MAX_FILE_BYTES + "\n")
    assert main(["show", str(too_big)]) == 2
    err = capsys.readouterr().err
    assert f"over the {pf.MAX_FILE_BYTES}-byte limit" in err and err.count("\n") == 1
    at_limit = tmp_path / "ok.csv"
    at_limit.write_text(_csv_lines(pf.MAX_RULES))
    assert main(["show", str(at_limit), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == pf.MAX_RULES


def test_a_suite_repeated_without_end_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Item 11: `repeats: 100000000` would evaluate for days; the cap is in envs/workloads.py."""
    from importlib import resources

    smoke = (resources.files("dynamiccl.configs") / "scenario" / "smoke.yaml").read_text()
    suite = tmp_path / "forever.yaml"
    suite.write_text(smoke.replace("repeats: 1}", "repeats: 100000000}"))
    assert main(["evaluate", "--policy", "oracle", "--suite", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "'suite.repeats' is 100000000; at most 100" in err and err.count("\n") == 1


# --- issue 23: what a new user and an adversary broke --------------------------------------------

REAL = Path(__file__).parent / "fixtures" / "real" / "sophia_dgx_a100_ib"
NVML = Path(__file__).parent / "fixtures" / "profiler" / "nvml" / "dgx_h100.yaml"
#: A bad input is answered within this many seconds of work (a 10^9-node system took minutes)...
ANSWER_S = 5
#: ... and within this many seconds of wall time, however loaded the machine (a FIFO opened for
#: reading blocked for ever, using no CPU at all).
HANG_S = 30


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the cases read and must leave byte-identical: logs, a topology, a user's notes
    and picture, policies written by `dynamiccl export`, a zip that is no checkpoint, ..."""
    import shutil
    import zipfile

    root = tmp_path_factory.mktemp("issue23")
    shutil.copy(REAL / "all_reduce_n2.txt", root / "meas.txt")
    shutil.copy(REAL / "topology.yaml", root / "t.yaml")
    (root / "logs").mkdir()
    shutil.copy(REAL / "all_reduce_n2.txt", root / "logs" / "run1.txt")
    shutil.copy(NVML, root / "rec.yaml")
    lines = (root / "meas.txt").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["1048576"])
    fields = lines[at].split()
    fields[5] = "nan"
    lines[at] = "  ".join(fields)
    (root / "nan.txt").write_text("\n".join(lines) + "\n")
    (root / "notes.txt").write_text("my notes, not a policy\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"a user's own picture" * 10)
    (root / "hello.yaml").write_text("# my own yaml\nkey: value\n")
    (root / "foreign").mkdir()
    (root / "foreign" / "summary.csv").write_text("my,own,spreadsheet\n1,2,3\n")
    (root / "adir").mkdir()
    with zipfile.ZipFile(root / "fake.zip", "w") as zf:
        zf.writestr("hello.txt", "no data member")
    (root / "bigtier.yaml").write_text((root / "t.yaml").read_text().replace("size: 2,", "size: 1000000000,"))
    export = ["export", "--policy", "oracle", "--topology", "dgx_h100"]
    assert main([*export, "-o", str(root / "existing.dccl")]) == 0
    assert main([*export, "--format", "nccl-example-csv", "-o", str(root / "nv.csv")]) == 0
    return root


def _digest(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the inputs as the current folder, with a FIFO, a socket and FIFOs named like
    a topology and a policy (special files copy badly, so they are made here)."""
    import shutil
    import socket

    work = tmp_path / "work"
    shutil.copytree(inputs, work)
    for name in ("fifo", "fifo.yaml", "fifo.dccl"):
        os.mkfifo(work / name)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(work / "sock"))
    monkeypatch.chdir(work)
    yield work
    sock.close()


@pytest.fixture
def answers_in_time():
    """A command that blocks (a FIFO opened for reading) fails the test instead of hanging it, and
    one that works for more than ANSWER_S seconds of CPU fails it too."""
    import signal
    import time

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    started = time.process_time()
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    assert time.process_time() - started < ANSWER_S


CAL = ["calibrate", "meas.txt", "--topology", "t.yaml", "--keep-undetermined"]
EXPORT = ["export", "--policy", "oracle", "--topology", "dgx_h100"]
COLLECTIVE = ["profile", "collective", "--backend", "gloo", "--nprocs", "1", "--runs", "1", "--iters", "1"]
ISSUE_23 = [
    # 1. no command overwrites a file it did not write, its own input never; --force only its kind
    ([*CAL, "-o", "meas.txt"], "-o meas.txt is an input of this command"),
    ([*CAL, "-o", "meas.txt", "--force"], "-o meas.txt is an input of this command"),
    ([*CAL, "-o", "t.yaml", "--force"], "-o t.yaml is an input of this command"),
    ([*CAL, "-o", "existing.dccl"], "existing.dccl exists and is not a topology written by `dynamiccl "
                                    "calibrate`; refusing to replace it"),
    ([*CAL, "-o", "hello.yaml", "--force"], "is not a topology written by `dynamiccl calibrate`"),
    ([*CAL, "-o", "new.yaml", "--plot", "photo.png"], "photo.png exists and is not a figure written by "
                                                      "dynamiccl"),
    ([*CAL, "-o", "x.png", "--plot", "x.png"], "-o and --plot name the same file x.png"),
    (["tune", "--topology", "dgx_h100", "-o", "notes.txt", "--force"],
     "notes.txt exists and is not a DynamICCL policy file; refusing to replace it"),
    (["tune", "--topology", "dgx_h100", "--measurements", "meas.txt", "-o", "meas.txt", "--force"],
     "-o meas.txt is an input of this command"),
    (["tune", "--topology", "dgx_h100", "--measurements", "logs", "-o", "logs/run1.txt", "--force"],
     "-o logs/run1.txt is an input of this command"),
    (["tune", "--topology", "t.yaml", "-o", "t.yaml", "--force"], "-o t.yaml is an input"),
    (["tune", "--topology", "dgx_h100", "-o", "existing.dccl"], "already exists; pass --force"),
    (["tune", "--topology", "dgx_h100", "-o", "fifo", "--force"], "fifo is a FIFO (named pipe), not a "
                                                                   "regular file; pick another -o path"),
    (["tune", "--topology", "dgx_h100", "--plan", "--run", "--record", "notes.txt"],
     "notes.txt exists and is not a file of measurement records"),
    ([*EXPORT, "-o", "notes.txt", "--force"], "is not a DynamICCL policy file; refusing to replace it"),
    ([*EXPORT, "--format", "nccl-example-csv", "-o", "notes.txt", "--force"],
     "is not a DynamICCL export for NVIDIA's example tuner"),
    ([*EXPORT, "--format", "nccl-example-csv", "-o", "existing.dccl", "--force"],
     "-o existing.dccl names a .dccl (the DynamICCL plugin's file), but --format is nccl-example-csv"),
    ([*EXPORT, "-o", "existing.csv"], "add --format nccl-example-csv, or name it .dccl"),
    (["export", "--policy", "existing.dccl", "--topology", "dgx_h100", "-o", "existing.dccl", "--force"],
     "-o existing.dccl is an input of this command"),
    (["export", "--policy", "oracle", "--topology", "t.yaml", "-o", "t.yaml", "--force"],
     "-o t.yaml is an input of this command"),
    (["profile", "topology", "--from", "rec.yaml", "-o", "rec.yaml", "--force"],
     "-o rec.yaml is an input of this command"),
    (["profile", "topology", "--from", str(NVML), "-o", "notes.txt", "--force"],
     "is not a topology written by `dynamiccl profile topology`"),
    (["profile", "topology", "--from", str(NVML), "--record", "notes.txt", "--force"],
     "is not an NVML recording written by `dynamiccl profile topology --record`"),
    ([*COLLECTIVE, "--record", "notes.txt"], "is not a file of measurement records"),
    ([*COLLECTIVE, "--plot", "photo.png"], "is not a figure written by dynamiccl"),
    ([*EXPLAIN, "--plot", "photo.png"], "is not a figure written by dynamiccl"),
    (["evaluate", "--policy", "nccl_default", "--suite", "smoke", "--out", "foreign", "--force"],
     "foreign/summary.csv exists and is not a summary written by `dynamiccl evaluate`"),
    # 2. bounded work, refused at the system level whichever command builds the system
    ([*SIM, "--nodes", "1000000000", "--collective", "allreduce", "--size", "1M"],
     "--nodes 1000000000 makes 8000000000 ranks, more than the 131072"),
    ([*SIM, "--gpus-per-node", "1000000000", "--collective", "allreduce", "--size", "1M"],
     "the largest NVLink domain (NVL576)"),
    ([*SIM, "--gpus-per-node", "1", "--nodes", "131073", "--collective", "allreduce", "--size", "1M"],
     "give at most 131072 nodes"),
    (["simulate", "--topology", "bigtier.yaml", "--collective", "allreduce", "--size", "1M"],
     "field 'tiers[1].size' is 1000000000, which makes more than 131072 ranks"),
    (["explain", "--topology", "dgx_h100", "--nodes", "1000000000", "--collective", "allreduce"],
     "more than the 131072"),
    (["tune", "--topology", "dgx_h100", "--nodes", "1000000000", "--plan"], "more than the 131072"),
    ([*EXPORT, "--node-counts", "100000000", "-o", "n.dccl"], "--nodes 100000000 makes"),
    ([*EXPORT, "--node-counts", ",".join(map(str, range(1, 66))), "-o", "n.dccl"],
     "65 values; export at most 64 at once"),
    # 4. what ended in "internal error"
    ([*EXPORT[:2], "fake.zip", *EXPORT[3:], "-o", "f.dccl"], "fake.zip is a zip archive but not a "
                                                              "checkpoint written by `dynamiccl train`"),
    (["evaluate", "--policy", "fake.zip", "--suite", "smoke"], "is a zip archive but not a checkpoint"),
    (["show", "existing.dccl", "--collective", "nosuch"], "unknown collective 'nosuch'"),
    (["evaluate", "--policy", "nccl_default", "--suite", "smoke", "--backend", "perturbed",
      "--reality-seed", "-1"], "argument --reality-seed"),
    # 5. special files are named, never opened
    (["show", "fifo"], "fifo is a FIFO (named pipe), not a regular file"),
    (["show", "fifo.dccl"], "fifo.dccl is a FIFO (named pipe), not a regular file"),
    (["show", "/dev/zero"], "/dev/zero is a character device, not a regular file"),
    (["show", "sock"], "sock is a socket, not a regular file"),
    (["calibrate", "fifo", "--topology", "t.yaml", "-o", "f.yaml"], "fifo is a FIFO (named pipe)"),
    (["calibrate", "/dev/zero", "--topology", "t.yaml", "-o", "f.yaml"], "is a character device"),
    (["calibrate", "adir", "--topology", "t.yaml", "-o", "f.yaml"], "adir: is a folder"),
    (["calibrate", "meas.txt", "--topology", "fifo.yaml", "-o", "f.yaml"], "fifo.yaml is a FIFO"),
    (["simulate", "--topology", "fifo.yaml", "--collective", "allreduce", "--size", "1M"],
     "fifo.yaml is a FIFO (named pipe), not a regular file; give the topology YAML file itself"),
    (["simulate", "--topology", "/dev/zero", "--collective", "allreduce", "--size", "1M"],
     "/dev/zero is a character device"),
    (["simulate", "--batch", "fifo"], "fifo is a FIFO (named pipe)"),
    (["simulate", "--batch", "/dev/zero"], "/dev/zero is a character device"),
    (["tune", "--topology", "dgx_h100", "--measurements", "fifo", "--plan"], "fifo is a FIFO"),
    (["tune", "--topology", "dgx_h100", "--measurements", "/dev/zero", "--plan"], "character device"),
    (["evaluate", "--policy", "nccl_default", "--suite", "fifo.yaml"], "fifo.yaml is a FIFO"),
    (["evaluate", "--policy", "nccl_default", "--suite", "smoke", "--backend", "replay", "--replay",
      "fifo"], "fifo is a FIFO"),
    (["profile", "topology", "--from", "fifo.yaml"], "fifo.yaml is a FIFO"),
    (["check-model", "fifo", "--topology", "dgx_h100"], "fifo is a FIFO"),
    # 9. small lies
    (["show", "existing.dccl", "--nodes", "-1"], "argument --nodes"),
    (["show", "existing.dccl", "--width", "5"], "argument --width: must be at least 60, got 5"),
]


@pytest.mark.parametrize(("argv", "message"), ISSUE_23, ids=[" ".join(a)[-60:] for a, _ in ISSUE_23])
def test_issue23_bad_input_is_one_line_in_time_and_touches_no_file(
        workdir: Path, answers_in_time: None, capsys: pytest.CaptureFixture[str], argv: list[str],
        message: str) -> None:
    before = _digest(workdir)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert _digest(workdir) == before  # every input byte-identical, nothing written
    assert not (workdir / "n.dccl").exists() and not (workdir / "f.yaml").exists()


def test_a_batch_line_beyond_the_limits_is_answered_in_its_line(workdir: Path, answers_in_time: None,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """One line of 10^9 nodes stalled a whole batch for 5 minutes (a per-node loop)."""
    lines = ['{"topology": "dgx_h100", "collective": "allreduce", "size": "1M"}',
             '{"topology": "dgx_h100", "nodes": 1000000000, "collective": "allreduce", "size": "1M"}',
             '{"topology": "dgx_h100", "gpus_per_node": 1000000000, "collective": "allreduce", "size": 8}']
    (workdir / "batch.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["simulate", "--batch", "batch.jsonl"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "error" not in answers[0] and answers[0]["time_us"] > 0
    assert "more than the 131072" in answers[1]["error"] and "NVL576" in answers[2]["error"]


def test_a_nan_time_is_skipped_with_a_warning_like_a_negative_one(workdir: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`calibrate` on a log with a `nan` time ended in "internal error" (the solver's non-finite start)."""
    assert main(["calibrate", "nan.txt", "--topology", "t.yaml", "-o", "fit.yaml",
                 "--keep-undetermined"]) == 0
    captured = capsys.readouterr()
    assert "time nan is not a positive number; skipped" in captured.err
    assert "fitted 57 measurements" in captured.out  # one of the 58 timed rows dropped


def test_force_replaces_a_file_of_the_commands_own_kind(workdir: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--force replaces what the command wrote; a figure of ours is redrawn without it, and records
    are appended to."""
    before = (workdir / "existing.dccl").read_bytes()
    assert main([*EXPORT, "--nodes", "2", "-o", "existing.dccl", "--force"]) == 0
    assert (workdir / "existing.dccl").read_bytes() != before
    assert main([*EXPLAIN, "--plot", "sweep.png", "--max-size", "64"]) == 0
    drawn = (workdir / "sweep.png").read_bytes()
    assert main([*EXPLAIN, "--plot", "sweep.png", "--max-size", "128"]) == 0  # a re-run redraws it
    assert (workdir / "sweep.png").read_bytes() != drawn
    assert main([*EXPLAIN, "--plot", "notes.txt", "--max-size", "64"]) == 0  # .png added: no clash
    assert (workdir / "notes.txt.png").is_file() and (workdir / "notes.txt").read_text().startswith("my")
    capsys.readouterr()


def test_claim_output_compares_inodes_and_files_inside_input_folders(tmp_path: Path) -> None:
    from dynamiccl.files import FileKind, OutputRefused, claim_output, starts_with

    kind = FileKind("a test file", starts_with(b"ours"))
    log = tmp_path / "logs" / "run.txt"
    log.parent.mkdir()
    log.write_text("a log\n")
    link = tmp_path / "alias.txt"
    os.link(log, link)  # the same inode under another name
    for path, inputs in ((link, [log]), (log, [tmp_path / "logs"]), (tmp_path / "logs" / ".." / "logs" /
                                                                      "run.txt", [log])):
        with pytest.raises(OutputRefused, match="is an input of this command"):
            claim_output(path, kind, inputs=inputs, force=True)
    ours = tmp_path / "ours.txt"
    ours.write_text("ours, written before\n")
    with pytest.raises(OutputRefused, match="pass --force"):
        claim_output(ours, kind)
    assert claim_output(ours, kind, force=True) == ours
    assert claim_output(tmp_path / "logs" / "new.txt", kind, inputs=[tmp_path / "logs"]).name == "new.txt"


def test_a_file_that_appears_or_changes_while_a_command_works_is_kept(tmp_path: Path) -> None:
    """The claim is checked again at write time: a path free when claimed is taken with a hard link
    (a file created meanwhile stays, the write is refused), and a file of the command's kind that
    was replaced meanwhile by another kind is not overwritten."""
    from dynamiccl.files import FileKind, OutputRefused, claim_output, write_text_atomic

    kind = FileKind("a test file", lambda p: p.read_text().startswith("ours"))
    free = tmp_path / "free.txt"
    claim_output(free, kind)
    free.write_text("another program's\n")
    with pytest.raises(OutputRefused, match="was created by another program while this command ran"):
        write_text_atomic(free, "ours\n")
    assert free.read_text() == "another program's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["free.txt"]  # no temporary file left
    ours = tmp_path / "ours.txt"
    ours.write_text("ours, before\n")
    claim_output(ours, kind, force=True)
    ours.unlink()
    ours.write_text("someone's notes\n")
    with pytest.raises(OutputRefused, match="was replaced by another program"):
        write_text_atomic(ours, "ours, again\n")
    assert ours.read_text() == "someone's notes\n"
    fresh = tmp_path / "fresh.txt"
    claim_output(fresh, kind)
    write_text_atomic(fresh, "ours, first\n")
    write_text_atomic(fresh, "ours, second\n")  # the command's own file: written again
    assert fresh.read_text() == "ours, second\n"


def test_calibrate_keeps_a_file_created_while_it_fits(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import dynamiccl.profiler.fit.calibrate as fitting

    real = fitting.calibrate

    def fit_while_someone_writes(*args, **kwargs):
        (workdir / "fit.yaml").write_text("# a user's own topology, saved during the fit\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(fitting, "calibrate", fit_while_someone_writes)
    assert main(["calibrate", "meas.txt", "--topology", "t.yaml", "-o", "fit.yaml",
                 "--keep-undetermined"]) == 2
    assert "fit.yaml was created by another program while this command ran" in capsys.readouterr().err
    assert (workdir / "fit.yaml").read_text() == "# a user's own topology, saved during the fit\n"


@pytest.mark.multiproc
def test_exports_of_one_file_started_together_leave_one_winner(tmp_path: Path) -> None:
    """Three `dynamiccl export -o x.dccl` at once, none with --force: one writes the file, the
    others are refused in one line (at the claim or at the write), and the file is whole."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "dynamiccl.cli.main", *EXPORT, "-o", "x.dccl"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2, 2], results
    for code, err in results:
        if code == 2:
            assert "x.dccl" in err and err.strip().count("\n") == 0, err
    from dynamiccl.plugin import policy_file as pf

    assert pf.read(tmp_path / "x.dccl").n_rules > 0
