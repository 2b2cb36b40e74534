"""Chunk sizes pinned through the plugin on real NCCL, timed interleaved: the GPU check of issue 38.

    python experiments/chunk_nccl.py --out DIR [--json] [--nprocs 2] [--size 32M]

One launch of ``--nprocs`` NCCL ranks (emulated hosts sharing the GPUs when there are more ranks
than GPUs, as every GPU check here) times the same call (``--collective`` of ``--size``, NCCL's
``--algorithm``/``--protocol`` pair pinned) with NCCL's own chunk size and with each of
``--chunks`` (two by default), round after round, the order reversed every other round
(:func:`~dynamiccl.profiler.measure.interleave.measure_interleaved`: ``dynamiccl_pin_knobs`` call
by call, the plugin's counts checking every call was pinned). NCCL has no variable for a chunk
size: the plugin's getChunkSize (tuner v6, NCCL 2.30.3 and later) answers it. That NCCL used them
is read from NCCL's own INFO log (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``, one file per rank
in DIR): the plugin's ``DynamICCL chunk: ... -> N B`` lines come through NCCL's logger when NCCL
asks for a chunk, and a chunk above NCCL's buffer ceiling (``--over``) draws NCCL's own ``tuner
chunk size ... exceeds buffer max ..., clamping``: NCCL read the plugin's answer and applied it.

Writes DIR/chunk_nccl.json: per chunk size its median time over rounds and the rounds' times,
whether every call was pinned, whether the log shows NCCL asking for it, and the ratio of the
two chunk sizes' times (interleaved, so the launch's state is shared).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path

from dynamiccl.profiler.formats.plugin_log import CHUNK_LINE
from dynamiccl.profiler.measure import emulation
from dynamiccl.profiler.measure.interleave import measure_interleaved
from dynamiccl.profiler.measure.runner import CollectiveSpec
from dynamiccl.system.units import format_size, parse_size

CLAMP_LINE = re.compile(r"tuner chunk size (\d+) exceeds buffer max (\d+), clamping")


def _sizes(text: str) -> list[int]:
    return [parse_size(t) for t in text.split(",") if t]


def read_logs(folder: Path) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """(chunk size -> lines where the plugin answered it, NCCL's clamp lines as (asked, ceiling))."""
    answered: dict[int, int] = {}
    clamped: list[tuple[int, int]] = []
    for path in glob.glob(str(folder / "nccl.*.log")):
        for line in Path(path).read_text(errors="replace").splitlines():
            if m := CHUNK_LINE.search(line):
                answered[int(m.group(7))] = answered.get(int(m.group(7)), 0) + 1
            if m := CLAMP_LINE.search(line):
                clamped.append((int(m.group(1)), int(m.group(2))))
    return answered, clamped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON and NCCL's logs")
    p.add_argument("--nprocs", type=int, default=2, help="NCCL ranks (default 2)")
    p.add_argument("--collective", default="allreduce")
    p.add_argument("--size", type=parse_size, default=32 << 20, help="the call's size (default 32M)")
    p.add_argument("--algorithm", default="ring")
    p.add_argument("--protocol", default="simple")
    p.add_argument("--chunks", type=_sizes, default=[128 << 10, 512 << 10],
                   help="chunk sizes to pin, comma list (default 128K,512K)")
    p.add_argument("--over", type=parse_size, default=16 << 20,
                   help="a chunk above NCCL's buffer ceiling, to draw NCCL's clamp line (0: none)")
    p.add_argument("--runs", type=int, default=9, help="interleaved rounds (default 9)")
    p.add_argument("--iters", type=int, default=20, help="calls per choice per round (default 20)")
    p.add_argument("--json", action="store_true", help="print the JSON")
    args = p.parse_args(argv)
    gpus = emulation.visible_gpus()
    if gpus == 0:
        print("chunk_nccl: measures NCCL on GPUs and none is visible here", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for old in glob.glob(str(args.out / "nccl.*.log")):
        os.unlink(old)
    os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
                       "NCCL_DEBUG_FILE": str(args.out / "nccl.%h.%p.log"),
                       "DYNAMICCL_LOG_DECISIONS": "1"})
    chunks = [None, *args.chunks, *([args.over] if args.over else [])]
    specs = [CollectiveSpec(args.collective, args.size, "nccl", warmup=5, iters=args.iters,
                            runs=args.runs, algorithm=args.algorithm, protocol=args.protocol,
                            chunk_bytes=c) for c in chunks]
    results, why_not = measure_interleaved(specs, args.nprocs, timeout_s=300,
                                           emulate_hosts=args.nprocs > gpus)
    answered, clamped = read_logs(args.out)
    rows = [{"chunk_bytes": c, "time_us": r.time_us, "time_us_runs": list(r.time_us_runs),
             "pinned": why is None, "why_not": why, "nccl_asked": c is None or answered.get(c, 0) > 0}
            for c, r, why in zip(chunks, results, why_not, strict=True)]
    a, b = rows[1], rows[2]
    doc = {"collective": args.collective, "nbytes": args.size, "nprocs": args.nprocs,
           "pair": f"{args.algorithm}/{args.protocol}", "gpu": results[0].gpu, "chunks": rows,
           "clamped": [{"asked": x, "ceiling": y} for x, y in sorted(set(clamped))],
           "nccl_used_both": all(r["pinned"] and r["nccl_asked"] for r in (a, b)),
           "nccl_clamped_over": any(x == args.over for x, _ in clamped),
           "ratio": a["time_us"] / b["time_us"] if b["time_us"] else None}
    (args.out / "chunk_nccl.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for r in rows:
            name = "NCCL's chunk" if r["chunk_bytes"] is None else format_size(r["chunk_bytes"])
            print(f"{name:>13}: {r['time_us']:9.1f} us  pinned {r['pinned']}  NCCL asked {r['nccl_asked']}")
        print(f"NCCL used both chunk sizes: {doc['nccl_used_both']}; NCCL clamped "
              f"{format_size(args.over)}: {doc['nccl_clamped_over']}")
    return 0 if doc["nccl_used_both"] else 1


if __name__ == "__main__":
    sys.exit(main())
