"""Backends the environment can run its collectives on, by name.

Names resolve to classes lazily (``module:Class`` strings), so ``sim`` never imports torch and a
missing live-profiling stack only matters to someone who asks for ``live``.
"""

from __future__ import annotations

import importlib
from typing import Any

from dynamiccl.envs.backends.base import Backend, ForcingBackend, Measurement, UnmeasuredChoice

BACKENDS: dict[str, str] = {
    "sim": "dynamiccl.envs.backends.sim:SimBackend",
    "live": "dynamiccl.envs.backends.live:LiveBackend",
    "perturbed": "dynamiccl.envs.backends.perturbed:PerturbedBackend",
    "replay": "dynamiccl.envs.backends.replay:ReplayBackend",
}


def make_backend(backend: str | Backend, **kwargs: Any) -> Backend:
    """A backend instance from a name in :data:`BACKENDS` (built with ``kwargs``) or as given."""
    if not isinstance(backend, str):
        if kwargs:
            raise ValueError(
                f"backend options {sorted(kwargs)} only apply when the backend is given by name; "
                "pass them to the backend's constructor instead"
            )
        if not isinstance(backend, Backend):
            raise TypeError(f"{backend!r} is not a Backend: it needs name, measure, action_times")
        return backend
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module_name, class_name = BACKENDS[backend].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**kwargs)


__all__ = ["BACKENDS", "Backend", "ForcingBackend", "Measurement", "UnmeasuredChoice",
           "make_backend"]
