"""A slow job for ``profile job``'s stop tests: a launcher and two ranks, as torchrun or mpirun has.

The launcher starts two rank processes and waits for them; each rank plays NCCL's part towards the
plugin ``NCCL_PROFILER_PLUGIN`` names (``nccl_profiler_standin``: torch-free, no GPU), reports
``STANDIN_CALLS`` all-reduces of one communicator, then sleeps ``STANDIN_SLEEP`` seconds (a job
still running). Rank 1 runs in a session of its own, as OpenMPI's ranks run in groups of their own,
so a signal to the launcher's process group does not reach it. With ``STANDIN_STUBBORN=1`` every
process ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT (a job that only SIGKILL ends). The launcher
writes the pids of all three, and the ring folder it was given, to ``STANDIN_PIDS`` once both
ranks have recorded their calls.

    STANDIN_SLEEP=30 timeout 4 dynamiccl profile job -- python slow_job_with_nccl_standin.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMM_ID = 0x51035


def _stubborn() -> None:
    if os.environ.get("STANDIN_STUBBORN") == "1":
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_IGN)


def rank(index: int, ready: str) -> None:
    sys.path.insert(0, str(HERE))
    from nccl_profiler_standin import NcclProfilerStandIn

    from dynamiccl.system.nccl import Algorithm, Collective, Protocol

    _stubborn()
    nccl = NcclProfilerStandIn(os.environ["NCCL_PROFILER_PLUGIN"], COMM_ID, 2, index)
    for i in range(int(os.environ.get("STANDIN_CALLS", "5"))):
        nccl.collective(Collective.ALLREDUCE, 1024, Algorithm.RING, Protocol.SIMPLE, 2,
                        time.time_ns(), 1000 * (10 + i))
    Path(ready).write_text("ready")
    time.sleep(float(os.environ.get("STANDIN_SLEEP", "30")))


def launcher() -> int:
    _stubborn()
    pids = os.environ.get("STANDIN_PIDS")
    ready = [f"{pids or os.devnull}.rank{i}" for i in (0, 1)]
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(i), ready[i]],
                              start_new_session=i == 1) for i in (0, 1)]
    if pids:
        while not all(os.path.exists(r) for r in ready) and all(p.poll() is None for p in ranks):
            time.sleep(0.05)
        Path(pids).write_text(" ".join(str(p) for p in (os.getpid(), *(r.pid for r in ranks)))
                              + "\n" + os.environ.get("DYNAMICCL_PROFILE", "") + "\n")
    return max(r.wait() for r in ranks)


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["--rank"]:
            rank(int(sys.argv[2]), sys.argv[3])
        else:
            sys.exit(launcher())
    except KeyboardInterrupt:  # Ctrl-C ends it as it ends a training script that handles it
        sys.exit(130)
