"""A job's output kept within a bound (``profiler/measure/kept_output.py``): the log is the output's
head and tail, cut at line ends, with one line saying exactly what was left out between; every line
is read on the way as :func:`dynamiccl.files.text_lines` reads the whole output from a file."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dynamiccl.files import MAX_LINE_CHARS, text_lines
from dynamiccl.profiler.measure.kept_output import LEFT_OUT, KeptOutput, Pump

NOTE = re.compile(rb"\[dynamiccl: ([\d,]+) bytes \(([\d,]+) lines\) of output left out here; [^\n]*\]\n")


def _output(rng: random.Random) -> bytes:
    """Lines of mixed lengths, line ends (\\n, \\r\\n, a bare \\r as a progress bar prints),
    non-ASCII text and bytes that are not UTF-8; sometimes without a last line end."""
    parts = []
    for _ in range(rng.randrange(0, 60)):
        body = rng.choice([b"", b"x" * rng.randrange(1, 200), "step time 12.5 ms \u00b5s".encode(),
                           b"\xff\xfe bad bytes", b"y" * rng.randrange(200, 3000)])
        parts.append(body + rng.choice([b"\n", b"\r\n", b"\r"]))
    if rng.random() < 0.3:
        parts.append(b"no line end at the very end")
    return b"".join(parts)


def _keep(output: bytes, keep: int, log: Path, rng: random.Random) -> tuple[KeptOutput, list[str]]:
    lines: list[str] = []
    with open(log, "wb") as fh:
        kept = KeptOutput(fh, keep, lines.extend)
        at = 0
        while at < len(output):  # chunks of any size, as a pipe hands them over
            step = rng.randrange(1, 700)
            kept.write(output[at:at + step])
            at += step
        kept.close()
    return kept, lines


@pytest.mark.parametrize("seed", range(40))
def test_the_log_is_the_head_and_tail_at_line_ends_and_every_line_is_read_as_from_the_whole_file(
        tmp_path, seed):
    rng = random.Random(seed)
    output = _output(rng)
    keep = rng.choice([2, 3, 64, 500, 2048, 10_000, 1 << 20])
    whole = tmp_path / "whole.log"
    whole.write_bytes(output)
    kept, lines = _keep(output, keep, tmp_path / "kept.log", rng)
    assert lines == list(text_lines(whole))
    log = (tmp_path / "kept.log").read_bytes()
    assert kept.total == len(output)
    if len(output) <= keep:
        assert log == output and kept.left_out == 0 and not NOTE.search(log)
        return
    head, tail = keep // 2, keep - keep // 2
    # the head ends at its last line end; one line cut short stays, the note then on a line of its own
    start = output.rfind(b"\n", 0, head) + 1 or head
    gap = b"" if output.rfind(b"\n", 0, head) >= 0 else b"\n"
    # the tail begins at a line start: after its first line end, unless that is its very end
    end = len(output) - tail
    if output[end - 1:end] != b"\n":
        first = output.find(b"\n", end) + 1
        end = first if 0 < first < len(output) else end
    (note,) = NOTE.finditer(log)
    assert log == output[:start] + gap + note[0] + output[end:]
    assert int(note[1].replace(b",", b"")) == kept.left_out == end - start
    assert int(note[2].replace(b",", b"")) == kept.left_out_lines == output[start:end].count(b"\n")
    assert start <= head and len(output) - end <= tail


def test_lines_that_fill_the_head_and_tail_exactly_are_kept_whole(tmp_path):
    output = b"".join(b"line %05d\n" % i for i in range(10))  # 11 bytes a line
    kept, lines = _keep(output, 22, tmp_path / "kept.log", random.Random(0))
    assert lines == [f"line {i:05d}" for i in range(10)]
    assert (tmp_path / "kept.log").read_bytes() == (
        b"line 00000\n" + LEFT_OUT.format(bytes=88, lines=8, head=11, tail=11).encode() + b"line 00009\n")


def test_a_line_longer_than_any_reader_wants_is_read_cut_and_kept_at_both_ends(tmp_path):
    output = b"a" * (3 * MAX_LINE_CHARS) + b"\nstep time 3 ms\n"
    kept, lines = _keep(output, 1000, tmp_path / "kept.log", random.Random(0))
    assert lines == ["a" * MAX_LINE_CHARS, "step time 3 ms"]
    log = (tmp_path / "kept.log").read_bytes()
    assert log.startswith(b"a" * 500 + b"\n[dynamiccl: ") and log.endswith(b" bytes]\nstep time 3 ms\n")
    assert len(log) <= 1000 + len(LEFT_OUT) + 40


def test_the_pump_reads_a_real_process_output_to_its_end_in_bounded_memory(tmp_path):
    """A child printing 40 MB through a pipe: every byte passes, the log keeps 64 KiB of it, and
    the reader holds a few megabytes at most (a chunk read, its lines, the tail)."""
    import tracemalloc

    script = ("import sys\nw = sys.stdout.buffer.write\nfor i in range(400000):\n"
              "    w(b'%07d' % i + b'.' * 92 + b'\\n')\n")
    read_end, write_end = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", script], stdout=write_end)
    os.close(write_end)
    count = [0]
    with open(tmp_path / "kept.log", "wb") as fh:
        kept = KeptOutput(fh, 64 << 10, lambda batch: count.__setitem__(0, count[0] + len(batch)))
        pump = Pump(read_end, kept)
        tracemalloc.start()
        try:
            pump.start()
            assert child.wait(timeout=120) == 0
            pump.finish(5.0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert (kept.total, count[0]) == (40_000_000, 400_000) and peak < 8 << 20
    log = (tmp_path / "kept.log").read_bytes()
    assert log.startswith(b"0000000.") and log.endswith(b"0399999" + b"." * 92 + b"\n")
    assert len(log) <= (64 << 10) + len(LEFT_OUT) + 40 and kept.left_out_lines == 400_000 - log.count(b".\n")
