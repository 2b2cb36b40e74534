"""A plain-script gloo job for ``profile job``'s CPU tests: two ranks (torch.multiprocessing) all-reduce
and all-gather a fixed mix of sizes over gloo. Gloo never loads NCCL's profiler, so each rank also
plays NCCL's part towards the plugin ``NCCL_PROFILER_PLUGIN`` names (the stand-in,
``nccl_profiler_standin``), reporting every collective with its host time as its GPU time.

    python gloo_job_with_nccl_standin.py [--exit-code N]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

#: (elements of float32, repeats): the job's all-reduces, then its all-gathers (per-rank elements).
ALL_REDUCES = ((1000, 7), (65536, 3), (1 << 18, 2))
ALL_GATHERS = ((256, 4),)
COMM_ID = 0x5EED0000ABCD


def rank_main(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from nccl_profiler_standin import NcclProfilerStandIn

    from dynamiccl.system.nccl import Algorithm, Collective, Protocol

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    nccl = NcclProfilerStandIn(os.environ["NCCL_PROFILER_PLUGIN"], COMM_ID, world, rank)
    assert nccl.recording, "DYNAMICCL_PROFILE did not reach the rank"
    for count, repeats in ALL_REDUCES:
        for _ in range(repeats):
            t = torch.ones(count)
            start = time.time_ns()
            dist.all_reduce(t)
            nccl.collective(Collective.ALLREDUCE, count, Algorithm.RING, Protocol.SIMPLE, 2, start,
                            time.time_ns() - start)
    for count, repeats in ALL_GATHERS:
        for _ in range(repeats):
            out = [torch.empty(count) for _ in range(world)]
            start = time.time_ns()
            dist.all_gather(out, torch.ones(count))
            nccl.collective(Collective.ALLGATHER, count, Algorithm.RING, Protocol.LL, 1, start,
                            time.time_ns() - start)
    nccl.finalize()
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # forked ranks share the parent's imported torch (no import per rank)
    mp.start_processes(rank_main, args=(2, port), nprocs=2, start_method="fork")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
