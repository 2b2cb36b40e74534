"""DynamICCL: learn better NCCL algorithm/protocol/channel choices and ship them into real jobs.

Importing the package registers the gymnasium environments ``dynamiccl/CollectiveTuning-v0`` and
``dynamiccl/OnlineTuning-v0`` by string entry points, without importing gymnasium: the CLI, the
simulator and the knob space never need it (importing it costs more than the rest of the core). If
gymnasium is already loaded the ids are registered at once, otherwise the moment gymnasium finishes
loading, so
``import dynamiccl; gymnasium.make(ENV_ID)`` works in either order.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__version__ = "0.1.0"

#: The environment's id, the one place it is written; the class lives in ``dynamiccl.envs``.
ENV_ID = "dynamiccl/CollectiveTuning-v0"
ENV_ENTRY_POINT = "dynamiccl.envs.collective_tuning:CollectiveTuningEnv"
#: The online-tuning environment (one context in a hidden perturbed reality, call after call).
ONLINE_ENV_ID = "dynamiccl/OnlineTuning-v0"
ONLINE_ENV_ENTRY_POINT = "dynamiccl.envs.online_tuning:OnlineTuningEnv"


def register_environment() -> None:
    """Registers :data:`ENV_ID` and :data:`ONLINE_ENV_ID` with gymnasium (idempotent; imports
    gymnasium)."""
    from gymnasium.envs.registration import register, registry

    for env_id, entry_point in ((ENV_ID, ENV_ENTRY_POINT), (ONLINE_ENV_ID, ONLINE_ENV_ENTRY_POINT)):
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point)


class _RegisteringLoader(importlib.abc.Loader):
    """gymnasium's own loader, which registers the environment once the module has run."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        register_environment()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _RegisterWhenGymnasiumLoads(importlib.abc.MetaPathFinder):
    """Steps in once, for the import of ``gymnasium`` itself, then leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


if "gymnasium" in sys.modules:
    register_environment()
elif not any(isinstance(f, _RegisterWhenGymnasiumLoads) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenGymnasiumLoads())
