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
import codecs
import copy
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import IO, Any

from dynamiccl.cli.common import (
    ArgumentParser,
    UserError,
    describe_input_error,
    internal_error_line,
    is_input_error,
    read_text,
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
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON's 1e9 or 2.0 is the whole number it spells
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

    def _parse(self, line: str) -> argparse.Namespace | dict[str, Any]:
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

    def run(self, chunks: Iterable[list[str]], out: IO[str]) -> None:
        for lines in chunks:
            requests = [self._parse(line) for line in lines]
            self._prefetch(requests)
            out.write("".join(json.dumps(self.answer(args)) + "\n" for args in requests))
            out.flush()


#: Lines answered together from a file (stdin: whatever has arrived, so a process feeding one
#: request at a time gets each answer at once).
CHUNK_LINES = 1024


def _chunks(source: str) -> Iterator[list[str]]:
    if source != "-":
        lines = read_text(source, "batch file").splitlines()
        for start in range(0, len(lines), CHUNK_LINES):
            yield lines[start:start + CHUNK_LINES]
        return
    try:
        fd = sys.stdin.fileno()
    except (OSError, io.UnsupportedOperation):  # a stream without a descriptor: line by line
        yield from ([line.rstrip("\n")] for line in sys.stdin)
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while block := os.read(fd, 1 << 16):
        pending += decoder.decode(block)
        *complete, pending = pending.split("\n")
        if complete:
            yield complete
    pending += decoder.decode(b"", final=True)
    if pending:
        yield [pending]


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
