"""Measurements checked against the system they are to tune, before anything is fitted to them.

``tune`` and ``calibrate`` re-simulate every measurement on the topology they are given, resized to
the measurement's node and rank counts. A record that system could not have produced would be
fitted all the same: the times of four emulated hosts on loopback sockets fitted onto InfiniBand, a
node of four ranks on a system of one GPU per node, and a policy written for a shape the system
cannot have. So both commands call :func:`check_fits` first, which refuses, in one line naming the
record and the system:

- measurements of emulated hosts mixed with a real system's (:func:`~.records.check_one_system_kind`);
- a GPU of another architecture than the topology's (the log names it);
- measurements of emulated hosts (``--emulate-hosts``) on anything but what
  ``dynamiccl profile topology --emulate-hosts N`` describes: one GPU per node, a socket network;
- more ranks per node than a node of the topology has GPUs;
- several nodes on a topology that describes one node and no network;
- a run whose environment named NCCL's network (``NCCL_NET=Socket`` or ``IB``) across nodes of a
  topology whose network is another transport.

:func:`record_shape` is the one place a record's (nodes, ranks per node) is read, recorded or
inferred where a log does not say its node count.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dynamiccl.config_loader import ConfigError
from dynamiccl.gpus import compute_capability, same_architecture
from dynamiccl.profiler.formats.records import MeasurementRecord, check_one_system_kind
from dynamiccl.system.topology import ARCHS, Topology

#: ``NCCL_NET`` values (lower case) and the topology transports each can be.
NCCL_NET_TRANSPORTS = {"socket": ("socket",), "ib": ("ib", "roce")}
#: How a user gets the topology of the system measurements came from.
PROFILE_FIX = "give the topology of the system they were measured on (`dynamiccl profile topology` there)"


class RecordsDoNotFit(ValueError):
    """A measurement the topology could not have produced; the message is one line."""


def record_shape(rec: MeasurementRecord, topology: Topology) -> tuple[int, int]:
    """(nodes, ranks per node) of a record: its recorded node count, else as few nodes of
    ``topology``'s size as hold its ranks (a log without a sidecar does not say how many nodes it
    spanned). The ranks need not split evenly; :func:`check_fits` says so where they do not."""
    nodes = rec.nnodes or max(1, -(-rec.nranks // topology.gpus_per_node))
    return nodes, rec.nranks // nodes


def check_fits(records: Sequence[MeasurementRecord], topology: Topology) -> None:
    """Raises :class:`RecordsDoNotFit` for the first record ``topology`` could not have produced
    (see the module docstring); every record of one shape is checked once."""
    try:
        check_one_system_kind(records)
    except ValueError as exc:
        raise RecordsDoNotFit(str(exc)) from None
    _check_gpus(records, topology)
    seen: set[tuple] = set()
    for rec in records:
        key = (rec.nnodes, rec.nranks, rec.emulated_hosts, _nccl_net(rec))
        if key not in seen:
            seen.add(key)
            problem = _shape_problem(rec, topology)
            if problem:
                raise RecordsDoNotFit(f"{rec.where}: {problem}")


def _check_gpus(records: Iterable[MeasurementRecord], topology: Topology) -> None:
    """A log that names a GPU of another architecture than the topology's: an A100's times fitted to
    an H100's model would tune the wrong system."""
    arch = ARCHS[topology.gpu.arch]
    first: dict[str, str] = {}
    for rec in records:
        if rec.gpu:
            first.setdefault(rec.gpu, rec.where)
    for gpu, source in first.items():
        if not same_architecture(gpu, arch, max(ARCHS.values())):
            raise RecordsDoNotFit(
                f"{source}: measured on {gpu} (sm{compute_capability(gpu)}), but the topology "
                f"{topology.name} has {topology.gpu.arch} GPUs; {PROFILE_FIX}")


def _shape_problem(rec: MeasurementRecord, topology: Topology) -> str | None:
    nodes, per_node = record_shape(rec, topology)
    gpus = topology.gpus_per_node
    system = f"{topology.name} ({_system_words(topology)})"
    if rec.emulated_hosts:
        net = _network(topology)
        if gpus != 1 or net is None or net.transport != "socket":
            return (f"measured on {rec.nranks} emulated hosts (--emulate-hosts: ranks sharing GPUs, "
                    f"each its own node to NCCL, over loopback sockets), but the topology is {system}; "
                    f"give the system they ran on: `dynamiccl profile topology --emulate-hosts "
                    f"{rec.nranks} -o emulated.yaml` on the machine that measured them")
    if rec.nranks % nodes:
        return (f"{rec.nranks} ranks do not split evenly over {nodes} nodes of {system}; record the "
                "node count the run spanned (a sidecar's `nodes`, or the record's `nnodes`)")
    if per_node > gpus:
        spread = "" if rec.nnodes else " (no node count recorded: as few nodes as hold them)"
        return (f"{rec.nranks} ranks on {nodes} node{'s' if nodes > 1 else ''}{spread} make "
                f"{per_node} ranks per node, but a node of {system} has {gpus} GPU"
                f"{'s' if gpus > 1 else ''}; {PROFILE_FIX}, or --emulate-hosts N for emulated hosts")
    net = _network(topology)
    if nodes > 1 and net is None:
        return (f"measured across {nodes} nodes, but the topology is {system}: one node and no "
                f"network; {PROFILE_FIX} with its network")
    named = _nccl_net(rec)
    if nodes > 1 and net is not None and named in NCCL_NET_TRANSPORTS \
            and net.transport not in NCCL_NET_TRANSPORTS[named]:
        return (f"measured with NCCL_NET={rec.env.get('NCCL_NET')} across {nodes} nodes, but the "
                f"network of {system} is {net.transport}; {PROFILE_FIX}")
    try:
        topology.resized(nodes=nodes, gpus_per_node=per_node)
    except (ConfigError, ValueError) as exc:
        return f"{nodes} nodes x {per_node} ranks is not a shape of {system} ({exc})"
    return None


def _network(topology: Topology):
    """The tier that joins nodes (None for a topology of one node and no network)."""
    return next((t for t in topology.tiers[1:] if t.link == "net"), None)


def _nccl_net(rec: MeasurementRecord) -> str | None:
    value = rec.env.get("NCCL_NET") if isinstance(rec.env, dict) else None
    return value.strip().lower() if isinstance(value, str) else None


def _system_words(topology: Topology) -> str:
    """``8 nvlink GPUs per node, ib network`` or ``1 GPU per node, socket network``."""
    node = topology.tiers[0]
    gpus = topology.gpus_per_node
    net = _network(topology)
    inner = f"{gpus} {node.link} GPU{'s' if gpus > 1 else ''} per node"
    return inner + (f", {net.transport} network" if net is not None else ", no network")
