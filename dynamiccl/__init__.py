"""DynamICCL: learn better NCCL algorithm/protocol/channel choices and ship them into real jobs.

The gymnasium environments' ids are written here, once; ``dynamiccl.envs`` registers them when it
is imported (Gymnasium 1.x's way), so ``gymnasium.make("dynamiccl.envs:dynamiccl/CollectiveTuning-v0")``
works in any process, and the plain id after ``import dynamiccl.envs``. Importing ``dynamiccl``
itself loads neither gymnasium nor anything else: the CLI, the simulator and the knob space never
need it.
"""

from __future__ import annotations

__version__ = "0.1.0"

#: The environment's id (``configs/env/default.yaml`` holds it too; a test keeps them equal).
ENV_ID = "dynamiccl/CollectiveTuning-v0"
#: The online-tuning environment (one context in a hidden perturbed reality, call after call).
ONLINE_ENV_ID = "dynamiccl/OnlineTuning-v0"
