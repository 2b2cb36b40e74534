"""The gymnasium environment ``dynamiccl/CollectiveTuning-v0`` and what it is built from.

* :mod:`~dynamiccl.envs.collective_tuning` – the environment (its docstring is the spec);
* :mod:`~dynamiccl.envs.observation` – the observation vector, field by field;
* :mod:`~dynamiccl.envs.workloads` – scenario distributions and evaluation suites
  (``configs/scenario/``), built on the workload traces of :mod:`~dynamiccl.envs.traces`
  (``configs/workload/``);
* :mod:`~dynamiccl.envs.backends` – what runs a call: the simulator (``sim``) or real GPUs
  (``live``).

Importing this package registers the environments' ids with gymnasium (Gymnasium 1.x's way: its
registry is filled when the package holding the environments is imported), by string entry points,
so nothing else of the package is imported until an environment is made; a core install (no
``[train]``) has no gymnasium, and nothing that can make an environment. A process that has not
imported it (SB3's SubprocVecEnv spawns its workers) names the package in the id:
``gymnasium.make("dynamiccl.envs:dynamiccl/CollectiveTuning-v0")``.
"""

from dynamiccl import ENV_ID, ONLINE_ENV_ID

#: Each environment's id and the class it makes.
ENVIRONMENTS = {
    ENV_ID: "dynamiccl.envs.collective_tuning:CollectiveTuningEnv",
    ONLINE_ENV_ID: "dynamiccl.envs.online_tuning:OnlineTuningEnv",
}

try:
    from gymnasium.envs.registration import register, registry
except ModuleNotFoundError as exc:  # a core install (no [train]): no environment can be made, and
    if exc.name != "gymnasium":     # the modules export and tune use from here need none
        raise
else:
    for _env_id, _entry_point in ENVIRONMENTS.items():
        if _env_id not in registry:  # importlib.reload must not register twice
            register(id=_env_id, entry_point=_entry_point)
