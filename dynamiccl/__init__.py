"""DynamICCL: learn better NCCL algorithm/protocol/channel choices and ship them into real jobs.

Importing the package registers the gymnasium environment ``dynamiccl/CollectiveTuning-v0`` (by a
string entry point, so nothing heavy is imported until ``gymnasium.make`` is called).
"""

__version__ = "0.1.0"

from gymnasium.envs.registration import register as _register
from gymnasium.envs.registration import registry as _registry

#: The environment's id; the class lives in ``dynamiccl.envs.collective_tuning``.
ENV_ID = "dynamiccl/CollectiveTuning-v0"

if ENV_ID not in _registry:
    _register(id=ENV_ID, entry_point="dynamiccl.envs.collective_tuning:CollectiveTuningEnv")
