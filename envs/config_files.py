"""Reading the environment's YAML config groups (``workload/``, ``scenario/``) with readable errors.

The same files are Hydra config groups, so they arrive either by name (read here from the installed
``dynamiccl.configs`` package), as a path, or already composed by Hydra as a mapping; all three end
up as plain Python containers checked by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A workload or scenario config that cannot be used; the message says where and how to fix it."""


def config_names(group: str) -> list[str]:
    folder = resources.files("dynamiccl.configs") / group
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_config(group: str, spec: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """(document, source) for a config given by name in ``group``, by path, or as a mapping."""
    if isinstance(spec, Mapping):
        return plain(spec), f"{group} config {spec.get('name', '<mapping>')!r}"
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"{path}: no such {group} file; check the path")
        text, source = path.read_text(), str(path)
    else:
        candidate = resources.files("dynamiccl.configs") / group / f"{spec}.yaml"
        if not candidate.is_file():
            raise ConfigError(
                f"unknown {group} {str(spec)!r}: give a YAML file or one of "
                f"{', '.join(config_names(group))} (configs/{group}/)"
            )
        text, source = candidate.read_text(), f"{group} {spec}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({exc}); fix the syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a {group} config is a mapping of keys at the top level")
    return data, source


def plain(value: Any) -> Any:
    """Hydra's DictConfig/ListConfig (or any mapping/sequence) as dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [plain(v) for v in value]
    return value


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
