"""`dynamiccl simulate --batch`: one answer per line, in order, identical to `--json`, errors in-line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.cli.main import main

REQUESTS = [
    {"topology": "dgx_h100", "nodes": 2, "gpus_per_node": 8, "collective": "allreduce",
     "size": "1MiB", "algo": "ring"},
    {"topology": "dgx_a100", "collective": "allgather", "size": 65536},
    {"topology": "dgx_h100", "collective": "allreduce", "size": "1G", "straggler_rank": 3,
     "straggler_delay": "10ms", "c2c": 0.5},
    {"topology": "dgx_h100", "nodes": 1, "gpus_per_node": 1, "collective": "reduce", "size": "4K"},
]


def _argv(request: dict) -> list[str]:
    return [arg for key, value in request.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


def _json_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_batch_answers_equal_json_answers_in_order(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    batch = tmp_path / "requests.jsonl"
    batch.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    assert main(["simulate", "--batch", str(batch)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(REQUESTS)
    for line, request in zip(lines, REQUESTS, strict=True):
        assert json.loads(line) == _json_of(capsys, _argv(request))


def test_the_echoed_input_is_itself_a_valid_request(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    first = _json_of(capsys, _argv(REQUESTS[2]))
    assert first["input"]["size"] == 2**30 and first["input"]["straggler_delay"] == 10_000.0
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(first["input"]) + "\n"))
    assert main(["simulate", "--batch", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == first


def test_a_bad_line_gets_an_error_on_its_line_and_the_rest_go_on(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        json.dumps(REQUESTS[0]),
        "not json",
        "",
        json.dumps({"topology": "dgx_h100", "collective": "allreduce", "size": "1e400"}),
        json.dumps({"topology": "dgx_a100", "collective": "allreduce", "size": "1M", "algo": "nvls"}),
        json.dumps({"topology": "dgx_h100", "collective": "allreduce", "size": 8, "colour": "red"}),
        json.dumps(["dgx_h100"]),
        json.dumps({"topology": "dgx_h100", "collective": "allreduce", "size": True}),
        json.dumps(REQUESTS[1]),
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["simulate", "--batch", "-"]) == 0
    captured = capsys.readouterr()
    answers = [json.loads(line) for line in captured.out.splitlines()]
    assert len(answers) == len(lines)
    errors = [a.get("error") for a in answers]
    assert errors[0] is None and errors[-1] is None
    assert "not a JSON object" in errors[1] and "empty line" in errors[2]
    assert "too large" in errors[3] and "sm90+" in errors[4]
    assert "unknown key 'colour'" in errors[5] and "JSON object" in errors[6]
    assert "string or a number" in errors[7]
    assert "7 invalid" in captured.err


def test_command_line_flags_are_defaults_for_every_line(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"size": "1M"}\n{"size": "2M", "nodes": 4}\n'))
    assert main(["simulate", "--batch", "-", "--topology", "dgx_h100", "--collective", "allgather"]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["input"]["collective"] == second["input"]["collective"] == "allgather"
    assert (first["nranks"], second["nranks"]) == (8, 32)


def test_a_process_feeding_one_request_at_a_time_gets_each_answer_at_once() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "dynamiccl.cli.main", "simulate", "--batch", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for request in REQUESTS[:2]:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())  # would block forever if output were held back
            assert answer["input"]["collective"] == request["collective"]
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
    assert proc.returncode == 0


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_a_line_too_long_or_not_text_is_answered_in_its_line_and_the_batch_goes_on(tmp_path, source):
    """A 3 MB line (read as it comes, never held: a 100 MB one took 88 s on stdin when each block
    re-split the whole line) and a line that is not UTF-8 each get an error in their place."""
    from dynamiccl.cli.simulate_batch import MAX_LINE_BYTES

    data = (b"x" * (3 << 20) + b"\n" + b"\xff\xfe{}\n" + json.dumps(REQUESTS[0]).encode() + b"\n")
    (tmp_path / "b.jsonl").write_bytes(data)
    argv = [sys.executable, "-m", "dynamiccl.cli.main", "simulate", "--batch",
            "-" if source == "stdin" else str(tmp_path / "b.jsonl")]
    done = subprocess.run(argv, input=data if source == "stdin" else None, capture_output=True,
                          timeout=120)
    too_long, not_text, answered = (json.loads(line) for line in done.stdout.splitlines())
    assert too_long == {"error": f"a line of {3 << 20} bytes, longer than any request "
                                 f"({MAX_LINE_BYTES} at most); give one JSON object per line"}
    assert not_text == {"error": "the line is not UTF-8 text"}
    assert answered["input"]["collective"] == REQUESTS[0]["collective"]
    assert done.returncode == 0 and b"2 invalid" in done.stderr


_DECIDE = """
import json, sys
from dataclasses import asdict
from dynamiccl import decisions
from dynamiccl.decisions import KnobConstraints, best, nccl_default
from dynamiccl.system.nccl import Algorithm, Collective, Protocol
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import load_topology

calls = []
for nodes in (1, 2):
    topo = load_topology("dgx_h100", nodes=nodes)
    for coll in Collective:
        for size in (8, 4096, 3 * 2**20 + 12, 2**30):
            for c in (KnobConstraints(), KnobConstraints(algorithm=Algorithm.RING),
                      KnobConstraints(protocol=Protocol.LL128, channels=24)):
                calls.append((Scenario(topo, coll, size), c))
                if coll == Collective.ALLREDUCE:
                    calls.append((Scenario(topo, coll, size, 3, 2500.0, 0.5), c))
if sys.argv[1] == "prefetch":
    decisions.prefetch(calls)
out = []
for scenario, c in calls:
    try:
        out.append([asdict(nccl_default(scenario, c)), asdict(best(scenario, c))])
    except ValueError as exc:
        out.append(str(exc))
print(json.dumps(out, default=str))
"""


def test_prefetched_answers_are_the_one_call_answers_exactly() -> None:
    """Each in a fresh process, so neither path can read the other's cached results."""
    runs = [subprocess.run([sys.executable, "-c", _DECIDE, mode], capture_output=True, text=True,
                           check=True).stdout for mode in ("prefetch", "one-by-one")]
    prefetched, one_by_one = (json.loads(r) for r in runs)
    assert len(prefetched) > 100 and prefetched == one_by_one


def test_a_thousand_odd_requests_end_in_answers_or_readable_errors_never_in_bugs() -> None:
    """An adversary's mix of sizes, knobs, ranks and ratios: every line is answered, none is an
    internal error, and the output is strict JSON (no Infinity or NaN)."""
    import argparse
    import random

    from dynamiccl.cli.simulate_batch import BatchSimulator
    from dynamiccl.cli.simulate_request import REQUEST_FLAGS

    rng = random.Random(11)
    choices = {
        "topology": ["dgx_h100", "dgx_a100", "pcie_cluster", "switch", "torus2d", "ring_ring_8to1"],
        "nodes": [1, 2, 3, 8, 1000], "gpus_per_node": [1, 2, 3, 8, 64],
        "collective": ["allreduce", "allgather", "reducescatter", "broadcast", "reduce"],
        "size": [0, 1, 7, 8, "1K", "1M", "4G", "1T", "8E", 2**62], "algo": ["tree", "ring", "nvls",
        "nvls_tree", "pat", "stragglar", "collnet_direct"], "proto": ["ll", "ll128", "simple"],
        "channels": [1, 24, 64], "hierarchy": ["flat", "hierarchical"], "schedule": ["bw_aware"],
        "chunks": [1, 8], "straggler_rank": [0, 7, 63], "straggler_delay": ["1us", "10ms", "1e6s"],
        "c2c": [0, 0.5, 1000]}
    lines = []
    for _ in range(1000):
        keys = ["topology", "collective", "size", *rng.sample(sorted(choices)[3:], rng.randint(0, 4))]
        lines.append(json.dumps({k: rng.choice(choices[k]) for k in keys}))
    defaults = argparse.Namespace(**{**dict.fromkeys(REQUEST_FLAGS), "straggler_delay": 0.0, "c2c": 0.0})
    batch, out = BatchSimulator(defaults), io.StringIO()
    batch.run([lines[:500], lines[500:]], out)
    text = out.getvalue()
    answers = [json.loads(line) for line in text.splitlines()]
    assert len(answers) == 1000 and batch.failed == 0
    assert "Infinity" not in text and "NaN" not in text
    assert sum("error" not in a for a in answers) > 200  # most odd mixes are still answerable
