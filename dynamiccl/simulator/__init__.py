"""The vectorized analytical collective simulator (issue 2): what each choice of knobs costs.

``simulate`` times a batch of configurations for a batch of states in one numpy call; ``evaluate``
times one scenario and one configuration. Each algorithm lives in its own module with the reason
for each formula beside it (``ring``, ``tree``, ``nvls``, ``collnet``, ``pat``, ``stragglar_time``);
``protocols`` holds the constants and their sources, ``fabric`` what a rank can push into each tier,
``phases`` the pipeline formula for active chunks, ``launch`` the host's floor under every call
(one process per GPU or one thread driving them all), ``overlap`` the straggler and compute overlap,
``stragglar_schedule`` seed 004's schedule generator and ``alphabeta`` seed 004's Table 1.

Modelling choices worth knowing before reading a number:

* per-hop latency = the tier's wire latency + NCCL's measured per-protocol hop cost (hwLatencies)
  + the network transport's per-message overhead (or host-memory staging beyond a PCIe switch),
  plus NCCL's base latency once per collective; bandwidth = the slowest link on the algorithm's
  path, per protocol efficiency, capped per channel (one CTA) and, for LL, by ``llMaxBws``;
* a topology's ``calibration:`` section (``dynamiccl.system.calibration``) replaces base latencies,
  scales bandwidths per (algorithm, protocol), sets the launch floor and the transport overhead;
* on a switched outer tier (an InfiniBand fat-tree with a NIC per GPU) a flat ring's or tree's
  channels spread over the node's NICs, as NCCL builds them; on a direct-connect tier (``ring``,
  ``torus2d``: seed 000's ASTRA-sim ``ring_ring``) a flat ring is the seed's single ``oneRing`` and
  crosses each node boundary on one cable. The seed-000 expectations of issue 2 rest on the second;
* bus bandwidth obeys ``fabric.busbw_bound_gbps`` (in-network reduction: ``in_network_algbw_bound``);
  a pipelined hierarchical ring may exceed one link because it drives NVLink and the NIC at once.
"""

from dynamiccl.simulator.api import SimResult, Timing, config_valid_mask, evaluate, simulate

__all__ = ["SimResult", "Timing", "config_valid_mask", "evaluate", "simulate"]
