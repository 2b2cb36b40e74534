"""The vocabulary and the system model every layer speaks: NCCL's collectives, algorithms and
protocols (:mod:`~dynamiccl.system.nccl`), the tuning knobs, a topology file with its calibration,
transports, launch noise, a scenario and its units. The ground floor: it imports nothing of DynamICCL
but the package's own utilities (``config_loader``, ``files``), and the simulator, NCCL's model, the
plugin room and everything above read the system through it.
"""
