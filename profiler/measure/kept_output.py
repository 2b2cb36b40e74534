"""A job's output kept within a bound: its head and its tail, each line read on the way through.

A job may print hundreds of megabytes (a debug level left on, a progress bar per step), and a log of
all of it, per launch, fills a disk for nothing: what a reader wants is its beginning (NCCL's
version, the plugins it loaded, their warnings) and its end (the last step times, how it ended).
:class:`KeptOutput` writes the first half of its budget to the log as it comes and holds the last
half in memory, so a log never exceeds the budget; the middle is left out at line ends and one line
in the log says how many bytes and lines (:data:`LEFT_OUT`). Every line, the middle's too, is handed
to ``on_lines`` as it passes (a chunk's lines at a time), read as :func:`dynamiccl.files.text_lines`
reads a file (UTF-8, any line end, each line cut at :data:`~dynamiccl.files.MAX_LINE_CHARS`): what
is looked for in the output is found wherever it falls, with the same answer as from a log of all of
it.

:class:`Pump` reads a job's pipe into it on a thread of its own, so the job never waits on dynamiccl
for longer than the chunk being read (the pipe holds :data:`PIPE_BYTES` meanwhile).
"""

from __future__ import annotations

import codecs
import io
import os
import select
import threading
from collections import deque
from collections.abc import Callable
from typing import BinaryIO

from dynamiccl.files import MAX_LINE_CHARS

#: The line that stands for the middle of the output in the log.
LEFT_OUT = ("[dynamiccl: {bytes:,} bytes ({lines:,} lines) of output left out here; the log keeps "
            "at most its first {head:,} and its last {tail:,} bytes]\n")
#: Bytes read from the pipe at a time.
CHUNK_BYTES = 1 << 20
#: What the pipe holds while the reader is busy (Linux's F_SETPIPE_SZ; an unprivileged user may
#: ask up to /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_BYTES = 1 << 20


class KeptOutput:
    """The first ``keep_bytes // 2`` bytes of the output written to ``log`` as they come, the last
    ``keep_bytes - keep_bytes // 2`` held until :meth:`close`, and every line passed to ``on_lines``."""

    def __init__(self, log: BinaryIO, keep_bytes: int, on_lines: Callable[[list[str]], None]) -> None:
        if keep_bytes < 2:
            raise ValueError(f"keep_bytes must be 2 or more, got {keep_bytes}")
        self.log = log
        self.on_lines = on_lines
        self.head_bytes = keep_bytes // 2
        self.tail_bytes = keep_bytes - self.head_bytes
        #: Bytes the job printed, and how many of them the log leaves out (set by :meth:`close`).
        self.total = 0
        self.left_out = 0
        self.left_out_lines = 0
        self._head = 0  # bytes written to the log
        self._head_line_end = 0  # where the log's last whole line ends
        self._tail: deque[bytes] = deque()
        self._held = 0  # bytes in _tail
        self._dropped = 0  # bytes that went between the head and the tail
        self._dropped_lines = 0
        self._dropped_ends_line = True  # the last byte dropped was a line end (or none was)
        self._decode = io.IncrementalNewlineDecoder(
            codecs.getincrementaldecoder("utf-8-sig")(errors="replace"), translate=True)
        self._line = ""  # the line being read, cut at MAX_LINE_CHARS

    def write(self, data: bytes) -> None:
        """A chunk of the output as it came."""
        self.total += len(data)
        self._read_lines(self._decode.decode(data))
        if self._head < self.head_bytes:
            first = data[:self.head_bytes - self._head]
            self.log.write(first)
            self.log.flush()  # the head is readable while the job runs
            end = first.rfind(b"\n")
            if end >= 0:
                self._head_line_end = self._head + end + 1
            self._head += len(first)
            data = data[len(first):]
        if data:
            self._tail.append(data)
            self._held += len(data)
            self._trim()

    def close(self) -> None:
        """Passes on the last line and writes the tail, after the line saying what was left out."""
        self._read_lines(self._decode.decode(b"", final=True))
        if self._line:
            self.on_lines([self._line])
        tail = b"".join(self._tail)
        self._tail.clear()
        if not self._dropped:  # all of it fits
            self.log.write(tail)
            return
        # the middle is left out at line ends: the head's last line, cut short, goes with it, and so
        # does the tail's first
        head_cut = self._head - self._head_line_end if self._head_line_end else 0
        tail_cut = 0 if self._dropped_ends_line else tail.find(b"\n") + 1
        if tail_cut == len(tail):
            tail_cut = 0  # the tail is part of one long line: kept as it is
        self.left_out = head_cut + self._dropped + tail_cut
        self.left_out_lines = self._dropped_lines + tail[:tail_cut].count(b"\n")
        if head_cut:
            self.log.seek(self._head_line_end)
            self.log.truncate()
        elif not self._head_line_end:
            self.log.write(b"\n")  # a head of one line cut short: the note on a line of its own
        self.log.write(LEFT_OUT.format(bytes=self.left_out, lines=self.left_out_lines,
                                       head=self.head_bytes, tail=self.tail_bytes).encode())
        self.log.write(tail[tail_cut:])

    def _trim(self) -> None:
        """Drops what no longer fits in the tail, from its oldest end."""
        excess = self._held - self.tail_bytes
        while excess > 0:
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                gone = first
            else:
                gone, self._tail[0] = first[:excess], first[excess:]
            self._held -= len(gone)
            excess -= len(gone)
            self._dropped += len(gone)
            self._dropped_lines += gone.count(b"\n")
            self._dropped_ends_line = gone.endswith(b"\n")

    def _read_lines(self, text: str) -> None:
        if not text:
            return
        lines = text.split("\n")
        lines[0] = self._line + lines[0]
        self._line = lines.pop()[:MAX_LINE_CHARS]
        if lines:
            self.on_lines([line[:MAX_LINE_CHARS] for line in lines])


class Pump(threading.Thread):
    """Reads a pipe (``fd``, the read end; closed when done) into ``kept`` until every writer has
    closed it. An error writing the log (a full disk) is kept for :meth:`finish` and the pipe read
    on all the same, so the job never blocks on a reader that stopped."""

    def __init__(self, fd: int, kept: KeptOutput) -> None:
        super().__init__(name="job-output", daemon=True)
        self.fd = fd
        self.kept = kept
        self.error: BaseException | None = None
        self._give_up = threading.Event()
        _widen(fd)

    def run(self) -> None:
        ready = select.poll()  # not select(): a descriptor past 1023 is fine
        ready.register(self.fd, select.POLLIN)
        try:
            while not self._give_up.is_set():
                if not ready.poll(100):
                    continue
                data = os.read(self.fd, CHUNK_BYTES)
                if not data:
                    break
                if self.error is None:
                    try:
                        self.kept.write(data)
                    except BaseException as exc:  # raised again by finish
                        self.error = exc
        finally:
            os.close(self.fd)

    def finish(self, wait_s: float) -> None:
        """Waits for the end of the output (``wait_s`` at most: a process that escaped the job may
        hold the pipe open; what it prints later is not read), then closes ``kept``."""
        self.join(wait_s)
        self._give_up.set()
        self.join()
        if self.error is not None:
            raise self.error
        self.kept.close()


def _widen(fd: int) -> None:
    import fcntl

    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass  # not Linux, or over the system's limit: the pipe keeps its 64 KiB
