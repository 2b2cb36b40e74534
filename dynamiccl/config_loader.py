"""Reading YAML configs by preset name or by path, with one readable error class.

Topology presets (``configs/topology/``) and the environment's config groups (``workload/``,
``scenario/``) are the same kind of file: a YAML mapping that arrives by name (read from the
installed ``dynamiccl.configs`` package), as a path, or already composed by Hydra as a mapping. One
loader reads them all, so a missing file, an unknown name or broken YAML reads the same everywhere.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from dynamiccl.files import not_regular_message


class ConfigError(ValueError):
    """A config (topology, workload, scenario) that cannot be used; the message says where and how
    to fix it."""


def configs_folder() -> Path:
    """The installed ``dynamiccl.configs`` folder, found without importing that package: importing
    it registers the training schema with Hydra, which a core install (no ``[train]``) lacks and
    reading a topology does not need."""
    spec = importlib.util.find_spec("dynamiccl.configs")
    return Path(next(iter(spec.submodule_search_locations)))


def config_names(group: str) -> list[str]:
    """The presets of a config group (``configs/<group>/*.yaml``), by name."""
    folder = configs_folder() / group
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_config(group: str, spec: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """(document, source) for a config given by name in ``group``, by path, or as a mapping."""
    if isinstance(spec, Mapping):
        return plain(spec), f"{group} config {spec.get('name', '<mapping>')!r}"
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        text, source = _read_file(path, group), str(path)
    else:
        candidate = configs_folder() / group / f"{spec}.yaml"
        if not candidate.is_file():
            raise ConfigError(
                f"unknown {group} {str(spec)!r}: give a YAML file or one of "
                f"{', '.join(config_names(group))} (configs/{group}/)"
            )
        text, source = candidate.read_text(), f"{group} {spec}"
    try:
        data = load_yaml(text)
    except DuplicateKey as exc:
        raise ConfigError(f"{source}: {exc.problem} at line {exc.problem_mark.line + 1}; keep one "
                          "of them") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({yaml_problem(exc)}); fix the syntax") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a {group} config is a mapping of keys at the top level")
    return data, source


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that gives one key twice (``problem`` names it and where it was first given)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last one
    silently, so a second ``name:`` or ``size:`` would quietly replace the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                again = key in first
            except TypeError:  # an unhashable key: the base loader refuses it
                continue
            if again:
                raise DuplicateKey(None, None, f"key {key!r} is given twice (first at line "
                                   f"{first[key] + 1})", key_node.start_mark)
            first[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` refusing a key given twice in one object (the last one
    would win silently, as in YAML): ValueError naming the key."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice")
        out[key] = value
    return out


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (:class:`DuplicateKey`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def _read_file(path: Path, group: str) -> str:
    """A file the user named, or one ConfigError saying why it cannot be read."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a {group} YAML file")
    special = not_regular_message(path, f"{group} YAML file")
    if special:
        raise ConfigError(special)
    if not path.is_file():
        raise ConfigError(f"{path}: no such {group} file; check the path")
    try:
        return path.read_text()
    except PermissionError:
        raise ConfigError(f"{path}: permission denied; make the file readable") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as a text {group} file ({exc})") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's several-line report as one line: what is wrong and where."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


#: The fix for a checkpoint that cannot be read (:func:`read_as`).
CHECKPOINT_FIX = ("move it away (a run folder then trains from its start) or give another checkpoint "
                  "or run folder")


@contextmanager
def read_as(path: str | Path, what: str, fix: str) -> Iterator[None]:
    """Reading a file a run wrote (a checkpoint, its sidecar): torch, SB3, zipfile and json report a
    file cut short or damaged (a full disk, an interrupted copy) or another file of the same name in
    many ways, none of them short or in the user's words; any of them is one ConfigError naming the
    file, what it should be and ``fix``. A file that cannot be opened stays an OSError (named by the
    caller)."""
    try:
        yield
    except (OSError, ConfigError):
        raise
    except Exception:
        raise ConfigError(f"{path} is not {what} that can be read (it is cut short, damaged or "
                          f"another file); {fix}") from None


def plain(value: Any) -> Any:
    """Hydra's DictConfig/ListConfig (or any mapping/sequence) as dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [plain(v) for v in value]
    return value
