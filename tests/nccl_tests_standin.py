"""Stands in for nccl-tests' binaries on a machine without GPUs (``all_reduce_perf`` & co.).

It prints a published run of the 8xH100 node (``fixtures/real/h100_nvswitch_node``, NCCL 2.26.2):
NCCL's default table where nothing forced NCCL, the ``NCCL_ALGO=RING`` table where anything did,
the rows from ``-b`` to ``-e``, and with ``NCCL_DEBUG=INFO`` the lines NCCL prints then (its version
banner, ``NCCL_ALGO set by environment to ...`` for every forcing variable, NCCL
``src/graph/tuning.cc``), so a plan's launches leave the logs a cluster would leave. The numbers
are one node's, whatever shape the launch claims: the day-one walk-through checks what the tools
do with logs, not what the numbers say.

With ``NCCL_TUNER_PLUGIN`` set it plays NCCL's part towards that tuner plugin as NCCL does on a GPU
(``nccl_tuner_standin``: the real ``libnccl.so.2`` and the real plugin in this process): one
communicator of the launch's shape (``SLURM_NNODES``/``SLURM_NTASKS`` as srun sets them, else one
node of ``-g`` ranks), getCollInfo for every size, getChunkSize for a piece of the pair decided
(an NCCL from 2.30.3, whose tuner interface has it), and with ``NCCL_DEBUG_SUBSYS`` holding
``TUNING`` the lines the plugin logs through NCCL's logger and NCCL's pick per size. A plugin file
that is not there leaves NCCL's own tuning, as NCCL does. ``NCCL_TESTS_STANDIN_VERSION`` sets the
release it states (default the fixture's, 2.26.2).

NCCL's debug lines go where NCCL sends them (NCCL ``src/debug.cc``): to ``NCCL_DEBUG_FILE`` where
it names a file (``%h`` the host, ``%p`` the pid) that opens, else to stdout with nccl-tests' own
output, so a site's exported ``NCCL_DEBUG_FILE`` empties a log of them as it does on a cluster.

Usage: ``python nccl_tests_standin.py all_reduce_perf -b 65536 -e 8388608 -f 2 -g 1 ...``
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TextIO

FIXTURE = Path(__file__).parent / "fixtures" / "real" / "h100_nvswitch_node"
PREFIX = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather",
          "reduce_scatter_perf": "reduce_scatter"}
FORCING = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
PREFIX_LINE = "gpu-dp-2jvzl-pqq7p:1601596:1601596 [0] NCCL "
BANNER = PREFIX_LINE + "INFO "
#: NCCL's ncclFunc_t of each binary's collective, and its names in TUNING's pick lines.
FUNC = {"all_reduce_perf": (4, "AllReduce"), "all_gather_perf": (2, "AllGather"),
        "reduce_scatter_perf": (3, "ReduceScatter")}
ALGOS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
PROTOS = ("LL", "LL128", "SIMPLE")
#: The first NCCL whose tuner interface (v6) asks for a chunk size; the fixture's release.
CHUNK_SINCE, FIXTURE_VERSION = (2, 30, 3), "2.26.2"
#: NCCL's own chunk and channels the stand-in asks the plugin about (a Simple slot, 16 channels).
NCCL_CHUNK, CHANNELS = 512 << 10, 16


def _flag(argv: list[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def debug_output() -> TextIO:
    """Where NCCL at ``NCCL_DEBUG=INFO`` writes its lines: the file ``NCCL_DEBUG_FILE`` names, its
    ``%h``, ``%p`` and ``%%`` expanded, opened for writing; stdout where it names none (unset, or
    empty) or the file cannot be opened."""
    name, i = "", 0
    pattern = os.environ.get("NCCL_DEBUG_FILE") or ""
    while i < len(pattern):
        c, i = pattern[i], i + 1
        if c != "%" or i == len(pattern):
            name += c
            continue
        c, i = pattern[i], i + 1
        name += {"%": "%", "h": socket.gethostname().split(".")[0], "p": str(os.getpid())}.get(c, "%" + c)
    if not name:
        return sys.stdout
    try:
        return open(name, "w", buffering=1)  # open for the process's life, as NCCL's is
    except OSError:
        return sys.stdout


def main(argv: list[str]) -> int:
    binary = argv[0]
    if binary not in PREFIX:
        print(f"{binary}: no published run to stand in with", file=sys.stderr)
        return 1
    forced = {k: os.environ[k] for k in FORCING if os.environ.get(k)}
    log = FIXTURE / f"{PREFIX[binary]}_{'ring' if forced else 'default'}.txt"
    low, high = _flag(argv, "-b", 8), _flag(argv, "-e", 8 << 30)
    version = os.environ.get("NCCL_TESTS_STANDIN_VERSION", FIXTURE_VERSION)
    code = "{}{:02d}{:02d}".format(*map(int, version.split(".")))
    lines = [line.replace("=22602", f"={code}") for line in log.read_text().splitlines()]
    table = next(i for i, line in enumerate(lines) if line.lstrip("#").split()[:1] == ["size"])
    info = os.environ.get("NCCL_DEBUG", "").upper() == "INFO"
    debug = debug_output() if info else sys.stdout
    if info:
        print(BANNER + f"NCCL version {version}+cuda12.4", file=debug)
        for name, value in forced.items():
            print(BANNER + f"{name} set by environment to {value}", file=debug)
    print("\n".join(lines[:table]))
    sizes = [n for n in (low << i for i in range(64)) if n <= high]
    for line in tuner_lines(binary, sizes, argv, tuple(map(int, version.split(".")))):
        if info and "TUNING" in os.environ.get("NCCL_DEBUG_SUBSYS", "").upper():
            print(line, file=debug)
    print("\n".join(lines[table: table + 2]))
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


def tuner_lines(binary: str, sizes: list[int], argv: list[str], version: tuple[int, ...]
                ) -> list[str]:
    """What NCCL logs of the tuner plugin ``NCCL_TUNER_PLUGIN`` names for a launch of ``sizes``
    (nothing without one): the plugin's own lines through NCCL's logger, and NCCL's pick per size."""
    plugin = os.environ.get("NCCL_TUNER_PLUGIN")
    if not plugin:
        return []
    if not Path(plugin).is_file():
        return [BANNER + f"TUNER/Plugin: Could not find {plugin}; using NCCL's internal tuner"]
    from nccl_tuner_standin import WARN, NcclTunerStandIn

    nranks = int(os.environ.get("SLURM_NTASKS") or _flag(argv, "-g", 1))
    comm = NcclTunerStandIn(plugin, nranks, int(os.environ.get("SLURM_NNODES") or 1))
    func, name = FUNC[binary]
    picks = []
    for n in sizes:
        algo, proto, _ = comm.decide(n, func) or (1, 2, 0)  # NCCL's own pick here: Ring/Simple
        picks.append(BANNER + f"{name}: {n} Bytes -> Algo {ALGOS[algo]} proto {PROTOS[proto]} "
                     f"channel{{Lo..Hi}}={{0..{CHANNELS - 1}}}")
        if version >= CHUNK_SINCE:
            comm.chunk(max(n // CHANNELS, 1), algo, proto, NCCL_CHUNK, func)
    comm.finalize()
    said = [PREFIX_LINE + ("WARN " if level == WARN else "INFO ") + text for level, text in comm.logs]
    return said + picks


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
