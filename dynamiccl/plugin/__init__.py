"""What a job's NCCL loads: the policy file (its Python reader and writer, the format facts the C side
is generated from, NVIDIA's example-tuner CSV), the profiler plugin's ring, and the build of the C
plugin (:mod:`~dynamiccl.plugin.build`; sources in ``csrc/``). It imports only the system room and
the package's file utilities, so the plugin knows the policy format and nothing of agents.
"""
