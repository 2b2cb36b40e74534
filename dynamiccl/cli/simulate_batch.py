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
import json
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
from dynamiccl.cli.simulate import REQUEST_FLAGS, add_request_args, decide, result_json
from dynamiccl.topology import Topology


def _line_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="dynamiccl simulate", add_help=False)
    add_request_args(parser)
    return parser


def request_argv(line: str) -> list[str]:
    """A JSON request as command-line arguments; UserError names what is wrong with it."""
    if not line.strip():
        raise UserError("empty line; give one JSON request per line")
    try:
        request = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"not a JSON object ({exc.msg} at column {exc.colno})") from None
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
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


class BatchSimulator:
    """Answers requests one by one; systems are loaded once per (topology, nodes, GPUs per node)."""

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

    def answer(self, line: str) -> dict[str, Any]:
        try:
            args = self.parser.parse_args(request_argv(line), namespace=copy.copy(self.defaults))
            scenario, default, top = decide(
                args, lambda a: self._load(a.topology, a.nodes, a.gpus_per_node))
            return result_json(args, scenario, default, top)
        except Exception as exc:
            if is_input_error(exc):
                self.invalid += 1
                return {"error": describe_input_error(exc)}
            self.failed += 1
            return {"error": internal_error_line(exc)}

    def run(self, lines: Iterable[str], out: IO[str]) -> None:
        for line in lines:
            out.write(json.dumps(self.answer(line)) + "\n")
            out.flush()


def _lines(source: str) -> Iterator[str]:
    if source == "-":
        yield from (line.rstrip("\n") for line in sys.stdin)
    else:
        yield from read_text(source, "batch file").splitlines()


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The request flags given on the command line; they apply to every line that omits them."""
    return argparse.Namespace(**{name: getattr(args, name) for name in REQUEST_FLAGS})


def run_batch(args: argparse.Namespace) -> int:
    if args.json:
        raise UserError("--batch always writes JSON lines; drop --json")
    batch = BatchSimulator(_defaults(args))
    batch.run(_lines(args.batch), sys.stdout)
    answered = batch.invalid + batch.failed
    if answered:
        print(f"dynamiccl simulate: {batch.invalid} invalid and {batch.failed} failed request(s); "
              "their lines hold {\"error\": ...}", file=sys.stderr)
    return 1 if batch.failed else 0
