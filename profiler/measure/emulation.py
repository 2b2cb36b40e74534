"""More NCCL ranks than GPUs: each rank its own emulated host, and the MPS check that makes it honest.

NCCL refuses two ranks of one communicator on the same GPU of one host: its duplicate-GPU check
compares the host hash and the GPU's PCI bus id. The host hash can be set per process
(``NCCL_HOSTID``), and ranks with distinct ones are separate nodes to NCCL: it reports nNodes =
nRanks, builds inter-node rings and trees, and moves every byte through a network transport. Here
that is NCCL's Socket transport on the loopback, with the intra-host shortcuts (P2P, SHM) and the
InfiniBand probe off, so the ranks meet only through sockets, as hosts on a network do. Rank r
drives GPU ``r % GPUs``. Every variable is set inside the rank before its communicator is created
(NCCL reads them at init).

Ranks sharing a GPU need the CUDA Multi-Process Service. Without it the kernels of different
processes time-slice the GPU, and a collective, whose kernels wait for data from the other ranks,
takes whole time slices: on an H100 every all-reduce took 13-40 ms whatever its size (4 KiB to
1 MiB, 4 ranks), which times the scheduler, not the network. With the MPS control daemon running
the ranks' kernels run side by side (a 4 KiB all-reduce then takes ~0.1 ms). So an emulated launch
first asks the daemon whether it answers, the way a user would (``echo get_server_list |
nvidia-cuda-mps-control``, with the caller's ``CUDA_MPS_PIPE_DIRECTORY``), and stops with one line
saying how to start it when it does not.

Measurements taken this way are marked (``MeasurementRecord.emulated_hosts``): a loopback "network"
is not the system the GPUs sit in, so tune and calibrate never mix them with a real system's.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynamiccl.system.topology import Topology

#: What every emulated host's rank runs with, besides its own ``NCCL_HOSTID``.
EMULATED_HOST_ENV = {
    "NCCL_NET": "Socket",           # the Socket transport (no InfiniBand device to use)
    "NCCL_SOCKET_IFNAME": "lo",     # data and bootstrap over the loopback
    "NCCL_P2P_DISABLE": "1",        # no GPU-to-GPU shortcut between the "hosts"
    "NCCL_SHM_DISABLE": "1",        # no shared-memory shortcut either
    "NCCL_IB_DISABLE": "1",         # skip the InfiniBand probe
}
HOSTID_ENV = "NCCL_HOSTID"
MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
#: Seconds the MPS control client may take to answer (it answers at once when a daemon runs).
MPS_TIMEOUT_S = 10.0
#: Bus bandwidth NCCL reached over loopback sockets between emulated hosts on an H100 (~3 GB/s for
#: a 64 MiB all-reduce on 4 ranks): the starting point of the emulated topology, which calibration
#: then fits to the measurements.
LOOPBACK_GBPS = 3.0
#: How to start a daemon, as the one line of an error can say it.
MPS_START = (f"export {MPS_PIPE_ENV}=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog; "
             f"mkdir -p /tmp/mps /tmp/mpslog; {MPS_CONTROL} -d")


class EmulationError(ValueError):
    """Ranks cannot be placed on the GPUs present; the message is one line naming the fix."""


def emulated_host_env(rank: int) -> dict[str, str]:
    """The NCCL environment that makes ``rank`` a host of its own."""
    return {**EMULATED_HOST_ENV, HOSTID_ENV: f"dynamiccl-emulated-host-{rank}"}


def gpu_of(rank: int, gpus: int) -> int:
    """The GPU rank ``rank`` drives: ranks spread over the GPUs present, one after another."""
    if gpus < 1:
        raise EmulationError("the nccl backend needs a GPU and none is visible; use --backend gloo on CPU")
    return rank % gpus


def check_placement(nprocs: int, gpus: int, emulate_hosts: bool) -> None:
    """Raises :class:`EmulationError` when ``nprocs`` NCCL ranks cannot run on ``gpus`` GPUs."""
    if gpus < 1:
        raise EmulationError(f"{nprocs} nccl rank(s) need a GPU and none is visible; run on a GPU "
                             "machine (on CPU, gloo measures: --backend gloo)")
    if nprocs > gpus and not emulate_hosts:
        raise EmulationError(
            f"{nprocs} nccl ranks need a GPU each and {gpus} is visible; add --emulate-hosts to run "
            f"them as {nprocs} hosts sharing the GPU{'s' if gpus > 1 else ''} (NCCL over loopback "
            "sockets, needs the CUDA MPS daemon), or lower --nprocs")


def mps_problem(timeout_s: float = MPS_TIMEOUT_S, env: dict[str, str] | None = None) -> str | None:
    """None when an MPS control daemon answers for this environment's pipe directory; otherwise
    what went wrong, in a few words."""
    env = dict(os.environ if env is None else env)
    where = env.get(MPS_PIPE_ENV) or "the default /tmp/nvidia-mps"
    # the request comes from a file, not a pipe: a client that exits without reading it must not
    # raise SIGPIPE here (the console command restores SIGPIPE's default action, which would kill
    # it silently)
    with tempfile.TemporaryFile("w+") as request:
        request.write("get_server_list\n")
        request.seek(0)
        try:
            done = subprocess.run([MPS_CONTROL], stdin=request, capture_output=True, text=True,
                                  timeout=timeout_s, env=env)
        except FileNotFoundError:
            return f"{MPS_CONTROL} is not on PATH (it comes with the NVIDIA driver)"
        except subprocess.TimeoutExpired:
            return f"{MPS_CONTROL} did not answer within {timeout_s:g} s (pipe directory {where})"
        except OSError as exc:
            return f"{MPS_CONTROL} could not run ({exc.strerror or exc})"
    if done.returncode != 0:
        said = " ".join((done.stdout + done.stderr).split())[:160]
        return (f"no MPS control daemon answers on pipe directory {where}"
                + (f" ({MPS_CONTROL} said: {said})" if said else f" ({MPS_CONTROL} exit code "
                                                               f"{done.returncode})"))
    return None


def check_mps(nprocs: int, gpus: int, timeout_s: float = MPS_TIMEOUT_S,
              env: dict[str, str] | None = None) -> None:
    """Raises :class:`EmulationError` when ranks would share a GPU without MPS."""
    if nprocs <= gpus:
        return  # a GPU per rank: nothing is shared, nothing time-slices
    problem = mps_problem(timeout_s, env)
    if problem is None:
        return
    raise EmulationError(
        f"--emulate-hosts puts {nprocs} ranks on {gpus} GPU{'s' if gpus > 1 else ''}, but {problem}: "
        "without MPS the ranks' kernels time-slice the GPU and every collective takes whole time "
        "slices (13-40 ms per all-reduce whatever its size); start the daemon with "
        f"`{MPS_START}` (the ranks need the same {MPS_PIPE_ENV}) and run again")


def prepare(nprocs: int, gpus: int, emulate_hosts: bool, timeout_s: float = MPS_TIMEOUT_S) -> None:
    """The parent's checks before it starts NCCL ranks: they fit, and with emulated hosts sharing a
    GPU, MPS answers. Raises :class:`EmulationError`."""
    check_placement(nprocs, gpus, emulate_hosts)
    if emulate_hosts:
        check_mps(nprocs, gpus, timeout_s)


def visible_gpus() -> int:
    """GPUs this process can use (``CUDA_VISIBLE_DEVICES`` applies); 0 without a driver."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def emulated_topology_dict(nranks: int, compute_capability: tuple[int, int], sms: int | None) -> dict:
    """The system NCCL sees on ``nranks`` emulated hosts, as a topology file holds it: one GPU per
    node (its arch and SM count; the schema's default count when none is known), the nodes joined
    by NCCL's Socket transport (whose NIC NCCL puts behind the CPU), at the loopback's measured
    speed (:data:`LOOPBACK_GBPS`)."""
    from dynamiccl.system.topology import modelled_arch

    arch = modelled_arch(10 * compute_capability[0] + compute_capability[1])
    gpu = {"arch": arch, **({"sms": int(sms)} if sms else {})}
    return {"name": f"emulated_{nranks}_hosts_{arch}", "gpu": gpu,
            "features": {"nvls": False, "collnet": False},
            "tiers": [{"name": "gpu", "size": 1, "fabric": "switch", "bandwidth_GBps": 64.0,
                       "latency_us": 1.0, "link": "pcie"},
                      {"name": "loopback", "size": nranks, "fabric": "switch",
                       "bandwidth_GBps": LOOPBACK_GBPS, "link": "net", "transport": "socket"}]}


def emulated_topology(nranks: int, compute_capability: tuple[int, int], sms: int | None) -> Topology:
    """:func:`emulated_topology_dict` loaded."""
    from dynamiccl.system.topology import topology_from_dict

    return topology_from_dict(emulated_topology_dict(nranks, compute_capability, sms),
                              source=f"{nranks} emulated hosts")


def local_emulated_topology(nranks: int) -> Topology:
    """:func:`emulated_topology` for this machine's first GPU (CUDA's device properties)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return emulated_topology(nranks, (props.major, props.minor), props.multi_processor_count)
