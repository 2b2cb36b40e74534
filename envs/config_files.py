"""Checking the fields of the environment's YAML config groups (``workload/``, ``scenario/``).

Reading the files is :mod:`dynamiccl.config_loader`'s job; the checks here give every bad field
one message that names the file, the field and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynamiccl.config_loader import ConfigError


def check_keys(data: Mapping[str, Any], allowed: set[str], where: str, source: str) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{source}: '{where}{sorted(unknown)[0]}' is not a known key; allowed: "
                          f"{', '.join(sorted(allowed))}")


def number(data: Mapping[str, Any], key: str, source: str, default: float | None = None,
           *, low: float = 0.0, where: str = "") -> float:
    """A number ≥ ``low`` (YAML's ``6.74e9`` arrives as a string from PyYAML and is accepted)."""
    value = data.get(key, default)
    if value is None:
        raise ConfigError(f"{source}: '{where}{key}' is missing")
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: '{where}{key}' is {value!r}; write a number") from None
    if isinstance(value, bool) or not result >= low:
        raise ConfigError(f"{source}: '{where}{key}' is {value!r}; it must be at least {low:g}")
    return result


def integer(data: Mapping[str, Any], key: str, source: str, default: int | None = None,
            *, low: int = 1, where: str = "") -> int:
    value = number(data, key, source, default, low=low, where=where)
    if value != int(value):
        raise ConfigError(f"{source}: '{where}{key}' is {value:g}; write a whole number")
    return int(value)
