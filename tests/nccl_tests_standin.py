"""Stands in for nccl-tests' binaries on a machine without GPUs (``all_reduce_perf`` & co.).

It prints a published run of the 8xH100 node (``fixtures/real/h100_nvswitch_node``, NCCL 2.26.2):
NCCL's default table where nothing forced NCCL, the ``NCCL_ALGO=RING`` table where anything did,
the rows from ``-b`` to ``-e``, and with ``NCCL_DEBUG=INFO`` the lines NCCL prints then (its version
banner, ``NCCL_ALGO set by environment to ...`` for every forcing variable, NCCL
``src/graph/tuning.cc``), so a plan's launches leave the logs a cluster would leave. The numbers
are one node's, whatever shape the launch claims: the day-one walk-through checks what the tools
do with logs, not what the numbers say.

Usage: ``python nccl_tests_standin.py all_reduce_perf -b 65536 -e 8388608 -f 2 -g 1 ...``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"
PREFIX = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
          "reduce_scatter_perf": "reduce_scatter"}
FORCING = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
BANNER = "gpu-dp-2jvzl-pqq7p:1601596:1601596 [0] NCCL INFO "


def _flag(argv: list[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def main(argv: list[str]) -> int:
    binary = argv[0]
    if binary not in PREFIX:
        print(f"{binary}: no published run to stand in with", file=sys.stderr)
        return 1
    forced = {k: os.environ[k] for k in FORCING if os.environ.get(k)}
    log = FIXTURE / f"{PREFIX[binary]}_{'ring' if forced else 'default'}.txt"
    low, high = _flag(argv, "-b", 8), _flag(argv, "-e", 8 << 30)
    lines = log.read_text().splitlines()
    table = next(i for i, line in enumerate(lines) if line.lstrip("#").split()[:1] == ["size"])
    if os.environ.get("NCCL_DEBUG", "").upper() == "INFO":
        print(BANNER + "NCCL version 2.26.2+cuda12.4")
        for name, value in forced.items():
            print(BANNER + f"{name} set by environment to {value}")
    print("\n".join(lines[: table + 2]))
    busbw = []
    for line in lines[table + 2:]:
        words = line.split()
        if not words or line.startswith("#"):
            continue
        if low <= int(words[0]) <= high:
            print(line)
            busbw += [float(words[7]), float(words[11])]
    average = sum(busbw) / len(busbw) if busbw else 0.0
    print(f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {average:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
