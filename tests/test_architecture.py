"""Imports flow one way (dynamiccl/README.md, Layers and imports): a module may import only the
layers written here.

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

#: Layers, most specific prefix first. ``dynamiccl/`` is rooms that match them: ``system`` (the
#: vocabulary and system model) at the bottom, its table of NCCL's facts (``nccl``) importing nothing;
#: the package's utilities (``ground``: files, configs, clocks, console, GPUs, the package's own
#: ``__init__``) beside it; the simulator and NCCL's model above the system; the ``plugin`` room (the
#: policy file and the C plugin's build) reading only the system; ``core`` (decisions and plots, which
#: compare the two models) and the PyTorch ``runtime`` above those; ``cli`` on top of everything.
#: ``agents`` and ``profiler`` are rooms by stage; the packages themselves (their ``__init__``) are
#: layers of their own.
LAYERS = (
    ("nccl", "dynamiccl.system.nccl"),
    ("system", "dynamiccl.system"),
    ("plugin", "dynamiccl.plugin"),
    ("simulator", "dynamiccl.simulator"),
    ("nccl_model", "dynamiccl.nccl_model"),
    ("runtime", "dynamiccl.runtime"),
    ("cli", "dynamiccl.cli"),
    ("envs", "dynamiccl.envs"),
    ("policies", "dynamiccl.agents.policies"),
    ("shipping", "dynamiccl.agents.shipping"),
    ("training", "dynamiccl.agents.training"),
    ("agents", "dynamiccl.agents"),
    ("formats", "dynamiccl.profiler.formats"),
    ("measure", "dynamiccl.profiler.measure"),
    ("fit", "dynamiccl.profiler.fit"),
    ("profiler", "dynamiccl.profiler"),
    ("configs", "dynamiccl.configs"),
    *(("ground", f"dynamiccl.{name}") for name in ("files", "config_loader", "clocks", "console", "gpus")),
    ("core", "dynamiccl"),
)
#: The modules left loose at the root of ``dynamiccl/`` (every other module lives in a room).
LOOSE = ("__init__", "clocks", "config_loader", "console", "decisions", "files", "gpus", "plots")
MAX_LOOSE = 8
#: The rooms of ``agents/``, ``profiler/`` and ``dynamiccl/``: every module there lives in one of them
#: (``dynamiccl/`` keeps its :data:`LOOSE` modules beside its rooms).
ROOMS = {"agents": ("policies", "shipping", "training"), "profiler": ("formats", "measure", "fit"),
         "dynamiccl": ("system", "plugin", "simulator", "nccl_model", "runtime", "cli")}
#: The floors below the stages: what every stage of ``envs``, ``agents`` and ``profiler`` may read.
_CORE = {"nccl", "system", "ground", "plugin", "simulator", "nccl_model", "core", "runtime", "configs"}
#: What each layer may import (besides itself). The simulator and NCCL's model never import each
#: other: both read NCCL's facts from ``dynamiccl.system`` and only ``decisions.py`` compares them.
#: The plugin room knows the system and the file utilities, nothing that models or chooses.
#: Measuring and fitting both read and write the formats, never each other; policies know nothing of
#: shipping or training, and shipping nothing of training (arrows run policies <- shipping <- training).
ALLOWED: dict[str, set[str]] = {
    "nccl": set(),
    "ground": set(),
    "system": {"nccl", "ground", "configs"},
    "plugin": {"nccl", "system", "ground"},
    "simulator": {"nccl", "system", "ground", "configs"},
    "nccl_model": {"nccl", "system", "ground", "configs"},
    "core": {"nccl", "system", "ground", "simulator", "nccl_model", "configs"},
    "runtime": {"nccl", "system", "ground", "plugin", "simulator", "nccl_model", "core"},
    "configs": set(),
    "profiler": set(),
    "formats": _CORE,
    "measure": _CORE | {"formats"},
    "fit": _CORE | {"formats"},
    "envs": _CORE | {"formats", "measure"},
    "agents": set(),
    "policies": _CORE | {"envs", "agents"},
    "shipping": _CORE | {"formats", "measure", "fit", "envs", "agents", "policies"},
    "training": _CORE | {"formats", "measure", "fit", "envs", "agents", "policies", "shipping"},
    "cli": _CORE | {"profiler", "formats", "measure", "fit", "envs", "agents", "policies", "shipping",
                    "training"},
}
#: The names the package's ``__init__`` defines (its version, the environments' ids): ``from dynamiccl
#: import __version__`` reads the ground floor, not the ``core`` modules beside it.
_PACKAGE_NAMES = {f"dynamiccl.{target.id}"
                  for node in ast.parse((REPO / "dynamiccl" / "__init__.py").read_text()).body
                  if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name; None for anything outside the package."""
    if module == "dynamiccl" or module in _PACKAGE_NAMES:
        return "ground"
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


def test_every_module_lives_in_a_room() -> None:
    """A module dropped beside the rooms (``agents/x.py``) would sit in no stage and import anything
    its package may; only the packages' ``__init__`` files are there, and in ``dynamiccl/`` the
    utilities and the modules comparing the two models (:data:`LOOSE`)."""
    for folder, rooms in ROOMS.items():
        allowed = LOOSE if folder == "dynamiccl" else ("__init__",)
        loose = sorted(p.stem for p in (REPO / folder).glob("*.py") if p.stem not in allowed)
        assert not loose, f"{folder}/ holds modules outside its rooms {rooms}: {loose}"
        found = {p.name for p in (REPO / folder).iterdir() if (p / "__init__.py").is_file()}
        assert found == set(rooms)
        assert all(ast.get_docstring(ast.parse((REPO / folder / room / "__init__.py").read_text()))
                   for room in rooms), "each room says what it holds"


def test_at_most_eight_modules_are_loose_in_dynamiccl() -> None:
    """The root of ``dynamiccl/`` shows its rooms at a glance: a ninth loose module belongs in one."""
    loose = sorted(p.stem for p in (REPO / "dynamiccl").glob("*.py"))
    assert len(loose) <= MAX_LOOSE, f"dynamiccl/ holds {len(loose)} loose modules: {loose}"
    assert len(LOOSE) <= MAX_LOOSE


def test_imports_follow_the_layers() -> None:
    found = [v for path in _installed_modules()
             for v in violations(module_name(path), path.read_text(encoding="utf-8"))]
    assert not found, "imports against the architecture:\n" + "\n".join(found)


@pytest.mark.parametrize(("module", "statement"), [
    ("dynamiccl.simulator.ring", "from dynamiccl.agents.policies import policy"),
    ("dynamiccl.simulator.protocols", "from dynamiccl.nccl_model import constants"),
    ("dynamiccl.nccl_model.graph", "import dynamiccl.simulator.fabric"),
    ("dynamiccl.system.knobs", "def f():\n    from dynamiccl.envs import observation"),
    ("dynamiccl.envs.workloads", "from dynamiccl.agents.policies.baselines import nccl_action"),
    ("dynamiccl.system.nccl", "from dynamiccl.system.topology import Topology"),
    ("dynamiccl.agents.training.train", "from dynamiccl.cli.common import UserError"),
    ("dynamiccl.agents.policies.registry", "from dynamiccl.agents.training import full_info_agent"),
    ("dynamiccl.agents.policies.baselines", "from dynamiccl.agents.shipping.gate import Gate"),
    ("dynamiccl.agents.shipping.tune", "def f():\n    from dynamiccl.agents.training.train import main"),
    ("dynamiccl.agents", "from dynamiccl.agents.policies import registry"),
    ("dynamiccl.profiler.formats.records", "from dynamiccl.profiler.measure import runner"),
    ("dynamiccl.profiler.measure.runner", "from dynamiccl.profiler.fit.calibrate import calibrate"),
    ("dynamiccl.profiler.fit.calibrate", "import dynamiccl.profiler.measure.launcher"),
    ("dynamiccl.envs.backends.replay", "from dynamiccl.profiler.fit import calibrate"),
])
def test_an_import_against_the_direction_is_caught(module: str, statement: str) -> None:
    assert violations(module, statement)


def test_training_may_import_shipping_and_policies_and_shipping_policies() -> None:
    training = ("from dynamiccl.agents.shipping import evaluate\n"
                "from dynamiccl.agents.policies import registry\nfrom dynamiccl.agents import MOVED")
    shipping = ("from dynamiccl.agents.policies.policy import Policy\n"
                "from dynamiccl.profiler.fit.calibrate import calibrate")
    assert violations("dynamiccl.agents.training.train", training) == []
    assert violations("dynamiccl.agents.shipping.tune", shipping) == []


def test_the_cli_may_import_every_layer() -> None:
    source = "\n".join(f"import {prefix}" for _, prefix in LAYERS)
    assert violations("dynamiccl.cli.main", source) == []


def _run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node outside ``if TYPE_CHECKING:`` blocks (a type named for the reader, not imported)."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the installed modules it imports when it runs (functions included: a loop through a
    deferred import is still a loop; ``TYPE_CHECKING`` imports are not). ``from package import
    module`` is an edge to the module, not to the package, whose ``__init__`` Python runs anyway."""
    modules = {module_name(path): path for path in _installed_modules()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for node in _run_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    edges.add(target if target in modules else node.module)
        graph[module] = {target for target in edges if target in modules and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """A loop (a imports b, b imports a, even inside a function) means neither can be read, tested
    or moved alone; the shared part belongs in a third module both import."""
    assert not cycles(import_graph()), "import loops:\n" + "\n".join(
        " <-> ".join(c) for c in cycles(import_graph()))


def test_a_loop_through_a_deferred_import_is_caught() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
