"""The gymnasium environment ``dynamiccl/CollectiveTuning-v0`` and what it is built from.

* :mod:`~dynamiccl.envs.collective_tuning` – the environment (its docstring is the spec);
* :mod:`~dynamiccl.envs.observation` – the observation vector, field by field;
* :mod:`~dynamiccl.envs.workloads` – scenario distributions and evaluation suites
  (``configs/scenario/``), built on the workload traces of :mod:`~dynamiccl.envs.traces`
  (``configs/workload/``);
* :mod:`~dynamiccl.envs.backends` – what runs a call: the simulator (``sim``) or real GPUs
  (``live``).

The id is registered by ``import dynamiccl``; importing this package imports nothing heavy.
"""
