"""The host's share of a collective: how fast the calling program can issue calls.

nccl-tests (and a training loop) enqueue calls back to back and synchronise once at the end, so in
steady state one call costs the longer of the GPUs' time and the host's time to issue it: the host
cost is a *floor* under the simulated time, not an addition to it.

Issuing one NCCL collective on one GPU costs the host its kernel launch (``cudaLaunchKernel`` is a
few µs of host time; NVIDIA's "Getting Started with CUDA Graphs" post measured ~3 µs per short
kernel launched back to back) plus NCCL's own enqueue work (planning the channels, ordering its
streams with events): ``HOST_LAUNCH_US`` in all, an estimate of that order, not a fit. With one
process per GPU every process issues its own call in parallel, so the floor is one launch; with one
thread driving every local GPU (nccl-tests ``-g 8``, ``Topology.launch == "single_process"``) the
thread launches each GPU's kernel in turn and the floor grows with the GPUs it drives.
A calibration that measured the floor replaces the estimate (``calibration.launch_floor_us``).
"""

from __future__ import annotations

from dynamiccl.system.topology import Topology

HOST_LAUNCH_US = 5.0


def launch_floor_us(topology: Topology) -> float:
    """The shortest time one call can take on ``topology``, µs."""
    cal = topology.calibration
    if cal is not None and cal.launch_floor_us is not None:
        return cal.launch_floor_us.value
    gpus = topology.gpus_per_node if topology.launch == "single_process" else 1
    return gpus * HOST_LAUNCH_US
