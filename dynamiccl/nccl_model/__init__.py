"""A faithful model of NCCL's own default selection (NCCL 2.30.7, the one PyTorch 2.15 loads).

Modules, in the order NCCL runs them: ``graph`` (what the topology search finds at init),
``tables`` (the per-communicator bandwidth/latency tables), ``select`` (the per-call cost table,
the pick and the channel count), ``model`` (the public API). What differs between algorithms is each
algorithm's entry in :data:`dynamiccl.system.nccl.ALGORITHMS`; the other constants live in ``constants``,
each with the NCCL source file it was read from.
"""

from dynamiccl.nccl_model.model import NcclChoice, NcclModel

__all__ = ["NcclChoice", "NcclModel"]
