"""``dynamiccl simulate --batch FILE|-``: many requests in one process, one JSON line each.

Scripts and notebooks ask for thousands of simulations; a process per call costs about a second of
start-up. Each input line is a JSON object keyed by ``simulate``'s long flag names (``_`` for ``-``)
and is parsed by the same argument parser as the command line, so a line's answer is exactly what
``simulate --json`` prints for the same flags. Flags given on the command line are defaults every
line may override. A bad line is answered with ``{"error": "..."}`` and the batch goes on; answers
keep the input's order, one per line (blank lines included), flushed as they are written so a
process feeding requests one at a time gets each answer at once.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from dynamiccl.cli.common import (
    ArgumentParser,
    UserError,
    describe_input_error,
    internal_error_line,
    is_input_error,
    read_head,
    topology_from_args,
)
from dynamiccl.cli.simulate_request import (
    REQUEST_FLAGS,
    add_request_args,
    constraints_from_args,
    decide,
    result_json,
    scenario_from_args,
)
from dynamiccl.config_loader import unique_keys
from dynamiccl.system.topology import Topology


def _line_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="dynamiccl simulate", add_help=False)
    add_request_args(parser)
    return parser


def request_argv(line: str) -> list[str]:
    """A JSON request as command-line arguments; UserError names what is wrong with it."""
    if not line.strip():
        raise UserError("empty line; give one JSON request per line")
    try:  # past a byte-order mark some editors write first
        request = json.loads(line.lstrip("\ufeff"), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise UserError(f"not a JSON object ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # a key given twice
        raise UserError(str(exc)) from None
    except RecursionError:
        raise UserError("JSON nested too deeply to be a request") from None
    if not isinstance(request, dict):
        raise UserError("a request is a JSON object like {\"topology\": \"dgx_h100\", \"collective\": "
                        "\"allreduce\", \"size\": \"1MiB\"}")
    argv = []
    for key, value in request.items():
        if key not in REQUEST_FLAGS:
            raise UserError(f"unknown key {key!r}; a request may hold {', '.join(REQUEST_FLAGS)}")
        if value is None:
            continue
        if isinstance(value, (bool, list, dict)):
            raise UserError(f"{key}: give a string or a number, not {json.dumps(value)}")
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            value = int(value)  # JSON's 1e9 or 2.0 is the whole number it spells (1e300 stays 1e+300)
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


class BatchSimulator:
    """Answers requests a chunk at a time; systems are loaded once per (topology, nodes, GPUs per
    node), and the requests of a chunk are computed together (``decisions.prefetch``)
    before each is answered exactly as ``simulate --json`` would answer it."""

    def __init__(self, defaults: argparse.Namespace) -> None:
        self.defaults = defaults
        self.parser = _line_parser()
        self.invalid = 0
        self.failed = 0
        self._load = lru_cache(maxsize=256)(self._load_topology)

    @staticmethod
    def _load_topology(name: str, nodes: int | None, gpus_per_node: int | None) -> Topology:
        return topology_from_args(argparse.Namespace(topology=name, nodes=nodes,
                                                     gpus_per_node=gpus_per_node))

    def _topology(self, args: argparse.Namespace) -> Topology:
        return self._load(args.topology, args.nodes, args.gpus_per_node)

    def _parse(self, line: str | UserError) -> argparse.Namespace | dict[str, Any]:
        if isinstance(line, UserError):  # a line too long or not text (:func:`_lines`)
            return self._error(line)
        try:
            return self.parser.parse_args(request_argv(line), namespace=copy.copy(self.defaults))
        except Exception as exc:
            return self._error(exc)

    def _error(self, exc: Exception) -> dict[str, Any]:
        if is_input_error(exc):
            self.invalid += 1
            return {"error": describe_input_error(exc)}
        self.failed += 1
        return {"error": internal_error_line(exc)}

    def _prefetch(self, requests: list[argparse.Namespace | dict[str, Any]]) -> None:
        from dynamiccl.decisions import prefetch

        calls = []
        for args in requests:
            if isinstance(args, argparse.Namespace):
                try:
                    calls.append((scenario_from_args(args, self._topology), constraints_from_args(args)))
                except Exception:  # reported when the request itself is answered below
                    continue
        prefetch(calls)

    def answer(self, args: argparse.Namespace | dict[str, Any]) -> dict[str, Any]:
        if isinstance(args, dict):
            return args
        try:
            scenario, default, top = decide(args, self._topology)
            return result_json(args, scenario, default, top)
        except Exception as exc:
            return self._error(exc)

    def run(self, chunks: Iterable[list[str | UserError]], out: IO[str]) -> None:
        for lines in chunks:
            requests = [self._parse(line) for line in lines]
            self._prefetch(requests)
            out.write("".join(json.dumps(self.answer(args)) + "\n" for args in requests))
            out.flush()


#: Lines answered together from a file (stdin: whatever has arrived, so a process feeding one
#: request at a time gets each answer at once).
CHUNK_LINES = 1024
#: The longest line read as a request (one is a few hundred bytes): a longer one is answered with
#: an error and its bytes are passed over, never held, so a 100 MB line costs no more than a read.
MAX_LINE_BYTES = 1 << 16
#: Bytes read at a time.
BLOCK_BYTES = 1 << 16


def _chunks(source: str) -> Iterator[list[str | UserError]]:
    if source != "-":
        read_head(source, "batch file", 0)  # a FIFO, a folder or a missing file: one line
        with Path(source).open("rb") as fh:
            yield from _lines(lambda: fh.read(BLOCK_BYTES), CHUNK_LINES)
        return
    try:
        fd = sys.stdin.fileno()
    except (OSError, io.UnsupportedOperation):  # a stream without a descriptor
        yield from _lines(lambda: sys.stdin.read(BLOCK_BYTES).encode(), None)
        return
    yield from _lines(lambda: os.read(fd, BLOCK_BYTES), None)


def _lines(read: Callable[[], bytes], chunk: int | None) -> Iterator[list[str | UserError]]:
    """The lines of what ``read`` returns, ``chunk`` at a time (None: as they arrive); each looked at
    once (linear in the input, whatever its lines' lengths). A line longer than
    :data:`MAX_LINE_BYTES` or not UTF-8 is a UserError in its place."""
    parts: list[bytes] = []
    size = 0
    out: list[str | UserError] = []
    while block := read():
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            out.append(_line(parts, size, block[start:end]))
            parts, size, start = [], 0, end + 1
        rest = block[start:]
        size += len(rest)
        if size <= MAX_LINE_BYTES:
            parts.append(rest)
        else:
            parts = []  # passed over: the line is answered as too long
        if out and (chunk is None or len(out) >= chunk):
            yield out
            out = []
    if size:
        out.append(_line(parts, size, b""))
    if out:
        yield out


def _line(parts: list[bytes], size: int, tail: bytes) -> str | UserError:
    if size + len(tail) > MAX_LINE_BYTES:
        return UserError(f"a line of {size + len(tail)} bytes, longer than any request "
                         f"({MAX_LINE_BYTES} at most); give one JSON object per line")
    try:
        return (b"".join(parts) + tail).decode("utf-8")
    except UnicodeDecodeError:
        return UserError("the line is not UTF-8 text")


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The request flags given on the command line; they apply to every line that omits them."""
    return argparse.Namespace(**{name: getattr(args, name) for name in REQUEST_FLAGS})


def run_batch(args: argparse.Namespace) -> int:
    if args.json:
        raise UserError("--batch always writes JSON lines; drop --json")
    batch = BatchSimulator(_defaults(args))
    batch.run(_chunks(args.batch), sys.stdout)
    if batch.invalid or batch.failed:
        print(f"dynamiccl simulate: {batch.invalid} invalid and {batch.failed} failed request(s); "
              "their lines hold {\"error\": ...}", file=sys.stderr)
    return 1 if batch.failed else 0
