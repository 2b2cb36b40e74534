"""Network transport kinds and what each costs per message: facts shared by the schema and the models.

NCCL's measured NET latencies (``hwLatencies``, NCCL 2.30.7 ``src/graph/tuning.cc``) were taken by
NVIDIA on its own InfiniBand clusters, so InfiniBand is the reference and adds nothing to them.
Every other kind adds its own *per-message* overhead: the extra time one network message spends in
the host or NIC software path and the switches, compared with InfiniBand. The simulator charges it
once per network
hop of an algorithm (it is a latency: a message must arrive before the next step can use it).

A tier that does not give ``latency_us`` gets its kind's ``wire_latency_us``: the one-way latency of
a small RDMA write across one switch, from the vendors' published point-to-point figures. The values
are orders of magnitude from public figures, not fits to anyone's logs:

* ``ib`` — InfiniBand HDR/NDR: ~1 µs ``ib_write_lat`` through one switch (NVIDIA ConnectX-6/7
  product briefs quote sub-microsecond NIC latency, Quantum switches ~0.1-0.2 µs per hop); the
  presets keep their historical 3 µs, which includes GPUDirect's PCIe crossings.
* ``roce`` — RoCEv2 on lossless Ethernet: the same NICs, but Ethernet switches add ~0.5 µs per
  port-to-port hop against ~0.13 µs for InfiniBand (Spectrum / Quantum-2 datasheets).
* ``efa`` — AWS Elastic Fabric Adapter (SRD through libfabric and aws-ofi-nccl): AWS publishes MPI
  ping-pong latencies of 10-20 µs on EFA where InfiniBand has 1-2 µs; we charge 12 µs more.
* ``tcpxo`` — Google A3 Mega GPUDirect-TCPXO: TCP with NIC header/data split and a host-side receive
  path; TCP round trips in a data centre are tens of µs; we charge 20 µs more than InfiniBand.
* ``slingshot`` — HPE Slingshot-11 (Cassini NIC, libfabric ``cxi`` through aws-ofi-nccl): ~2 µs MPI
  latency published by HPE, with a libfabric software path like EFA's but thinner; 3 µs more.
* ``socket`` — NCCL's socket transport over kernel TCP: every message crosses the kernel stack and a
  host copy on both sides; request/response round trips (netperf TCP_RR) on data-centre NICs take
  ~20 µs, ~10 µs one way against ~2 µs for RDMA: 8 µs more.

``launch_noise`` is how far one launch's time of a call may land from another launch's (relative
1-sigma), assumed where no repeated launches were measured (``dynamiccl tune``): 5 % for the RDMA
kinds, the top of the 1-5 % run-to-run spread nccl-tests runs show; 25 % for kernel sockets, where
three launches of the same all-reduce over loopback sockets (four NCCL 2.28.9 ranks on one H100 as
emulated hosts) differed by x1.12-x1.64 by size, a sigma of 0.07-0.29 of log time.

The socket transport is also the one kind without GPUDirect RDMA (it moves host buffers only), which
decides where NCCL sees the NIC: see :data:`dynamiccl.system.topology.CPU_NIC_PATH`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynamiccl.system.topology import Topology


@dataclass(frozen=True)
class Transport:
    #: One-way latency of a small message across one switch, µs (the tier default).
    wire_latency_us: float
    #: Extra per-message cost against InfiniBand, µs (charged once per network hop).
    message_overhead_us: float
    #: Relative 1-sigma of a call's time from launch to launch where none was measured.
    launch_noise: float = 0.05
    #: The NIC reads and writes GPU memory directly (GPUDirect RDMA); without it every byte is
    #: staged through host memory next to the GPU's CPU.
    gpudirect_rdma: bool = True
    #: NCCL's messages cross a host TCP stack (kernel sockets; TCPXO's host-side receive path).
    over_tcp: bool = False


TRANSPORTS: dict[str, Transport] = {
    "ib": Transport(1.0, 0.0),
    "roce": Transport(1.5, 0.5),
    "efa": Transport(15.0, 12.0),
    "tcpxo": Transport(20.0, 20.0, over_tcp=True),
    "slingshot": Transport(2.0, 3.0),
    "socket": Transport(10.0, 8.0, launch_noise=0.25, gpudirect_rdma=False, over_tcp=True),
}
#: What a network tier is when its file does not say (NVIDIA's reference fabric).
DEFAULT_TRANSPORT = "ib"


def system_kind(topology: Topology) -> str:
    """The kind of system its model's errors were measured apart for: ``tcp`` where a network tier
    its calls cross runs over TCP, else ``rdma`` (the perturbed realities' ``MEASURED_MODEL_ERROR``,
    the gate's :data:`~dynamiccl.system.calibration.MODEL_RATIO_ERROR`)."""
    tcp = any(TRANSPORTS[t.transport].over_tcp for t in topology.tiers[1:]
              if t.link == "net" and t.transport and t.size > 1)
    return "tcp" if tcp else "rdma"
