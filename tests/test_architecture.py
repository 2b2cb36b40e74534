"""Imports flow one way (README, Architecture): a module may import only the layers written here.

Every import statement of every installed module is read with ``ast`` (including imports inside
functions and ``TYPE_CHECKING`` blocks: a type is knowledge too), mapped to the layer of the module
it names, and checked against :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Source folder -> installed package (pyproject's ``[tool.scikit-build.wheel.packages]``).
PACKAGES = {"dynamiccl": "dynamiccl", "envs": "dynamiccl.envs", "agents": "dynamiccl.agents",
            "profiler": "dynamiccl.profiler", "configs": "dynamiccl.configs"}

#: Layers, most specific prefix first; ``core`` is every other module of ``dynamiccl``.
LAYERS = (
    ("nccl", "dynamiccl.nccl"),
    ("simulator", "dynamiccl.simulator"),
    ("nccl_model", "dynamiccl.nccl_model"),
    ("cli", "dynamiccl.cli"),
    ("envs", "dynamiccl.envs"),
    ("agents", "dynamiccl.agents"),
    ("profiler", "dynamiccl.profiler"),
    ("configs", "dynamiccl.configs"),
    ("core", "dynamiccl"),
)
_CORE = {"nccl", "core", "simulator", "nccl_model", "configs"}
#: What each layer may import (besides itself). The simulator and NCCL's model never import each
#: other: both read NCCL's facts from ``dynamiccl.nccl`` and only ``decisions.py`` compares them.
ALLOWED: dict[str, set[str]] = {
    "nccl": set(),
    "simulator": {"nccl", "core", "configs"},
    "nccl_model": {"nccl", "core", "configs"},
    "core": _CORE,
    "configs": set(),
    "profiler": _CORE,
    "envs": _CORE | {"profiler"},
    "agents": _CORE | {"profiler", "envs"},
    "cli": _CORE | {"profiler", "envs", "agents"},
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name; None for anything outside the package."""
    for name, prefix in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = [*PACKAGES[rel.parts[0]].split("."), *rel.parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) for every absolute import; ``from a import b`` names both ``a`` and ``a.b``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations(module: str, source: str) -> list[str]:
    own = layer_of(module)
    allowed = ALLOWED[own] | {own}
    return [f"{module}:{line} imports {target} ({own} -> {layer_of(target)})"
            for line, target in imported_modules(source)
            if layer_of(target) not in (None, *allowed)]


def _installed_modules() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (REPO / folder).rglob("*.py"))


def test_every_installed_folder_is_scanned() -> None:
    """A folder pyproject installs but this test does not read (``configs/`` once) could import
    anything unnoticed."""
    section = (REPO / "pyproject.toml").read_text().split("[tool.scikit-build.wheel.packages]")[1]
    section = section.split("\n[", 1)[0]
    installed = {folder: package.replace("/", ".")
                 for package, folder in re.findall(r'^"([^"]+)"\s*=\s*"([^"]+)"', section, re.M)}
    assert installed == PACKAGES


def test_every_layer_is_written_down() -> None:
    assert set(ALLOWED) == {name for name, _ in LAYERS}
    assert all(allowed <= set(ALLOWED) for allowed in ALLOWED.values())


def test_imports_follow_the_layers() -> None:
    found = [v for path in _installed_modules()
             for v in violations(module_name(path), path.read_text(encoding="utf-8"))]
    assert not found, "imports against the architecture:\n" + "\n".join(found)


@pytest.mark.parametrize(("module", "statement"), [
    ("dynamiccl.simulator.ring", "from dynamiccl.agents import policy"),
    ("dynamiccl.simulator.protocols", "from dynamiccl.nccl_model import constants"),
    ("dynamiccl.nccl_model.graph", "import dynamiccl.simulator.fabric"),
    ("dynamiccl.knobs", "def f():\n    from dynamiccl.envs import observation"),
    ("dynamiccl.envs.workloads", "from dynamiccl.agents.baselines import nccl_action"),
    ("dynamiccl.nccl", "from dynamiccl.topology import Topology"),
    ("dynamiccl.agents.train", "from dynamiccl.cli.common import UserError"),
])
def test_an_import_against_the_direction_is_caught(module: str, statement: str) -> None:
    assert violations(module, statement)


def test_the_cli_may_import_every_layer() -> None:
    source = "\n".join(f"import {prefix}" for _, prefix in LAYERS)
    assert violations("dynamiccl.cli.main", source) == []
